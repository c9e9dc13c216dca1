"""Tasks to messages and back, for both engines (no I/O).

A :class:`Task` becomes the :class:`Message` a backend stores (plugin headers, codec, size
limit, delay) in :func:`to_message`; a stored or claimed message becomes a :class:`Task` again
in :func:`decode_message` (TaskSerializationError when it cannot); handler results are JSON
(:func:`encode_result`, :func:`decode_result`).

Both build their model through a :class:`ModelBuild`: the reference one here builds through
attrs, so the models' validators judge every value. The accelerator ``prebuilt_builders``
(``fairque_core.app.accel.builders``) is a subclass that an engine's constructor plugs in.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs

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
    expiry_ms,
)
from fairque_core.ports.json_codec import check_str_keys
from fairque_core.settings.config import QueueConfig

if TYPE_CHECKING:
    from fairque_core.app.engine.support import PluginHostLike


__all__ = [
    "REFERENCE_BUILD",
    "ModelBuild",
    "decode_claimed",
    "decode_message",
    "decode_result",
    "encode_result",
    "stub_task",
    "to_message",
    "wait_seconds",
]


class ModelBuild:
    """How the engine builds the models it hands on: through attrs (the reference path)."""

    def message(  # noqa: PLR0917 - the message's own values, as to_message has them
        self,
        task: Task,
        body: bytes,
        content_type: str,
        delay: float,
        headers: dict[str, str],
        keep_result: bool = True,
    ) -> Message:
        """The message that stores ``task`` (encoded as ``body``): a push starts the attempt
        count at 0, whatever the task carries; ``keep_result`` is the task's, resolved
        against the queue's default."""
        return Message(
            task_id=task.task_id,
            tenant=task.tenant,
            priority=task.priority,
            body=body,
            content_type=content_type,
            retry_count=0,
            max_retries=task.max_retries,
            created_at=task.created_at,
            delay=delay,
            depends_on=task.depends_on,
            headers=headers,
            name=task.name,
            unique_key=task.unique_key,
            unique_window=task.unique_window_seconds,
            keep_result=keep_result,
            expires_ms=expiry_ms(task.expires_at),
            limit_key=task.limit_key,
        )

    def task(self, message: Message, payload: Mapping[str, Any], lease: Lease | None) -> Task:
        """The task ``message`` stores, its payload decoded; the validators raise
        TaskValidationError (or TypeError, ValueError, OverflowError) for a value they refuse."""
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
            # resolved at push: False, or None for kept (a round trip gives the task back)
            keep_result=None if message.keep_result else False,
            expires_at=message.expires_ms / 1000 if message.expires_ms else None,
            limit_key=message.limit_key,
            lease=lease,
        )


#: The reference :class:`ModelBuild`, what every caller that names none gets.
REFERENCE_BUILD = ModelBuild()


def to_message(
    task: Task,
    host: PluginHostLike,
    config: QueueConfig,
    now: float | None = None,
    build: ModelBuild = REFERENCE_BUILD,
) -> Message:
    """Validate ``task`` and encode it: headers from plugins, codec, size limit, delay.

    The size limit (``max_payload_bytes``) bounds the whole stored record: the encoded
    payload plus the name, headers and dependency ids (UTF-8 bytes), so neither a huge
    name nor huge headers slip past it. A push starts the attempt count: the message's
    ``retry_count`` is 0 whatever the task carries (both backends store it so).
    """
    if not isinstance(task, Task):
        raise TaskTypeError("task", task, "must be a fairque_core.Task")
    deps, headers = task.depends_on, task.headers
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
    size = len(body) + _extra_bytes(task)
    if size > config.max_payload_bytes:
        raise PayloadTooLargeError(size, config.max_payload_bytes)
    delay = task.execute_after - (time.time() if now is None else now)
    # max(0.0, delay), NaN included; the message gets a dict of its own
    keep = task.keep_result
    if keep is None:  # the queue's default (ADR 78)
        keep = config.results != "none"
    return build.message(
        task, body, content_type, delay if delay > 0.0 else 0.0, dict(headers), keep
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


def decode_message(
    message: Message,
    host: PluginHostLike,
    lease: Lease | None = None,
    build: ModelBuild = REFERENCE_BUILD,
) -> Task:
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
    try:  # the models' validators judge every field
        return build.task(message, payload, lease)
    except (TaskValidationError, TypeError, ValueError, OverflowError) as exc:
        raise TaskSerializationError(f"task {message.task_id} is malformed: {exc}") from exc


def decode_claimed(
    claimed: Claimed, host: PluginHostLike, build: ModelBuild = REFERENCE_BUILD
) -> Task:
    return decode_message(claimed.message, host, claimed.lease, build)


def wait_seconds(message: Message, now: float) -> float:
    """Seconds between the moment the task became ready (as sent) and ``now``."""
    return max(0.0, now - (message.created_at + max(0.0, message.delay)))


# json.dumps with arguments other than its defaults builds an encoder per call: one for all.
_RESULT_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False)
_SCALARS = frozenset({str, int, float, bool})


def encode_result(task_id: str, result: object, limit: int | None = None) -> bytes | None:
    """A handler's result as compact JSON bytes (None stays None).

    A result longer than ``limit`` bytes (the queue's ``max_payload_bytes``) is refused with
    TaskSerializationError, never truncated: a finished task keeps its result for
    ``result_ttl_seconds``, so the cap bounds what a finished task holds (issue 16).
    """
    if result is None:
        return None
    body = _encode_json(task_id, result, "result")
    if limit is not None and len(body) > limit:
        raise TaskSerializationError(
            f"the result of {task_id} is {len(body)} bytes, over the limit of {limit} bytes "
            "(max_payload_bytes)"
        )
    return body


def _encode_json(task_id: str, value: object, what: str) -> bytes:
    """``value`` (a result or a progress value of task ``task_id``) as compact JSON: ``str``
    keys and nesting bounded as payloads, no NaN; TaskSerializationError naming ``what``."""
    try:
        if type(value) not in _SCALARS and value is not None:
            check_str_keys(value, "$")
        return _RESULT_ENCODER.encode(value).encode()
    except TaskSerializationError as exc:
        raise TaskSerializationError(f"the {what} of {task_id}: {exc}") from exc
    except (TypeError, ValueError, RecursionError) as exc:
        raise TaskSerializationError(
            f"the {what} of {task_id} is not JSON-serializable: {exc}"
        ) from exc


#: How large a progress value may be, encoded (``ctx.set_progress``): it is rewritten on the
#: task's record and copied into the event log each time.
MAX_PROGRESS_BYTES = 1024


def encode_progress(task_id: str, value: object) -> bytes:
    """A progress value as compact JSON (the rules of a result: ``str`` keys, bounded
    nesting, no NaN), at most :data:`MAX_PROGRESS_BYTES`; TaskSerializationError otherwise.
    None is a value here (``null``): a task can report it has no progress to tell."""
    body = _encode_json(task_id, value, "progress")
    if len(body) > MAX_PROGRESS_BYTES:
        raise TaskSerializationError(
            f"the progress of {task_id} is {len(body)} bytes, over {MAX_PROGRESS_BYTES}"
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
