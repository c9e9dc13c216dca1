"""OpenTelemetry plugins with the SDK's in-memory exporter and reader (no globals set)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import attrs
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from fairque_core import FailureType, Priority, Task
from fairque_core.app.plugins.host import PluginHost
from fairque_plugins import OpenTelemetryMetrics, OpenTelemetryTracing
from fairque_plugins.metrics import (
    DEFAULT_MAX_TENANTS,
    OTHER_TENANT,
    QUEUE_COUNTERS,
    SECONDS_BUCKETS,
)


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    yield tp
    tp.shutdown()


def make_task() -> Task:
    return Task.create("tenant-a", Priority.HIGH, {"n": 1}, task_id="t-42")


def push_and_run(host: PluginHost, call: Any = lambda: "ok") -> object:
    task = make_task()
    headers = host.push_headers(task, queue="orders")
    assert "traceparent" in headers
    worker_task = attrs.evolve(task, headers=headers)  # what the worker decodes
    return host.execute(worker_task, call, queue="orders")


def by_kind(spans: tuple[ReadableSpan, ...], kind: SpanKind) -> ReadableSpan:
    (found,) = [s for s in spans if s.kind is kind]
    return found


def test_consumer_span_is_child_of_producer(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    host = PluginHost([OpenTelemetryTracing(provider)], load_entrypoints=False)
    assert push_and_run(host) == "ok"
    spans = exporter.get_finished_spans()
    assert len(spans) == 2
    producer = by_kind(spans, SpanKind.PRODUCER)
    consumer = by_kind(spans, SpanKind.CONSUMER)
    assert producer.context is not None
    assert consumer.context is not None
    assert consumer.parent is not None
    assert consumer.context.trace_id == producer.context.trace_id
    assert consumer.parent.span_id == producer.context.span_id
    assert producer.name == "publish orders"
    assert consumer.name == "process orders"
    assert consumer.attributes is not None
    assert dict(consumer.attributes) == {
        "messaging.system": "fairque",
        "messaging.destination.name": "orders",
        "messaging.message.id": "t-42",
        "messaging.operation": "process",
        "fairque.tenant": "tenant-a",
        "fairque.priority": 4,
        "fairque.retry_count": 0,
    }
    assert producer.attributes is not None
    assert producer.attributes["messaging.operation"] == "publish"


def test_link_mode_starts_a_new_trace(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    tracing = OpenTelemetryTracing(provider, link_instead_of_parent=True)
    host = PluginHost([tracing], load_entrypoints=False)
    push_and_run(host)
    spans = exporter.get_finished_spans()
    producer = by_kind(spans, SpanKind.PRODUCER)
    consumer = by_kind(spans, SpanKind.CONSUMER)
    assert producer.context is not None
    assert consumer.context is not None
    assert consumer.parent is None
    assert consumer.context.trace_id != producer.context.trace_id
    (link,) = consumer.links
    assert link.context.span_id == producer.context.span_id
    assert link.context.trace_id == producer.context.trace_id


def test_handler_exception_is_recorded_and_reraised(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    host = PluginHost([OpenTelemetryTracing(provider)], load_entrypoints=False)
    error = ZeroDivisionError("bad math")

    def call() -> object:
        raise error

    with pytest.raises(ZeroDivisionError) as info:
        push_and_run(host, call)
    assert info.value is error
    consumer = by_kind(exporter.get_finished_spans(), SpanKind.CONSUMER)
    assert consumer.status.status_code is StatusCode.ERROR
    assert [e.name for e in consumer.events] == ["exception"]


def test_queue_name_comes_from_configure_when_not_given(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    class Config:
        name = "emails"

    host = PluginHost([OpenTelemetryTracing(provider)], load_entrypoints=False)
    host.configure(Config())
    host.execute(make_task(), lambda: None)
    (span,) = exporter.get_finished_spans()
    assert span.name == "process emails"


# --------------------------------------------------------------------------- metrics
def collect(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    data = reader.get_metrics_data()
    assert data is not None
    out: dict[str, list[Any]] = {}
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                out[metric.name] = list(metric.data.data_points)
    return out


def total(points: list[Any]) -> float:
    return float(sum(p.value for p in points))


def test_counters_and_histograms_follow_events() -> None:
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    host = PluginHost([OpenTelemetryMetrics(meters)], load_entrypoints=False)
    task = make_task()
    emitted = {
        "pushed": 3,
        "started": 2,
        "finished": 1,
        "failed": 2,
        "retried": 1,
        "dead": 2,
        "released": 1,
        "canceled": 1,
    }
    for _ in range(emitted["pushed"]):
        host.task_event("pushed", task, "orders", duplicate=False)
    host.task_event("pushed", task, "orders", duplicate=True)  # nothing was enqueued
    for wait in (0.5, 1.5):
        host.task_event("started", task, "orders", wait_seconds=wait)
    host.task_event("finished", task, "orders", run_seconds=0.25)
    host.task_event("failed", task, "orders", run_seconds=0.1, error="E", failure_type="failed")
    host.task_event(
        "failed", task, "orders", run_seconds=0.1, error="E", failure_type=FailureType.POISONED
    )
    host.task_event("retried", task, "orders", retry_delay=1.0, failure_type="failed")
    host.task_event("dead", task, "orders", failure_type=FailureType.FAILED)
    host.task_event("dead", task, "orders", failure_type=FailureType.POISONED)
    host.task_event("released", task, "orders")
    host.task_event("canceled", task, "orders")

    got = collect(reader)
    names = {
        "pushed": "fairque.tasks.pushed",
        "finished": "fairque.tasks.finished",
        "failed": "fairque.tasks.failed",
        "retried": "fairque.tasks.retried",
        "dead": "fairque.tasks.dead_lettered",
        "released": "fairque.tasks.released",
        "canceled": "fairque.tasks.canceled",
    }
    for event, name in names.items():
        assert total(got[name]) == emitted[event], name
    (pushed,) = got["fairque.tasks.pushed"]
    assert dict(pushed.attributes) == {"queue": "orders", "tenant": "tenant-a", "priority": 4}
    dead = {p.attributes["failure_type"]: p.value for p in got["fairque.tasks.dead_lettered"]}
    assert dead == {"failed": 1, "poisoned": 1}
    failed = {p.attributes["failure_type"]: p.value for p in got["fairque.tasks.failed"]}
    assert failed == {"failed": 1, "poisoned": 1}
    (poisoned,) = got["fairque.tasks.poisoned"]  # the poisoned part of dead_lettered
    assert poisoned.value == 1
    assert "failure_type" not in poisoned.attributes
    (wait,) = got["fairque.task.wait_time"]
    assert (wait.count, wait.sum) == (2, 2.0)
    (run,) = got["fairque.task.run_time"]
    assert run.count == 3
    assert run.sum == pytest.approx(0.45)
    meters.shutdown()


def test_histograms_have_seconds_buckets() -> None:
    """Sub-second and multi-second times land in different buckets (not all in "0-5 ms")."""
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    host = PluginHost([OpenTelemetryMetrics(meters)], load_entrypoints=False)
    task = make_task()
    samples = (0.002, 0.04, 0.3, 0.9, 2.0, 4.0, 45.0, 7200.0)
    for wait in samples:
        host.task_event("started", task, "orders", wait_seconds=wait)
        host.task_event("finished", task, "orders", run_seconds=wait)
    got = collect(reader)
    for name in ("fairque.task.wait_time", "fairque.task.run_time"):
        (point,) = got[name]
        assert tuple(point.explicit_bounds) == SECONDS_BUCKETS, name
        filled = [i for i, n in enumerate(point.bucket_counts) if n]
        assert len(filled) == len(samples), (name, point.bucket_counts)
        assert point.bucket_counts[-1] == 1  # 2 h: past the last bound (1 h)
    meters.shutdown()


def test_bucket_boundaries_can_be_chosen_and_are_checked() -> None:
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    host = PluginHost(
        [OpenTelemetryMetrics(meters, bucket_boundaries=[1, 10])], load_entrypoints=False
    )
    host.task_event("started", make_task(), "orders", wait_seconds=5.0)
    (point,) = collect(reader)["fairque.task.wait_time"]
    assert tuple(point.explicit_bounds) == (1.0, 10.0)
    assert list(point.bucket_counts) == [0, 1, 0]
    meters.shutdown()
    with pytest.raises(ValueError, match="bucket_boundaries"):
        OpenTelemetryMetrics(bucket_boundaries=[2, 1])
    with pytest.raises(ValueError, match="max_tenants"):
        OpenTelemetryMetrics(max_tenants=-1)
    with pytest.raises(ValueError, match="stats_ttl_seconds"):
        OpenTelemetryMetrics(stats_ttl_seconds=float("nan"))


def test_observe_depth_reports_each_tenant() -> None:
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    plugin = OpenTelemetryMetrics(meters)
    plugin.observe_depth(lambda: {"a": 3, "b": 5}, queue="orders")

    def broken() -> dict[str, int]:
        raise RuntimeError("backend down")

    plugin.observe_depth(broken, queue="emails")
    points = collect(reader)["fairque.tenant.depth"]
    assert {(p.attributes["tenant"], p.value) for p in points} == {("a", 3), ("b", 5)}
    assert {p.attributes["queue"] for p in points} == {"orders"}
    meters.shutdown()


def test_tenant_attribute_is_capped() -> None:
    """Past ``max_tenants`` distinct tenants, the rest share one ``_other`` value."""
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    plugin = OpenTelemetryMetrics(meters, max_tenants=2)
    host = PluginHost([plugin], load_entrypoints=False)
    for name in ("a", "b", "c", "d", "a"):
        host.task_event("finished", Task.create(name), "orders", run_seconds=0.1)
    plugin.observe_depth(lambda: {"a": 1, "b": 2, "c": 3, "d": 4}, queue="orders")
    got = collect(reader)
    finished = {p.attributes["tenant"]: p.value for p in got["fairque.tasks.finished"]}
    assert finished == {"a": 2, "b": 1, OTHER_TENANT: 2}
    depth = {p.attributes["tenant"]: p.value for p in got["fairque.tenant.depth"]}
    assert depth == {"a": 1, "b": 2, OTHER_TENANT: 7}
    assert plugin.tenant_label("c") == OTHER_TENANT
    assert OpenTelemetryMetrics().max_tenants == DEFAULT_MAX_TENANTS
    meters.shutdown()


def test_tenant_attribute_can_be_turned_off() -> None:
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    plugin = OpenTelemetryMetrics(meters, tenant_attribute=False)
    host = PluginHost([plugin], load_entrypoints=False)
    host.task_event("finished", make_task(), "orders", run_seconds=1.0)
    plugin.observe_depth(lambda: {"a": 1, "b": 2}, queue="orders")
    got = collect(reader)
    (point,) = got["fairque.tasks.finished"]
    assert "tenant" not in point.attributes
    (depth,) = got["fairque.tenant.depth"]
    assert (dict(depth.attributes), depth.value) == ({"queue": "orders"}, 3)
    meters.shutdown()


class FakeStats:
    """A get_stats() stand-in that counts its calls."""

    def __init__(self, **values: int) -> None:
        self.values = values
        self.calls = 0

    def __call__(self) -> dict[str, int]:
        self.calls += 1
        return dict(self.values)


def test_observe_stats_reports_queue_gauges_and_counters() -> None:
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    plugin = OpenTelemetryMetrics(meters, stats_ttl_seconds=3600)
    stats = FakeStats(
        ready=4, scheduled=2, leased=1, dlq=3, active_tenants=2, recovered=5, canceled=6, dead=3
    )
    plugin.observe_stats(stats, queue="orders")
    got = collect(reader)
    states = {p.attributes["state"]: p.value for p in got["fairque.queue.tasks"]}
    assert states == {"ready": 4, "scheduled": 2, "leased": 1}  # no deferred figure given
    assert {p.attributes["queue"] for p in got["fairque.queue.tasks"]} == {"orders"}
    (depth,) = got["fairque.queue.depth"]
    assert (dict(depth.attributes), depth.value) == ({"queue": "orders"}, 7)
    assert total(got["fairque.queue.dlq_size"]) == 3
    assert total(got["fairque.queue.active_tenants"]) == 2
    assert total(got["fairque.queue.leases_recovered"]) == 5
    assert total(got["fairque.queue.canceled"]) == 6
    assert total(got["fairque.queue.dead_lettered"]) == 3
    assert "fairque.queue.pushed" not in got  # a counter the source did not give
    assert set(QUEUE_COUNTERS) >= {"recovered", "canceled", "dead"}
    # one get_stats() for the whole collection, not one per instrument; cached for the TTL
    assert stats.calls == 1
    collect(reader)
    assert stats.calls == 1
    meters.shutdown()


def test_observe_stats_reads_again_after_the_ttl_and_reports_deferred() -> None:
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    plugin = OpenTelemetryMetrics(meters, stats_ttl_seconds=0.05)
    stats = FakeStats(ready=1, scheduled=0, deferred=2, leased=0)
    plugin.observe_stats(stats, queue="orders")
    collect(reader)
    stats.values["ready"] = 9
    time.sleep(0.06)
    got = collect(reader)
    assert stats.calls == 2
    states = {p.attributes["state"]: p.value for p in got["fairque.queue.tasks"]}
    assert states == {"ready": 9, "scheduled": 0, "deferred": 2, "leased": 0}
    assert total(got["fairque.queue.depth"]) == 11
    meters.shutdown()


def test_a_failing_stats_source_is_skipped(caplog: pytest.LogCaptureFixture) -> None:
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    plugin = OpenTelemetryMetrics(meters, stats_ttl_seconds=3600)
    calls = []

    def broken() -> dict[str, int]:
        calls.append(1)
        raise ConnectionError("backend down")

    plugin.observe_stats(broken, queue="emails")
    plugin.observe_stats(FakeStats(ready=1, leased=0, scheduled=0), queue="orders")
    got = collect(reader)
    assert {p.attributes["queue"] for p in got["fairque.queue.depth"]} == {"orders"}
    assert len(calls) == 1  # the failure is cached too: a down backend is not hammered
    assert "stats source for queue 'emails' failed" in caplog.text
    meters.shutdown()


def test_a_timed_out_task_leaves_an_error_span(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """The worker fails a task whose handler runs past the timeout while the handler runs on;
    when it returned at last, its span ended as a success (UNSET), though the task was in the
    DLQ. The failure event now marks the span still open."""
    from fairque_core import FairQueue, InMemoryBackend, TaskHandler, TaskState, Worker
    from fairque_core import WorkerConfig as Config

    class Slow(TaskHandler):
        def process_task(self, task: Task) -> object:
            time.sleep(0.6)
            return "late"

    queue = FairQueue(
        InMemoryBackend(queue="otel-timeout"), plugins=[OpenTelemetryTracing(provider)]
    )
    config = Config(id="w", task_timeout_seconds=0.2, poll_interval_seconds=0.05)
    worker = Worker(config, Slow(), queue)
    worker.start()
    try:
        queue.push(Task.create("tenant-a", task_id="slow", max_retries=0))
        deadline = time.monotonic() + 10
        while not [s for s in exporter.get_finished_spans() if s.kind is SpanKind.CONSUMER]:
            assert time.monotonic() < deadline, "the handler's span never ended"
            time.sleep(0.05)
    finally:
        worker.stop()
    consumer = by_kind(exporter.get_finished_spans(), SpanKind.CONSUMER)
    assert consumer.status.status_code is StatusCode.ERROR
    assert "TaskTimeoutError" in (consumer.status.description or "")
    assert [e.name for e in consumer.events] == ["exception"]
    assert queue.get_state("slow") is TaskState.FAILED
