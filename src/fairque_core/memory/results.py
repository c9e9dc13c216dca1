"""Results in the in-memory model: one read of a task's outcome, waiting for a task to end,
and reading XCom values (ADR 27).

A task's end (finish, a final failure, a cancel) notifies the store's condition
(``ModelStore._ended``), which is what :meth:`ResultOps.wait_done` sleeps on: no polling.
XCom values are kept on the finished record for the result TTL; a read names the reader's
tenant, and a value of another tenant's task reads as absent.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from fairque_core.domain.outcomes import ENDED_STATES, RETURN_VALUE, TaskOutcome
from fairque_core.domain.validation import check_wait_timeout, check_xcom_key, validate_id
from fairque_core.memory.store import ModelStore, TaskRecord, locked

__all__ = ["ResultOps"]


class ResultOps(ModelStore):
    """get_outcome, wait_done and xcom_get of the port."""

    @locked
    def get_outcome(self, task_id: str) -> TaskOutcome | None:
        validate_id(task_id, "task_id")
        rec = self._live(task_id, self._now())
        if rec is None:
            return None
        return TaskOutcome.observed(
            rec.state,
            result=rec.result,
            reason=rec.reason,
            failure_type=rec.failure_type.value if rec.failure_type is not None else "",
            error=rec.error,
            tenant=rec.message.tenant,
        )

    def wait_done(self, task_id: str, timeout: float) -> bool:
        """Sleep on the store's condition until the task ended or ``timeout`` passed (real
        time, whatever the model's clock)."""
        validate_id(task_id, "task_id")
        deadline = time.monotonic() + check_wait_timeout(timeout)
        with self._done:
            while True:
                rec = self._live(task_id, self._now())
                if rec is not None and rec.state in ENDED_STATES:
                    return True
                if rec is not None:
                    rec.waited = True  # armed: a finish keeps its record (ADR 78)
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._done.wait(left)

    @locked
    def xcom_get(self, tenant: str, items: Sequence[tuple[str, str]]) -> list[bytes | None]:
        validate_id(tenant, "tenant")
        now = self._now()
        out: list[bytes | None] = []
        for task_id, key in items:
            validate_id(task_id, "task_id")
            check_xcom_key(key)
            rec = self._live(task_id, now)
            out.append(None if rec is None else _value(rec, tenant, key))
        return out


def _value(rec: TaskRecord, tenant: str, key: str) -> bytes | None:
    if rec.message.tenant != tenant:
        return None  # another tenant's task reads exactly as an absent one
    if key == RETURN_VALUE:
        return rec.result
    return rec.xcom.get(key)
