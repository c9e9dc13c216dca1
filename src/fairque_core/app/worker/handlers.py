"""Task handlers: the ``TaskHandler`` base, the ``@task`` decorator and its registry.

A :class:`TaskRegistry` maps task names to plain functions (sync or async). ``@task`` registers a
function and returns a :class:`TaskFunction`: calling it builds a :class:`~fairque_core.Task` to
push, ``.call(...)`` runs the function directly. :class:`RegistryHandler` is the handler a
worker uses to run registered tasks: it dispatches by ``task.name`` among the registered names
only (it never imports a module named in task data), and an unknown name raises
:class:`~fairque_core.domain.errors.UnknownTaskError`, which the worker dead-letters as POISONED.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from concurrent.futures import Executor
from typing import Any, Generic, TypeVar, overload

from fairque_core.app.context import current_task_context
from fairque_core.app.engine.workflows import INJECT_HEADER
from fairque_core.domain.enums import Priority
from fairque_core.domain.errors import TaskSerializationError, TaskValidationError, UnknownTaskError
from fairque_core.domain.models import Task
from fairque_core.domain.validation import is_digits, is_valid_id

__all__ = [
    "RegistryHandler",
    "TaskFunction",
    "TaskHandler",
    "TaskRegistry",
    "default_registry",
    "task",
]

R = TypeVar("R")

# keywords of TaskFunction.create that are task options, not function arguments
_CREATE_OPTIONS = (
    "task_id",
    "priority",
    "execute_after",
    "depends_on",
    "max_retries",
    "headers",
    "keep_result",
    "expires_at",
    "expires_in",
    "limit_key",
)


async def _awaited(value: Awaitable[Any]) -> Any:
    return await value


#: The thread pool an ``AsyncWorker`` runs sync handlers on, current inside its tasks (None
#: elsewhere: the event loop's default pool, as ``asyncio.to_thread``). The default pool holds
#: ``min(32, cpus + 4)`` threads shared with everything else on the loop: a worker with more
#: places than that could not run them all, and its timed-out threads starved new tasks.
HANDLER_THREADS: contextvars.ContextVar[Executor | None] = contextvars.ContextVar(
    "fairque_handler_threads", default=None
)


async def in_handler_thread(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` on a thread of :data:`HANDLER_THREADS` (the running worker's
    pool, else the loop's default one), in a copy of the current context."""
    loop = asyncio.get_running_loop()
    call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
    return await loop.run_in_executor(HANDLER_THREADS.get(), call)


class TaskHandler:
    """Subclass and implement :meth:`process_task`; the worker calls the rest.

    ``process_task`` may also be ``async def``: the async worker awaits it, the thread worker
    runs it to completion on its own event loop. Its return value is stored as the task's
    result (it must be JSON-serializable). Raising marks the attempt failed (retry or DLQ).
    The ``on_*`` callbacks must be quick; their exceptions are logged and ignored.
    """

    def process_task(self, task: Task) -> object:
        raise NotImplementedError

    async def process_task_async(self, task: Task) -> object:
        """How the async worker runs a task: awaits an async ``process_task``, else a thread."""
        if inspect.iscoroutinefunction(self.process_task):
            return await self.process_task(task)
        result = await in_handler_thread(self.process_task, task)
        if inspect.isawaitable(result):
            return await result
        return result

    def run_sync(self, task: Task) -> object:
        """How the thread worker runs a task: calls ``process_task``, runs a coroutine result."""
        result = self.process_task(task)
        if inspect.iscoroutine(result):
            return asyncio.run(result)
        return result

    def on_task_success(self, task: Task, result: object) -> None:
        """Called after ``process_task`` returned (before the result is acknowledged)."""

    def on_task_failure(self, task: Task, error: BaseException) -> None:
        """Called after ``process_task`` raised."""

    def on_task_timeout(self, task: Task) -> None:
        """Called when the task ran past the worker's ``task_timeout_seconds``."""


class TaskFunction(Generic[R]):
    """A registered task function.

    ``fn(tenant, *args, **kwargs)`` (same as ``fn.create``) returns a Task for ``tenant``
    whose payload is ``{"args": [...], "kwargs": {...}}``; ``fn.call(*args, **kwargs)`` runs
    the function here and now. With ``bind=True`` the function receives the running
    :class:`Task` as its first argument (not part of the payload).

    The tenant is positional-only, so the function may have a ``tenant`` parameter of its own.
    """

    def __init__(
        self,
        fn: Callable[..., R] | Callable[..., Awaitable[R]],
        *,
        name: str,
        priority: Priority = Priority.NORMAL,
        max_retries: int = 3,
        bind: bool = False,
    ) -> None:
        self.fn = fn
        self.name = name
        self.priority = priority
        self.max_retries = max_retries
        self.bind = bind
        self.is_async = inspect.iscoroutinefunction(fn)
        self._signature = inspect.signature(fn)
        functools.update_wrapper(self, fn)

    def create(
        self,
        tenant: str,
        /,
        *args: Any,
        task_id: str | None = None,
        priority: Priority | int | None = None,
        execute_after: float | None = None,
        depends_on: Sequence[str] = (),
        max_retries: int | None = None,
        headers: Mapping[str, str] | None = None,
        keep_result: bool | None = None,
        expires_at: float | None = None,
        expires_in: float | None = None,
        limit_key: str | None = None,
        **kwargs: Any,
    ) -> Task:
        """A new Task (fresh id unless ``task_id``) that runs this function with the args
        (``keep_result``: as :meth:`Task.create`'s, ADR 78; ``expires_at``/``expires_in``: not
        started by then, it never runs, ADR 77; ``limit_key``: the limits by key it runs
        under, by default the task's name when that is an id, ADR 79)."""
        self._check_args(args, kwargs)
        return Task.create(
            tenant,
            self.priority if priority is None else priority,
            {"args": list(args), "kwargs": dict(kwargs)},
            task_id=task_id,
            max_retries=self.max_retries if max_retries is None else max_retries,
            execute_after=execute_after,
            depends_on=depends_on,
            headers=headers,
            name=self.name,
            keep_result=keep_result,
            expires_at=expires_at,
            expires_in=expires_in,
            limit_key=self.default_limit_key() if limit_key is None else limit_key,
        )

    __call__ = create

    def default_limit_key(self) -> str:
        """The limit key of this function's tasks when none is given (ADR 79): its name when
        the name is an id (a name with other characters, such as ``<locals>``, has none)."""
        return self.name if is_valid_id(self.name) else ""

    def step(self, tenant: str, /, *args: Any, **kwargs: Any) -> Task:
        """``create`` for a chain step or a chord callback: the arguments are checked with
        the injected parent result(s) in front, which the worker passes as the first
        argument (``workflows``, ADR 27); only the rest are stored. Task options
        (``task_id``, ``priority`` ...) are keywords, as for ``create``."""
        options = {k: kwargs.pop(k) for k in _CREATE_OPTIONS if k in kwargs}
        self._check_args((None, *args), kwargs)
        priority = options.pop("priority", None)
        max_retries = options.pop("max_retries", None)
        options.setdefault("limit_key", self.default_limit_key())
        return Task.create(
            tenant,
            self.priority if priority is None else priority,
            {"args": list(args), "kwargs": dict(kwargs)},
            name=self.name,
            max_retries=self.max_retries if max_retries is None else max_retries,
            **options,
        )

    def call(self, *args: Any, **kwargs: Any) -> Any:
        """Run the function directly (a coroutine for an async function)."""
        return self.fn(*args, **kwargs)

    def _check_args(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        try:
            if self.bind:
                self._signature.bind(None, *args, **kwargs)
            else:
                self._signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise TaskValidationError(
                "args", (args, kwargs), f"do not fit {self.name}: {exc}"
            ) from exc

    def arguments(self, task: Task) -> tuple[list[Any], dict[str, Any]]:
        """The call arguments stored in ``task.payload`` (TaskSerializationError if malformed)."""
        args = task.payload.get("args", [])
        kwargs = task.payload.get("kwargs", {})
        if not isinstance(args, list) or not isinstance(kwargs, Mapping):
            raise TaskSerializationError(
                f"task {task.task_id}: payload must hold 'args' (list) and 'kwargs' (mapping)"
            )
        if not all(isinstance(key, str) for key in kwargs):
            raise TaskSerializationError(f"task {task.task_id}: kwargs keys must be str")
        call_args: list[Any] = [task, *args] if self.bind else list(args)
        return call_args, dict(kwargs)

    def __repr__(self) -> str:
        return f"<TaskFunction {self.name}>"


class TaskRegistry:
    """Task names to functions. Names are unique; registering a name twice is an error."""

    def __init__(self) -> None:
        self._functions: dict[str, TaskFunction[Any]] = {}

    def register(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        priority: Priority | int = Priority.NORMAL,
        max_retries: int = 3,
        bind: bool = False,
    ) -> TaskFunction[Any]:
        task_name = name if name is not None else f"{fn.__module__}.{fn.__qualname__}"
        if not task_name or not isinstance(task_name, str):
            raise TaskValidationError("name", task_name, "must be a non-empty str")
        if task_name in self._functions:
            raise TaskValidationError("name", task_name, "is already registered")
        try:
            level = priority if isinstance(priority, Priority) else Priority.from_int(priority)
        except ValueError as exc:
            raise TaskValidationError("priority", priority, "must be 1-6") from exc
        wrapped: TaskFunction[Any] = TaskFunction(
            fn, name=task_name, priority=level, max_retries=max_retries, bind=bind
        )
        self._functions[task_name] = wrapped
        return wrapped

    def task(
        self,
        name: str | None = None,
        *,
        priority: Priority | int = Priority.NORMAL,
        max_retries: int = 3,
        bind: bool = False,
    ) -> Callable[[Callable[..., Any]], TaskFunction[Any]]:
        """Decorator form of :meth:`register`."""

        def decorate(fn: Callable[..., Any]) -> TaskFunction[Any]:
            return self.register(
                fn, name=name, priority=priority, max_retries=max_retries, bind=bind
            )

        return decorate

    def get(self, name: str) -> TaskFunction[Any]:
        """The function registered under ``name``; UnknownTaskError otherwise."""
        found = self._functions.get(name)
        if found is None:
            raise UnknownTaskError(name)
        return found

    def names(self) -> list[str]:
        return sorted(self._functions)

    def __contains__(self, name: object) -> bool:
        return name in self._functions

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._functions))

    def __len__(self) -> int:
        return len(self._functions)


#: The registry ``@task`` uses when no ``registry`` is given. Prefer explicit registries in
#: libraries; this one is for applications and scripts.
default_registry = TaskRegistry()


@overload
def task(fn: Callable[..., Any], /) -> TaskFunction[Any]: ...


@overload
def task(
    name: str | None = None,
    *,
    priority: Priority | int = ...,
    max_retries: int = ...,
    bind: bool = ...,
    registry: TaskRegistry | None = ...,
) -> Callable[[Callable[..., Any]], TaskFunction[Any]]: ...


def task(
    name: str | Callable[..., Any] | None = None,
    *,
    priority: Priority | int = Priority.NORMAL,
    max_retries: int = 3,
    bind: bool = False,
    registry: TaskRegistry | None = None,
) -> TaskFunction[Any] | Callable[[Callable[..., Any]], TaskFunction[Any]]:
    """Register a function as a task: ``@task``, ``@task("name")`` or ``@task(registry=r)``.

    The default name is ``module.qualname``.
    """
    target = registry if registry is not None else default_registry
    if callable(name):
        return target.register(name)
    return target.task(name, priority=priority, max_retries=max_retries, bind=bind)


def _injected(task: Task, parents: list[Any], args: list[Any]) -> list[Any]:
    """``args`` with the parents' results in front, as a chord or chain step takes them."""
    kind = task.headers.get(INJECT_HEADER, "")
    if kind == "chord":
        return [parents, *args]
    if kind.startswith("chord:") and is_digits(kind[6:]):
        return [parents[: int(kind[6:])], *args]  # the members', not the callback's own deps
    if kind == "chain":
        return [parents[0] if parents else None, *args]
    return args


class RegistryHandler(TaskHandler):
    """Runs registered task functions by ``task.name``; nothing outside the registry.

    A chord's callback gets the list of its members' results as its first argument, a
    chain's step the result of the step before (``workflows``, ADR 27).
    """

    def __init__(self, registry: TaskRegistry | None = None) -> None:
        self.registry = registry if registry is not None else default_registry

    def process_task(self, task: Task) -> object:
        function = self.registry.get(task.name)
        args, kwargs = function.arguments(task)
        if INJECT_HEADER in task.headers:
            parents = current_task_context().parent_results()
            if inspect.isawaitable(parents):
                parents = asyncio.run(_awaited(parents))
            args = _injected(task, parents, args)
        result = function.fn(*args, **kwargs)
        if inspect.iscoroutine(result):
            return asyncio.run(result)
        return result

    async def process_task_async(self, task: Task) -> object:
        function = self.registry.get(task.name)
        args, kwargs = function.arguments(task)
        if INJECT_HEADER in task.headers:
            parents = current_task_context().parent_results()
            if inspect.isawaitable(parents):
                parents = await parents
            args = _injected(task, parents, args)
        if function.is_async:
            return await function.fn(*args, **kwargs)
        return await in_handler_thread(function.fn, *args, **kwargs)

    def run_sync(self, task: Task) -> object:
        return self.process_task(task)
