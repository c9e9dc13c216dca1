"""The task record and browsing in the in-memory model (ADR 70).

``get_record`` returns what the model keeps of a task's story (``store.py`` records each
attempt as its lease ends, the claim its start, ``_ended`` the end). ``list_tasks`` pages the
tasks that ended (finished, failed, canceled), newest first by the time they ended, the task
id breaking ties (higher first): the order of the Redis indexes, which are scored by that time
(``lua/_include/record.lua``). A record past its result TTL is gone, so nothing lists it.
"""

from __future__ import annotations

from fairque_core.domain.enums import TaskState
from fairque_core.domain.task_records import (
    LISTED_STATES,
    StoredRecord,
    StoredSummary,
    check_list_args,
    decode_cursor,
)
from fairque_core.domain.validation import validate_id
from fairque_core.memory.records import TaskRecord
from fairque_core.memory.store import ModelStore, locked

__all__ = ["BrowseOps"]


def stored_record(rec: TaskRecord) -> StoredRecord:
    """The record as the port returns it."""
    return StoredRecord(
        message=rec.message,
        state=rec.state,
        started_ms=rec.started_ms,
        ended_ms=rec.ended_ms if rec.state in LISTED_STATES else 0,
        attempts=tuple(rec.attempts),
        attempt_count=rec.attempt_count,
        result=rec.result,
        failure_type=rec.failure_type.value if rec.failure_type is not None else "",
        reason=rec.reason,
        error=rec.error,
        body_size=rec.body_size,
        progress=rec.progress,
    )


class BrowseOps(ModelStore):
    """get_record and list_tasks of the port."""

    @locked
    def get_record(self, task_id: str) -> StoredRecord | None:
        validate_id(task_id, "task_id")
        rec = self._live(task_id, self._now())
        return None if rec is None else stored_record(rec)

    @locked
    def list_tasks(
        self,
        *,
        state: TaskState | None = None,
        tenant: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> tuple[list[StoredSummary], str | None]:
        state, limit = check_list_args(state, tenant, limit)
        after = decode_cursor(cursor)
        now = self._now()
        states = LISTED_STATES if state is None else (state,)
        found: list[tuple[int, str]] = []
        for task_id in list(self._records):
            rec = self._live(task_id, now)
            if rec is None or rec.state not in states:
                continue
            if tenant is not None and rec.message.tenant != tenant:
                continue
            key = (rec.ended_ms, task_id)
            if after is None or key < after:
                found.append(key)
        found.sort(reverse=True)
        page = found[:limit]
        items = [self._summary(task_id) for _ms, task_id in page]
        more = len(found) > limit
        return items, (f"{page[-1][0]}:{page[-1][1]}" if more else None)

    def _summary(self, task_id: str) -> StoredSummary:
        rec = self._records[task_id]
        message = rec.message
        return StoredSummary(
            task_id=task_id,
            tenant=message.tenant,
            state=rec.state,
            ended_ms=rec.ended_ms,
            name=message.name,
            priority=int(message.priority),
            retry_count=message.retry_count,
            failure_type=rec.failure_type.value if rec.failure_type is not None else "",
            reason=rec.reason,
        )
