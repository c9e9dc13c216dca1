"""Small value types shared by the whole core."""

from __future__ import annotations

from enum import Enum, IntEnum

__all__ = ["FailureType", "Priority", "TaskState"]


class Priority(IntEnum):
    """Task priority. 1-5 are scored with aging; CRITICAL goes to a per-tenant FIFO."""

    VERY_LOW = 1
    LOW = 2
    NORMAL = 3
    HIGH = 4
    VERY_HIGH = 5
    CRITICAL = 6

    @property
    def weight(self) -> float:
        """The aging weight p/5 of priorities 1-5. CRITICAL has none (ValueError)."""
        if self is Priority.CRITICAL:
            raise ValueError("Critical priority does not use weight calculation")
        return self.value / 5.0

    @property
    def is_critical(self) -> bool:
        return self is Priority.CRITICAL

    @classmethod
    def from_int(cls, value: int) -> Priority:
        """The priority for ``value``; ``ValueError`` outside 1-6."""
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"Invalid priority value: {value!r}. Must be 1-6.")
        try:
            return cls(value)
        except ValueError:
            raise ValueError(f"Invalid priority value: {value}. Must be 1-6.") from None


class TaskState(str, Enum):
    """Where a task is in its life. The transitions live in :mod:`fairque_core.domain.states`."""

    SCHEDULED = "scheduled"  # waiting for its execute_after time (delayed or retry backoff)
    DEFERRED = "deferred"  # waiting for the tasks it depends on
    QUEUED = "queued"  # ready: in its tenant's critical list or scored set
    STARTED = "started"  # claimed by a worker under a lease
    FINISHED = "finished"
    FAILED = "failed"  # in the dead-letter queue
    CANCELED = "canceled"

    def __str__(self) -> str:
        return self.value


class FailureType(str, Enum):
    """Why a task is in the dead-letter queue."""

    FAILED = "failed"  # retries exhausted
    EXPIRED = "expired"  # lease lost too often (worker died repeatedly)
    POISONED = "poisoned"  # undecodable payload, unknown task name, non-retriable error
    REJECTED = "rejected"  # taken by the intake, refused when ingested (ADR 47)
    STALE = "stale"  # not started before its expires_at: never run (ADR 77)

    def __str__(self) -> str:
        return self.value
