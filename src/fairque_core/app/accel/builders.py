"""The accelerator ``prebuilt_builders``: models built without a second round of checks.

The reference path (:class:`~fairque_core.app.engine.messages.ModelBuild`) builds every
:class:`Task` and :class:`Message` through attrs, so the models' validators judge each value.
Here the same frozen objects are set slot by slot, as attrs' own ``__init__`` sets a frozen
slotted instance, without running the validators again (issue 17):

- :class:`PrebuiltBuild` decodes a claimed or stored message into a :class:`Task` after one
  derived check, on plain types only, of what the validators would accept (anything it does
  not vouch for, e.g. a str subclass, takes the reference path, which says what is wrong);
  and builds the pushed :class:`Message` (it has no validators) from positional values.
- ``unchecked_*`` are the builders themselves, also used by the Redis adapter's claim reply.

``tests/unit/test_accel_builders.py`` shows that both paths give equal models field by field
(hypothesis, valid and invalid values), with the switch on and off. Off switch:
``FAIRQUE_ACCEL_OFF=prebuilt_builders``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from types import MemberDescriptorType
from typing import Any

import attrs

from fairque_core.app.engine.messages import REFERENCE_BUILD, ModelBuild
from fairque_core.domain.enums import Priority
from fairque_core.domain.models import Claimed, Lease, Message, Task
from fairque_core.domain.validation import (
    MAX_EPOCH_SECONDS,
    MAX_ID_LENGTH,
    MAX_RETRY_COUNT,
    id_fullmatch,
    is_valid_id,
)
from fairque_core.settings.accel import Accelerators

__all__ = [
    "PREBUILT",
    "PrebuiltBuild",
    "model_build",
    "unchecked_claimed",
    "unchecked_lease",
    "unchecked_message",
    "unchecked_task",
]

NAME = "prebuilt_builders"

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
    "depends_on headers name unique_key unique_window_seconds lease",
)
_LEASE_SLOTS = _slot_setters(Lease, "token deadline worker_id")
_CLAIMED_SLOTS = _slot_setters(Claimed, "message lease recoveries")
_MESSAGE_SLOTS = _slot_setters(
    Message,
    "task_id tenant priority body content_type retry_count max_retries created_at delay "
    "depends_on headers name unique_key unique_window",
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


class PrebuiltBuild(ModelBuild):
    """:class:`ModelBuild` with the models set slot by slot where the values are known good."""

    def message(
        self, task: Task, body: bytes, content_type: str, delay: float, headers: dict[str, str]
    ) -> Message:
        return unchecked_message(
            task.task_id,
            task.tenant,
            task.priority,
            body,
            content_type,
            0,
            task.max_retries,
            task.created_at,
            delay,
            task.depends_on,
            headers,
            task.name,
            task.unique_key,
            task.unique_window_seconds,
        )

    def task(self, message: Message, payload: Mapping[str, Any], lease: Lease | None) -> Task:
        # Whether ``Task(...)`` of these fields would pass every validator, judged on plain
        # types only (anything else takes the reference path, which says why): spelled
        # inline, each field read once, as it runs once per claimed task (issue 17).
        task_id, tenant, priority = message.task_id, message.tenant, message.priority
        retries, max_retries, created = message.retry_count, message.max_retries, message.created_at
        delay, deps, name, headers = (
            message.delay,
            message.depends_on,
            message.name,
            message.headers,
        )
        unique_key, window = message.unique_key, message.unique_window
        if (
            (type(created) is float or type(created) is int)
            and (type(delay) is float or type(delay) is int)
            and 0.0 <= created <= MAX_EPOCH_SECONDS
            and type(task_id) is str
            and type(tenant) is str
            and len(task_id) <= MAX_ID_LENGTH
            and len(tenant) <= MAX_ID_LENGTH
            and id_fullmatch(task_id) is not None
            and id_fullmatch(tenant) is not None
            and type(priority) is Priority
            and type(payload) is dict
            and type(retries) is int
            and 0 <= retries <= MAX_RETRY_COUNT
            and type(max_retries) is int
            and 0 <= max_retries <= MAX_RETRY_COUNT
            and type(deps) is tuple
            and type(headers) is dict
            and type(name) is str
            and ((unique_key == "" and type(unique_key) is str) or is_valid_id(unique_key))
            and (type(window) is float or type(window) is int)
            and 0.0 <= window <= MAX_EPOCH_SECONDS
            and (lease is None or type(lease) is Lease)
            and (not deps or all(is_valid_id(dep) for dep in deps))
            and (not headers or all(type(k) is str and type(v) is str for k, v in headers.items()))
        ):
            try:
                # created + max(0.0, delay), NaN included; a plain int or float as both are
                ready = created + (delay if delay > 0 else 0.0)
            except OverflowError:  # an int too large for a float: the validators say why
                ready = -1.0
            if 0.0 <= ready <= MAX_EPOCH_SECONDS:
                return unchecked_task(
                    task_id,
                    tenant,
                    priority,
                    payload,
                    retries,
                    max_retries,
                    created,
                    ready,
                    deps,
                    dict(headers) if headers else {},
                    name,
                    unique_key,
                    window,
                    lease,
                )
        return super().task(message, payload, lease)


#: The one :class:`PrebuiltBuild` (it holds no state).
PREBUILT = PrebuiltBuild()


def model_build(accel: Accelerators) -> ModelBuild:
    """What a composition root plugs in: :data:`PREBUILT` when the switch is on, else the
    reference :class:`ModelBuild`."""
    return PREBUILT if accel.on(NAME) else REFERENCE_BUILD
