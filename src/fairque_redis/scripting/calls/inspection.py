"""Read-only calls: one task's record, state and result, queue sizes, queue statistics and the
time until the next scheduled task is due (the wait for work). No I/O."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fairque_core.domain.enums import TaskState
from fairque_core.domain.limits import LIMIT_COUNTERS
from fairque_core.domain.models import Message, QueueSizes
from fairque_core.domain.outcomes import TaskOutcome
from fairque_core.domain.scoring import STAT_COUNTERS
from fairque_core.domain.validation import check_xcom_key, validate_id
from fairque_redis.scripting.calls.base import (
    Call,
    CallsBase,
    contract,
    int_list,
    pairs,
    to_bytes,
    to_text,
)
from fairque_redis.scripting.calls.records import read_message

__all__ = ["InspectionCalls"]

_QUEUE_GAUGES = ("ready", "scheduled", "leased", "dlq", "active_tenants", "paused", "intake")
_STATES = {state.value: state for state in TaskState}


class InspectionCalls(CallsBase):
    """get (message, state, result), queue_sizes, stats, next_due."""

    def get(self, task_id: str) -> Call[list[Any] | None]:
        validate_id(task_id, "task_id")

        def parse(reply: Any) -> list[Any] | None:
            contract("get", isinstance(reply, list) and len(reply) in (0, 11), reply)
            return reply or None

        return Call("get", [*self.header(), task_id], parse, writes=False)

    def watch(self, task_id: str) -> Call[bool | None]:
        """Arm the task's end notification (watch.lua): True when it has ended already (no
        wait needed), False when armed (an end from now on leaves the token in ``done:<id>``),
        None when there is no such task."""
        validate_id(task_id, "task_id")

        def parse(reply: Any) -> bool | None:
            contract("watch", reply in (1, 0, -1), reply)
            return None if reply == -1 else reply == 1

        # writes=False: arming twice is harmless, so a lost reply is no unknown outcome
        return Call("watch", [*self.header(), task_id], parse, writes=False)

    def get_message(self, task_id: str) -> Call[Message | None]:
        inner = self.get(task_id)

        def parse(reply: Any) -> Message | None:
            fields = inner.parse(reply)
            if fields is None or to_text(fields[0]) == TaskState.FINISHED.value:
                return None  # a finished task keeps its result, not its payload
            return read_message([task_id, *fields[1:6]])

        return Call(inner.script, inner.args, parse, writes=False)

    def get_state(self, task_id: str) -> Call[TaskState | None]:
        inner = self.get(task_id)

        def parse(reply: Any) -> TaskState | None:
            fields = inner.parse(reply)
            if fields is None:
                return None
            state = _STATES.get(to_text(fields[0]))
            contract("get", state is not None, reply)
            return state

        return Call(inner.script, inner.args, parse, writes=False)

    def get_result(self, task_id: str) -> Call[bytes | None]:
        inner = self.get(task_id)

        def parse(reply: Any) -> bytes | None:
            fields = inner.parse(reply)
            if fields is None or int(fields[6]) == 0:
                return None
            return to_bytes(fields[7])

        return Call(inner.script, inner.args, parse, writes=False)

    def get_outcome(self, task_id: str) -> Call[TaskOutcome | None]:
        inner = self.get(task_id)

        def parse(reply: Any) -> TaskOutcome | None:
            fields = inner.parse(reply)
            if fields is None:
                return None
            state = _STATES.get(to_text(fields[0]))
            contract("get", state is not None, reply)
            assert state is not None
            return TaskOutcome(
                state=state,
                result=to_bytes(fields[7]) if int(fields[6]) == 1 else None,
                reason=to_text(fields[8]),
                failure_type=to_text(fields[9]),
                error=to_text(fields[10]),
                tenant=to_text(fields[1]),
            )

        return Call(inner.script, inner.args, parse, writes=False)

    def xcom_get(self, tenant: str, items: Sequence[tuple[str, str]]) -> Call[list[bytes | None]]:
        validate_id(tenant, "tenant")
        args: list[Any] = [*self.header(), tenant, len(items)]
        for task_id, key in items:
            validate_id(task_id, "task_id")
            args += [task_id, check_xcom_key(key)]
        n = len(items)

        def parse(reply: Any) -> list[bytes | None]:
            contract("xcom_get", isinstance(reply, list) and len(reply) == n, reply)
            return [None if value is None else to_bytes(value) for value in reply]

        return Call("xcom_get", args, parse, writes=False)

    def queue_sizes(self, tenants: Sequence[str]) -> Call[dict[str, QueueSizes]]:
        ids = list(tenants)
        for tenant in ids:
            validate_id(tenant, "tenants")

        def parse(reply: Any) -> dict[str, QueueSizes]:
            values = int_list("sizes", reply)
            contract("sizes", len(values) == 4 * len(ids), reply)
            out: dict[str, QueueSizes] = {}
            for k, tenant in enumerate(ids):
                c, n, s, le = values[4 * k : 4 * k + 4]
                out[tenant] = QueueSizes(critical=c, normal=n, scheduled=s, leased=le)
            return out

        return Call("sizes", [*self.header(), len(ids), *ids], parse, writes=False)

    def stats(self) -> Call[dict[str, int]]:
        def parse(reply: Any) -> dict[str, int]:
            got = pairs("stats", reply)
            out = {name: got.get(name, 0) for name in (*STAT_COUNTERS, *LIMIT_COUNTERS)}
            for name in _QUEUE_GAUGES:
                out[name] = got.get(name, 0)
            return out

        return Call("stats", [*self.header(), ""], parse, writes=False)

    def next_due(self) -> Call[float | None]:
        """Seconds until the first scheduled task is due (0 = due now), None if none is."""

        def parse(reply: Any) -> float | None:
            contract("next_due", isinstance(reply, int) and reply >= -1, reply)
            return None if reply == -1 else reply / 1000

        return Call("next_due", self.header(), parse, writes=False)
