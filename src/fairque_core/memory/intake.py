"""The intake in the in-memory model (ADR 47): a producer's append-only path, ingested later.

``push_intake`` checks the messages (only plain ones: ready now, no dependencies, no unique
key; ids, tenant and payload size as ``push`` checks them) and appends them to one FIFO;
nothing else happens then: no counter, no record, no tenant made active. Only the wake
signal is raised, when the intake was empty, so an idle worker comes to claim.

*Ingesting* takes entries from the head, in order, and does for each what ``push`` of that
message would do at that moment, with one clock reading for the whole ingest:

* a live task of another tenant has the id: set aside, counted ``rejected`` (ADR 60);
* a live task has the id: ``duplicates`` counted, nothing stored (checked first);
* stored (a new id, or one whose record is past its logical expiry): ``pushed`` counted,
  QUEUED, ready now with the next sequence number, its tenant made active;
* refused where ``push`` would have raised (its tenant at ``max_queued``, counted in
  ``refusals``; the model cannot meet a payload over its maximum at ingest, push_intake
  refused it): the message becomes a task record in
  state FAILED, in the dead-letter queue with failure type REJECTED and the reason, counted
  ``dead`` as a task failing into the DLQ is. ``requeue_dlq`` sends it back through the
  normal path. Nothing is dropped.

A claim ingests first (``claim`` in ``model.py`` calls :meth:`IntakeOps._ingest` before due
tasks move and parked tenants unpark), at most :data:`INTAKE_CLAIM_LIMIT` entries, paused
queue or not; ``ingest(limit)`` takes up to ``limit``. Nothing else ingests.
"""

from __future__ import annotations

from collections.abc import Sequence

from fairque_core.domain.enums import FailureType
from fairque_core.domain.intake import IngestReport, check_ingest_limit, check_intake_message
from fairque_core.domain.limits import TenantQueueFullError
from fairque_core.domain.models import Message
from fairque_core.domain.states import TaskEvent, next_state
from fairque_core.memory import limits
from fairque_core.memory.dlq import DLQOps
from fairque_core.memory.store import TaskRecord, locked

__all__ = ["REJECTED_PREFIX", "IntakeOps"]

#: How the reason of a message refused at ingest begins (the rest names the refusal).
REJECTED_PREFIX = "rejected at ingest: "


class IntakeOps(DLQOps):
    """push_intake, ingest and intake_size of the port's optional ``TakesIntake``."""

    def _push_one(self, message: Message, now: int) -> tuple[bool, str]:
        """``push`` of one checked message at ``now`` (written in ``model.py``)."""
        raise NotImplementedError

    @locked
    def push_intake(self, messages: Sequence[Message]) -> None:
        for message in messages:  # every message checked before anything is appended
            check_intake_message(message)
            self._check_message(message)
        if not messages:
            return
        was_empty = not self._intake
        self._intake.extend(messages)
        if was_empty:  # else a wake is out already, or a claim will pass it on
            self._wake.signal()

    @locked
    def ingest(self, limit: int = 1000) -> IngestReport:
        return self._ingest(self._now(), check_ingest_limit(limit))

    @locked
    def intake_size(self) -> int:
        return len(self._intake)

    def _ingest(self, now: int, limit: int) -> IngestReport:
        """Take up to ``limit`` entries from the intake's head into the queue at ``now``."""
        ingested = duplicates = rejected = 0
        for _ in range(min(limit, len(self._intake))):
            message = self._intake.popleft()
            # a live task's id is a duplicate whatever else (push counts it so), checked first;
            # one of another tenant's live task is set aside (ADR 60: Redis keeps the raw
            # entry in intake:bad; the model has no raw entries), counted as rejected
            live = self._live(message.task_id, now)
            if live is not None and live.message.tenant != message.tenant:
                rejected += 1
                continue
            reason = "" if live else self._refusal(message, now)
            if reason:
                self._reject(message, now, reason)
                rejected += 1
            elif self._push_one(message, now)[0]:
                ingested += 1
            else:
                duplicates += 1
        return IngestReport(
            ingested=ingested, duplicates=duplicates, rejected=rejected, left=len(self._intake)
        )

    def _refusal(self, message: Message, now: int) -> str:
        """Why ``push`` of ``message`` (a new id) would raise now (its reason text), or ``""``.
        Only ``max_queued``: ``push_intake`` refused an oversized payload already and the
        model's one config never changes (the Redis ingest also refuses against a worker's
        lower maximum, which the model cannot have)."""
        if self._limits.on:
            try:
                limits.check_push(self, [message], now)  # counts the refusal, as push does
            except TenantQueueFullError as exc:
                return f"{REJECTED_PREFIX}max_queued {exc.cap} reached"
        return ""

    def _reject(self, message: Message, now: int, reason: str) -> None:
        """Store ``message`` as a FAILED record in the DLQ (REJECTED, ``reason``), counted
        ``dead`` as a task that failed into the DLQ is. It takes a sequence number, as the
        push it stands for would have, so a requeue orders it as one."""
        self._seq += 1
        rec = TaskRecord(
            message=message, state=next_state(None, TaskEvent.INGEST_REJECTED), seq=self._seq
        )
        rec.failure_type = FailureType.REJECTED
        rec.reason = reason
        rec.moved_ms = now
        self._records[message.task_id] = rec
        self._dlq[message.task_id] = now
        self._bump("dead", self._tenant(message.tenant))
        self._tell("dead_lettered", rec, FailureType.REJECTED.value, reason)
        self._ended(rec, now)
