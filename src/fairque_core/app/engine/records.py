"""The task record and the browse page, decoded for both engines (no I/O; ADR 70).

A backend's :class:`~fairque_core.domain.task_records.StoredRecord` becomes the public
:class:`~fairque_core.domain.task_records.TaskRecord` here: the payload decoded by the queue's
codec (a finished task's payload too long to keep: None, with its size and a text preview),
the attempts' failure records split into type, message and traceback, the result decoded.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fairque_core.app.engine.messages import REFERENCE_BUILD, ModelBuild, decode_message
from fairque_core.app.engine.messages import decode_result as _decode_result
from fairque_core.domain.enums import Priority, TaskState
from fairque_core.domain.errors import TaskSerializationError
from fairque_core.domain.task_records import (
    StoredRecord,
    StoredSummary,
    TaskAttempt,
    TaskRecord,
    TaskSummary,
)

if TYPE_CHECKING:
    from fairque_core.app.engine.support import PluginHostLike

__all__ = ["decode_record", "decode_summary"]


def decode_record(
    stored: StoredRecord, host: PluginHostLike, build: ModelBuild = REFERENCE_BUILD
) -> TaskRecord:
    """The public record of ``stored``. TaskSerializationError when the payload of a task
    that has not finished cannot be decoded (as ``get_task`` always did); a finished task's
    kept payload that cannot be decoded reads as None, with its preview."""
    message = stored.message
    payload = None
    task = None
    preview = ""
    size = len(message.body) if stored.body_size is None else stored.body_size
    if stored.body_size is None:
        try:
            task = decode_message(message, host, build=build)
            payload = task.payload
        except TaskSerializationError:
            if stored.state is not TaskState.FINISHED:
                raise
    if payload is None:
        preview = message.body.decode("utf-8", "replace")
    return TaskRecord(
        task_id=message.task_id,
        tenant=message.tenant,
        name=message.name,
        priority=message.priority,
        state=stored.state,
        payload=payload,
        payload_size=size,
        payload_preview=preview,
        headers=dict(message.headers),
        depends_on=tuple(message.depends_on),
        retry_count=message.retry_count,
        max_retries=message.max_retries,
        created_at=message.created_at,
        started_at=stored.started_ms / 1000 if stored.started_ms else None,
        ended_at=stored.ended_ms / 1000 if stored.ended_ms else None,
        attempts=tuple(TaskAttempt.of(a) for a in stored.attempts),
        attempt_count=stored.attempt_count,
        result=_decode_result(stored.result),
        progress=_decode_result(stored.progress),
        failure_type=stored.failure_type,
        reason=stored.reason,
        task=task,
    )


def decode_summary(stored: StoredSummary) -> TaskSummary:
    try:
        priority = Priority(stored.priority)
    except ValueError:
        priority = Priority.NORMAL
    return TaskSummary(
        task_id=stored.task_id,
        tenant=stored.tenant,
        name=stored.name,
        state=stored.state,
        priority=priority,
        ended_at=stored.ended_ms / 1000,
        retry_count=stored.retry_count,
        failure_type=stored.failure_type,
        reason=stored.reason,
    )
