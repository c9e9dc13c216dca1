"""The in-memory model's dead-letter queue: how a task enters it, and list/requeue/purge.

A task enters the DLQ when it fails for good (``fail`` without a retry delay, in
``leases.py``) or when its lease expired too many times (the reaper, also in ``leases.py``);
its dependents that still wait are canceled. An entry is the task record itself, in state
FAILED, kept until an operator requeues it (back to QUEUED, counters reset) or purges it.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from fairque_core.domain.enums import FailureType
from fairque_core.domain.models import DLQEntry
from fairque_core.domain.states import TaskEvent
from fairque_core.domain.task_records import retry_history
from fairque_core.domain.validation import check_page_bound, validate_id
from fairque_core.memory.store import ModelStore, TaskRecord, locked

__all__ = ["DLQOps"]


class DLQOps(ModelStore):
    """Entering the DLQ, and the operators' DLQ methods of the port."""

    def _to_dlq(
        self,
        task_id: str,
        rec: TaskRecord,
        now: int,
        *,
        event: TaskEvent,
        failure_type: FailureType,
        reason: str,
    ) -> None:
        """Move ``rec`` to the DLQ by ``event`` (FAIL_DEAD or LEASE_EXPIRED_DEAD)."""
        self._move(rec, event)
        rec.failure_type = failure_type
        rec.reason = reason
        rec.moved_ms = now
        self._dlq[task_id] = now
        self._bump("dead", self._tenant(rec.message.tenant))
        self._tell("dead_lettered", rec, failure_type.value, reason)
        self._ended(rec, now)
        self._cancel_dependents(task_id, rec, now)

    @locked
    def list_dlq(
        self, *, limit: int = 100, offset: int = 0, failure_type: FailureType | None = None
    ) -> list[DLQEntry]:
        check_page_bound("limit", limit)
        check_page_bound("offset", offset)
        entries: list[DLQEntry] = []
        for moved_ms, task_id in sorted((ms, tid) for tid, ms in self._dlq.items()):
            rec = self._records[task_id]
            if failure_type is not None and rec.failure_type is not failure_type:
                continue
            entries.append(
                DLQEntry(
                    entry_id=task_id,
                    original_task=rec.message,
                    failure_type=rec.failure_type or FailureType.FAILED,
                    reason=rec.reason,
                    moved_at=moved_ms / 1000,
                    retry_history=retry_history(rec.attempts),
                )
            )
        return entries[offset : offset + limit]

    def _dlq_ids(self, entry_ids: Sequence[str] | None) -> list[str]:
        if entry_ids is None:
            return [tid for _ms, tid in sorted((ms, tid) for tid, ms in self._dlq.items())]
        for entry_id in entry_ids:
            validate_id(entry_id, "entry_id")
        return list(dict.fromkeys(tid for tid in entry_ids if tid in self._dlq))

    @locked
    def requeue_dlq(self, entry_ids: Sequence[str] | None = None) -> int:
        now = self._now()
        ids = self._dlq_ids(entry_ids)
        for task_id in ids:
            del self._dlq[task_id]
            rec = self._records[task_id]
            rec.message = attrs.evolve(rec.message, retry_count=0)
            rec.recoveries = 0
            rec.failure_type = None
            rec.reason = ""
            rec.error = ""
            self._bump("dlq_requeued", self._tenant(rec.message.tenant))
            self._move(rec, TaskEvent.DLQ_REQUEUE)
            self._make_ready(task_id, rec, now)
        return len(ids)

    @locked
    def purge_dlq(self, entry_ids: Sequence[str] | None = None) -> int:
        ids = self._dlq_ids(entry_ids)
        for task_id in ids:
            del self._dlq[task_id]
            del self._records[task_id]
        return len(ids)
