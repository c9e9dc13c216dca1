"""OpenTelemetry tracing: a PRODUCER span per push, a CONSUMER span per execution.

The producer injects W3C trace context (``traceparent``, plus whatever the globally
configured propagator writes) into the task's headers through ``fairque_push_headers``; the
worker extracts it and runs the task inside a CONSUMER span, either as a child of the
producer span or, with ``link_instead_of_parent=True``, as the root of a new trace that
links to it (better for tasks that run long after they were pushed). Only
``opentelemetry-api`` is needed at run time; without an SDK the spans are no-ops.

Async handlers: when the wrapped ``call()`` returns an awaitable (the
:class:`~fairque_core.AsyncWorker` creates the handler's coroutine inside
the
hook and awaits it afterwards), the consumer span is not ended by the hook; the hook returns
an instrumented coroutine that keeps the span current while the handler runs and ends it
when the handler returns or raises.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Awaitable, Callable, Generator, Mapping
from typing import TYPE_CHECKING

from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from fairque_core.ports.hooks import hookimpl

if TYPE_CHECKING:
    from opentelemetry.util.types import AttributeValue

    from fairque_core.domain.models import Task

__all__ = ["OpenTelemetryTracing"]

_SYSTEM = "fairque"


def _library_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("fairque")
    except PackageNotFoundError:
        return None


class OpenTelemetryTracing:
    """Trace tasks from push to execution.

    ``tracer_provider`` defaults to the global one. Spans carry the messaging semantic
    conventions (``messaging.system="fairque"``, ``messaging.destination.name``,
    ``messaging.message.id``, ``messaging.operation``) and ``fairque.tenant``,
    ``fairque.priority`` and ``fairque.retry_count``. A handler's exception is recorded on the
    consumer span, whose status becomes ERROR; the exception itself is re-raised untouched.
    """

    fairque_plugin_name = "fairque.tracing"

    def __init__(
        self,
        tracer_provider: trace.TracerProvider | None = None,
        link_instead_of_parent: bool = False,
    ) -> None:
        self._tracer = trace.get_tracer(
            "fairque", _library_version(), tracer_provider=tracer_provider
        )
        self.link_instead_of_parent = link_instead_of_parent
        self._queue = "default"
        # consumer spans whose handler still runs, by (task id, lease token): a task the
        # worker fails while its handler runs on (a timeout) gets its failure recorded there
        self._open: dict[tuple[str, str], trace.Span] = {}
        self._lock = threading.Lock()

    @hookimpl
    def fairque_configure(self, config: object) -> None:
        name = getattr(config, "name", None)
        if isinstance(name, str) and name:
            self._queue = name

    def _attributes(self, task: Task, queue: str, operation: str) -> Mapping[str, AttributeValue]:
        return {
            "messaging.system": _SYSTEM,
            "messaging.destination.name": queue,
            "messaging.message.id": task.task_id,
            "messaging.operation": operation,
            "fairque.tenant": task.tenant,
            "fairque.priority": int(task.priority),
            "fairque.retry_count": task.retry_count,
        }

    @hookimpl
    def fairque_push_headers(self, task: Task, headers: dict[str, str], queue: str) -> None:
        destination = queue or self._queue
        with self._tracer.start_as_current_span(
            f"publish {destination}",
            kind=SpanKind.PRODUCER,
            attributes=self._attributes(task, destination, "publish"),
        ):
            propagate.inject(headers)

    @hookimpl(wrapper=True)
    def fairque_task_execute(self, task: Task, queue: str) -> Generator[None, object, object]:
        destination = queue or self._queue
        carried = propagate.extract(dict(task.headers))
        links: list[Link] = []
        parent: Context | None = carried
        if self.link_instead_of_parent:
            producer = trace.get_current_span(carried).get_span_context()
            if producer.is_valid:
                links.append(Link(producer))
            parent = Context()  # a new trace, whatever span is current in the worker
        span = self._tracer.start_span(
            f"process {destination}",
            context=parent,
            kind=SpanKind.CONSUMER,
            attributes=self._attributes(task, destination, "process"),
            links=links,
        )
        key = _key(task)
        with self._lock:
            self._open[key] = span
        try:
            with trace.use_span(span, record_exception=False, set_status_on_exception=False):
                result = yield
        except BaseException as exc:
            self._close(key)
            _record_failure(span, exc)
            span.end()
            raise
        if inspect.isawaitable(result):
            # An async handler (AsyncWorker): ``call()`` only created the coroutine. The span
            # stays open and current until it has been awaited.
            return _traced(span, result, lambda: self._close(key))
        self._close(key)
        span.end()
        return result

    @hookimpl
    def fairque_task_event(self, event: str, task: Task, info: Mapping[str, object]) -> None:
        """A task failed while its handler still runs (the worker timed it out): the failure
        goes on its consumer span, which ends when the handler returns (it was left OK)."""
        if event != "failed":
            return
        with self._lock:
            span = self._open.get(_key(task))
        if span is None or not span.is_recording():
            return
        reason = str(info.get("error") or "failed")  # the retry decision's reason
        span.add_event("exception", {"exception.message": reason})
        span.set_status(Status(StatusCode.ERROR, reason))

    def _close(self, key: tuple[str, str]) -> None:
        with self._lock:
            self._open.pop(key, None)


def _record_failure(span: trace.Span, exc: BaseException) -> None:
    span.record_exception(exc)
    span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))


def _key(task: Task) -> tuple[str, str]:
    return task.task_id, task.lease.token if task.lease is not None else ""


async def _traced(
    span: trace.Span, awaitable: Awaitable[object], closed: Callable[[], None]
) -> object:
    """Await ``awaitable`` with ``span`` current, then end the span (ERROR if it raised)."""
    try:
        with trace.use_span(span, record_exception=False, set_status_on_exception=False):
            return await awaitable
    except BaseException as exc:
        _record_failure(span, exc)
        raise
    finally:
        closed()
        span.end()
