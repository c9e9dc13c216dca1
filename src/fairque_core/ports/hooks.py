"""The fairque hook specifications (pluggy).

Every hook is named ``fairque_<noun>_<verb>``. Three kinds are used:

* **firstresult** where exactly one plugin decides: the payload codec and the retry/DLQ
  decision. Plugins are asked in order and the first non-None answer wins.
* **broadcast** where every plugin is told something: task events (metrics, audit) and the
  push headers (tracing). Return values are ignored. The
  :class:`~fairque_core.app.plugins.host.PluginHost`
  isolates broadcast implementations from each other: one that raises is reported and the
  others still run.
* **wrapper** around task execution: ``fairque_task_execute`` has a plain default
  implementation that runs the task; plugins wrap it with ``@hookimpl(wrapper=True)``.

Hooks are synchronous and must not block: they run on the hot path of push and claim.
Implementations may accept any subset of a spec's arguments (pluggy's opt-in arguments), so
specs grow by adding arguments, never by renaming them.

The engine never calls these hooks directly; it goes through the typed
:class:`~fairque_core.app.plugins.host.PluginHost`, which always passes keyword arguments.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from fairque_core.domain.models import Task
    from fairque_core.domain.retry import RetryDecision

__all__ = [
    "PROJECT_NAME",
    "TASK_EVENTS",
    "fairque_configure",
    "fairque_payload_decode",
    "fairque_payload_encode",
    "fairque_push_headers",
    "fairque_retry_decide",
    "fairque_task_event",
    "fairque_task_execute",
    "hookimpl",
    "hookspec",
]

PROJECT_NAME = "fairque"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)

#: The events ``fairque_task_event`` is called with, and what ``info`` carries for each.
TASK_EVENTS: Mapping[str, str] = {
    "pushed": (
        "the task was accepted by the backend; info: duplicate (bool, a known task id); "
        "intake (True) when it was stored in the queue's intake, not yet checked (ADR 47)"
    ),
    "started": "a worker claimed the task; info: wait_seconds, recoveries, worker_id",
    "finished": "the task succeeded; info: run_seconds",
    "failed": "one attempt failed; info: error, failure_type, run_seconds",
    "retried": "after 'failed', the task was scheduled again; info: retry_delay and the above",
    "dead": "the task went to the dead-letter queue; info: error, failure_type",
    "released": "a worker gave the task back without an attempt being counted",
    "canceled": "the task was canceled before it ran",
    "canceled_running": (
        "the worker running the task learned of its cancel (ADR 76) and stops its handler; "
        "info: terminate (bool, cancel(..., terminate=True))"
    ),
}


@hookspec(firstresult=True)
def fairque_payload_encode(task: Task) -> tuple[bytes, str] | None:
    """Encode ``task.payload`` for the backend.

    Return ``(body, content_type)`` if this plugin is the codec that encodes, else None.
    Stops at the first non-None result. Raise
    :class:`~fairque_core.domain.errors.TaskSerializationError` for a payload the codec cannot
    represent and :class:`~fairque_core.domain.errors.PayloadTooLargeError` for one over its limit;
    both are raised before any network call.
    """


@hookspec(firstresult=True)
def fairque_payload_decode(content_type: str, body: bytes) -> dict[str, Any] | None:
    """Decode a stored payload back into a dict.

    Return the payload if this plugin understands ``content_type``, else None, so a worker
    decodes whatever format the producer chose. Stops at the first non-None result. Raise
    :class:`~fairque_core.domain.errors.TaskSerializationError` for bytes that do not decode; the
    engine sends such a task to the dead-letter queue as ``poisoned``.
    """


@hookspec
def fairque_push_headers(task: Task, headers: dict[str, str], queue: str) -> None:
    """Add headers to a task that is about to be pushed (broadcast).

    ``headers`` starts as a copy of ``task.headers`` and is mutable: plugins write into it
    (tracing injects the W3C ``traceparent`` here). Keys and values must be ``str``. The
    result is stored with the task and comes back on ``task.headers`` in the worker.
    ``queue`` is the queue name (empty when the caller did not say). Return value ignored.
    """


@hookspec
def fairque_task_event(event: str, task: Task, queue: str, info: Mapping[str, Any]) -> None:
    """Something happened to a task (broadcast to every plugin; return value ignored).

    ``event`` is one of "pushed", "started", "finished", "failed", "retried", "dead",
    "released" and "canceled" (see ``TASK_EVENTS`` for what each ``info`` carries, e.g.
    ``wait_seconds``, ``run_seconds``, ``error``, ``failure_type``, ``retry_delay``). Events
    are reported after the backend changed state, so an implementation must only record
    (metrics, audit logs) and never block; its exceptions are logged, not raised.
    """


@hookspec(firstresult=True)
def fairque_task_execute(task: Task, call: Callable[[], object], queue: str) -> object:
    """Run a claimed task: ``call()`` runs the user's handler and returns its result.

    The built-in implementation (``trylast``) returns ``call()``. Plugins that work around
    execution (tracing, timing, context) use ``@hookimpl(wrapper=True)``, ``yield`` to get
    the result and must re-raise the handler's exception. A plain implementation that
    returns non-None replaces execution. Stops at the first non-None result. ``queue`` is
    the queue name (empty when the caller did not say).

    Under the AsyncWorker ``call()`` returns the handler's coroutine, not yet awaited, and the
    worker awaits whatever the hook returns: a wrapper that must cover the awaited run returns
    its own awaitable wrapping the one it got (the tracing plugin does this).
    """


@hookspec(firstresult=True)
def fairque_retry_decide(task: Task, error: BaseException, attempt: int) -> RetryDecision | None:
    """Decide what happens after attempt number ``attempt`` (1 for the first) failed.

    Return ``RetryDecision.retry(delay)`` or ``RetryDecision.dead(failure_type, reason)``,
    or None to leave the decision to the next plugin. Stops at the first non-None result.
    The built-in default (``trylast``) applies :mod:`fairque_core.domain.retry`'s backoff until
    ``task.max_retries`` is used up.
    """


@hookspec(historic=True)
def fairque_configure(config: object) -> None:
    """Receive the queue configuration once it is final (historic broadcast).

    Plugins registered later still receive it at registration time. Return value ignored.
    """
