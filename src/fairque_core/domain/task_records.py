"""The task record: a task's story as the backends keep it, and the browse page (no I/O).

A backend keeps, with every task, the time each attempt started (the claim) and, when it ends,
one attempt entry: the worker that held the lease, when it started and ended, how it ended
and, for a failed attempt, the failure record (:func:`~fairque_core.domain.outcomes.
error_record`: exception type, message, the last :data:`~fairque_core.domain.outcomes.
TRACEBACK_CHARS` characters of the traceback). The last :data:`ATTEMPTS_KEPT` attempts are
kept. A finished task keeps its payload when it is at most :data:`BODY_KEPT_BYTES` long,
else its size and its first :data:`PREVIEW_BYTES` bytes. All of it lives as long as the record
(the result TTL for a finished or canceled task; a DLQ entry until requeued or purged).

:class:`StoredRecord` is what a backend returns (bytes, milliseconds); the engine decodes it
into the public :class:`TaskRecord` (ADR 70). :class:`TaskSummary` and :class:`TaskPage` are
what ``list_tasks`` returns: the tasks that ended, newest first, by state and tenant.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from fairque_core.domain.enums import Priority, TaskState
from fairque_core.domain.errors import TaskValidationError
from fairque_core.domain.models import Message, Task
from fairque_core.domain.outcomes import decode_error_record
from fairque_core.domain.validation import validate_id

__all__ = [
    "ATTEMPTS_KEPT",
    "BODY_KEPT_BYTES",
    "LISTED_STATES",
    "MAX_LIST_LIMIT",
    "PREVIEW_BYTES",
    "StoredAttempt",
    "StoredRecord",
    "StoredSummary",
    "TaskAttempt",
    "TaskPage",
    "TaskRecord",
    "TaskSummary",
    "check_list_args",
    "decode_cursor",
    "encode_attempt",
    "encode_cursor",
    "parse_attempt",
    "retry_history",
]

#: The attempts a record keeps (the newest; older ones are dropped as new ones end).
ATTEMPTS_KEPT = 20
#: A finished task keeps a payload (its encoded body) up to this size ...
BODY_KEPT_BYTES = 1024
#: ... and of a longer one its size and its first bytes, this many.
PREVIEW_BYTES = 256
#: The states ``list_tasks`` browses: the ones a task ends in (ADR 70).
LISTED_STATES = (TaskState.FINISHED, TaskState.FAILED, TaskState.CANCELED)
#: The largest page of ``list_tasks``.
MAX_LIST_LIMIT = 1000

#: How an attempt ended.
OUTCOMES = ("finished", "retried", "failed", "expired", "canceled")


@attrs.frozen(kw_only=True)
class StoredAttempt:
    """One attempt as a backend keeps it (times in ms; ``error`` the failure record)."""

    number: int
    outcome: str
    started_ms: int
    ended_ms: int
    worker_id: str = ""
    error: str = ""


def encode_attempt(attempt: StoredAttempt) -> str:
    """``outcome|started|ended|len(worker)|worker`` then the failure record: the form the Lua
    scripts write (``lua/_include/record.lua``) and :func:`parse_attempt` reads."""
    worker = attempt.worker_id
    return (
        f"{attempt.outcome}|{attempt.started_ms}|{attempt.ended_ms}|{len(worker)}|"
        f"{worker}{attempt.error}"
    )


def parse_attempt(number: int, text: str) -> StoredAttempt | None:
    """The attempt ``text`` (see :func:`encode_attempt`), or None when it is not one."""
    parts = text.split("|", 4)
    if len(parts) != 5:
        return None
    outcome, started, ended, size, rest = parts
    try:
        n = int(size)
        return StoredAttempt(
            number=number,
            outcome=outcome,
            started_ms=int(started),
            ended_ms=int(ended),
            worker_id=rest[:n],
            error=rest[n:],
        )
    except ValueError:
        return None


@attrs.frozen(kw_only=True)
class StoredRecord:
    """A task's record as a backend returns it: the message (its body the kept payload or
    its preview, ``body_size`` the payload's size when only a preview is kept, else None),
    state, times in ms (0: not yet), the kept attempts, result, failure and reason."""

    message: Message
    state: TaskState
    started_ms: int = 0
    ended_ms: int = 0
    attempts: tuple[StoredAttempt, ...] = ()
    attempt_count: int = 0
    result: bytes | None = None
    failure_type: str = ""
    reason: str = ""
    error: str = ""
    body_size: int | None = None
    #: the last progress the handler reported (JSON bytes), None when it reported none
    progress: bytes | None = None


@attrs.frozen(kw_only=True)
class TaskAttempt:
    """One attempt of a task: ``number`` counts from 1 over the task's life (a DLQ requeue
    goes on counting); ``outcome`` is ``finished``, ``retried`` (failed, to be retried),
    ``failed`` (failed for good), ``expired`` (its lease ran out) or ``canceled``; the error
    fields are empty unless the handler raised."""

    number: int
    worker_id: str
    started_at: float
    ended_at: float
    outcome: str
    error_type: str = ""
    error_message: str = ""
    traceback: str = ""

    @classmethod
    def of(cls, stored: StoredAttempt) -> TaskAttempt:
        error = decode_error_record(stored.error)
        return cls(
            number=stored.number,
            worker_id=stored.worker_id,
            started_at=stored.started_ms / 1000,
            ended_at=stored.ended_ms / 1000,
            outcome=stored.outcome,
            error_type=error["type"],
            error_message=error["message"],
            traceback=error["traceback"],
        )

    def as_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)


def retry_history(attempts: Iterable[StoredAttempt]) -> tuple[dict[str, Any], ...]:
    """``DLQEntry.retry_history``: the kept attempts, oldest first, as plain dicts
    (:meth:`TaskAttempt.as_dict`: number, worker_id, started_at, ended_at, outcome,
    error_type, error_message, traceback)."""
    return tuple(TaskAttempt.of(a).as_dict() for a in attempts)


@attrs.frozen(kw_only=True)
class TaskRecord:
    """A task's story (``queue.get_task``): what it is, where it is, what happened to it.

    ``payload`` is the decoded payload, or None when only a preview of it is kept (a finished
    task's payload longer than :data:`BODY_KEPT_BYTES`): ``payload_size`` and
    ``payload_preview`` then say what it was. ``created_at`` is the task's creation time (the
    producer's clock), ``started_at`` the start of its last attempt, ``ended_at`` when it
    finished, failed for good or was canceled (None until then). ``attempts`` holds the last
    :data:`ATTEMPTS_KEPT` attempts, oldest first; ``attempt_count`` counts them all.
    ``result`` is the decoded result (None without one); ``progress`` is the last value the
    handler reported with ``ctx.set_progress`` (None when it reported none).
    """

    task_id: str
    tenant: str
    name: str
    priority: Priority
    state: TaskState
    payload: Mapping[str, Any] | None
    payload_size: int
    payload_preview: str = ""
    headers: Mapping[str, str] = attrs.field(factory=dict)
    depends_on: tuple[str, ...] = ()
    retry_count: int = 0
    max_retries: int = 3
    created_at: float = 0.0
    started_at: float | None = None
    ended_at: float | None = None
    attempts: tuple[TaskAttempt, ...] = ()
    attempt_count: int = 0
    result: Any = None
    progress: Any = None
    failure_type: str = ""
    reason: str = ""
    #: the stored task as a :class:`~fairque_core.domain.models.Task` (None when only a
    #: preview of its payload is kept)
    task: Task | None = attrs.field(default=None, eq=False, repr=False)

    def as_dict(self) -> dict[str, Any]:
        """Plain values (JSON-ready but for what the payload and result hold)."""
        out = attrs.asdict(self, recurse=False)
        del out["task"]
        out["priority"] = self.priority.name.lower()
        out["state"] = self.state.value
        out["payload"] = None if self.payload is None else dict(self.payload)
        out["headers"] = dict(self.headers)
        out["depends_on"] = list(self.depends_on)
        out["attempts"] = [a.as_dict() for a in self.attempts]
        return out


@attrs.frozen(kw_only=True)
class StoredSummary:
    """One index entry as a backend returns it (ms times)."""

    task_id: str
    tenant: str
    state: TaskState
    ended_ms: int
    name: str = ""
    priority: int = 3
    retry_count: int = 0
    failure_type: str = ""
    reason: str = ""


@attrs.frozen(kw_only=True)
class TaskSummary:
    """One line of :class:`TaskPage`: a task that ended."""

    task_id: str
    tenant: str
    name: str
    state: TaskState
    priority: Priority
    ended_at: float
    retry_count: int = 0
    failure_type: str = ""
    reason: str = ""

    def as_dict(self) -> dict[str, Any]:
        out = attrs.asdict(self)
        out["state"] = self.state.value
        out["priority"] = self.priority.name.lower()
        return out


@attrs.frozen(kw_only=True)
class TaskPage:
    """A page of ``list_tasks``: newest first; ``cursor`` continues it (None: the last)."""

    items: tuple[TaskSummary, ...]
    cursor: str | None


def encode_cursor(ended_ms: int, task_id: str) -> str:
    """The cursor after the entry ``(ended_ms, task_id)``: the next page starts below it."""
    return f"{ended_ms}:{task_id}"


def decode_cursor(cursor: str | None) -> tuple[int, str] | None:
    """``(ended_ms, task_id)`` of a cursor; TaskValidationError for one that is not."""
    if cursor is None:
        return None
    head, sep, task_id = cursor.partition(":") if isinstance(cursor, str) else ("", "", "")
    if not sep or not head.isdigit() or not task_id or len(head) > 15:
        raise TaskValidationError("cursor", cursor, "is not a list_tasks cursor")
    return int(head), task_id


def check_list_args(
    state: TaskState | str | None, tenant: str | None, limit: int
) -> tuple[TaskState | None, int]:
    """The state (one of :data:`LISTED_STATES`, or None: all three) and the limit (1..1000)
    of a ``list_tasks`` call; TaskValidationError otherwise."""
    if state is not None:
        try:
            state = TaskState(state)
        except ValueError:
            raise TaskValidationError("state", state, "is not a task state") from None
        if state not in LISTED_STATES:
            raise TaskValidationError(
                "state", state.value, "must be finished, failed or canceled (ADR 70)"
            )
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIST_LIMIT:
        raise TaskValidationError("limit", limit, f"must be an int in [1, {MAX_LIST_LIMIT}]")
    if tenant is not None:
        validate_id(tenant, "tenant")
    return state, limit
