"""``fairque stats --tenants`` on a live Valkey queue: the fairness table sorted by lag, its
JSON, and ``--watch`` with window shares and Jain's index over the backlogged tenants."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest

from fairque_cli import fairness_cmd
from fairque_cli.main import main
from fairque_core import Message, Priority
from fairque_redis import connect

pytestmark = pytest.mark.redis


def cli(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(args), stdout=out)
    return code, out.getvalue()


def _fill(url: str, queue_name: str) -> None:
    """heavy (weight 3) and light backlogged; pinned has had 3 pinned claims (lag 3)."""
    with connect(url, queue=queue_name) as queue:
        backend = queue.backend
        backend.set_tenant_weight("heavy", 3.0)
        for tenant in ("heavy", "light", "pinned"):
            backend.push_batch(
                [
                    Message(
                        task_id=f"{tenant}-{i}",
                        tenant=tenant,
                        priority=Priority.NORMAL,
                        body=b"{}",
                    )
                    for i in range(200)
                ]
            )
        for _ in range(3):
            backend.claim(worker_id="pin", assigned=["pinned"])


def _drain(url: str, queue_name: str, n: int) -> None:
    with connect(url, queue=queue_name) as queue:
        backend = queue.backend
        for _ in range(n):
            [claimed] = backend.claim(worker_id="shared", assigned=["heavy", "light"])
            backend.finish(claimed.message.task_id, claimed.lease.token)


def test_the_table_is_sorted_by_lag_with_the_alarm(server_url: str, queue_name: str) -> None:
    _fill(server_url, queue_name)
    base = ("--url", server_url, "--queue", queue_name)
    code, out = cli(*base, "stats", "--tenants")
    assert code == 0, out
    lines = out.splitlines()
    header = next(k for k, line in enumerate(lines) if line.startswith("tenant"))
    assert lines[header].split()[:6] == ["tenant", "weight", "tier", "ready", "running", "lag"]
    rows = [line.split() for line in lines[header + 2 : header + 5]]
    assert [r[0] for r in rows] == ["pinned", "heavy", "light"]  # alarm first, then by lag
    pinned = rows[0]
    assert pinned[1:8] == ["1", "0", "197", "3", "3.00", "3", pinned[7]]
    assert pinned[-1] == "lag"
    assert "starving: pinned (lag)" in out

    code, out = cli(*base, "stats", "--tenants", "--tenant", "light,heavy", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["queue"] == queue_name
    assert [t["tenant"] for t in data["tenants"]] == ["heavy", "light"]  # same lag: by wait, name
    heavy = data["tenants"][0]
    assert heavy["weight"] == 3.0
    assert heavy["ready"] == 200
    assert heavy["lag"] == 0.0
    assert heavy["oldest_ready_age"] >= 0
    assert data["starving"] == []


def test_watch_adds_window_shares_and_jain(
    server_url: str, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fill(server_url, queue_name)
    readings = 0

    def between(_seconds: float) -> None:  # the pause between two readings: serve 40 tasks
        nonlocal readings
        readings += 1
        if readings == 2:
            raise KeyboardInterrupt
        _drain(server_url, queue_name, 40)

    monkeypatch.setattr(fairness_cmd.time, "sleep", between)
    base = ("--url", server_url, "--queue", queue_name)
    code, out = cli(*base, "stats", "--tenants", "--watch", "0.5", "--json")
    assert code == 0
    first, second = (json.loads(line) for line in out.splitlines())
    assert "window" not in first
    window: dict[str, Any] = second["window"]
    assert window["dispatched"] == 40
    assert window["backlogged"] == 3
    assert window["tenants"]["heavy"]["dispatched"] == 30
    assert window["tenants"]["light"]["dispatched"] == 10
    # pinned was backlogged and not served in 40 dispatches (more than the 3 backlogged
    # tenants): the workers named only heavy and light, whose passes overtook pinned's, so its
    # lag is back to 0 (next in line) and the window's alarm says why it starves
    assert window["tenants"]["pinned"]["starving_reason"] == "unserved"
    assert window["jain"] < 1.0  # pinned got nothing while backlogged


def test_watch_as_text_on_a_fair_drain(
    server_url: str, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fill(server_url, queue_name)
    with connect(server_url, queue=queue_name) as queue:
        queue.backend.purge_tenant("pinned")
    readings = 0

    def between(_seconds: float) -> None:
        nonlocal readings
        readings += 1
        if readings == 2:
            raise KeyboardInterrupt
        _drain(server_url, queue_name, 40)

    monkeypatch.setattr(fairness_cmd.time, "sleep", between)
    base = ("--url", server_url, "--queue", queue_name)
    code, out = cli(*base, "stats", "--tenants", "--watch", "0.5", "--tenant", "heavy,light")
    assert code == 0
    last = out[out.rindex("(fairness by tenant)") :]  # the second reading
    assert "Jain index over 2 servable tenants 1.0000" in last
    heavy = next(line for line in last.splitlines() if line.startswith("heavy"))
    assert heavy.split()[-6:] == ["30", "0.750", "0.750", "1.00", "-", "-"]
    assert "starving: none" in last
