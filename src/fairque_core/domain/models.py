"""Domain models: frozen attrs classes with no wire-format code in them."""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MemberDescriptorType
from typing import TYPE_CHECKING, Any

import attrs

from fairque_core.domain.enums import FailureType, Priority
from fairque_core.domain.errors import TaskTypeError, TaskValidationError
from fairque_core.domain.validation import (
    MAX_EPOCH_SECONDS,
    MAX_ID_LENGTH,
    MAX_RETRY_COUNT,
    check_count,
    check_duration,
    check_finite,
    check_id_list,
    check_mapping,
    check_str,
    check_time,
    id_fullmatch,
    is_valid_id,
    validate_id,
)

__all__ = [
    "UNREADABLE_HEADER",
    "Claimed",
    "DLQEntry",
    "Lease",
    "Message",
    "QueueSizes",
    "Task",
    "new_task_id",
    "unchecked_claimed",
    "unchecked_lease",
    "unchecked_message",
    "unchecked_task",
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


def _check_window(_inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    check_duration(value, attribute.name)


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
) -> Task:
    """A new task with a random UUID4 id (unless ``task_id`` is given) created now.

    ``unique_key``: a second push of a task with the same key (same tenant) while this
    one is queued or running, or within ``unique_window_seconds`` after it ended, stores
    nothing and returns this task's id (``TaskHandle.duplicate`` is True).
    """
    now = time.time()
    if type(priority) is not Priority:
        try:
            priority = Priority.from_int(priority)
        except ValueError as exc:
            raise TaskValidationError("priority", priority, "must be 1-6") from exc
    key = unique_key if unique_key is not None else ""
    window = unique_window_seconds or 0.0
    if (
        type(tenant) is str
        and len(tenant) <= MAX_ID_LENGTH
        and id_fullmatch(tenant) is not None
        and (task_id is None or is_valid_id(task_id))
        and (payload is None or type(payload) is dict)
        and type(max_retries) is int
        and 0 <= max_retries <= MAX_RETRY_COUNT
        and 0.0 <= now <= MAX_EPOCH_SECONDS
        and (execute_after is None or _is_time(execute_after))
        and (depends_on == () or _plain_ids(depends_on))
        and (headers is None or _plain_headers(headers))
        and type(name) is str
        and ((key == "" and type(key) is str) or is_valid_id(key))
        and (type(window) is float or type(window) is int)
        and 0.0 <= window <= MAX_EPOCH_SECONDS
    ):
        # every value is of a plain type and passes its rule: built without the
        # validators, which would check it all again (the common case, issue 17)
        return unchecked_task(
            task_id=task_id if task_id is not None else new_task_id(),
            tenant=tenant,
            priority=priority,
            payload=dict(payload) if payload is not None else {},
            retry_count=0,
            max_retries=max_retries,
            created_at=now,
            execute_after=execute_after if execute_after is not None else now,
            depends_on=tuple(depends_on),
            headers=dict(headers) if headers is not None else {},
            name=name,
            unique_key=key,
            unique_window_seconds=window,
            lease=None,
        )
    # anything else goes through the validators, which raise the typed error it earns
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
        unique_key=key,
        unique_window_seconds=window,
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


# ---------------------------------------------------------------- construction without checks
# The validators above run on every ``Task(...)``/``Lease(...)``. Code that has checked every
# value already (``Task.create``, the engine decoding a claimed record, a backend building the
# lease it drew) builds the instance with these instead: the same frozen object, set as attrs'
# own ``__init__`` sets a frozen slotted instance, without a second round of checks (issue 17).

_new = object.__new__
_put = object.__setattr__
_VARIANT = "89ab"


def new_task_id() -> str:
    """A random UUID4 in its canonical text form, as ``str(uuid.uuid4())`` makes it.

    The same 16 bytes of ``os.urandom`` as ``uuid.uuid4`` draws, the version and variant
    bits set (122 random bits), formatted directly: about a third of ``uuid.uuid4``'s cost.
    """
    raw = os.urandom(16)
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{_VARIANT[raw[8] >> 6]}{h[17:20]}-{h[20:]}"


def _is_time(value: object) -> bool:
    """A plain int or float in [0, MAX_EPOCH_SECONDS] (what ``check_time`` accepts, minus
    subclasses, which take the validators' path)."""
    return (type(value) is float or type(value) is int) and 0.0 <= value <= MAX_EPOCH_SECONDS


def _plain_ids(value: object) -> bool:
    """A list or tuple of valid ids (``depends_on``)."""
    if type(value) is tuple or type(value) is list:
        return not value or all(is_valid_id(item) for item in value)
    return False


def _plain_headers(value: object) -> bool:
    """A dict of str to str (``headers``)."""
    if type(value) is dict:
        return not value or all(type(k) is str and type(v) is str for k, v in value.items())
    return False


def unchecked_task(  # noqa: PLR0917 - positional in field order: the claim path calls so
    task_id: str,
    tenant: str,
    priority: Priority,
    payload: Mapping[str, Any],
    retry_count: int,
    max_retries: int,
    created_at: float,
    execute_after: float,
    depends_on: tuple[str, ...],
    headers: Mapping[str, str],
    name: str,
    unique_key: str,
    unique_window_seconds: float,
    lease: Lease | None,
) -> Task:
    """A :class:`Task` of values the caller has checked against every validator's rule
    (``depends_on`` a tuple, ``headers`` a dict of its own): no check runs here."""
    (
        set_task_id,
        set_tenant,
        set_priority,
        set_payload,
        set_retry_count,
        set_max_retries,
        set_created_at,
        set_execute_after,
        set_depends_on,
        set_headers,
        set_name,
        set_unique_key,
        set_unique_window_seconds,
        set_lease,
    ) = _TASK_SLOTS
    task: Task = _new(Task)
    set_task_id(task, task_id)
    set_tenant(task, tenant)
    set_priority(task, priority)
    set_payload(task, payload)
    set_retry_count(task, retry_count)
    set_max_retries(task, max_retries)
    set_created_at(task, created_at)
    set_execute_after(task, execute_after)
    set_depends_on(task, depends_on)
    set_headers(task, headers)
    set_name(task, name)
    set_unique_key(task, unique_key)
    set_unique_window_seconds(task, unique_window_seconds)
    set_lease(task, lease)
    return task


def unchecked_lease(token: str, deadline: float, worker_id: str) -> Lease:
    """A :class:`Lease` of a str token and worker id and a finite deadline the caller made:
    no check runs here. (The builders take values by position too, in field order: cheaper.)"""
    set_token, set_deadline, set_worker_id = _LEASE_SLOTS
    lease: Lease = _new(Lease)
    set_token(lease, token)
    set_deadline(lease, deadline)
    set_worker_id(lease, worker_id)
    return lease


def unchecked_message(  # noqa: PLR0917 - as unchecked_task
    task_id: str,
    tenant: str,
    priority: Priority,
    body: bytes,
    content_type: str,
    retry_count: int,
    max_retries: int,
    created_at: float,
    delay: float,
    depends_on: tuple[str, ...],
    headers: Mapping[str, str],
    name: str,
    unique_key: str,
    unique_window: float,
) -> Message:
    """A :class:`Message` from positional values (it has no validators; this is only the
    cheaper spelling of ``Message(...)`` for the push and claim paths)."""
    (
        set_task_id,
        set_tenant,
        set_priority,
        set_body,
        set_content_type,
        set_retry_count,
        set_max_retries,
        set_created_at,
        set_delay,
        set_depends_on,
        set_headers,
        set_name,
        set_unique_key,
        set_unique_window,
    ) = _MESSAGE_SLOTS
    message: Message = _new(Message)
    set_task_id(message, task_id)
    set_tenant(message, tenant)
    set_priority(message, priority)
    set_body(message, body)
    set_content_type(message, content_type)
    set_retry_count(message, retry_count)
    set_max_retries(message, max_retries)
    set_created_at(message, created_at)
    set_delay(message, delay)
    set_depends_on(message, depends_on)
    set_headers(message, headers)
    set_name(message, name)
    set_unique_key(message, unique_key)
    set_unique_window(message, unique_window)
    return message


def unchecked_claimed(message: Message, lease: Lease, recoveries: int) -> Claimed:
    """The cheaper spelling of ``Claimed(...)`` (no validators) for a claim's reply."""
    set_message, set_lease, set_recoveries = _CLAIMED_SLOTS
    claimed: Claimed = _new(Claimed)
    set_message(claimed, message)
    set_lease(claimed, lease)
    set_recoveries(claimed, recoveries)
    return claimed


def _slot_setters(cls: type, names: str) -> tuple[Callable[[Any, Any], None], ...]:
    """The setters of a frozen slotted attrs class's fields ``names`` (all of them, in field
    order, as the unchecked constructors unpack them): each slot's own ``__set__``, which
    stores as ``object.__setattr__`` does (attrs' ``__init__`` stores so), without looking
    the name up on every store."""
    fields = tuple(field.name for field in attrs.fields(cls))
    if fields != tuple(names.split()):
        raise RuntimeError(f"{cls.__name__}'s fields are {fields}: update its unchecked builder")
    setters: list[Callable[[Any, Any], None]] = []
    for name in fields:
        slot = cls.__dict__.get(name)
        if isinstance(slot, MemberDescriptorType):
            setters.append(slot.__set__)
        else:  # not a plain slot: store by name
            setters.append(functools.partial(_put_named, name=name))
    return tuple(setters)


def _put_named(instance: object, value: object, *, name: str) -> None:
    _put(instance, name, value)


_TASK_SLOTS = _slot_setters(
    Task,
    "task_id tenant priority payload retry_count max_retries created_at execute_after "
    "depends_on headers name unique_key unique_window_seconds lease",
)
_LEASE_SLOTS = _slot_setters(Lease, "token deadline worker_id")
_CLAIMED_SLOTS = _slot_setters(Claimed, "message lease recoveries")
_MESSAGE_SLOTS = _slot_setters(
    Message,
    "task_id tenant priority body content_type retry_count max_retries created_at delay "
    "depends_on headers name unique_key unique_window",
)
