"""A worker process for the OpenTelemetry end-to-end test.

``python otel_worker_child.py --url URL --queue Q --out FILE --expect N [--link]`` runs a
fairque Worker with :class:`OpenTelemetryTracing` on its own SDK TracerProvider until ``N``
tasks have finished or failed for good, then writes every finished span to ``FILE``, one JSON
object a line (name, kind, trace_id, span_id, parent_span_id, attributes, links, status,
events). A task whose payload has ``"fail": true`` raises ``RuntimeError("boom")``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from typing import IO, Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from fairque_core import FairQueue, QueueConfig, Task, TaskHandler, WorkerConfig
from fairque_core.app.worker.worker import Worker
from fairque_plugins import OpenTelemetryTracing
from fairque_redis.backends.backend import RedisBackend


def span_record(span: ReadableSpan) -> dict[str, Any]:
    context = span.context
    assert context is not None
    return {
        "name": span.name,
        "kind": span.kind.name,
        "trace_id": f"{context.trace_id:032x}",
        "span_id": f"{context.span_id:016x}",
        "parent_span_id": None if span.parent is None else f"{span.parent.span_id:016x}",
        "attributes": dict(span.attributes or {}),
        "links": [
            {"trace_id": f"{link.context.trace_id:032x}", "span_id": f"{link.context.span_id:016x}"}
            for link in span.links
        ],
        "status": span.status.status_code.name,
        "events": [event.name for event in span.events],
    }


class JsonLinesExporter(SpanExporter):
    """Append each finished span to a file as one JSON line."""

    def __init__(self, out: IO[str]) -> None:
        self.out = out

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        for span in spans:
            self.out.write(json.dumps(span_record(span)) + "\n")
        self.out.flush()
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self.out.close()


class Handler(TaskHandler):
    def process_task(self, task: Task) -> object:
        if task.payload.get("fail"):
            raise RuntimeError("boom")
        return {"echo": task.payload.get("n")}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--queue", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--expect", type=int, required=True)
    parser.add_argument("--link", action="store_true")
    parser.add_argument("--timeout", type=float, default=20.0)
    args = parser.parse_args()

    provider = TracerProvider()
    provider.add_span_processor(
        SimpleSpanProcessor(JsonLinesExporter(open(args.out, "a", encoding="utf-8")))  # noqa: SIM115
    )
    tracing = OpenTelemetryTracing(provider, link_instead_of_parent=args.link)
    config = QueueConfig(name=args.queue)
    backend = RedisBackend.from_url(args.url, queue=args.queue, config=config)
    queue = FairQueue(backend, plugins=[tracing], config=config)
    worker = Worker(
        WorkerConfig(id="otel-child", poll_interval_seconds=0.05, max_concurrent_tasks=2),
        Handler(),
        queue,
    )
    worker.start()
    deadline = time.monotonic() + args.timeout
    try:
        while True:
            health = worker.health()
            if health["processed"] + health["dead"] >= args.expect:
                break
            if time.monotonic() > deadline:
                print(f"timed out: {health}", file=sys.stderr)
                return 1
            time.sleep(0.02)
    finally:
        worker.stop()
        queue.close()
        provider.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
