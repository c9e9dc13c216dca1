"""OpenTelemetry plugins with the SDK's in-memory exporter and reader (no globals set)."""

from __future__ import annotations

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
from fairque_core.app.plugin_host import PluginHost
from fairque_plugins import OpenTelemetryMetrics, OpenTelemetryTracing


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
    emitted = {"pushed": 3, "started": 2, "finished": 1, "failed": 2, "retried": 1, "dead": 1}
    for _ in range(emitted["pushed"]):
        host.task_event("pushed", task, "orders", duplicate=False)
    host.task_event("pushed", task, "orders", duplicate=True)  # nothing was enqueued
    for wait in (0.5, 1.5):
        host.task_event("started", task, "orders", wait_seconds=wait)
    host.task_event("finished", task, "orders", run_seconds=0.25)
    for _ in range(emitted["failed"]):
        host.task_event("failed", task, "orders", run_seconds=0.1, error="E")
    host.task_event("retried", task, "orders", retry_delay=1.0)
    host.task_event("dead", task, "orders", failure_type=FailureType.FAILED)
    host.task_event("released", task, "orders")

    got = collect(reader)
    names = {
        "pushed": "fairque.tasks.pushed",
        "finished": "fairque.tasks.finished",
        "failed": "fairque.tasks.failed",
        "retried": "fairque.tasks.retried",
        "dead": "fairque.tasks.dead_lettered",
    }
    for event, name in names.items():
        assert total(got[name]) == emitted[event], name
    (pushed,) = got["fairque.tasks.pushed"]
    assert dict(pushed.attributes) == {"queue": "orders", "tenant": "tenant-a", "priority": 4}
    (dead,) = got["fairque.tasks.dead_lettered"]
    assert dead.attributes["failure_type"] == "failed"
    (wait,) = got["fairque.task.wait_time"]
    assert (wait.count, wait.sum) == (2, 2.0)
    (run,) = got["fairque.task.run_time"]
    assert run.count == 3
    assert run.sum == pytest.approx(0.45)
    meters.shutdown()


def test_observe_depth_reports_each_tenant() -> None:
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    plugin = OpenTelemetryMetrics(meters)
    plugin.observe_depth(lambda: {"a": 3, "b": 5}, queue="orders")

    def broken() -> dict[str, int]:
        raise RuntimeError("backend down")

    plugin.observe_depth(broken, queue="emails")
    points = collect(reader)["fairque.queue.depth"]
    assert {(p.attributes["tenant"], p.value) for p in points} == {("a", 3), ("b", 5)}
    assert {p.attributes["queue"] for p in points} == {"orders"}
    meters.shutdown()


def test_tenant_attribute_can_be_turned_off() -> None:
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    host = PluginHost(
        [OpenTelemetryMetrics(meters, tenant_attribute=False)], load_entrypoints=False
    )
    host.task_event("finished", make_task(), "orders", run_seconds=1.0)
    (point,) = collect(reader)["fairque.tasks.finished"]
    assert "tenant" not in point.attributes
    meters.shutdown()
