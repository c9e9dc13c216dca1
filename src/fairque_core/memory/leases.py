"""Leases in the in-memory model: heartbeat, finish, fail, release and the reaper.

A claim (``model.py``) gives a task a lease: a random token, the worker's id and a deadline.
Every method here needs the live token (else ``LeaseLostError``, nothing changed), except the
reaper (``requeue_expired``), which takes back leases whose deadline passed: the task goes to
the head of its tenant's queue, or to the DLQ (``dlq.py``) once it expired more than
``max_recoveries`` times. A claim that never started gives its tenant its turn back
(``FairState.refund``, ADR 4): a release (the worker gives back a task it did not run), or an
expired lease that no heartbeat ever extended (its deadline is still the one the claim gave).
``finish`` and ``fail`` are idempotent per lease token (ADR 19): a repeat after a lost reply is
recognised by the token kept on the record and changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs

from fairque_core.domain.enums import FailureType, TaskState
from fairque_core.domain.errors import LeaseLostError
from fairque_core.domain.outcomes import LEASE_CANCELED, LEASE_TERMINATE
from fairque_core.domain.scoring import lease_ms, to_ms
from fairque_core.domain.states import TaskEvent
from fairque_core.domain.task_records import BODY_KEPT_BYTES, PREVIEW_BYTES
from fairque_core.domain.validation import check_page_bound
from fairque_core.memory.dlq import DLQOps
from fairque_core.memory.store import locked
from fairque_core.ports import FinishItem

__all__ = ["LeaseOps"]


class LeaseOps(DLQOps):
    """The lease methods of the port (a failed lease can end in the DLQ, hence the base)."""

    @locked
    def heartbeat(self, task_id: str, token: str, lease_seconds: float | None = None) -> float:
        now = self._now()
        rec = self._leased(task_id, token, now)
        lease = lease_ms(self._config.lease_seconds if lease_seconds is None else lease_seconds)
        rec.deadline_ms = now + lease
        self._leases[task_id] = rec.deadline_ms
        return rec.deadline_ms / 1000

    @locked
    def heartbeat_batch(
        self, items: Sequence[tuple[str, str]], lease_seconds: float | None = None
    ) -> list[float | None]:
        deadlines: list[float | None] = []
        for task_id, token in items:
            try:
                deadlines.append(self.heartbeat(task_id, token, lease_seconds))
            except LeaseLostError:
                deadlines.append(self._lease_end(task_id, token))
        return deadlines

    def _lease_end(self, task_id: str, token: str) -> float | None:
        """A lost lease's heartbeat entry: ``LEASE_CANCELED`` (or ``LEASE_TERMINATE``) when
        its task was canceled while this lease held it (ADR 76), else None."""
        rec = self._live(task_id, self._now())
        if rec is None or rec.state is not TaskState.CANCELED or not token or rec.token != token:
            return None
        return LEASE_TERMINATE if rec.terminate else LEASE_CANCELED

    @locked
    def finish(
        self,
        task_id: str,
        token: str,
        result: bytes | None = None,
        xcom: Mapping[str, bytes] | None = None,
        *,
        keep: bool = True,
    ) -> None:
        now = self._now()
        done = self._live(task_id, now)
        if done is not None and done.state is TaskState.FINISHED and token and done.token == token:
            return  # a repeat of this lease's finish (its reply was lost): done, nothing changes
        rec = self._leased(task_id, token, now)
        self._attempt_ended(rec, "finished", now)
        self._drop_lease(task_id, rec)
        rec.token = token  # kept, so that a repeat of this finish is recognised
        self._tell("completed", rec)
        self._move(rec, TaskEvent.FINISH)
        rec.result = result
        rec.xcom = dict(xcom or {})  # the same step as the finish (XCom, ADR 27)
        self._bump("finished", self._tenant(rec.message.tenant))
        self._bump("result_bytes", self._tenant(rec.message.tenant), len(result or b""))
        body = rec.message.body  # a long payload goes (issue 16): its size and a preview stay
        if len(body) > BODY_KEPT_BYTES:
            rec.body_size = len(body)
            rec.message = attrs.evolve(rec.message, body=body[:PREVIEW_BYTES])
        self._close_record(rec, now)
        self._release_dependents(rec, task_id, now)
        if not keep:
            self._forget_finished(task_id, rec)

    @locked
    def finish_batch(self, items: Sequence[FinishItem]) -> list[bool]:
        done: list[bool] = []
        for item in items:
            try:
                xcom = item[3] if len(item) > 3 else None
                keep = len(item) <= 4 or item[4] is not False
                self.finish(item[0], item[1], item[2], xcom, keep=keep)
            except LeaseLostError:
                done.append(False)
            else:
                done.append(True)
        return done

    @locked
    def fail(
        self,
        task_id: str,
        token: str,
        *,
        retry_delay: float | None,
        failure_type: FailureType = FailureType.FAILED,
        reason: str = "",
        error: str = "",
    ) -> TaskState:
        now = self._now()
        done = self._live(task_id, now)
        if (
            done is not None
            and done.state in (TaskState.SCHEDULED, TaskState.FAILED)
            and token
            and done.token == token
        ):
            return done.state  # a repeat of this lease's fail (its reply was lost): no change
        rec = self._leased(task_id, token, now)
        self._attempt_ended(rec, "retried" if retry_delay is not None else "failed", now, error)
        self._drop_lease(task_id, rec)
        rec.token = token  # kept until the next claim, so that a repeat is recognised
        tenant = self._tenant(rec.message.tenant)
        self._tell("failed", rec, failure_type.value, reason)
        if retry_delay is not None:
            rec.message = attrs.evolve(rec.message, retry_count=rec.message.retry_count + 1)
            rec.reason = reason
            self._bump("retried", tenant)
            self._tell("retried", rec, failure_type.value, reason)
            self._move(rec, TaskEvent.FAIL_RETRY)
            self._schedule(task_id, rec, now + max(0, to_ms(retry_delay)))
        else:
            rec.error = error
            self._to_dlq(
                task_id,
                rec,
                now,
                event=TaskEvent.FAIL_DEAD,
                failure_type=failure_type,
                reason=reason,
            )
        return rec.state

    @locked
    def release(self, task_id: str, token: str) -> None:
        now = self._now()
        rec = self._leased(task_id, token, now)
        self._drop_lease(task_id, rec)
        self._fair.refund(rec.message.tenant)  # released unstarted: the turn is given back
        self._bump("released", self._tenant(rec.message.tenant))
        self._move(rec, TaskEvent.RELEASE)
        self._make_ready(task_id, rec, rec.ready_ms, head=True)

    @locked
    def requeue_expired(self, limit: int = 100) -> int:
        check_page_bound("limit", limit)
        now = self._now()
        expired = sorted((ms, tid) for tid, ms in self._leases.items() if ms <= now)[:limit]
        for _deadline, task_id in expired:
            rec = self._records[task_id]
            if rec.deadline_ms == rec.claim_deadline_ms:
                self._fair.refund(rec.message.tenant)  # never heartbeated: never started
            self._attempt_ended(rec, "expired", now)
            self._drop_lease(task_id, rec)
            rec.recoveries += 1
            tenant = self._tenant(rec.message.tenant)
            if rec.recoveries > self._config.max_recoveries:
                reason = f"lease expired {rec.recoveries} times"
                self._to_dlq(
                    task_id,
                    rec,
                    now,
                    event=TaskEvent.LEASE_EXPIRED_DEAD,
                    failure_type=FailureType.EXPIRED,
                    reason=reason,
                )
            else:
                self._bump("recovered", tenant)
                self._tell(
                    "retried",
                    rec,
                    FailureType.EXPIRED.value,
                    f"lease expired {rec.recoveries} times",
                )
                self._move(rec, TaskEvent.LEASE_EXPIRED)
                self._make_ready(task_id, rec, rec.ready_ms, head=True)
        return len(expired)
