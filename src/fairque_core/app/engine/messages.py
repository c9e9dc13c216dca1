"""Tasks to messages and back, for both engines (no I/O).

A :class:`Task` becomes the :class:`Message` a backend stores (plugin headers, codec, size
limit, delay) in :func:`to_message`; a stored or claimed message becomes a :class:`Task` again
in :func:`decode_message` (TaskSerializationError when it cannot); handler results are JSON
(:func:`encode_result`, :func:`decode_result`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs

from fairque_core.domain.enums import Priority
from fairque_core.domain.errors import (
    FairQueueError,
    PayloadTooLargeError,
    TaskSerializationError,
    TaskTypeError,
    TaskValidationError,
)
from fairque_core.domain.models import (
    UNREADABLE_HEADER,
    Claimed,
    Lease,
    Message,
    Task,
    unchecked_message,
    unchecked_task,
)
from fairque_core.domain.validation import (
    MAX_EPOCH_SECONDS,
    MAX_ID_LENGTH,
    MAX_RETRY_COUNT,
    id_fullmatch,
    is_valid_id,
)
from fairque_core.settings.config import QueueConfig

if TYPE_CHECKING:
    from fairque_core.app.engine.support import PluginHostLike


__all__ = [
    "decode_claimed",
    "decode_message",
    "decode_result",
    "encode_result",
    "stub_task",
    "to_message",
    "wait_seconds",
]


def to_message(
    task: Task, host: PluginHostLike, config: QueueConfig, now: float | None = None
) -> Message:
    """Validate ``task`` and encode it: headers from plugins, codec, size limit, delay.

    The size limit (``max_payload_bytes``) bounds the whole stored record: the encoded
    payload plus the name, headers and dependency ids (UTF-8 bytes), so neither a huge
    name nor huge headers slip past it. A push starts the attempt count: the message's
    ``retry_count`` is 0 whatever the task carries (both backends store it so).
    """
    if type(task) is not Task and not isinstance(task, Task):
        raise TaskTypeError("task", task, "must be a fairque_core.Task")
    # a task without dependencies, headers or a name (the common one) skips their tests
    deps, headers, name = task.depends_on, task.headers, task.name
    if deps and task.task_id in deps:
        raise TaskValidationError("depends_on", task.task_id, "a task cannot depend on itself")
    if headers and UNREADABLE_HEADER in headers:
        raise TaskValidationError("headers", UNREADABLE_HEADER, "is reserved for fairque")
    added = host.push_headers(task, queue=config.name)
    if added != headers:
        task = attrs.evolve(task, headers={**headers, **added})
        headers = task.headers
    try:
        body, content_type = host.encode(task)
    except FairQueueError:
        raise
    except Exception as exc:
        raise TaskSerializationError(f"cannot encode the payload of {task.task_id}: {exc}") from exc
    size = len(body) + _extra_bytes(task) if name or deps or headers else len(body)
    if size > config.max_payload_bytes:
        raise PayloadTooLargeError(size, config.max_payload_bytes)
    delay = task.execute_after - (time.time() if now is None else now)
    return unchecked_message(
        task_id=task.task_id,
        tenant=task.tenant,
        priority=task.priority,
        body=body,
        content_type=content_type,
        retry_count=0,
        max_retries=task.max_retries,
        created_at=task.created_at,
        delay=delay if delay > 0.0 else 0.0,  # max(0.0, delay), NaN included
        depends_on=deps,
        headers=dict(headers) if headers else {},
        name=name,
        unique_key=task.unique_key,
        unique_window=task.unique_window_seconds,
    )


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _extra_bytes(task: Task) -> int:
    """Bytes the record stores beside the payload: name, headers and dependency ids."""
    name, deps, headers = task.name, task.depends_on, task.headers
    if not name and not deps and not headers:
        return 0
    size = _utf8_len(name) + sum(len(dep) for dep in deps)
    for key, value in headers.items():
        size += _utf8_len(key) + _utf8_len(value)
    return size


def decode_message(message: Message, host: PluginHostLike, lease: Lease | None = None) -> Task:
    """The task stored in ``message``; TaskSerializationError when it cannot be rebuilt."""
    headers = message.headers
    if type(headers) is dict:
        problem = headers.get(UNREADABLE_HEADER)
    else:
        problem = headers.get(UNREADABLE_HEADER) if isinstance(headers, Mapping) else None
    if problem is not None:  # salvaged by the backend from a damaged record
        raise TaskSerializationError(problem)
    try:
        payload = host.decode(message.content_type, message.body)
    except Exception as exc:
        raise TaskSerializationError(
            f"cannot decode the payload of {message.task_id} ({message.content_type}): {exc}"
        ) from exc
    if type(payload) is not dict and not isinstance(payload, Mapping):
        raise TaskSerializationError(
            f"the payload of {message.task_id} decodes to {type(payload).__name__}, not a mapping"
        )
    # Whether ``Task(...)`` of these fields would pass every validator, judged on plain types
    # only (anything else, e.g. a str subclass, takes the validators' path, which says why):
    # spelled inline, each field read once, as it runs once per claimed task (issue 17).
    task_id, tenant, priority = message.task_id, message.tenant, message.priority
    retries, max_retries, created = message.retry_count, message.max_retries, message.created_at
    delay, deps, name = message.delay, message.depends_on, message.name
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
            # every field passes its validator's rule: built without the validators, which
            # would check it all again; values by position, in the Task's field order
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
    try:  # the validators say what is wrong with it
        return Task(
            task_id=message.task_id,
            tenant=message.tenant,
            priority=message.priority,
            payload=payload,
            retry_count=message.retry_count,
            max_retries=message.max_retries,
            created_at=message.created_at,
            execute_after=message.created_at + max(0.0, message.delay),
            depends_on=message.depends_on,
            headers=message.headers,
            name=message.name,
            unique_key=message.unique_key,
            unique_window_seconds=message.unique_window,
            lease=lease,
        )
    except (TaskValidationError, TypeError, ValueError, OverflowError) as exc:
        raise TaskSerializationError(f"task {message.task_id} is malformed: {exc}") from exc


def decode_claimed(claimed: Claimed, host: PluginHostLike) -> Task:
    return decode_message(claimed.message, host, claimed.lease)


def wait_seconds(message: Message, now: float) -> float:
    """Seconds between the moment the task became ready (as sent) and ``now``."""
    return max(0.0, now - (message.created_at + max(0.0, message.delay)))


# json.dumps with arguments other than its defaults builds an encoder per call: one for all.
_RESULT_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False)


def encode_result(task_id: str, result: object, limit: int | None = None) -> bytes | None:
    """A handler's result as compact JSON bytes (None stays None).

    A result longer than ``limit`` bytes (the queue's ``max_payload_bytes``) is refused with
    TaskSerializationError, never truncated: a finished task keeps its result for
    ``result_ttl_seconds``, so the cap bounds what a finished task holds (issue 16).
    """
    if result is None:
        return None
    try:
        body = _RESULT_ENCODER.encode(result).encode()
    except (TypeError, ValueError) as exc:
        raise TaskSerializationError(
            f"the result of {task_id} is not JSON-serializable: {exc}"
        ) from exc
    if limit is not None and len(body) > limit:
        raise TaskSerializationError(
            f"the result of {task_id} is {len(body)} bytes, over the limit of {limit} bytes "
            "(max_payload_bytes)"
        )
    return body


def decode_result(raw: bytes | None) -> Any:
    """A stored result: the JSON value, or the raw bytes when they are not JSON."""
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def stub_task(message: Message) -> Task | None:
    """A payload-less Task for events about a message that could not be decoded."""
    try:
        return Task(
            task_id=message.task_id,
            tenant=message.tenant,
            priority=message.priority,
            name=message.name,
            created_at=message.created_at,
            execute_after=message.created_at,
        )
    except (TaskValidationError, TypeError, ValueError):
        return None
