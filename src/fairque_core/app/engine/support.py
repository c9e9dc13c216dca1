"""The engine's rules that do no I/O, shared by :class:`FairQueue` and :class:`AsyncFairQueue`.

The plugin host both engines talk to (:class:`PluginHostLike`), which queue config they use
(:func:`resolve_config`), the retry-or-DLQ decision for a failed attempt (:func:`decide`),
lease bookkeeping for the batch calls, and the parents-first order of a pushed batch.
Encoding tasks and results lives in :mod:`fairque_core.app.engine.messages`, the URL-to-backend
lookup in :mod:`fairque_core.app.backend_loading`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

import attrs

from fairque_core.domain.deps import dependency_edges, topological_order
from fairque_core.domain.enums import FailureType
from fairque_core.domain.errors import (
    ConfigurationError,
    LeaseLostError,
    ParentResultExpiredError,
    TaskSerializationError,
    UnknownTaskError,
)
from fairque_core.domain.models import Lease, Task
from fairque_core.settings.config import QueueConfig

__all__ = [
    "Decision",
    "PluginHostLike",
    "RetryDecisionLike",
    "decide",
    "describe",
    "in_given_order",
    "leased_items",
    "make_host",
    "ordered_for_push",
    "renewed_tasks",
    "require_lease",
    "resolve_config",
    "with_deadline",
]

# Errors that mean "this task can never succeed as sent": straight to the DLQ as POISONED,
# whatever the retry policy says.
_POISON = (UnknownTaskError, TaskSerializationError, ParentResultExpiredError)


class RetryDecisionLike(Protocol):
    """What a retry policy decides (``fairque_core.domain.retry.RetryDecision`` has this shape)."""

    @property
    def retry_delay(self) -> float | None: ...

    @property
    def failure_type(self) -> FailureType: ...

    @property
    def reason(self) -> str: ...


class PluginHostLike(Protocol):
    """The typed plugin facade the engine relies on (``plugin_host.PluginHost``)."""

    def encode(self, task: Task) -> tuple[bytes, str]: ...

    def decode(self, content_type: str, body: bytes) -> dict[str, Any]: ...

    def push_headers(self, task: Task, *, queue: str = "") -> dict[str, str]: ...

    def task_event(self, event: str, task: Task, queue: str, **info: Any) -> None: ...

    def execute(self, task: Task, call: Callable[[], object], *, queue: str = "") -> object: ...

    def retry_decide(self, task: Task, error: BaseException, attempt: int) -> Any: ...

    def configure(self, config: Any) -> None: ...


@attrs.frozen
class Decision:
    """The engine's resolved decision for one failed attempt."""

    retry_delay: float | None
    failure_type: FailureType
    reason: str


def make_host(
    plugins: Sequence[object],
    plugin_host: PluginHostLike | None,
    config: QueueConfig,
    host_class: Callable[[Sequence[object]], PluginHostLike] | None = None,
) -> PluginHostLike:
    """The given host, or a new ``host_class`` (``PluginHost`` unless the composition root
    names another) with ``plugins`` (defaults and entry points)."""
    if plugin_host is not None:
        if plugins:
            raise ConfigurationError("pass either plugins or plugin_host, not both")
        return plugin_host
    from fairque_core.app.plugins.builtin import DefaultRetry, retry_schedule
    from fairque_core.app.plugins.host import PluginHost

    # The queue's retry_* settings become the fallback policy (plugins still win over it).
    fallback = DefaultRetry(retry_schedule(config))
    host: PluginHostLike = (PluginHost if host_class is None else host_class)((*plugins, fallback))
    host.configure(config)
    return host


def resolve_config(backend: object, config: QueueConfig | None) -> QueueConfig:
    """The engine's queue config. The backend owns it: the engine reads ``backend.config``.

    ``config`` is only for a backend that has no queue config of its own (a third-party
    backend without a ``config`` property); given for a backend that has one, it must equal
    it, or a ConfigurationError says so (build the backend with that config instead). With
    neither, the defaults for the backend's queue name apply.
    """
    owned = getattr(backend, "config", None)
    if isinstance(owned, QueueConfig):
        if config is not None and config != owned:
            raise ConfigurationError(
                "the engine's queue config differs from its backend's: the backend owns the "
                "queue config, so build the backend with this config (or pass none here)",
                path="config",
            )
        return owned
    if config is not None:
        return config
    return QueueConfig(name=str(getattr(backend, "queue", "default")))


def leased_items(tasks: Sequence[Task]) -> tuple[list[tuple[str, str]], list[int]]:
    """``(task_id, token)`` of the tasks that carry a lease, and their positions in ``tasks``."""
    items: list[tuple[str, str]] = []
    positions: list[int] = []
    for index, task in enumerate(tasks):
        if task.lease is not None:
            items.append((task.task_id, task.lease.token))
            positions.append(index)
    return items, positions


def renewed_tasks(
    tasks: Sequence[Task], positions: Sequence[int], deadlines: Sequence[float | None]
) -> list[Task | None]:
    """``heartbeat_batch``'s answer: per task, the task with its new deadline, else None."""
    out: list[Task | None] = [None] * len(tasks)
    for index, deadline in zip(positions, deadlines, strict=True):
        if deadline is not None:
            out[index] = with_deadline(tasks[index], deadline)
    return out


def renewed_leases(
    tasks: Sequence[Task], positions: Sequence[int], deadlines: Sequence[float | None]
) -> list[Task | float | None]:
    """``heartbeat_leases``' answer: as :func:`renewed_tasks`, a canceled lease's negative
    entry (``LEASE_CANCELED``, ``LEASE_TERMINATE``) kept in its task's place (ADR 76)."""
    out: list[Task | float | None] = [None] * len(tasks)
    for index, deadline in zip(positions, deadlines, strict=True):
        if deadline is not None:
            out[index] = deadline if deadline < 0 else with_deadline(tasks[index], deadline)
    return out


def require_lease(task: Task) -> Lease:
    if task.lease is None:
        raise LeaseLostError(task.task_id)
    return task.lease


def storable(text: str) -> str:
    """``text`` with what UTF-8 cannot encode (a lone surrogate, which a str may hold but no
    server stores) spelled as a backslash escape: a failure's reason that raised in the
    client's encoder refused the task's fail, again at every try."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def describe(error: BaseException) -> str:
    text = storable(f"{type(error).__name__}: {error}")
    return text if len(text) <= 500 else text[:497] + "..."


def decide(host: PluginHostLike, task: Task, error: BaseException) -> Decision:
    """Retry or dead-letter: poison errors go to the DLQ, everything else asks the policy."""
    if isinstance(error, _POISON):
        return Decision(None, FailureType.POISONED, describe(error))
    chosen = host.retry_decide(task, error, task.retry_count + 1)
    delay = chosen.retry_delay
    failure_type = chosen.failure_type
    reason = storable(chosen.reason) if chosen.reason else describe(error)
    if delay is not None:
        delay = max(0.0, float(delay))
    if not isinstance(failure_type, FailureType):
        failure_type = FailureType(str(failure_type))
    return Decision(delay, failure_type, reason)


def with_deadline(task: Task, deadline: float) -> Task:
    """``task`` with its lease deadline moved to ``deadline``."""
    lease = require_lease(task)
    return attrs.evolve(task, lease=attrs.evolve(lease, deadline=deadline))


H = TypeVar("H")


def in_given_order(tasks: Sequence[Task], ordered: Sequence[Task], handles: Sequence[H]) -> list[H]:
    """``handles`` (one per task of ``ordered``, from :func:`ordered_for_push`) in the order of
    ``tasks``. An id given twice keeps its places: the first copy gets the first handle (its
    push), the second the next (a duplicate), as the stable reordering left them."""
    if ordered is tasks:
        return list(handles)
    by_id: dict[str, list[H]] = {}
    for task, handle in zip(ordered, handles, strict=True):
        by_id.setdefault(task.task_id, []).append(handle)
    return [by_id[task.task_id].pop(0) for task in tasks]


def ordered_for_push(tasks: list[Task]) -> list[Task]:
    """``tasks`` with every in-batch parent before its children, otherwise in the order given.

    Keeping the caller's order matters: it is the FIFO order inside a priority. Call after
    ``deps.check_batch`` (cycles are rejected there).
    """
    position = {t.task_id: i for i, t in enumerate(tasks)}
    if all(position.get(dep, -1) < i for i, t in enumerate(tasks) for dep in t.depends_on):
        return tasks
    rank = {task_id: i for i, task_id in enumerate(topological_order(dependency_edges(tasks)))}
    return sorted(tasks, key=lambda t: rank[t.task_id])
