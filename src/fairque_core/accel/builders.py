"""The model builders of the accelerator ``prebuilt_builders``: frozen models set slot by slot.

Below the application layer, so the Redis adapter's claim reply can use them too; the engine's
switchable :class:`~fairque_core.app.accel.builders.PrebuiltBuild` is built on them. A frozen
slotted instance is set as attrs' own ``__init__`` sets it, without running the validators
again: only for values a caller has already checked (or that have no validators). Equivalence:
``tests/unit/test_accel_builders.py``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from types import MemberDescriptorType
from typing import Any

import attrs

from fairque_core.domain.enums import Priority
from fairque_core.domain.models import Claimed, Lease, Message, Task

__all__ = [
    "_slot_setters",
    "unchecked_claimed",
    "unchecked_lease",
    "unchecked_message",
    "unchecked_task",
]

_new = object.__new__
_put = object.__setattr__


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
    "depends_on headers name unique_key unique_window_seconds keep_result expires_at limit_key "
    "lease",
)
_LEASE_SLOTS = _slot_setters(Lease, "token deadline worker_id")
_CLAIMED_SLOTS = _slot_setters(Claimed, "message lease recoveries")
_MESSAGE_SLOTS = _slot_setters(
    Message,
    "task_id tenant priority body content_type retry_count max_retries created_at delay "
    "depends_on headers name unique_key unique_window keep_result expires_ms limit_key",
)


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
    expires_at: float | None,
    lease: Lease | None,
    keep_result: bool | None = None,
    limit_key: str = "",
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
        set_keep_result,
        set_expires_at,
        set_limit_key,
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
    set_keep_result(task, keep_result)
    set_expires_at(task, expires_at)
    set_limit_key(task, limit_key)
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
    keep_result: bool = True,
    expires_ms: int = 0,
    limit_key: str = "",
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
        set_keep_result,
        set_expires_ms,
        set_limit_key,
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
    set_keep_result(message, keep_result)
    set_expires_ms(message, expires_ms)
    set_limit_key(message, limit_key)
    return message


def unchecked_claimed(message: Message, lease: Lease, recoveries: int) -> Claimed:
    """The cheaper spelling of ``Claimed(...)`` (no validators) for a claim's reply."""
    set_message, set_lease, set_recoveries = _CLAIMED_SLOTS
    claimed: Claimed = _new(Claimed)
    set_message(claimed, message)
    set_lease(claimed, lease)
    set_recoveries(claimed, recoveries)
    return claimed
