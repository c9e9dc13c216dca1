"""Calls on a claimed task's lease: heartbeat, finish (alone or with the next claim), fail
(retry or DLQ), release, and the reaper's requeue of expired leases. No I/O."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from fairque_core.domain.enums import FailureType, TaskState
from fairque_core.domain.errors import TaskValidationError
from fairque_core.domain.models import Claimed
from fairque_core.domain.outcomes import LEASE_CANCELED, LEASE_TERMINATE
from fairque_core.domain.scoring import to_ms
from fairque_core.domain.validation import check_page_bound
from fairque_core.ports import FinishItem
from fairque_redis.scripting.calls.base import (
    Call,
    CallsBase,
    contract,
    int_list,
    int_reply,
    to_text,
)

__all__ = ["LeaseCalls"]

_STATES = {state.value: state for state in TaskState}
# heartbeat.lua's -1 and -2: the lease's task was canceled (with terminate), ADR 76
_ENDS: dict[int, float | None] = {-1: LEASE_CANCELED, -2: LEASE_TERMINATE}


class LeaseCalls(CallsBase):
    """heartbeat, finish, finish_claim, fail, release, requeue_expired."""

    def heartbeat(
        self, items: Sequence[tuple[str, str]], lease_seconds: float | None, *, strict: bool
    ) -> Call[list[float | None]]:
        """New lease deadlines (epoch seconds) per ``(task_id, token)``, None = lease lost."""
        args: list[Any] = [*self.header(), "1" if strict else "0", self._lease_ms(lease_seconds)]
        args.append(len(items))
        for task_id, token in items:
            args += [task_id, token]
        n = len(items)

        def parse(reply: Any) -> list[float | None]:
            deadlines = int_list("heartbeat", reply)
            contract("heartbeat", len(deadlines) == n, reply)
            return [ms / 1000 if ms > 0 else _ENDS.get(ms) for ms in deadlines]

        return Call("heartbeat", args, parse)

    def finish(self, items: Sequence[FinishItem], *, strict: bool) -> Call[list[bool]]:
        args: list[Any] = [*self.header(), "1" if strict else "0", len(items)]
        for item in items:
            task_id, token, result = item[0], item[1], item[2]
            xcom = item[3] if len(item) > 3 else None
            # "0"/"1": no result/a result; "2"/"3" the same, not kept (ADR 78)
            forget = len(item) > 4 and item[4] is False
            args += [
                task_id,
                token,
                ("2" if result is None else "3") if forget else ("0" if result is None else "1"),
                b"" if result is None else result,
                len(xcom or {}),
            ]
            for key, value in (xcom or {}).items():
                args += [key, value]
        n = len(items)

        def parse(reply: Any) -> list[bool]:
            flags = int_list("finish", reply)
            contract("finish", len(flags) == n, reply)
            return [f == 1 for f in flags]

        return Call("finish", args, parse)

    def finish_claim(
        self, items: Sequence[FinishItem], claim: Call[list[Claimed]]
    ) -> Call[tuple[list[bool], list[Claimed]]]:
        """finish_claim.lua (ADR 40): ``finish(items, strict=False)``, then ``claim`` (a call
        built by ``claim``: its arguments and tokens), in one script call. Its reply is read
        by the two calls' own parsers: per item finished or lease lost, then the claim's."""
        finish = self.finish(items, strict=False)
        head = len(self.header())  # ARGV[1..7]; finish's ARGV[8] (strict) is not sent
        args = [*finish.args[:head], *finish.args[head + 1 :], *claim.args[head:]]

        def parse(reply: Any) -> tuple[list[bool], list[Claimed]]:
            contract("finish_claim", isinstance(reply, list) and len(reply) == 2, reply)
            return finish.parse(reply[0]), claim.parse(reply[1])

        return Call("finish_claim", args, parse)

    def fail(
        self,
        task_id: str,
        token: str,
        retry_delay: float | None,
        failure_type: FailureType,
        reason: str,
        *,
        error: str = "",
    ) -> Call[TaskState]:
        if retry_delay is None:
            delay = ""
        else:
            if isinstance(retry_delay, bool) or not isinstance(retry_delay, (int, float)):
                raise TaskValidationError("retry_delay", retry_delay, "must be a number or None")
            if not math.isfinite(retry_delay):
                raise TaskValidationError("retry_delay", retry_delay, "must be finite")
            delay = str(to_ms(retry_delay))
        ftype = FailureType(failure_type).value
        args = [*self.header(), task_id, token, delay, ftype, str(reason), str(error)]

        def parse(reply: Any) -> TaskState:
            state = _STATES.get(to_text(reply)) if isinstance(reply, (bytes, str)) else None
            contract("fail", state is not None, reply)
            assert state is not None
            return state

        return Call("fail", args, parse)

    def release(self, task_id: str, token: str) -> Call[None]:
        return Call("release", [*self.header(), task_id, token], lambda _reply: None)

    def requeue_expired(self, limit: int) -> Call[int]:
        check_page_bound("limit", limit)
        return Call("requeue_expired", [*self.header(), limit], int_reply("requeue_expired"))
