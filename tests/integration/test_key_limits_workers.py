"""Limits by key acceptance (issue 32 item 4, ADR 79) on Valkey, with worker PROCESSES.

Two ``flow_child.py`` workers x 8 slots (no prefetch) log every handler start and end (tenant,
task, limit key, time); the checks read that log:

* ``limit_key="export"`` with ``max_running=1, per_tenant=True``: 5 tenants each push 20
  exports and 100 other tasks. At most one export per tenant runs at any time (and each
  tenant does run one); the other tasks keep the free slots (the workers run 16 at once);
  over the first half of the starts, when every tenant still has work, each tenant's share
  is within 2 points of a fifth.
* a global key (``per_tenant=False``) with ``rate=20, burst=5``: in each 1 s window from the
  first start at most 20 starts of the key, the burst allowed on top in the first window;
  across the run no more than 20/s (+10 %).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fairque_core import FairQueue, Task
from fairque_redis import connect
from integration.flow_workers import Workers, most_at_once, wait_ends

pytestmark = [pytest.mark.redis, pytest.mark.timeout(120)]

TENANTS = ["t1", "t2", "t3", "t4", "t5"]


@pytest.fixture
def url(valkey_server: Any) -> str:
    return str(valkey_server.url)


@pytest.fixture
def queue(url: str) -> Iterator[FairQueue]:
    q = connect(url, queue="keylim-" + uuid.uuid4().hex[:10])
    try:
        yield q
    finally:
        q.purge_all()
        q.close()


@pytest.fixture
def workers(url: str, queue: FairQueue, tmp_path: Path) -> Iterator[Workers]:
    w = Workers(url, queue.name, tmp_path / "log.jsonl", name="keylim")
    try:
        yield w
    finally:
        w.stop()


def test_one_export_per_tenant_and_the_rest_keep_the_slots(
    queue: FairQueue, workers: Workers
) -> None:
    queue.set_key_limits("export", max_running=1, per_tenant=True)
    for tenant in TENANTS:
        exports = [
            Task.create(tenant, payload={"sleep": 0.15}, limit_key="export") for _ in range(20)
        ]
        others = [Task.create(tenant, payload={"sleep": 0.03}) for _ in range(100)]
        queue.push_batch(exports + others)
    workers.start(2, 8)
    total = len(TENANTS) * 120
    log = wait_ends(workers.log, total, timeout=90)
    starts = sorted((e for e in log if e["event"] == "start"), key=lambda e: e["t"])
    assert len(starts) == total  # nothing lost, nothing run twice
    for tenant in TENANTS:
        exports = [e for e in log if e["tenant"] == tenant and e["key"] == "export"]
        assert most_at_once(exports) == 1, tenant  # never two at once, and it does run
    # the other tasks keep the free slots: the 16 slots are all busy at some point
    assert most_at_once(log) >= 15
    # fairness: over the first half of the starts (every tenant still has work), each
    # tenant's share is within 2 points of a fifth
    half = starts[: total // 2]
    for tenant in TENANTS:
        share = sum(e["tenant"] == tenant for e in half) / len(half)
        assert abs(share - 0.2) <= 0.02, (tenant, share)
    status = queue.get_key_limits("export")
    deadline = time.monotonic() + 30  # the last finishes land after their end lines
    while status.running and time.monotonic() < deadline:
        time.sleep(0.05)
        status = queue.get_key_limits("export")
    assert (dict(status.running), dict(status.parked)) == ({}, {})


def test_a_global_key_rate_holds_across_tenants(queue: FairQueue, workers: Workers) -> None:
    rate, burst = 20, 5
    queue.set_key_limits("pay", rate=rate, burst=burst, per_tenant=False)
    n = 70  # about three seconds of the rate
    for k, tenant in enumerate(TENANTS):
        queue.push_batch(
            [Task.create(tenant, limit_key="pay") for _ in range(n // len(TENANTS))]
            + [Task.create(tenant, payload={"sleep": 0.02}) for _ in range(20 + k)]
        )
    workers.start(2, 8)
    others = sum(20 + k for k in range(len(TENANTS)))
    log = wait_ends(workers.log, n + others, timeout=60)
    starts = sorted(e["t"] for e in log if e["event"] == "start" and e["key"] == "pay")
    assert len(starts) == n
    first = starts[0]
    windows: dict[int, int] = {}
    for t in starts:
        windows[int(t - first)] = windows.get(int(t - first), 0) + 1
    assert windows[0] <= rate + burst, windows  # the documented burst, on top, once
    for second, count in windows.items():
        if second:
            assert count <= rate + 1, windows  # (a start on a window's edge may count twice)
    measured = (len(starts) - burst) / (starts[-1] - starts[burst - 1])
    assert measured <= rate * 1.1, measured
