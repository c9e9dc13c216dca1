"""What a finished, failed or canceled task leaves behind, and the failure record stored with
it (no I/O).

A task ends FINISHED (its result), FAILED (in the DLQ: failure type, reason and, when a
handler raised, the :func:`error_record` the engine stored with the final failure) or CANCELED
(a reason). :class:`TaskOutcome` is one read of that; ``TaskHandle.get`` turns it into a value
or an exception. XCom values are named values a task publishes at its finish; the result is
the one named :data:`RETURN_VALUE`.
"""

from __future__ import annotations

import json
import traceback as tb
from typing import Any

import attrs

from fairque_core.domain.enums import TaskState

__all__ = [
    "ENDED_STATES",
    "LEASE_CANCELED",
    "LEASE_TERMINATE",
    "RETURN_VALUE",
    "TaskOutcome",
    "decode_error_record",
    "error_record",
]

#: The XCom key under which a finished task's result (its handler's return value) is read.
RETURN_VALUE = "return_value"

#: States a task does not leave on its own: the ones a result handle waits for.
ENDED_STATES = frozenset({TaskState.FINISHED, TaskState.FAILED, TaskState.CANCELED})

#: ``heartbeat_batch``'s entry for a lease whose task was canceled while it ran (ADR 76): the
#: lease is gone as when lost, and the worker stops the handler; the next, with
#: ``terminate=True``: the process running it is to end. No deadline is ever negative.
LEASE_CANCELED = -1.0
LEASE_TERMINATE = -2.0

# A failure record keeps the last frames of the traceback, at most this many characters.
_TRACEBACK_CHARS = 2000
_MESSAGE_CHARS = 1000


@attrs.frozen(kw_only=True)
class TaskOutcome:
    """One read of a task's end (or of its still running state).

    ``result`` is the stored result bytes (None: the task finished without one, or has not
    finished); ``reason`` the DLQ or cancel reason; ``failure_type`` the DLQ's failure type
    (``""`` unless FAILED); ``error`` the failure record (``""`` when none was stored);
    ``tenant`` the task's tenant (``""`` when the backend did not say), which a handle checks
    against the tenant it pushed for (ADR 60).
    """

    state: TaskState
    result: bytes | None = None
    reason: str = ""
    failure_type: str = ""
    error: str = ""
    tenant: str = ""

    @classmethod
    def observed(
        cls,
        state: TaskState,
        *,
        result: bytes | None = None,
        reason: str = "",
        failure_type: str = "",
        error: str = "",
        tenant: str = "",
    ) -> TaskOutcome:
        """An outcome read in ``state`` (the state first, as every backend reads it)."""
        return cls(
            state=state,
            result=result,
            reason=reason,
            failure_type=failure_type,
            error=error,
            tenant=tenant,
        )

    @property
    def ended(self) -> bool:
        return self.state in ENDED_STATES


def error_record(error: BaseException) -> str:
    """The failure record stored with a task that failed for good: JSON with the exception's
    class name, its message and a summary of the traceback (its last frames)."""
    message = str(error)[:_MESSAGE_CHARS]
    lines = tb.format_exception(type(error), error, error.__traceback__)
    summary = "".join(lines)
    if len(summary) > _TRACEBACK_CHARS:
        summary = "...\n" + summary[-_TRACEBACK_CHARS:]
    return json.dumps(
        {"type": type(error).__name__, "message": message, "traceback": summary},
        separators=(",", ":"),
    )


def decode_error_record(text: str) -> dict[str, str]:
    """``type``, ``message`` and ``traceback`` of a stored failure record (empty strings for
    what it lacks, or for a record that is not one)."""
    out = {"type": "", "message": "", "traceback": ""}
    if not text:
        return out
    try:
        got: Any = json.loads(text)
    except ValueError:
        return out
    if isinstance(got, dict):
        for key in out:
            value = got.get(key)
            if isinstance(value, str):
                out[key] = value
    return out
