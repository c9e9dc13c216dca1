"""OpenTelemetryMetrics through a real FairQueue and Worker, on the model and on Valkey.

Each tenant gets tasks that succeed, one that fails once and then succeeds, one that fails
until it is dead-lettered and one that is poisoned (an unknown task name). One more task is
canceled before the worker starts, and one is claimed (on the backend, with a short lease) by
a "ghost" worker that never comes back, so the worker's reaper recovers its lease. The
counters, histograms and gauges read by an SDK InMemoryMetricReader must equal what the
engine and the backend actually did.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    HistogramDataPoint,
    InMemoryMetricReader,
    NumberDataPoint,
)

from fairque_core import (
    FairQueue,
    InMemoryBackend,
    QueueConfig,
    Task,
    TaskHandler,
    UnknownTaskError,
    WorkerConfig,
)
from fairque_core.app.worker.worker import Worker
from fairque_plugins import OpenTelemetryMetrics
from fairque_plugins.metrics import SECONDS_BUCKETS

pytestmark = [pytest.mark.timeout(60)]

TENANTS = ("t0", "t1", "t2")
STATS_TTL = 0.2


@pytest.fixture(autouse=True)
def _no_autoload(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAIRQUE_DISABLE_PLUGIN_AUTOLOAD", "1")


@pytest.fixture
def reader() -> Iterator[InMemoryMetricReader]:
    found = InMemoryMetricReader()
    yield found
    found.shutdown()


BackendFactory = Callable[[QueueConfig], Any]


@pytest.fixture(params=["memory", pytest.param("valkey", marks=pytest.mark.redis)])
def make_backend(request: pytest.FixtureRequest) -> BackendFactory:
    """A backend for a queue config: the model, or a client of the embedded Valkey."""
    if request.param == "memory":

        def memory(config: QueueConfig) -> Any:
            return InMemoryBackend(queue=config.name, config=config)

        return memory
    from fairque_redis.backends.backend import RedisBackend

    url = request.getfixturevalue("valkey_server").url

    def valkey(config: QueueConfig) -> Any:
        return RedisBackend.from_url(url, queue=config.name, config=config)

    return valkey


class FlakyHandler(TaskHandler):
    """Fails while ``task.retry_count < payload["fail"]``; ``poison`` raises UnknownTaskError."""

    def process_task(self, task: Task) -> object:
        if task.payload.get("poison"):
            raise UnknownTaskError("no-such-task")
        if task.retry_count < int(task.payload["fail"]):
            raise RuntimeError(f"attempt {task.retry_count} of {task.task_id} failed")
        return None


def points(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    data = reader.get_metrics_data()
    out: dict[str, list[Any]] = {}
    if data is None:
        return out
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                out.setdefault(metric.name, []).extend(metric.data.data_points)
    return out


def per_tenant_sum(found: list[Any], **where: str) -> Counter[str]:
    totals: Counter[str] = Counter()
    for point in found:
        assert isinstance(point, NumberDataPoint)
        assert point.attributes is not None
        if all(point.attributes.get(k) == v for k, v in where.items()):
            totals[str(point.attributes["tenant"])] += int(point.value)
    return totals


def per_tenant_count(found: list[Any]) -> Counter[str]:
    totals: Counter[str] = Counter()
    for point in found:
        assert isinstance(point, HistogramDataPoint)
        assert point.attributes is not None
        assert tuple(point.explicit_bounds) == SECONDS_BUCKETS
        totals[str(point.attributes["tenant"])] += point.count
    return totals


def queue_value(found: dict[str, list[Any]], metric: str, name: str) -> dict[str, float]:
    """``{state or "": value}`` of a queue-level metric for queue ``name``."""
    return {
        str(p.attributes.get("state", "")): p.value
        for p in found[metric]
        if p.attributes["queue"] == name
    }


def test_metrics_match_what_the_worker_did(
    make_backend: BackendFactory, reader: InMemoryMetricReader
) -> None:
    name = f"metrics-{uuid.uuid4().hex[:10]}"
    config = QueueConfig(name=name, retry_base_seconds=0.01, retry_cap_seconds=0.05)
    metrics = OpenTelemetryMetrics(
        MeterProvider(metric_readers=[reader]), stats_ttl_seconds=STATS_TTL
    )
    with FairQueue(make_backend(config), plugins=[metrics], config=config) as queue:

        def depths() -> dict[str, int]:
            sizes = queue.get_queue_sizes_batch(TENANTS)
            return {tenant: size["total"] for tenant, size in sizes.items()}

        stats_calls: list[float] = []

        def stats() -> dict[str, Any]:
            stats_calls.append(time.monotonic())
            return queue.get_stats()

        metrics.observe_depth(depths, queue=name)
        metrics.observe_stats(stats, queue=name)

        expected: dict[str, Counter[str]] = {}
        tasks: list[Task] = []
        for index, tenant in enumerate(TENANTS):
            ok = index + 1  # a different number of tasks per tenant
            tasks += [Task.create(tenant, payload={"fail": 0}) for _ in range(ok)]
            tasks.append(Task.create(tenant, payload={"fail": 1}, max_retries=3))  # retried once
            tasks.append(Task.create(tenant, payload={"fail": 99}, max_retries=1))  # dead after 2
            tasks.append(Task.create(tenant, payload={"fail": 0, "poison": True}))  # poisoned
            expected[tenant] = Counter(
                pushed=ok + 3,
                finished=ok + 1,
                failed=4,
                retried=2,
                dead=2,
                poisoned=1,
                started=ok + 5,
            )
        queue.push_batch(tasks)
        queue.push(tasks[0])  # a duplicate id: not counted as pushed again
        doomed = Task.create("t0", payload={"fail": 0})
        queue.push(doomed)
        expected["t0"]["pushed"] += 1
        assert queue.cancel(doomed.task_id)

        before = points(reader)
        depth = {
            str(p.attributes["tenant"]): p.value
            for p in before["fairque.tenant.depth"]
            if p.attributes["queue"] == name
        }
        assert depth == {
            tenant: expected[tenant]["pushed"] - (tenant == "t0") for tenant in TENANTS
        }
        assert queue_value(before, "fairque.queue.depth", name) == {"": len(tasks)}
        assert queue_value(before, "fairque.queue.tasks", name) == {
            "intake": 0,
            "ready": len(tasks),
            "scheduled": 0,
            "leased": 0,
        }

        # a ghost worker claims one task with a short lease and never comes back (straight
        # on the backend: no task event, and the queue's own lease stays the default)
        (ghost,) = queue.backend.claim(
            worker_id="ghost", assigned=None, steal=None, count=1, lease_seconds=0.1
        )
        assert ghost.lease.token

        worker = Worker(
            WorkerConfig(
                id="metrics-w",
                poll_interval_seconds=0.02,
                max_concurrent_tasks=4,
                reaper_interval_seconds=0.05,
            ),
            FlakyHandler(),
            queue,
        )
        worker.start()
        try:
            deadline = time.monotonic() + 30
            while True:
                now = queue.get_stats()
                if now["finished"] + now["dead"] >= len(tasks):
                    break
                assert time.monotonic() < deadline, (now, worker.health())
                time.sleep(0.02)
        finally:
            worker.stop()
        assert len(queue.list_dlq(limit=100)) == 2 * len(TENANTS)

        time.sleep(STATS_TTL * 1.5)  # past the stats cache
        calls_before = len(stats_calls)
        found = points(reader)
        assert len(stats_calls) == calls_before + 1  # one get_stats() for 14 instruments
        counters = {
            "pushed": "fairque.tasks.pushed",
            "finished": "fairque.tasks.finished",
            "failed": "fairque.tasks.failed",
            "retried": "fairque.tasks.retried",
            "dead": "fairque.tasks.dead_lettered",
            "poisoned": "fairque.tasks.poisoned",
        }
        for event, metric in counters.items():
            assert per_tenant_sum(found[metric]) == {t: expected[t][event] for t in TENANTS}, event
        for failure_type in ("failed", "poisoned"):
            by_type = per_tenant_sum(
                found["fairque.tasks.dead_lettered"], failure_type=failure_type
            )
            assert by_type == dict.fromkeys(TENANTS, 1), failure_type
        started = {t: expected[t]["started"] for t in TENANTS}
        assert per_tenant_count(found["fairque.task.wait_time"]) == started
        # one run time per attempt: finished + failed attempts = started
        assert per_tenant_count(found["fairque.task.run_time"]) == started
        for point in found["fairque.tasks.dead_lettered"]:
            assert point.attributes["queue"] == name
        depth = {str(p.attributes["tenant"]): p.value for p in found["fairque.tenant.depth"]}
        assert depth == dict.fromkeys(TENANTS, 0)

        # queue-wide figures, from get_stats()
        assert queue_value(found, "fairque.queue.tasks", name) == {
            "intake": 0,
            "ready": 0,
            "scheduled": 0,
            "leased": 0,
        }
        assert queue_value(found, "fairque.queue.depth", name) == {"": 0}
        assert queue_value(found, "fairque.queue.dlq_size", name) == {"": 2 * len(TENANTS)}
        assert queue_value(found, "fairque.queue.leases_recovered", name) == {"": 1}
        assert queue_value(found, "fairque.queue.canceled", name) == {"": 1}
        assert queue_value(found, "fairque.queue.dead_lettered", name) == {"": 2 * len(TENANTS)}
        assert queue_value(found, "fairque.queue.finished", name) == {
            "": sum(expected[t]["finished"] for t in TENANTS)
        }
        assert queue_value(found, "fairque.queue.pushed", name) == {"": len(tasks) + 1}
        assert queue_value(found, "fairque.queue.duplicates", name) == {"": 1}
