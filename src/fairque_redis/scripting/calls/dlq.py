"""Calls on the dead-letter queue: list (damaged records salvaged, never fatal), requeue and
purge. No I/O."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fairque_core.domain.enums import FailureType
from fairque_core.domain.errors import TaskSerializationError
from fairque_core.domain.models import DLQEntry
from fairque_core.domain.task_records import retry_history
from fairque_core.domain.validation import check_page_bound, validate_id
from fairque_redis.scripting.calls.base import Call, CallsBase, contract, int_reply, to_text
from fairque_redis.scripting.calls.browse import joined_attempts
from fairque_redis.scripting.calls.records import read_message, salvage_message

__all__ = ["DlqCalls"]

_FAILURES = {ft.value: ft for ft in FailureType}


class DlqCalls(CallsBase):
    """list_dlq, requeue_dlq, purge_dlq."""

    def list_dlq(
        self, limit: int, offset: int, failure_type: FailureType | None
    ) -> Call[list[DLQEntry]]:
        check_page_bound("limit", limit)
        check_page_bound("offset", offset)
        want = "" if failure_type is None else FailureType(failure_type).value

        def parse(reply: Any) -> list[DLQEntry]:
            contract("dlq_list", isinstance(reply, list) and len(reply) % 11 == 0, reply)
            out: list[DLQEntry] = []
            for i in range(0, len(reply), 11):
                task_id, tenant, prio, rc, meta, body, ftype, reason, moved = reply[i : i + 9]
                count, texts = reply[i + 9 : i + 11]
                fields = [task_id, tenant, prio, rc, meta, body]
                try:
                    original = read_message(fields)
                except TaskSerializationError as exc:
                    original = salvage_message(fields, str(exc))
                out.append(
                    DLQEntry(
                        entry_id=to_text(task_id),
                        original_task=original,
                        failure_type=_FAILURES.get(to_text(ftype), FailureType.FAILED),
                        reason=to_text(reason),
                        moved_at=int(moved) / 1000,
                        retry_history=retry_history(joined_attempts(count, texts)),
                    )
                )
            return out

        args = [*self.header(), limit, offset, want]
        return Call("dlq_list", args, parse, writes=False)

    def _dlq_ids(self, script: str, entry_ids: Sequence[str] | None) -> Call[int]:
        if entry_ids is None:
            args = [*self.header(), "1"]
        else:
            ids = list(entry_ids)
            for entry_id in ids:
                validate_id(entry_id, "entry_id")
            args = [*self.header(), "0", len(ids), *ids]
        return Call(script, args, int_reply(script))

    def requeue_dlq(self, entry_ids: Sequence[str] | None) -> Call[int]:
        return self._dlq_ids("dlq_requeue", entry_ids)

    def purge_dlq(self, entry_ids: Sequence[str] | None) -> Call[int]:
        return self._dlq_ids("dlq_purge", entry_ids)
