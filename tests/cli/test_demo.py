"""``fairque demo`` end to end: exit 0, bounded wall time, and the fairness figures it reports.

The share bars (Jain's index, each backlogged tenant's share) follow from stride scheduling and
hold with an order of magnitude of margin. The light tenants' wait is wall-clock time, so CPU
starvation by other processes on the machine can stretch it; the verdict's bar is asserted with
one rerun allowed, and the property that matters, "nowhere near the FIFO wait behind the flood",
is asserted on every run.
"""

from __future__ import annotations

import contextlib
import io
import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from fairque_cli import metrics
from fairque_cli.main import main
from fairque_core import Task
from fairque_redis import connect

from .conftest import run_cli, run_cli_here

pytestmark = [pytest.mark.redis]

DURATION = 6.0


def run_demo(tmp_path: Path, attempt: int) -> tuple[dict[str, Any], str]:
    path = tmp_path / f"demo-{attempt}.json"
    started = time.monotonic()
    # a child, not main() here: the demo's figures are wall-clock ones, and threads other
    # tests left in this process would share its GIL
    proc = run_cli(["demo", "--duration", str(DURATION), "--json", str(path)], timeout=60)
    elapsed = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert elapsed < DURATION + 8, f"the demo took {elapsed:.1f}s for --duration {DURATION}"
    return json.loads(path.read_text()), proc.stdout


# slow: the whole demo in a child is wall-clock bound by design (its light tenants' waits, and
# "ends within its duration + 8 s"): 7.5 s on an idle 2-core machine (15 s with its rerun), and
# on a busy one the bound failed (20.8 s, the child's start-up starved of CPU). The default run
# keeps the demo's machinery and exact figures: on the reference model, and on a named Valkey
# queue (the two tests below).
@pytest.mark.slow
def test_demo_reports_fair_figures(tmp_path: Path) -> None:
    summary, stdout = run_demo(tmp_path, 1)
    for word in ("Verdict", "Jain", "What the numbers mean", "[baseline]", "[flood]"):
        assert word in stdout

    # The flood and the busy tenants were backlogged, the light ones were not.
    assert set(summary["backlogged"]) == {"flood", "acme", "globex"}
    flood_phase = summary["phases"]["flood"]["tenants"]
    pushed = {t["name"]: t["pushed"] for t in flood_phase}
    others = [n for t in flood_phase if (n := t["pushed"]) and t["name"] != "flood"]
    assert pushed["flood"] >= 15 * sum(others) / len(others)  # ~20x the others' average

    assert summary["jain"] >= metrics.JAIN_BAR
    for name, share in summary["shares"].items():
        assert abs(share["service"] - share["weight"]) <= metrics.SHARE_TOLERANCE, name
    assert summary["shares"]["flood"]["weight"] == pytest.approx(1 / 7)

    light = summary["light"]
    assert light["baseline_samples"] >= 40
    assert light["flood_samples"] >= 100
    fifo = summary["fifo_wait_estimate"]
    assert fifo is not None
    assert fifo > 2.0
    assert light["flood_p99"] < fifo / 10

    def timing_ok(light: dict[str, Any]) -> bool:
        return light["flood_p99"] <= metrics.wait_bar(light["baseline_p99"]) and light[
            "flood_ahead_p99"
        ] <= metrics.ahead_bar(light["baseline_ahead_p99"])

    if not timing_ok(light):
        summary, _ = run_demo(tmp_path, 2)  # a load spike on the machine: one more try
        light = summary["light"]
    assert timing_ok(light), light


def test_demo_rejects_bad_arguments() -> None:
    proc = run_cli_here(["demo", "--tenants", "2"])
    assert proc.returncode == 1
    assert proc.stderr.strip() == (
        "fairque: error: --tenants must be at least 3 (a flood, a busy and a light tenant)"
    )
    proc = run_cli_here(["demo", "--duration", "1"])
    assert proc.returncode == 1
    assert "--duration must be at least 2 seconds" in proc.stderr


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--duration", "nan"], "--duration must be a number of seconds from 2"),
        (["--duration", "inf"], "--duration must be a number of seconds from 2"),
        (["--tenants", "99999999999"], "--tenants must be at most"),
        (["--workers", "100000"], "--workers must be at most"),
        (["--work-ms", "nan"], "--work-ms must be a number > 0"),
        (["--work-ms", "inf"], "--work-ms must be a number > 0"),
        (["--light-rate", "0"], "--light-rate must be a number > 0"),
        (["--light-rate", "-1"], "--light-rate must be a number > 0"),
        (["--flood-factor", "nan"], "--flood-factor must be a number > 0"),
        (["--flood-factor", "0"], "--flood-factor must be a number > 0"),
        (["--json", "/no/such/dir/x.json"], "no such directory"),
        (["--json", "/tmp"], "is a directory"),
        (["--json", "/proc/x.json"], "not writable"),
    ],
)
def test_demo_refuses_every_bad_flag_before_it_starts(flags: list[str], needle: str) -> None:
    """These ran for ever (a NaN or infinite duration) or failed only after the whole run."""
    started = time.monotonic()
    proc = run_cli_here(["demo", *flags])
    assert proc.returncode == 1
    assert needle in proc.stderr
    assert proc.stderr.count("\n") == 1
    assert time.monotonic() - started < 5


def test_demo_on_the_reference_model_in_process(tmp_path: Path) -> None:
    """The same machinery on ``memory://`` (no server): the figures are exact there too."""
    import io

    from fairque_cli.demo import DemoOptions
    from fairque_cli.demo import run_demo as run

    out = io.StringIO()
    summary = run(DemoOptions(duration=3.0, url="memory://", tenants=4), out)
    assert summary["jain"] >= metrics.JAIN_BAR
    assert set(summary["backlogged"]) == {"flood", "acme"}
    assert "Verdict" in out.getvalue()


def test_demo_runs_on_a_named_queue_a_dashboard_can_follow(valkey_server: Any) -> None:
    """``fairque demo --queue NAME``: both phases on NAME (emptied after each), so that
    ``fairque dashboard --queue NAME`` shows the demo live; a queue with tasks is refused."""
    name = f"demo-watch-{uuid.uuid4().hex[:8]}"
    out = io.StringIO()
    code = main(
        ["--url", valkey_server.url, "--queue", name, "demo", "--duration", "3", "--tenants", "3"],
        stdout=out,
    )
    assert code == 0, out.getvalue()
    with connect(valkey_server.url, queue=name) as queue:
        assert queue.list_tenants()[1] == 0  # emptied after the last phase
        # nor left in the registry (`fairque queues` listed each run's queues for ever)
        assert name not in queue.backend.list_queues()  # type: ignore[attr-defined]
        queue.push(Task.create("someone", payload={}))
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(["--url", valkey_server.url, "--queue", name, "demo", "--duration", "3"])
    assert code != 0
    assert "is not empty" in err.getvalue()


def test_a_demo_stopped_by_sigterm_cleans_up_like_ctrl_c(tmp_path: Path) -> None:
    """``timeout`` in CI sends SIGTERM: the demo died at once and its embedded server's
    temporary directory stayed behind. Now it stops as on Ctrl-C (exit 130), cleaned up."""
    import os
    import signal
    import subprocess
    import sys

    env = {**os.environ, "TMPDIR": str(tmp_path)}
    env.pop("FAIRQUE_REDIS_URL", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "fairque_cli", "demo", "--duration", "30"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    deadline = time.monotonic() + 30
    while not list(tmp_path.glob("fairque-valkey-*")):
        assert time.monotonic() < deadline, "the demo's embedded server never started"
        time.sleep(0.1)
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert list(tmp_path.glob("fairque-valkey-*")) == []
