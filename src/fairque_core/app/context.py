"""The running task's context: XCom values a handler publishes and reads (ADR 27).

A handler reaches its context with :func:`current_task_context` (a contextvar, so
``process_task(task)`` keeps its signature). The engine records which queue (and event loop)
claimed each task, once per claim call (:func:`register_all`); the plugin host's ``execute``
makes the task current around the handler call (:func:`bind`), on the worker's thread or
event-loop task, and threads the async worker starts for sync handlers inherit it. The
:class:`TaskContext` itself is built the first time the handler asks for it, so a handler that
never does costs no context (issue 17). ``finish`` reads the values pushed (:func:`pushed`),
encoded already, stores them in the same backend step as the result, and drops the context
once that call went through (:func:`discard`; a finish retried after an error stores them
still); ``fail`` and ``release`` drop them.

Reads go to the queue of the claim: with a synchronous :class:`FairQueue` they return the
value; with an :class:`AsyncFairQueue` they return an awaitable on the event loop's thread
(``await ctx.xcom_pull(...)``) and the value itself on any other thread (a sync handler the
async worker runs on a thread), by running the read on the loop that claimed the task.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import threading
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, Protocol

from fairque_core.domain.errors import (
    FairQueueError,
    ParentResultExpiredError,
    TaskCanceledError,
    TaskValidationError,
)
from fairque_core.domain.models import Task
from fairque_core.domain.outcomes import RETURN_VALUE
from fairque_core.domain.validation import check_xcom_key

__all__ = [
    "TaskContext",
    "XComQueue",
    "bind",
    "cancel",
    "current_task_context",
    "discard",
    "register",
    "register_all",
    "take",
]

# How many claimed tasks' contexts are kept at most (a claim never finished, failed or released
# by this process, e.g. its lease was lost, would otherwise stay forever): the oldest go first.
_MAX_CONTEXTS = 100_000


class XComQueue(Protocol):
    """What a context needs from its engine (both engines have it; async ones await)."""

    def xcom_get_values(self, tenant: str, items: Sequence[tuple[str, str]]) -> Any: ...

    def encode_xcom(self, task: Task, key: str, value: object) -> bytes: ...

    def get_state(self, task_id: str) -> Any: ...

    def set_progress(self, task: Task, value: object) -> Any: ...


class TaskContext:
    """The running task (``task``), the XCom values it pushed, and reads of other tasks'
    values, always within the task's own tenant."""

    def __init__(
        self, task: Task, queue: XComQueue | None, loop: asyncio.AbstractEventLoop | None
    ) -> None:
        self.task = task
        self._queue = queue
        self._loop = loop
        self._pushed: dict[str, bytes] = {}

    @property
    def tenant(self) -> str:
        return self.task.tenant

    @property
    def cancelled(self) -> bool:
        """True once the worker learned that the task was canceled while it ran (ADR 76: at
        its next heartbeat, within one heartbeat interval of the cancel). Cooperative: a
        thread's handler is never interrupted, it should look here between steps and
        return (or call :meth:`raise_if_cancelled`); an async handler's coroutine is
        cancelled as well. Whatever the handler then returns or raises is dropped."""
        key = _key(self.task)
        return key is not None and key in _CANCELED

    def raise_if_cancelled(self) -> None:
        """Raise TaskCanceledError when :attr:`cancelled` (a handler's way out of its work:
        the worker records nothing for the task, which stays canceled)."""
        if self.cancelled:
            raise TaskCanceledError(self.task.task_id, "canceled while running")

    def xcom_push(self, key: str, value: object) -> None:
        """Publish ``value`` under ``key``, stored when the task finishes (with its result,
        in one step), for the result TTL. The value is encoded now with the queue's codec:
        an unencodable value is a TaskSerializationError, one over the cap an
        XComTooLargeError, both naming the key. ``return_value`` is the task's result: set
        it by returning. A key that is no str of 1 to 256 characters, or holds a lone
        surrogate (which no server can store), is a TaskValidationError (``field`` is
        ``xcom key``), raised here in the handler: it never reaches the task's finish."""
        if not isinstance(key, str) or not key or len(key) > 256:
            raise TaskValidationError("xcom key", key, "must be a str of 1 to 256 characters")
        check_xcom_key(key, "xcom key")
        if key == RETURN_VALUE:
            raise TaskValidationError("xcom key", key, "is the result: return the value")
        queue = self._require_queue()
        self._pushed[key] = queue.encode_xcom(self.task, key, value)

    def set_progress(self, value: object) -> Any:
        """Report how far the task got: ``value`` (a small JSON value, at most 1 KiB
        encoded) replaces its progress, seen by ``queue.get_task(id).progress``,
        ``handle.progress()``, ``fairque task show``, the dashboard's task page and the
        queue's events (a ``progress`` event each time). Written at once, not at the finish.
        TaskSerializationError for a value JSON cannot hold or too large; LeaseLostError
        when the task's lease is gone. With an :class:`AsyncFairQueue` it returns an
        awaitable on the event loop's thread (``await ctx.set_progress(...)``) and writes at
        once from any other thread."""
        made = self._require_queue().set_progress(self.task, value)
        if inspect.iscoroutine(made):
            return self._on_owner_loop(made)
        return made

    def xcom_pull(self, task_id: str, key: str = RETURN_VALUE) -> Any:
        """The value ``key`` of task ``task_id`` (default its result), or None when there is
        none: absent, expired, or a task of another tenant (which reads exactly as absent)."""
        return self._read([(task_id, key)], lambda values: values[0])

    def parent_results(self) -> Any:
        """The results of the tasks this one depends on, in ``depends_on`` order (a chord's
        callback gets its members' results, a chain's step its predecessor's).

        A parent's result lives as long as its finished record (``result_ttl_seconds``). A
        parent whose result reads as None is looked up: when its record is gone (the task
        started after the result expired) this raises ParentResultExpiredError instead of
        handing the step a None that was never the parent's result."""
        deps = list(self.task.depends_on)
        queue = self._require_queue()
        made = queue.xcom_get_values(self.tenant, [(dep, RETURN_VALUE) for dep in deps])
        if not inspect.isawaitable(made):
            missing = [dep for dep, value in zip(deps, made, strict=True) if value is None]
            self._check_kept(missing, [queue.get_state(dep) for dep in missing])
            return list(made)
        pending: Awaitable[list[Any]] = made

        async def checked() -> list[Any]:
            values = await pending
            missing = [dep for dep, value in zip(deps, values, strict=True) if value is None]
            self._check_kept(missing, [await queue.get_state(dep) for dep in missing])
            return list(values)

        return self._on_owner_loop(checked())

    def _check_kept(self, parents: list[str], states: list[Any]) -> None:
        gone = [dep for dep, state in zip(parents, states, strict=True) if state is None]
        if gone:
            raise ParentResultExpiredError(self.task.task_id, gone)

    def _require_queue(self) -> XComQueue:
        if self._queue is None:
            raise FairQueueError(
                f"task {self.task.task_id} was not claimed through a FairQueue in this process"
            )
        return self._queue

    def _read(self, items: list[tuple[str, str]], shape: Callable[[list[Any]], Any]) -> Any:
        made = self._require_queue().xcom_get_values(self.tenant, items)
        if not inspect.isawaitable(made):
            return shape(made)
        pending: Awaitable[list[Any]] = made

        async def shaped() -> Any:
            return shape(await pending)

        return self._on_owner_loop(shaped())

    def _on_owner_loop(self, read: Coroutine[Any, Any, Any]) -> Any:
        """An async queue's ``read``: the awaitable on the claiming loop's thread, else its
        value, run on that loop."""
        if self._loop is None or _on_loop(self._loop):
            return read
        return asyncio.run_coroutine_threadsafe(read, self._loop).result()


def _on_loop(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


class _Current:
    """What :func:`bind` makes current: the task, and its context once the handler asked."""

    __slots__ = ("context", "task")

    def __init__(self, task: Task) -> None:
        self.task = task
        self.context: TaskContext | None = None


# The queue and event loop that claimed a task: stands for its context until one is built.
_Owner = tuple[XComQueue, asyncio.AbstractEventLoop | None]

_CURRENT: contextvars.ContextVar[_Current | None] = contextvars.ContextVar(
    "fairque_task_context", default=None
)
_CONTEXTS: dict[tuple[str, str], TaskContext | _Owner] = {}
_LOCK = threading.Lock()
# the leases (task id, token) whose task was canceled while it ran (ADR 76): read without the
# lock by ``TaskContext.cancelled``, dropped with the task's context
_CANCELED: set[tuple[str, str]] = set()


def current_task_context() -> TaskContext:
    """The context of the task this handler runs; FairQueueError outside a handler."""
    current = _CURRENT.get()
    if current is None:
        raise FairQueueError("current_task_context() is only available inside a task handler")
    found = current.context
    if found is None:
        found = current.context = _lookup(current.task)
    return found


def _key(task: Task) -> tuple[str, str] | None:
    return None if task.lease is None else (task.task_id, task.lease.token)


def register(task: Task, queue: XComQueue) -> None:
    """Record that ``queue`` claimed ``task`` (:func:`register_all` of one task)."""
    register_all([task], queue)


def register_all(tasks: Sequence[Task], queue: XComQueue) -> None:
    """Record that ``queue`` claimed ``tasks`` (the engine calls this once per claim call):
    their contexts are built when a handler asks for one."""
    if not tasks:
        return
    try:
        loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    owner: _Owner = (queue, loop)
    with _LOCK:
        for task in tasks:
            lease = task.lease
            if lease is not None:
                _CONTEXTS[(task.task_id, lease.token)] = owner
        for _ in range(len(_CONTEXTS) - _MAX_CONTEXTS):  # the oldest go first
            del _CONTEXTS[next(iter(_CONTEXTS))]


def _lookup(task: Task) -> TaskContext:
    """The task's context, built from its owner on first use (a task this process did not
    claim gets one without a queue)."""
    key = _key(task)
    if key is None:
        return TaskContext(task, None, None)
    with _LOCK:
        found = _CONTEXTS.get(key)
        if found is None:
            return TaskContext(task, None, None)
        if isinstance(found, tuple):
            found = _CONTEXTS[key] = TaskContext(task, *found)
        return found


def pushed(task: Task) -> dict[str, bytes]:
    """The encoded values the task pushed, its context kept: the engine's finish reads them,
    and drops the context (:func:`discard`) only once the backend call went through, so that
    a finish retried after a connection error stores them still."""
    key = _key(task)
    if key is None:
        return {}
    with _LOCK:
        found = _CONTEXTS.get(key)
    return dict(found._pushed) if isinstance(found, TaskContext) else {}


def cancel(task: Task) -> None:
    """Mark ``task`` (its lease) canceled while it runs: its context's ``cancelled`` turns
    True (the worker calls this when a heartbeat reports the cancel, ADR 76)."""
    key = _key(task)
    if key is not None:
        with _LOCK:
            _CANCELED.add(key)


def take(task: Task) -> dict[str, bytes]:
    """The encoded values the task pushed, its context dropped."""
    key = _key(task)
    if key is None:
        return {}
    with _LOCK:
        _CANCELED.discard(key)
        found = _CONTEXTS.pop(key, None)
    return dict(found._pushed) if isinstance(found, TaskContext) else {}


def discard(task: Task) -> None:
    """Drop the task's context and what it pushed (fail, release, a finish that went
    through)."""
    take(task)


def bind(task: Task, call: Callable[[], object]) -> Callable[[], object]:
    """``call`` with the task current while it runs (an awaitable it returns runs with it
    too): :func:`current_task_context` inside it finds the task's context."""
    current = _Current(task)

    def run() -> object:
        token = _CURRENT.set(current)
        try:
            made = call()
        finally:
            _CURRENT.reset(token)
        if inspect.isawaitable(made):
            return _awaiting(current, made)
        return made

    return run


async def _awaiting(current: _Current, made: Awaitable[object]) -> object:
    token = _CURRENT.set(current)
    try:
        return await made
    finally:
        _CURRENT.reset(token)
