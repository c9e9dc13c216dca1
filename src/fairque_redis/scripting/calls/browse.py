"""Calls for a task's story and the browse indexes (ADR 70; ``lua/_include/record.lua``,
``record_get.lua``, ``task_list.lua``). No I/O."""

from __future__ import annotations

from typing import Any

from fairque_core.domain.enums import TaskState
from fairque_core.domain.errors import TaskSerializationError
from fairque_core.domain.task_records import (
    ATTEMPTS_KEPT,
    LISTED_STATES,
    StoredAttempt,
    StoredRecord,
    StoredSummary,
    check_list_args,
    decode_cursor,
    encode_cursor,
    parse_attempt,
)
from fairque_core.domain.validation import validate_id
from fairque_redis.scripting.calls.base import Call, CallsBase, contract, to_text
from fairque_redis.scripting.calls.records import UNREADABLE, _meta, read_message, salvage_message

__all__ = ["BrowseCalls", "joined_attempts"]

_STATES = {state.value: state for state in TaskState}
# record_get's fixed fields before the attempts' texts
_RECORD_FIELDS = 19


def _attempts(count: int, texts: list[str]) -> tuple[StoredAttempt, ...]:
    first = max(1, count - ATTEMPTS_KEPT + 1)
    out = []
    for k, text in enumerate(texts):
        attempt = parse_attempt(first + k, text)
        if attempt is not None:
            out.append(attempt)
    return tuple(out)


def joined_attempts(count: Any, joined: Any) -> tuple[StoredAttempt, ...]:
    """The attempts of ``dlq_list``'s two fields: their number and the kept texts, each as
    ``<length>:<text>`` (lengths in bytes)."""
    raw = joined if isinstance(joined, bytes) else to_text(joined).encode()
    texts: list[str] = []
    at = 0
    while at < len(raw):
        colon = raw.find(b":", at)
        if colon < 0 or not raw[at:colon].isdigit():
            break  # (not what the script writes: the rest is left out)
        size = int(raw[at:colon])
        texts.append(raw[colon + 1 : colon + 1 + size].decode("utf-8", "replace"))
        at = colon + 1 + size
    return _attempts(int(count or 0), texts)


def _name(meta: Any) -> str:
    try:
        value = _meta(meta)
        name = value[6]
    except (*UNREADABLE, StopIteration):
        return ""
    return name if isinstance(name, str) else ""


class BrowseCalls(CallsBase):
    """get_record, list_tasks, set_progress."""

    def set_progress(self, task_id: str, token: str, body: bytes) -> Call[bool]:
        validate_id(task_id, "task_id")

        def parse(reply: Any) -> bool:
            contract("progress", reply in (0, 1), reply)
            return bool(reply)

        return Call("progress", [*self.header(), task_id, token, body], parse)

    def get_record(self, task_id: str) -> Call[StoredRecord | None]:
        validate_id(task_id, "task_id")

        def parse(reply: Any) -> StoredRecord | None:
            contract(
                "record_get",
                isinstance(reply, list) and (not reply or len(reply) >= _RECORD_FIELDS),
                reply,
            )
            if not reply:
                return None
            state = _STATES.get(to_text(reply[0]))
            contract("record_get", state is not None, reply)
            assert state is not None
            (_st, tenant, prio, rc, meta, body, has, result, reason, ftype, error) = reply[:11]
            started, ended, moved, count, kept_meta, kept_body, size, progress = reply[
                11:_RECORD_FIELDS
            ]
            if state is TaskState.FINISHED:
                meta, body = kept_meta or meta, kept_body
            fields = [task_id, tenant, prio or b"3", rc, meta, body]
            try:
                message = read_message(fields)
            except TaskSerializationError as exc:
                message = salvage_message(fields, str(exc))
            texts = [to_text(t) for t in reply[_RECORD_FIELDS:]]
            end = int(moved) if state is TaskState.FAILED else int(ended)
            return StoredRecord(
                message=message,
                state=state,
                started_ms=int(started),
                ended_ms=end if state in LISTED_STATES else 0,
                attempts=_attempts(int(count), texts),
                attempt_count=int(count),
                result=(result if isinstance(result, bytes) else to_text(result).encode())
                if int(has) == 1
                else None,
                failure_type=to_text(ftype),
                reason=to_text(reason),
                error=to_text(error),
                body_size=int(size) if size not in (b"", "") else None,
                progress=(progress if isinstance(progress, bytes) else to_text(progress).encode())
                if progress not in (b"", "")
                else None,
            )

        return Call("record_get", [*self.header(), task_id], parse, writes=False)

    def list_tasks(
        self,
        state: TaskState | None,
        tenant: str | None,
        limit: int,
        cursor: str | None,
    ) -> Call[tuple[list[StoredSummary], str | None]]:
        state, limit = check_list_args(state, tenant, limit)
        after = decode_cursor(cursor)
        states = LISTED_STATES if state is None else (state,)

        def parse(reply: Any) -> tuple[list[StoredSummary], str | None]:
            contract("task_list", isinstance(reply, list) and (len(reply) - 3) % 9 == 0, reply)
            items: list[StoredSummary] = []
            for i in range(3, len(reply), 9):
                task_id, st, who, ended, prio, rc, meta, ftype, reason = reply[i : i + 9]
                found = _STATES.get(to_text(st))
                contract("task_list", found is not None, reply)
                assert found is not None
                items.append(
                    StoredSummary(
                        task_id=to_text(task_id),
                        tenant=to_text(who),
                        state=found,
                        ended_ms=int(ended),
                        name=_name(meta),
                        priority=int(prio) if to_text(prio).isdigit() else 3,
                        retry_count=int(rc) if to_text(rc).isdigit() else 0,
                        failure_type=to_text(ftype),
                        reason=to_text(reason),
                    )
                )
            more = int(reply[0]) == 1
            return items, encode_cursor(int(reply[1]), to_text(reply[2])) if more else None

        args = [
            *self.header(),
            ",".join(s.value for s in states),
            tenant or "",
            limit,
            "" if after is None else after[0],
            "" if after is None else after[1],
        ]
        return Call("task_list", args, parse, writes=False)
