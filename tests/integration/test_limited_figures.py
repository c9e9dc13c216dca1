"""Figures that know why a tenant waits (issue 30 item 2, ADR 67), end to end on Valkey.

A real ``Worker`` with 10 slots drains four backlogged tenants; ``capped`` has
``max_running=2``, so it holds at most 2 of the 10 slots and gets about a fifth of the
dispatches instead of a quarter. Counted as owed a quarter, the queue read a Jain index near
0.987 and ``capped`` a negative lag. Between two readings bracketing at least 400 dispatches:

* the API (``get_tenant_fairness`` + ``fairness_window``): Jain >= 0.99 over the three
  servable tenants, ``capped`` limited with reason ``cap`` and not compared;
* ``fairque stats --tenants --watch``: the Jain line over 3 servable tenants, 1 limited left
  out, and ``capped`` in the limited column and the limited line;
* the metrics plugin: ``fairque.tenant.limited{tenant=capped, reason=cap} = 1`` and Jain;
* the dashboard: the overview lists ``capped (cap)`` as limited, the tenants page has ``cap``
  in its limited column, and its Jain index is >= 0.99.

Then the control: a worker pinned to one of four backlogged tenants, nobody limited: Jain
reads 1/4 (the figures did not just stop reporting unfairness). Waits are on dispatch counts
(events), never on sleeps; the timeouts bound a hang.
"""

from __future__ import annotations

import io
import re
import threading
import time
import types
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from starlette.testclient import TestClient

from fairque_cli import fairness_cmd
from fairque_cli.main import main
from fairque_core import (
    AsyncFairQueue,
    FairQueue,
    FairQueueConfig,
    Task,
    TaskHandler,
    Worker,
    WorkerConfig,
)
from fairque_core.app.backend_loading import open_async_backend
from fairque_core.domain.tenant_figures import fairness_window
from fairque_dashboard import DashboardSettings, create_app
from fairque_plugins import OpenTelemetryMetrics
from fairque_plugins.fairness_metrics import MIN_READING_SECONDS
from fairque_redis import connect
from fairque_redis.servers.embedded import EmbeddedValkey

pytestmark = [pytest.mark.redis, pytest.mark.timeout(120)]

TENANTS = ("capped", "a", "b", "c")
WINDOW = 400  # dispatches between the two readings at least
HANG = 60.0  # only a hung worker takes this long


class Busy(TaskHandler):
    """Every task takes about 4 ms, so the 10 slots are all in use. Once ``hold`` is set, a
    task of ``capped`` blocks until ``release``: its 2 leases stay held, so it stays capped
    for the readings of one instant (``fairque stats``, ``fairque tenants``)."""

    def __init__(self) -> None:
        self.hold = threading.Event()
        self.release = threading.Event()
        self.blocked = threading.Semaphore(0)

    def process_task(self, task: Task) -> object:
        if task.tenant == "capped" and self.hold.is_set():
            self.blocked.release()
            self.release.wait(HANG)
        time.sleep(0.004)
        return None


def _dispatched(queue: FairQueue) -> int:
    return sum(f.dispatched for f in queue.get_tenant_fairness(list(TENANTS)))


def _wait_for(queue: FairQueue, more: int) -> None:
    """Until ``more`` dispatches past the count now (polled: the dispatches are the event)."""
    target = _dispatched(queue) + more
    deadline = time.monotonic() + HANG
    while _dispatched(queue) < target:
        assert time.monotonic() < deadline, f"{more} dispatches did not come"
        time.sleep(0.01)


@pytest.fixture
def drained(valkey_server: EmbeddedValkey) -> Iterator[tuple[FairQueue, str, Busy]]:
    name = "limited-" + uuid.uuid4().hex[:10]
    queue = connect(valkey_server.url, queue=name)
    queue.set_tenant_limits("capped", max_running=2)
    for tenant in TENANTS:
        # enough that every tenant stays backlogged through a slow run (about 1,000 are used)
        for start in range(0, 4000, 1000):
            batch = range(start, start + 1000)
            queue.push_batch([Task.create(tenant, payload={"n": i}) for i in batch])
    config = WorkerConfig(id="w-" + name, max_concurrent_tasks=10)
    handler = Busy()
    worker = Worker(config, handler, queue)
    worker.start()
    try:
        _wait_for(queue, 100)  # running: every slot in use
        yield queue, name, handler
    finally:
        handler.release.set()
        worker.stop()
        queue.purge_all()
        queue.close()


def _metric_points(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    data = reader.get_metrics_data()
    assert data is not None
    return {
        m.name: list(m.data.data_points)
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
    }


def _dashboard(url: str, name: str) -> TestClient:
    config = FairQueueConfig.from_dict({"redis": {"url": url}, "queue": {"name": name}}, env={})

    async def opener() -> AsyncFairQueue:
        return AsyncFairQueue(open_async_backend(config))

    app = create_app(opener, DashboardSettings(sample_interval=0, target=url))
    return TestClient(app, raise_server_exceptions=False)


def test_a_capped_tenant_reads_limited_and_the_others_fair(
    drained: tuple[FairQueue, str, Busy], valkey_server: EmbeddedValkey, monkeypatch: Any
) -> None:
    queue, name, handler = drained
    url = str(valkey_server.url)
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    metrics = OpenTelemetryMetrics(meters, stats_ttl_seconds=0.0)
    metrics.observe_fairness(lambda: queue.get_tenant_fairness(list(TENANTS)), queue=name)
    with _dashboard(url, name) as client:
        sampler = client.app.state.dashboard.sampler  # type: ignore[attr-defined]
        # the first readings of all four faces
        before = queue.get_tenant_fairness(list(TENANTS))
        _metric_points(reader)
        opened = time.monotonic()  # the plugin reads again MIN_READING_SECONDS after this
        client.portal.call(sampler.sample)  # type: ignore[union-attr]

        # the CLI's own two readings, the drain between them
        readings = 0

        def between(_seconds: float) -> None:
            nonlocal readings
            readings += 1
            if readings == 2:
                raise KeyboardInterrupt
            _wait_for(queue, WINDOW)

        # the command's own clock module, not time.sleep itself: the worker sleeps too
        clock = types.SimpleNamespace(monotonic=time.monotonic, sleep=between)
        monkeypatch.setattr(fairness_cmd, "time", clock)
        out = io.StringIO()
        args = ["--url", url, "--queue", name, "stats", "--tenants", "--watch", "0.5"]
        assert main(args, stdout=out) == 0
        _wait_for(queue, 1)
        time.sleep(max(0.0, MIN_READING_SECONDS + 0.05 - (time.monotonic() - opened)))

        # the second readings
        after = queue.get_tenant_fairness(list(TENANTS))
        got = _metric_points(reader)
        client.portal.call(sampler.sample)  # type: ignore[union-attr]
        overview = client.get("/?partial=live").text
        tenants_page = client.get("/tenants").text
        dash = sampler.fairness()

    # the API
    window = fairness_window(before, after, 1.0)
    assert window.dispatched >= WINDOW
    capped = window.tenants["capped"]
    assert (capped.limited, capped.limited_reason, capped.backlogged) == (True, "cap", False)
    assert capped.share is None
    assert not capped.starving
    assert capped.dispatched > 0  # it is served, as its cap allows
    assert (window.backlogged, window.limited) == (3, 1)
    assert window.jain is not None
    assert window.jain >= 0.99, window
    counted = [w.dispatched / w.weight for w in window.tenants.values()]
    owed_all = sum(counted) ** 2 / (len(counted) * sum(x * x for x in counted))
    assert owed_all < window.jain  # counted as owed a quarter, it read lower

    # the CLI
    text = out.getvalue()
    last = text[text.rindex("(fairness by tenant)") :]
    jain_line = re.search(r"Jain index over 3 servable tenants, 1 limited left out (\S+)", last)
    assert jain_line is not None, last
    assert float(jain_line.group(1)) >= 0.99
    row = next(line for line in last.splitlines() if line.startswith("capped"))
    assert row.split()[-2:] == ["cap", "-"]
    assert "capped (cap)" in last

    # the metrics
    limited = {
        (p.attributes["tenant"], p.attributes.get("reason"), p.value)
        for p in got["fairque.tenant.limited"]
    }
    assert ("capped", "cap", 1) in limited
    assert {t for t, _why, v in limited if v == 1} == {"capped"}
    (jain,) = got["fairque.queue.fairness.jain"]
    assert jain.value >= 0.99
    assert "capped" not in {p.attributes["tenant"] for p in got["fairque.tenant.share_ratio"]}

    # the dashboard
    assert dash is not None
    assert dash.limited == {"capped": "cap"}
    assert dash.jain is not None
    assert dash.jain >= 0.99
    assert 'data-limited="capped">capped (cap)<' in overview
    shown = re.search(r'id="jain">([0-9.]+)<', overview)
    assert shown is not None
    assert float(shown.group(1)) >= 0.99
    capped_row = re.search(r'<tr data-tenant="capped">.*?</tr>', tenants_page, re.S)
    assert capped_row is not None
    assert '<td data-col="limited">cap</td>' in capped_row.group(0)
    meters.shutdown()

    # the one-instant readings: `fairque stats` and `fairque tenants`, while both of capped's
    # leases are held by blocked handlers (so it is at its cap at the instant of the reading)
    monkeypatch.undo()
    handler.hold.set()
    for _ in range(2):
        assert handler.blocked.acquire(timeout=HANG), "capped's tasks did not start"
    for command in (["stats", "--tenant", "capped,a"], ["tenants"]):
        out = io.StringIO()
        assert main(["--url", url, "--queue", name, *command], stdout=out) == 0
        lines = out.getvalue().splitlines()
        capped_line = next(line for line in lines if line.startswith("capped"))
        a_line = next(line for line in lines if line.startswith("a "))
        assert capped_line.split()[-1] == "cap", command
        assert a_line.split()[-1] == "-", command


def test_an_unlimited_unfair_drain_still_reads_unfair(valkey_server: EmbeddedValkey) -> None:
    """The control: a worker pinned to ``a`` while four tenants are backlogged and none is
    limited: Jain is 1/4 (one tenant got every dispatch), the others unserved."""
    queue = connect(valkey_server.url, queue="unfair-" + uuid.uuid4().hex[:10])
    done = threading.Event()

    class Count(TaskHandler):
        def __init__(self) -> None:
            self.n = 0

        def process_task(self, task: Task) -> object:
            self.n += 1
            if self.n >= 200:
                done.set()
            return None

    tenants = ["a", "b", "c", "d"]
    for tenant in tenants:
        queue.push_batch([Task.create(tenant) for _ in range(300)])
    config = WorkerConfig(id="pinned", max_concurrent_tasks=4, assigned_tenants=["a"])
    worker = Worker(config, Count(), queue)
    before = queue.get_tenant_fairness(tenants)
    worker.start()
    try:
        assert done.wait(HANG)
    finally:
        worker.stop()
    window = fairness_window(before, queue.get_tenant_fairness(tenants), 1.0)
    queue.purge_all()
    queue.close()
    assert window.limited == 0
    assert window.backlogged == 4
    assert window.jain == pytest.approx(0.25)
    assert {t for t, w in window.tenants.items() if w.starving_reason == "unserved"} == {
        "b",
        "c",
        "d",
    }
