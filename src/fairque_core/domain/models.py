"""Domain models: frozen attrs classes with no wire-format code in them."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from fairque_core.domain.enums import FailureType, Priority
from fairque_core.domain.errors import TaskTypeError, TaskValidationError
from fairque_core.domain.validation import (
    MAX_RETRY_COUNT,
    check_count,
    check_duration,
    check_finite,
    check_id_list,
    check_mapping,
    check_str,
    check_time,
    validate_id,
)

__all__ = [
    "STALE_CLAIM_LIMIT",
    "UNREADABLE_HEADER",
    "Claimed",
    "DLQEntry",
    "Lease",
    "Message",
    "QueueSizes",
    "Task",
    "expiry_ms",
    "new_task_id",
]

#: Set by a backend on a message it salvaged from a stored record it could not read (the value
#: says why). The engine treats such a message as undecodable: POISONED at once.
UNREADABLE_HEADER = "x-fairque-unreadable"


def _check_id(_inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    validate_id(value, attribute.name)


def _check_priority(_inst: object, _attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, Priority):
        raise TaskTypeError("priority", value, "must be a Priority (1-6)")


def _check_count(_inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    check_count(value, attribute.name, 0, MAX_RETRY_COUNT)


def _check_time(_inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    check_time(value, attribute.name)


def _check_str(_inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    check_str(value, attribute.name)


def _check_finite(_inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    check_finite(value, attribute.name)


def _check_lease(_inst: object, _attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and not isinstance(value, Lease):
        raise TaskTypeError("lease", value, "must be a Lease or None")


def _check_deps(_inst: object, _attribute: attrs.Attribute[Any], value: tuple[str, ...]) -> None:
    for dep in value:
        validate_id(dep, "depends_on")


def _check_headers(_inst: object, _attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, Mapping):
        raise TaskTypeError("headers", value, "must be a mapping of str to str")
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise TaskTypeError("headers", {key: item}, "keys and values must be str")


def _check_payload(_inst: object, _attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, Mapping):
        raise TaskTypeError("payload", value, "must be a mapping")


def _check_unique_key(_inst: object, _attribute: attrs.Attribute[Any], value: object) -> None:
    if value != "":
        validate_id(value, "unique_key")


def _check_keep(_inst: object, _attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and type(value) is not bool:
        raise TaskTypeError("keep_result", value, "must be True, False or None")


def _check_limit_key(_inst: object, _attribute: attrs.Attribute[Any], value: object) -> None:
    if value != "":
        validate_id(value, "limit_key")


def _check_window(_inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    check_duration(value, attribute.name)


def _check_expiry(_inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None:
        check_time(value, attribute.name)


#: A claim pops at most its ``count`` plus this many tasks (ADR 77): the stale tasks past that
#: wait for the next claim, so that a backlog of them never makes one claim run long (the Lua
#: claim's FQ_STALE_CLAIM_LIMIT; a test keeps the two equal).
STALE_CLAIM_LIMIT = 256


def expiry_ms(expires_at: float | None) -> int:
    """A task's ``expires_at`` as the whole epoch milliseconds a message carries (0: none)."""
    return 0 if expires_at is None else round(expires_at * 1000)


def _expiry(
    expires_at: object, expires_in: object, execute_after: float, now: float
) -> float | None:
    """``Task.create``'s expiry: at most one of the two, a time or a span > 0, after the task
    may start (a task that could never start is refused), to whole milliseconds."""
    if expires_at is None and expires_in is None:
        return None
    if expires_at is not None and expires_in is not None:
        raise TaskValidationError(
            "expires_in", expires_in, "give expires_at or expires_in, not both"
        )
    if expires_in is not None:
        span = check_duration(expires_in, "expires_in")
        if span <= 0.0:
            raise TaskValidationError("expires_in", expires_in, "must be > 0 seconds")
        at, field, given = now + span, "expires_in", expires_in
    else:
        at, field, given = check_time(expires_at, "expires_at"), "expires_at", expires_at
    at = round(at * 1000) / 1000
    check_time(at, field)
    if at <= execute_after:
        raise TaskValidationError(
            field,
            given,
            "must end after the task may start (execute_after, or now): it would never run",
        )
    return at


def _to_tuple(value: Iterable[str]) -> tuple[str, ...]:
    return tuple(check_id_list(value, "depends_on"))


def _freeze_headers(value: Mapping[str, str] | None) -> Mapping[str, str]:
    return dict(check_mapping(value, "headers")) if value is not None else {}


def _create(
    cls: type[Task],
    tenant: str,
    priority: Priority | int = Priority.NORMAL,
    payload: Mapping[str, Any] | None = None,
    *,
    task_id: str | None = None,
    max_retries: int = 3,
    execute_after: float | None = None,
    depends_on: Sequence[str] = (),
    headers: Mapping[str, str] | None = None,
    name: str = "",
    unique_key: str | None = None,
    unique_window_seconds: float | None = None,
    keep_result: bool | None = None,
    expires_at: float | None = None,
    expires_in: float | None = None,
    limit_key: str | None = None,
) -> Task:
    """A new task with a random UUID4 id (unless ``task_id`` is given) created now.

    ``unique_key``: a second push of a task with the same key (same tenant) while this
    one is queued or running, or within ``unique_window_seconds`` after it ended, stores
    nothing and returns this task's id (``TaskHandle.duplicate`` is True).

    ``keep_result``: False = its record is deleted when it finishes, unless something needs
    it (a dependent, XCom values, a waiter armed before the finish, a unique window; ADR 78);
    None = the queue's ``results`` default.
    ``expires_at`` (epoch seconds) or ``expires_in`` (seconds from now), at most one: a task
    not started by then is never run; a claim moves it to the DLQ as ``stale`` (ADR 77).
    ``limit_key``: an id naming the limits by key (``set_key_limits``) it runs under (ADR 79).
    """
    now = time.time()
    if type(priority) is not Priority:
        try:
            priority = Priority.from_int(priority)
        except ValueError as exc:
            raise TaskValidationError("priority", priority, "must be 1-6") from exc
    start = execute_after if execute_after is not None else now
    expiry = _expiry(expires_at, expires_in, start if isinstance(start, (int, float)) else now, now)
    # the validators judge every value and raise the typed error it earns
    return cls(
        task_id=task_id if task_id is not None else new_task_id(),
        tenant=tenant,
        priority=priority,
        payload=dict(check_mapping(payload, "payload")) if payload is not None else {},
        max_retries=max_retries,
        created_at=now,
        execute_after=execute_after if execute_after is not None else now,
        depends_on=depends_on,  # the converter checks and freezes it
        headers=headers,
        name=name,
        unique_key=unique_key if unique_key is not None else "",
        unique_window_seconds=unique_window_seconds or 0.0,
        keep_result=keep_result,
        expires_at=expiry,
        limit_key=limit_key if limit_key is not None else "",
    )


@attrs.frozen(kw_only=True)
class Lease:
    """A worker's claim on a task: the token proves it, the deadline bounds it (epoch seconds)."""

    token: str = attrs.field(validator=_check_str)
    deadline: float = attrs.field(validator=_check_finite)
    worker_id: str = attrs.field(default="", validator=_check_str)


@attrs.frozen(kw_only=True)
class Task:
    """One unit of work for one tenant.

    ``lease`` is set on tasks handed out by ``claim`` and is what ``finish``/``fail``/
    ``heartbeat`` present as proof; it takes no part in equality.
    """

    task_id: str = attrs.field(validator=_check_id)
    tenant: str = attrs.field(validator=_check_id)
    priority: Priority = attrs.field(default=Priority.NORMAL, validator=_check_priority)
    payload: Mapping[str, Any] = attrs.field(factory=dict, validator=_check_payload)
    retry_count: int = attrs.field(default=0, validator=_check_count)
    max_retries: int = attrs.field(default=3, validator=_check_count)
    created_at: float = attrs.field(factory=time.time, validator=_check_time)
    execute_after: float = attrs.field(factory=time.time, validator=_check_time)
    depends_on: tuple[str, ...] = attrs.field(
        default=(), converter=_to_tuple, validator=_check_deps
    )
    headers: Mapping[str, str] = attrs.field(
        factory=dict, converter=_freeze_headers, validator=_check_headers
    )
    name: str = attrs.field(default="", validator=_check_str)
    #: while a task with this key (same tenant) is queued, scheduled, waiting or running, or
    #: ended less than ``unique_window_seconds`` ago, pushing another one is a duplicate
    unique_key: str = attrs.field(default="", validator=_check_unique_key)
    unique_window_seconds: float = attrs.field(default=0.0, validator=_check_window)
    #: False: the record goes when the task finishes, unless something needs it (ADR 78);
    #: None: the queue's ``results`` default decides at push (a claimed task: None = kept)
    keep_result: bool | None = attrs.field(default=None, validator=_check_keep)
    #: epoch seconds: a task not started by then is never run, but dead-lettered as
    #: ``stale`` by the claim that finds it (ADR 77); None: no expiry
    expires_at: float | None = attrs.field(default=None, validator=_check_expiry)
    #: the limit key (``set_key_limits``) its claim is checked against (ADR 79); "": none
    limit_key: str = attrs.field(default="", validator=_check_limit_key)
    lease: Lease | None = attrs.field(default=None, eq=False, repr=False, validator=_check_lease)

    if TYPE_CHECKING:  # the signature callers and type checkers see (``cls`` bound)

        @classmethod
        def create(
            cls,
            tenant: str,
            priority: Priority | int = Priority.NORMAL,
            payload: Mapping[str, Any] | None = None,
            *,
            task_id: str | None = None,
            max_retries: int = 3,
            execute_after: float | None = None,
            depends_on: Sequence[str] = (),
            headers: Mapping[str, str] | None = None,
            name: str = "",
            unique_key: str | None = None,
            unique_window_seconds: float | None = None,
            keep_result: bool | None = None,
            expires_at: float | None = None,
            expires_in: float | None = None,
            limit_key: str | None = None,
        ) -> Task: ...

    else:
        create = classmethod(_create)

    def is_ready_to_execute(self, now: float | None = None) -> bool:
        return (time.time() if now is None else now) >= self.execute_after

    def can_retry(self) -> bool:
        return self.retry_count < self.max_retries


@attrs.frozen(kw_only=True)
class Message:
    """A task as a backend stores it: the payload already encoded by the codec.

    ``delay`` is seconds from the moment the backend receives the message until the task is
    ready (0 for ready now); the backend's clock decides the absolute time. Backends store
    the tenant as they always did (the Redis record's ``u`` field): the name of the attribute
    is not part of any record.
    """

    task_id: str
    tenant: str
    priority: Priority
    body: bytes
    content_type: str = "application/json"
    retry_count: int = 0
    max_retries: int = 3
    created_at: float = 0.0
    delay: float = 0.0
    depends_on: tuple[str, ...] = ()
    headers: Mapping[str, str] = attrs.field(factory=dict)
    name: str = ""
    #: the push deduplication key (``""``: none) and its window in seconds after the task ends
    unique_key: str = ""
    unique_window: float = 0.0
    #: False: the worker asks the finish not to keep the record (ADR 78)
    keep_result: bool = True
    #: epoch milliseconds on the backend's clock: not started by then, the claim that finds
    #: it dead-letters it as ``stale`` (0: no expiry; ADR 77)
    expires_ms: int = 0
    #: the limit key its claim is checked against (ADR 79; ``""``: none)
    limit_key: str = ""


@attrs.frozen(kw_only=True)
class Claimed:
    """What a claim hands out: the stored message and the lease on it."""

    message: Message
    lease: Lease
    recoveries: int = 0


@attrs.frozen(kw_only=True)
class DLQEntry:
    """A task in the dead-letter queue with why and when it landed there."""

    entry_id: str
    original_task: Message
    failure_type: FailureType
    reason: str
    moved_at: float
    retry_history: tuple[Mapping[str, Any], ...] = ()
    #: what of the stored entry could not be read ('' when it is sound), e.g. a DLQ score
    #: that is not a whole number of ms (``moved_at`` is then the best reading, or 0); the
    #: entry is listed all the same, and ``fairque doctor --repair`` mends it
    damage: str = ""


@attrs.frozen(kw_only=True)
class QueueSizes:
    """One tenant's depths: ready critical, ready normal, scheduled (delayed), leased."""

    critical: int = 0
    normal: int = 0
    scheduled: int = 0
    leased: int = 0

    @property
    def total(self) -> int:
        return self.critical + self.normal + self.scheduled + self.leased

    def as_dict(self) -> dict[str, int]:
        return {
            "critical": self.critical,
            "normal": self.normal,
            "scheduled": self.scheduled,
            "leased": self.leased,
            "total": self.total,
        }


_VARIANT = "89ab"


def new_task_id() -> str:
    """A random UUID4 in its canonical text form, as ``str(uuid.uuid4())`` makes it.

    The same 16 bytes of ``os.urandom`` as ``uuid.uuid4`` draws, the version and variant
    bits set (122 random bits), formatted directly: about a third of ``uuid.uuid4``'s cost.
    """
    raw = os.urandom(16)
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{_VARIANT[raw[8] >> 6]}{h[17:20]}-{h[20:]}"
