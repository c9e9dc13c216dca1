"""A real scrape of both Prometheus exports, from a scenario that makes every series appear.

On the in-memory reference model: a worker started from code with
:func:`fairque_plugins.prometheus.worker_metrics` runs tasks that finish, fail and are retried,
and are dead-lettered; the exporter's plugin (:func:`fairque_plugins.prometheus.exporter_metrics`)
reads the queue's stats, fairness figures (two readings while two tenants are backlogged, so
shares and Jain's index appear) and workers registry. :func:`exported_names` is what the alert
rules and the Grafana dashboard may name: the sample names of the two scrapes, nothing typed by
hand.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from fairque_core import (
    FairQueue,
    InMemoryBackend,
    QueueConfig,
    Task,
    TaskHandler,
    Worker,
    WorkerConfig,
)
from fairque_core.app.worker.registry import WorkerRegistry
from fairque_plugins.fairness_metrics import MIN_READING_SECONDS
from fairque_plugins.prometheus import exporter_metrics, worker_metrics


class _Handler(TaskHandler):
    def process_task(self, task: Task) -> object:
        if task.payload.get("fail"):
            raise RuntimeError("boom")
        return None


def _until(check: object, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def scrapes() -> tuple[str, str]:
    """``(worker scrape, exporter scrape)`` of one scenario (a second or two)."""
    plugin, worker_registry = worker_metrics("scenario-worker")
    model = InMemoryBackend(config=QueueConfig(name="scenario"))
    queue = FairQueue(model, plugins=[plugin])
    exporter, exporter_registry = exporter_metrics("scenario-exporter")
    exporter.observe_stats(queue.get_stats, queue=queue.name)
    exporter.observe_fairness(lambda: queue.get_tenant_fairness(limit=100), queue=queue.name)
    exporter.observe_workers(WorkerRegistry(queue.backend).list, queue=queue.name)
    queue.set_tenant_weight("heavy", 2.0)
    # a backlog of two tenants, read twice around some dispatches: shares, Jain, ages
    queue.push_batch([Task.create(t, payload={}) for t in ("heavy", "light") for _ in range(20)])
    exporter_text = generate_latest(exporter_registry).decode()
    for _ in range(6):
        claimed = queue.claim_batch(6)
        queue.finish_batch([(task, None) for task in claimed])
    time.sleep(max(MIN_READING_SECONDS, exporter.stats_ttl_seconds) + 0.05)
    exporter_text += generate_latest(exporter_registry).decode()
    worker = Worker(WorkerConfig(id="scenario-worker", max_concurrent_tasks=2), _Handler(), queue)
    plugin.observe_worker(worker)
    worker.start()
    try:
        queue.push_batch([Task.create("bad", payload={"fail": True}, max_retries=1)])
        queue.push(Task.create("worse", payload={"fail": True}, max_retries=0))
        _until(lambda: queue.get_stats()["dead"] == 2 and queue.get_stats()["ready"] == 0, 20)
        _until(lambda: worker.health()["in_flight"] == 0, 5)
        worker_text = generate_latest(worker_registry).decode()
        exporter_text += generate_latest(exporter_registry).decode()
    finally:
        worker.stop(timeout=10)
        queue.close()
    return worker_text, exporter_text


def sample_names(texts: Iterable[str]) -> set[str]:
    """Every sample name in the expositions ``texts`` (``x_total``, ``x_bucket``, ``x``)."""
    return {
        sample.name
        for text in texts
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def exported_names() -> set[str]:
    """The names a query may use: every sample name of a real scrape of both exports."""
    return sample_names(scrapes())
