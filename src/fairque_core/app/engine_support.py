"""Pure pieces shared by :class:`FairQueue` and :class:`AsyncFairQueue` (no I/O here).

Building a :class:`Message` from a :class:`Task` (headers, codec, size limit, delay), turning a
claimed message back into a :class:`Task`, result encoding and the retry decision all live
here so the sync and async engines differ only by ``await``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from importlib import metadata
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from fairque_core.app.config import FairQueueConfig, QueueConfig
from fairque_core.domain.deps import dependency_edges, topological_order
from fairque_core.domain.enums import FailureType
from fairque_core.domain.errors import (
    ConfigurationError,
    FairQueueError,
    PayloadTooLargeError,
    TaskSerializationError,
    TaskValidationError,
    UnknownTaskError,
)
from fairque_core.domain.models import UNREADABLE_HEADER, Claimed, Lease, Message, Task

if TYPE_CHECKING:
    from fairque_core.memory.model import InMemoryBackend

__all__ = [
    "BACKENDS_GROUP",
    "Decision",
    "PluginHostLike",
    "RetryDecisionLike",
    "backend_url",
    "decide",
    "decode_claimed",
    "decode_message",
    "decode_result",
    "encode_result",
    "load_backend_factory",
    "make_host",
    "ordered_for_push",
    "resolve_config",
    "stub_task",
    "to_message",
]

BACKENDS_GROUP = "fairque.backends"

# Errors that mean "this task can never succeed as sent": straight to the DLQ as POISONED,
# whatever the retry policy says.
_POISON = (UnknownTaskError, TaskSerializationError)


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
    plugins: Sequence[object], plugin_host: PluginHostLike | None, config: QueueConfig
) -> PluginHostLike:
    """The given host, or a new ``PluginHost`` with ``plugins`` (defaults and entry points)."""
    if plugin_host is not None:
        if plugins:
            raise ConfigurationError("pass either plugins or plugin_host, not both")
        return plugin_host
    from fairque_core.app.builtin_plugins import DefaultRetry
    from fairque_core.app.plugin_host import PluginHost
    from fairque_core.domain.retry import RetryPolicy

    # The queue's retry_* settings become the fallback policy (plugins still win over it).
    fallback = DefaultRetry(RetryPolicy.from_queue_config(config))
    host: PluginHostLike = PluginHost((*plugins, fallback))
    host.configure(config)
    return host


def resolve_config(backend: object, config: QueueConfig | None) -> QueueConfig:
    """The engine's queue config: the given one, else the backend's, else the defaults."""
    if config is not None:
        return config
    found = getattr(backend, "config", None)
    if isinstance(found, QueueConfig):
        return found
    return QueueConfig(name=str(getattr(backend, "queue", "default")))


def to_message(
    task: Task, host: PluginHostLike, config: QueueConfig, now: float | None = None
) -> Message:
    """Validate ``task`` and encode it: headers from plugins, codec, size limit, delay."""
    if not isinstance(task, Task):
        raise TaskValidationError("task", task, "must be a fairque_core.Task")
    if task.task_id in task.depends_on:
        raise TaskValidationError("depends_on", task.task_id, "a task cannot depend on itself")
    headers = host.push_headers(task, queue=config.name)
    if headers != task.headers:
        task = attrs.evolve(task, headers={**task.headers, **headers})
    try:
        body, content_type = host.encode(task)
    except FairQueueError:
        raise
    except Exception as exc:
        raise TaskSerializationError(f"cannot encode the payload of {task.task_id}: {exc}") from exc
    if len(body) > config.max_payload_bytes:
        raise PayloadTooLargeError(len(body), config.max_payload_bytes)
    current = time.time() if now is None else now
    return Message(
        task_id=task.task_id,
        user_id=task.user_id,
        priority=task.priority,
        body=body,
        content_type=content_type,
        retry_count=task.retry_count,
        max_retries=task.max_retries,
        created_at=task.created_at,
        delay=max(0.0, task.execute_after - current),
        depends_on=task.depends_on,
        headers=dict(task.headers),
        name=task.name,
    )


def decode_message(message: Message, host: PluginHostLike, lease: Lease | None = None) -> Task:
    """The task stored in ``message``; TaskSerializationError when it cannot be rebuilt."""
    headers = message.headers
    problem = headers.get(UNREADABLE_HEADER) if isinstance(headers, Mapping) else None
    if problem is not None:  # salvaged by the backend from a damaged record
        raise TaskSerializationError(problem)
    try:
        payload = host.decode(message.content_type, message.body)
    except Exception as exc:
        raise TaskSerializationError(
            f"cannot decode the payload of {message.task_id} ({message.content_type}): {exc}"
        ) from exc
    if not isinstance(payload, Mapping):
        raise TaskSerializationError(
            f"the payload of {message.task_id} decodes to {type(payload).__name__}, not a mapping"
        )
    try:
        return Task(
            task_id=message.task_id,
            user_id=message.user_id,
            priority=message.priority,
            payload=payload,
            retry_count=message.retry_count,
            max_retries=message.max_retries,
            created_at=message.created_at,
            execute_after=message.created_at + max(0.0, message.delay),
            depends_on=message.depends_on,
            headers=message.headers,
            name=message.name,
            lease=lease,
        )
    except (TaskValidationError, TypeError, ValueError) as exc:
        raise TaskSerializationError(f"task {message.task_id} is malformed: {exc}") from exc


def decode_claimed(claimed: Claimed, host: PluginHostLike) -> Task:
    return decode_message(claimed.message, host, claimed.lease)


def wait_seconds(message: Message, now: float) -> float:
    """Seconds between the moment the task became ready (as sent) and ``now``."""
    return max(0.0, now - (message.created_at + max(0.0, message.delay)))


def encode_result(task_id: str, result: object) -> bytes | None:
    """A handler's result as compact JSON bytes (None stays None)."""
    if result is None:
        return None
    try:
        return json.dumps(result, separators=(",", ":"), allow_nan=False).encode()
    except (TypeError, ValueError) as exc:
        raise TaskSerializationError(
            f"the result of {task_id} is not JSON-serializable: {exc}"
        ) from exc


def decode_result(raw: bytes | None) -> Any:
    """A stored result: the JSON value, or the raw bytes when they are not JSON."""
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw


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
    """``heartbeat_many``'s answer: per task, the task with its new deadline, else None."""
    out: list[Task | None] = [None] * len(tasks)
    for index, deadline in zip(positions, deadlines, strict=True):
        if deadline is not None:
            out[index] = with_deadline(tasks[index], deadline)
    return out


def require_lease(task: Task) -> Lease:
    from fairque_core.domain.errors import LeaseLostError

    if task.lease is None:
        raise LeaseLostError(task.task_id)
    return task.lease


def describe(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}"
    return text if len(text) <= 500 else text[:497] + "..."


def decide(host: PluginHostLike, task: Task, error: BaseException) -> Decision:
    """Retry or dead-letter: poison errors go to the DLQ, everything else asks the policy."""
    if isinstance(error, _POISON):
        return Decision(None, FailureType.POISONED, describe(error))
    chosen = host.retry_decide(task, error, task.retry_count + 1)
    delay = chosen.retry_delay
    failure_type = chosen.failure_type
    reason = chosen.reason or describe(error)
    if delay is not None:
        delay = max(0.0, float(delay))
    if not isinstance(failure_type, FailureType):
        failure_type = FailureType(str(failure_type))
    return Decision(delay, failure_type, reason)


def backend_url(config: FairQueueConfig) -> str:
    """The backend URL of ``config``: ``redis.url``, else one built from host/port/db.

    Credentials never go into the URL (it may end up in logs); the backend factory receives
    the whole config and takes them from its ``redis`` section.
    """
    redis = config.redis
    if redis.url:
        return redis.url
    scheme = "rediss" if redis.ssl_ca_certs or redis.ssl_certfile else "redis"
    return f"{scheme}://{redis.host}:{redis.port}/{redis.db}"


def load_backend_factory(scheme: str) -> Any:
    """The factory registered for ``scheme`` in the ``fairque.backends`` entry-point group."""
    for entry in metadata.entry_points(group=BACKENDS_GROUP):
        if entry.name == scheme:
            return entry.load()
    known = sorted({e.name for e in metadata.entry_points(group=BACKENDS_GROUP)} | {"memory"})
    raise ConfigurationError(
        f"no fairque backend handles URL scheme {scheme!r} (known: {', '.join(known)})",
        path="redis.url",
        value=scheme,
    )


def memory_backend(config: FairQueueConfig) -> InMemoryBackend:
    from fairque_core.memory.model import InMemoryBackend

    return InMemoryBackend(queue=config.queue.name, config=config.queue)


def with_deadline(task: Task, deadline: float) -> Task:
    """``task`` with its lease deadline moved to ``deadline``."""
    lease = require_lease(task)
    return attrs.evolve(task, lease=attrs.evolve(lease, deadline=deadline))


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


def stub_task(message: Message) -> Task | None:
    """A payload-less Task for events about a message that could not be decoded."""
    try:
        return Task(
            task_id=message.task_id,
            user_id=message.user_id,
            priority=message.priority,
            name=message.name,
            created_at=message.created_at,
            execute_after=message.created_at,
        )
    except (TaskValidationError, TypeError, ValueError):
        return None
