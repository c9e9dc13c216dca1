"""OpenTelemetryMetrics through a real FairQueue and Worker on the embedded Valkey.

Each tenant gets tasks that succeed, one that fails once and then succeeds, and one that fails
until it is dead-lettered. The counters, histograms and the queue depth gauge read by an SDK
InMemoryMetricReader must equal what the engine actually did.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    HistogramDataPoint,
    InMemoryMetricReader,
    NumberDataPoint,
)

from fairque_core import FairQueue, QueueConfig, Task, TaskHandler, WorkerConfig
from fairque_core.app.worker import Worker
from fairque_plugins import OpenTelemetryMetrics
from fairque_redis.backend import RedisBackend

pytestmark = [pytest.mark.redis, pytest.mark.timeout(60)]

TENANTS = ("t0", "t1", "t2")


@pytest.fixture(autouse=True)
def _no_autoload(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAIRQUE_DISABLE_PLUGIN_AUTOLOAD", "1")


@pytest.fixture
def reader() -> Iterator[InMemoryMetricReader]:
    found = InMemoryMetricReader()
    yield found
    found.shutdown()


class FlakyHandler(TaskHandler):
    """Fails while ``task.retry_count < payload["fail"]``."""

    def process_task(self, task: Task) -> object:
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


def per_tenant_sum(found: list[Any]) -> Counter[str]:
    totals: Counter[str] = Counter()
    for point in found:
        assert isinstance(point, NumberDataPoint)
        assert point.attributes is not None
        totals[str(point.attributes["tenant"])] += int(point.value)
    return totals


def per_tenant_count(found: list[Any]) -> Counter[str]:
    totals: Counter[str] = Counter()
    for point in found:
        assert isinstance(point, HistogramDataPoint)
        assert point.attributes is not None
        totals[str(point.attributes["tenant"])] += point.count
    return totals


def test_metrics_match_what_the_worker_did(
    valkey_server: Any, reader: InMemoryMetricReader
) -> None:
    name = f"metrics-{uuid.uuid4().hex[:10]}"
    config = QueueConfig(name=name, retry_base_seconds=0.01, retry_cap_seconds=0.05)
    metrics = OpenTelemetryMetrics(MeterProvider(metric_readers=[reader]))
    backend = RedisBackend.from_url(valkey_server.url, queue=name, config=config)
    with FairQueue(backend, plugins=[metrics], config=config) as queue:

        def depths() -> dict[str, int]:
            sizes = queue.get_queue_sizes_batch(TENANTS)
            return {tenant: size["total"] for tenant, size in sizes.items()}

        metrics.observe_depth(depths, queue=name)

        expected: dict[str, Counter[str]] = {}
        tasks: list[Task] = []
        for index, tenant in enumerate(TENANTS):
            ok = index + 1  # a different number of tasks per tenant
            tasks += [Task.create(tenant, payload={"fail": 0}) for _ in range(ok)]
            tasks.append(Task.create(tenant, payload={"fail": 1}, max_retries=3))  # retried once
            tasks.append(Task.create(tenant, payload={"fail": 99}, max_retries=1))  # dead after 2
            expected[tenant] = Counter(
                pushed=ok + 2, finished=ok + 1, failed=3, retried=2, dead=1, started=ok + 4
            )
        queue.push_batch(tasks)
        queue.push(tasks[0])  # a duplicate id: not counted as pushed again

        before = points(reader)
        depth = {
            str(p.attributes["tenant"]): p.value
            for p in before["fairque.queue.depth"]
            if p.attributes["queue"] == name
        }
        assert depth == {tenant: expected[tenant]["pushed"] for tenant in TENANTS}

        worker = Worker(
            WorkerConfig(id="metrics-w", poll_interval_seconds=0.02, max_concurrent_tasks=4),
            FlakyHandler(),
            queue,
        )
        worker.start()
        try:
            deadline = time.monotonic() + 30
            while worker.health()["processed"] + worker.health()["dead"] < len(tasks):
                assert time.monotonic() < deadline, worker.health()
                time.sleep(0.02)
        finally:
            worker.stop()
        assert len(queue.list_dlq(limit=100)) == len(TENANTS)

        found = points(reader)
        counters = {
            "pushed": "fairque.tasks.pushed",
            "finished": "fairque.tasks.finished",
            "failed": "fairque.tasks.failed",
            "retried": "fairque.tasks.retried",
            "dead": "fairque.tasks.dead_lettered",
        }
        for event, metric in counters.items():
            assert per_tenant_sum(found[metric]) == {t: expected[t][event] for t in TENANTS}, event
        started = {t: expected[t]["started"] for t in TENANTS}
        assert per_tenant_count(found["fairque.task.wait_time"]) == started
        # one run time per attempt: finished + failed attempts = started
        assert per_tenant_count(found["fairque.task.run_time"]) == started
        for point in found["fairque.tasks.dead_lettered"]:
            assert point.attributes["failure_type"] == "failed"
            assert point.attributes["queue"] == name
        depth = {str(p.attributes["tenant"]): p.value for p in found["fairque.queue.depth"]}
        assert depth == dict.fromkeys(TENANTS, 0)
