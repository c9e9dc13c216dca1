"""OpenTelemetry tracing through the real engine on the embedded Valkey, across processes.

The producer pushes from this process with an SDK TracerProvider and an in-memory exporter;
``otel_worker_child.py`` runs the tasks in a worker subprocess with its own TracerProvider and
writes its spans to a JSON-lines file. The trace context travels only in the task headers.
Also here: the AsyncWorker's consumer span covers the awaited handler.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from fairque_core import AsyncFairQueue, FairQueue, Priority, QueueConfig, Task, WorkerConfig
from fairque_core.app.worker.handlers import RegistryHandler, TaskRegistry
from fairque_core.app.worker.worker_async import AsyncWorker
from fairque_plugins import OpenTelemetryTracing
from fairque_redis.backends.backend import RedisBackend
from fairque_redis.backends.backend_async import AsyncRedisBackend

pytestmark = [pytest.mark.redis, pytest.mark.timeout(60)]

CHILD = Path(__file__).with_name("otel_worker_child.py")


@pytest.fixture(autouse=True)
def _no_autoload(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAIRQUE_DISABLE_PLUGIN_AUTOLOAD", "1")


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    yield tp
    tp.shutdown()


def queue_name() -> str:
    return f"otel-{uuid.uuid4().hex[:10]}"


def producer_queue(url: str, name: str, tracing: OpenTelemetryTracing) -> FairQueue:
    config = QueueConfig(name=name)
    backend = RedisBackend.from_url(url, queue=name, config=config)
    return FairQueue(backend, plugins=[tracing], config=config)


def run_child(url: str, name: str, out: Path, expect: int, *, link: bool = False) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["FAIRQUE_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    command = [sys.executable, str(CHILD), "--url", url, "--queue", name, "--out", str(out)]
    command += ["--expect", str(expect)] + (["--link"] if link else [])
    proc = subprocess.run(command, check=False, env=env, capture_output=True, text=True, timeout=45)
    assert proc.returncode == 0, proc.stderr


def read_spans(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def hex_ids(span: ReadableSpan) -> tuple[str, str]:
    assert span.context is not None
    return f"{span.context.trace_id:032x}", f"{span.context.span_id:016x}"


def test_consumer_span_in_worker_process_is_child_of_producer_span(
    valkey_server: Any, provider: TracerProvider, exporter: InMemorySpanExporter, tmp_path: Path
) -> None:
    name = queue_name()
    with producer_queue(valkey_server.url, name, OpenTelemetryTracing(provider)) as queue:
        task = Task.create("tenant-a", Priority.HIGH, {"n": 1}, task_id=f"ok-{name}")
        queue.push(task)
    (producer,) = exporter.get_finished_spans()
    assert producer.kind is SpanKind.PRODUCER
    assert producer.name == f"publish {name}"
    trace_id, span_id = hex_ids(producer)

    out = tmp_path / "spans.jsonl"
    run_child(valkey_server.url, name, out, expect=1)
    (consumer,) = read_spans(out)
    assert consumer["kind"] == "CONSUMER"
    assert consumer["name"] == f"process {name}"
    assert consumer["trace_id"] == trace_id
    assert consumer["parent_span_id"] == span_id
    assert consumer["links"] == []
    assert consumer["status"] == "UNSET"
    assert consumer["attributes"] == {
        "messaging.system": "fairque",
        "messaging.destination.name": name,
        "messaging.message.id": task.task_id,
        "messaging.operation": "process",
        "fairque.tenant": "tenant-a",
        "fairque.priority": int(Priority.HIGH),
        "fairque.retry_count": 0,
    }
    assert producer.attributes is not None
    assert dict(producer.attributes) == {
        **consumer["attributes"],
        "messaging.operation": "publish",
    }


def test_link_mode_starts_a_new_trace_linked_to_the_producer(
    valkey_server: Any, provider: TracerProvider, exporter: InMemorySpanExporter, tmp_path: Path
) -> None:
    name = queue_name()
    with producer_queue(valkey_server.url, name, OpenTelemetryTracing(provider)) as queue:
        queue.push(Task.create("tenant-b", Priority.LOW, {"n": 2}))
    (producer,) = exporter.get_finished_spans()
    trace_id, span_id = hex_ids(producer)

    out = tmp_path / "spans.jsonl"
    run_child(valkey_server.url, name, out, expect=1, link=True)
    (consumer,) = read_spans(out)
    assert consumer["kind"] == "CONSUMER"
    assert consumer["trace_id"] != trace_id
    assert consumer["parent_span_id"] is None
    assert consumer["links"] == [{"trace_id": trace_id, "span_id": span_id}]
    assert consumer["attributes"]["fairque.tenant"] == "tenant-b"
    assert consumer["attributes"]["fairque.priority"] == int(Priority.LOW)


def test_failing_task_consumer_span_is_error_with_exception_event(
    valkey_server: Any, provider: TracerProvider, exporter: InMemorySpanExporter, tmp_path: Path
) -> None:
    name = queue_name()
    with producer_queue(valkey_server.url, name, OpenTelemetryTracing(provider)) as queue:
        queue.push(Task.create("tenant-c", payload={"fail": True}, max_retries=0))
        queue.push(Task.create("tenant-c", payload={"n": 3}))
    producers = {hex_ids(s)[1]: s for s in exporter.get_finished_spans()}
    assert len(producers) == 2

    out = tmp_path / "spans.jsonl"
    run_child(valkey_server.url, name, out, expect=2)
    spans = read_spans(out)
    assert len(spans) == 2
    assert {s["parent_span_id"] for s in spans} == set(producers)
    (failed,) = [s for s in spans if s["status"] == "ERROR"]
    (succeeded,) = [s for s in spans if s["status"] != "ERROR"]
    assert failed["events"] == ["exception"]
    assert succeeded["events"] == []
    assert succeeded["status"] == "UNSET"


def test_async_worker_consumer_span_covers_the_awaited_handler(
    valkey_server: Any, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    name = queue_name()
    registry = TaskRegistry()
    seen: dict[str, Any] = {}
    tracer = provider.get_tracer("handler")

    @registry.task("work", max_retries=0)
    async def work(n: int) -> int:
        await asyncio.sleep(0.05)  # suspends: the span must still be current afterwards
        current = trace.get_current_span()
        seen[f"span-{n}"] = current.get_span_context().span_id
        with tracer.start_as_current_span(f"inner-{n}"):
            await asyncio.sleep(0)
        if n < 0:
            raise ValueError("negative")
        return 2 * n

    async def scenario() -> None:
        config = QueueConfig(name=name)
        backend = AsyncRedisBackend.from_url(valkey_server.url, queue=name, config=config)
        queue = AsyncFairQueue(backend, plugins=[OpenTelemetryTracing(provider)], config=config)
        async with queue:
            ok = work("tenant-x", 21)
            bad = work("tenant-x", -1)
            await queue.push_batch([ok, bad])
            worker = AsyncWorker(
                WorkerConfig(id="aw", poll_interval_seconds=0.05, max_concurrent_tasks=2),
                RegistryHandler(registry),
                queue,
            )
            await worker.start()
            deadline = asyncio.get_running_loop().time() + 15
            while worker.health()["processed"] + worker.health()["dead"] < 2:
                assert asyncio.get_running_loop().time() < deadline, worker.health()
                await asyncio.sleep(0.02)
            await worker.stop(5)

    asyncio.run(scenario())
    spans = exporter.get_finished_spans()
    consumers = [s for s in spans if s.kind is SpanKind.CONSUMER]
    assert len(consumers) == 2
    inner = {s.name: s for s in spans if s.name.startswith("inner-")}
    for n in (21, -1):
        span = inner[f"inner-{n}"]
        assert span.parent is not None
        parent_id = span.parent.span_id
        (consumer,) = [
            c for c in consumers if c.context is not None and c.context.span_id == parent_id
        ]
        assert seen[f"span-{n}"] == parent_id
        # the consumer span ends after the handler's work, so it covers the awaited run
        assert consumer.end_time is not None
        assert span.end_time is not None
        assert consumer.end_time >= span.end_time
        assert consumer.start_time is not None
        assert consumer.end_time - consumer.start_time >= 40e6
    failed = [c for c in consumers if c.status.status_code is StatusCode.ERROR]
    assert len(failed) == 1
    assert [e.name for e in failed[0].events] == ["exception"]
