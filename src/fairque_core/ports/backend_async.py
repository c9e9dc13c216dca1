"""The backend port and its two optional capabilities, as protocols: what the engine needs
from a queue backend (:class:`AsyncQueueBackend`), the idle wait and claim in one round trip
(:class:`AsyncClaimsWhenReady`, ADR 38) and a finish with the next claim in one call
(:class:`AsyncFinishesAndClaims`, ADR 40). Import them from :mod:`fairque_core.ports`.
"""

# backend.py (QueueBackend, ClaimsWhenReady, FinishesAndClaims) is generated  # unasync: remove
# from this file by tools/gen_sync.py: edit here, then run it.  # unasync: remove

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from fairque_core.domain.enums import FailureType, TaskState
from fairque_core.domain.events import QueueEvent
from fairque_core.domain.intake import IngestReport
from fairque_core.domain.key_limits import KeyLimits, KeyLimitStatus
from fairque_core.domain.limits import LimitStatus
from fairque_core.domain.models import Claimed, DLQEntry, Message, QueueSizes
from fairque_core.domain.outcomes import TaskOutcome
from fairque_core.domain.task_records import StoredRecord, StoredSummary
from fairque_core.domain.tenant_figures import TenantFairness
from fairque_core.ports.values import FinishItem

__all__ = [
    "AsyncClaimsWhenReady",
    "AsyncFinishesAndClaims",
    "AsyncQueueBackend",
    "AsyncTakesIntake",
]


class AsyncQueueBackend(Protocol):
    """The backend port: what the engine needs from a queue's storage, method by method.

    The rules every method shares (times, fairness, order inside a tenant, leases) are in
    :mod:`fairque_core.ports`; :class:`fairque_core.memory.model.InMemoryBackend` is their
    executable form.

    A parameter holding one tenant id is named ``tenant``, several ``tenants`` (ADR 23). The
    engines pass tenant ids positionally, so they do not depend on a backend's own
    parameter names; backends should use these.
    """

    @property
    def queue(self) -> str:
        """The queue's name."""
        ...

    async def push(self, message: Message) -> bool:
        """Store ``message``; True if new, False if a task with this id already exists.

        A known id is a no-op (idempotent push). Ready now when ``delay <= 0`` (QUEUED), else
        SCHEDULED until its due time.
        """
        ...

    async def push_batch(self, messages: Sequence[Message]) -> list[bool]:
        """``push`` for many messages in one round trip, in order; one flag per message."""
        ...

    async def push_batch_detailed(self, messages: Sequence[Message]) -> list[tuple[bool, str]]:
        """``push_batch``, telling per message ``(stored, holder)``: ``holder`` is the id of
        the task that now stands for it: its own id when stored or when that id was known,
        else the id of the live task with the same ``unique_key`` (same tenant), or of one
        that ended less than its ``unique_window`` ago (earlier in the same batch included).
        A unique duplicate stores nothing and counts in ``duplicates``. A task holds its key
        from its push until it ends, then for its window (none: the key is free at once).
        """
        ...

    async def claim(
        self,
        *,
        worker_id: str = "",
        assigned: Sequence[str] | None = None,
        steal: Sequence[str] | None = None,
        count: int = 1,
        lease_seconds: float | None = None,
    ) -> list[Claimed]:
        """Lease up to ``count`` ready tasks, fairly, each choice made as a single claim would.

        First moves due scheduled tasks to their tenants (a bounded number per call). With
        neither ``assigned`` nor ``steal`` every tenant is a candidate; otherwise the
        ``assigned`` tenants first and the ``steal`` tenants only when no assigned one is
        active. Empty list when nothing is ready.
        """
        ...

    async def heartbeat(
        self, task_id: str, token: str, lease_seconds: float | None = None
    ) -> float:
        """Extend the lease to now + lease; returns the new deadline (epoch seconds)."""
        ...

    async def heartbeat_batch(
        self, items: Sequence[tuple[str, str]], lease_seconds: float | None = None
    ) -> list[float | None]:
        """``heartbeat`` for many ``(task_id, token)`` in one round trip.

        One entry per item: the new deadline (epoch seconds), or None when its lease was lost
        (that item is left unchanged; the others are still extended); ``LEASE_CANCELED``
        (``LEASE_TERMINATE`` for ``cancel(..., terminate=True)``) when the task was canceled
        while this lease held it (ADR 76; a backend that never says so reports None). Never
        raises LeaseLostError. An empty list makes no call.
        """
        ...

    async def finish(
        self,
        task_id: str,
        token: str,
        result: bytes | None = None,
        xcom: Mapping[str, bytes] | None = None,
        *,
        keep: bool = True,
    ) -> None:
        """Mark the task FINISHED, keep ``result`` for the result TTL, drop the lease.

        ``xcom`` (key -> encoded value) is stored in the same atomic step, for the result
        TTL, under the task's tenant (read back by :meth:`xcom_get`), so a dependent never
        sees a finished parent without its values. The result reads as the XCom key
        ``return_value``. Every waiter of :meth:`wait_done` is woken.

        Idempotent per lease: repeated with the token that finished the task (its reply was
        lost and the caller sends it again), it succeeds and changes nothing, the first
        result included. Any other token on a finished task is a LeaseLostError. ``fail`` is
        idempotent the same way while the task is still SCHEDULED or FAILED (ADR 19).

        ``keep=False`` (ADR 78): the record is deleted instead, unless something needs it:
        dependents, ``xcom`` values, a waiter armed (:meth:`wait_done`) before the finish, a
        unique key held for a window. A deleted record reads as unknown (``get_state`` and
        ``get_result`` None) and a repeat of the finish is a LeaseLostError (no token left
        to recognise it by).
        """
        ...

    async def finish_batch(self, items: Sequence[FinishItem]) -> list[bool]:
        """``finish`` for many ``(task_id, token, result[, xcom])`` in one round trip.

        One flag per item: True when finished, False when its lease was lost (that item is
        left unchanged; the others still finish). Never raises LeaseLostError.
        """
        ...

    async def fail(
        self,
        task_id: str,
        token: str,
        *,
        retry_delay: float | None,
        failure_type: FailureType = FailureType.FAILED,
        reason: str = "",
        error: str = "",
    ) -> TaskState:
        """Record a failed attempt.

        ``retry_delay`` not None: retry_count + 1, SCHEDULED after the delay. None: into the
        dead-letter queue with ``failure_type`` and ``reason`` (state FAILED), with ``error``
        (the failure record, ``outcomes.error_record``) kept with the task for
        :meth:`get_outcome`; waiters of :meth:`wait_done` are woken.
        """
        ...

    async def release(self, task_id: str, token: str) -> None:
        """Give a claimed, unstarted task back at once, in its old place; no attempt counted."""
        ...

    async def requeue_expired(self, limit: int = 100) -> int:
        """The reaper: expired leases (at most ``limit``) back to their tenant's queue.

        A task recovered more than ``max_recoveries`` times goes to the DLQ as EXPIRED.
        Returns how many leases were handled.
        """
        ...

    async def cancel(self, task_id: str, terminate: bool = False) -> bool:
        """Cancel a task that is not finished, failed or canceled; False otherwise. A started
        task's lease ends and its token stays on the record: the heartbeat of that lease then
        reports ``LEASE_CANCELED``, or ``LEASE_TERMINATE`` with ``terminate`` (ADR 76)."""
        ...

    async def get_message(self, task_id: str) -> Message | None: ...

    async def get_state(self, task_id: str) -> TaskState | None: ...

    async def get_result(self, task_id: str) -> bytes | None: ...

    async def get_outcome(self, task_id: str) -> TaskOutcome | None:
        """State, result, reason, failure type and failure record in one read; None for an
        unknown or expired task."""
        ...

    async def get_record(self, task_id: str) -> StoredRecord | None:
        """The task's story (ADR 70): message (a finished task's payload, or its preview and
        size), state, start and end times, its kept attempts (worker, times, outcome, failure
        record), result, failure and reason; None for an unknown or expired task."""
        ...

    async def list_tasks(
        self,
        *,
        state: TaskState | None = None,
        tenant: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> tuple[list[StoredSummary], str | None]:
        """A page of the tasks that ended (``state`` finished, failed or canceled; None: all
        three), of ``tenant`` or all, newest first by the time they ended (ties: the higher
        id first), from after ``cursor`` (None: the newest); and the cursor of the next page
        (None: this one is the last). Cost bounded by the page, not by the queue (ADR 70)."""
        ...

    async def wait_done(self, task_id: str, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds (> 0) for the notification that the task ended
        (finished, failed for good, canceled): True when it came (or had come within the
        result TTL), False on timeout. Every waiter is woken, not only one. A hint: read
        :meth:`get_outcome` after it."""
        ...

    async def xcom_get(self, tenant: str, items: Sequence[tuple[str, str]]) -> list[bytes | None]:
        """The XCom values ``(task_id, key)`` of tasks of ``tenant``, encoded, in order; None
        for a value that is absent, expired, or belongs to a task of another tenant (which
        reads exactly as absent). Key ``return_value`` is the finished task's result."""
        ...

    async def queue_sizes(self, tenants: Sequence[str]) -> dict[str, QueueSizes]:
        """Each of ``tenants``' depths (ready critical and normal, scheduled, leased), keyed
        by tenant id; all zeros for a tenant the queue has never seen. Every id is checked
        before any I/O (TaskValidationError)."""
        ...

    async def stats(self) -> dict[str, int]:
        """Queue counters (see ``scoring.STAT_COUNTERS``) and gauges (``ready``,
        ``scheduled``, ``leased``, ``dlq``, ``active_tenants``, ``paused``, and ``intake``:
        entries waiting in the intake, ADR 47), all keys present."""
        ...

    async def tenant_stats(self, tenant: str) -> dict[str, int]:
        """``tenant``'s counters (``scoring.STAT_COUNTERS``, ``limits.LIMIT_COUNTERS``) and
        its ``ready``, ``scheduled`` and ``leased`` gauges, all keys present (zeros for a
        tenant never seen)."""
        ...

    async def list_tenants(self, *, limit: int = 100, offset: int = 0) -> tuple[list[str], int]:
        """A page of the tenants the queue has seen, and how many there are in all.

        A tenant is listed from its first stored message on (a push that counts in its
        ``pushed`` counter; a duplicate of a known task id does not) and stays listed after
        all its tasks are finished, canceled or dead. Order: the time of that first push,
        ties by tenant id (byte order): a tenant's place never changes when it pushes again.
        ``limit`` and ``offset`` are ints >= 0, ``limit`` at most
        :data:`~fairque_core.domain.validation.MAX_TENANT_PAGE` (1000), checked before any I/O
        (TaskValidationError).
        """
        ...

    async def set_tenant_weight(self, tenant: str, weight: float, *, tier: int = 0) -> None:
        """Store ``tenant``'s fair share ``weight`` (as a stride, ``scoring.stride_for``) and
        its ``tier`` (an int in [0, 1000]); a tenant need not have pushed yet. Bad values are
        typed errors (TaskValidationError) raised before any write."""
        ...

    async def list_dlq(
        self, *, limit: int = 100, offset: int = 0, failure_type: FailureType | None = None
    ) -> list[DLQEntry]: ...

    async def requeue_dlq(self, entry_ids: Sequence[str] | None = None) -> int: ...

    async def purge_dlq(self, entry_ids: Sequence[str] | None = None) -> int: ...

    async def purge_tenant(self, tenant: str) -> int:
        """Cancel every QUEUED and SCHEDULED task of ``tenant`` in one atomic step.

        Each is canceled as :meth:`cancel` cancels a task (state CANCELED, reason
        ``"purged"``, counted in ``canceled``, dependents that wait on it canceled), so the
        counters still add up. Leased tasks are left to finish, fail or expire; DEFERRED ones
        keep waiting unless a parent is purged. Returns how many tasks were purged (their
        canceled dependents not included). Other tenants' tasks are untouched.
        """
        ...

    async def purge_all(self) -> int:
        """:meth:`purge_tenant` for every tenant of the queue, in one atomic step."""
        ...

    async def set_limits(
        self,
        changes: Mapping[str, float | None],
        *,
        tenant: str | None = None,
        tier: int | None = None,
    ) -> None:
        """Flow control (ADR 28): apply ``changes`` (``max_running``, ``rate``, ``burst``,
        ``max_queued`` -> a value, or None to clear it) to ``tenant``'s own limits, ``tier``'s
        defaults, or (neither) the queue-wide limits. A tenant need not have pushed yet. A
        tenant's change applies at once; a tier's or the queue's at each tenant's next start
        or lease end. Typed errors (TaskValidationError) name a bad field."""
        ...

    async def limit_status(self, tenant: str) -> LimitStatus:
        """Where ``tenant`` stands against its limits (own and in force, running, queued,
        capped, next start time and tokens of its rate, cap hits, throttles, refusals)."""
        ...

    async def set_key_limits(
        self,
        key: str,
        *,
        max_running: int | None = None,
        rate: float | None = None,
        burst: int | None = None,
        per_tenant: bool = True,
    ) -> None:
        """Limits by key (ADR 79): set the cap and rate of the tasks whose ``limit_key`` is
        ``key`` (per tenant, or one for all tenants), replacing what the key had; every number
        None clears them. Every task parked under the key goes back to its queue. Typed
        errors (TaskValidationError) name a bad value."""
        ...

    async def key_limit_status(self, key: str) -> KeyLimitStatus:
        """``key``'s limits (None: none) and, per tenant ("" for a global key), its leases
        counted and its tasks parked."""
        ...

    async def list_key_limits(self) -> dict[str, KeyLimits]:
        """Every limit key that has limits, with them, in key order."""
        ...

    async def pause(self, tenant: str | None = None) -> None:
        """Hold ``tenant`` (or, None, the whole queue) out of claims from the next claim on:
        a paused tenant leaves its active set as a capped one does, a paused queue leases
        nothing. Pushes are still accepted and leased tasks run to their end. Idempotent."""
        ...

    async def resume(self, tenant: str | None = None) -> None:
        """Undo :meth:`pause`: a tenant with ready work enters its active set again like a
        newcomer (no credit for the paused time; unless a limit holds it); raises the wake
        signal. Idempotent."""
        ...

    async def is_paused(self, tenant: str | None = None) -> bool:
        """Whether ``tenant`` (its own flag, not the queue's) or the queue is paused."""
        ...

    async def tenant_weights(self, tenants: Sequence[str]) -> dict[str, tuple[float, int]]:
        """Each tenant's ``(weight, tier)`` as stored (the weight read back from its stride,
        ``scoring.weight_of``); ``(1.0, 0)`` for a tenant never given a weight."""
        ...

    async def tenant_fairness(
        self, tenants: Sequence[str] | None = None, *, limit: int = 100, offset: int = 0
    ) -> list[TenantFairness]:
        """Fairness figures (``domain.tenant_figures``) of ``tenants`` in order (at most
        1000; an empty list reads nothing), or, None, of the page ``offset``/``limit`` of
        :meth:`list_tenants`; one read-only step that adds nothing to a claim."""
        ...

    async def list_queues(self) -> list[str]:
        """The queue names known to this backend's server, sorted. A Redis backend registers
        its queue (one idempotent SADD to ``fq:queues``) before its first write; the memory
        model knows only its own queue."""
        ...

    async def register_worker(self, worker_id: str, record: str) -> None:
        """Store ``worker_id``'s heartbeat record (opaque text, JSON by
        :mod:`fairque_core.ports.workers`), replacing its previous one."""
        ...

    async def list_workers(self) -> dict[str, str]:
        """Every stored heartbeat record of the queue: worker id -> record."""
        ...

    async def remove_workers(self, worker_ids: Sequence[str]) -> int:
        """Drop these workers' records; how many existed."""
        ...

    async def read_events(
        self, after: str, *, count: int = 100, timeout: float = 0.0
    ) -> list[QueueEvent]:
        """Up to ``count`` events of the queue's log (ADR 71, :mod:`fairque_core.domain.events`)
        written after the position ``after`` (an event's id, or ``0``: from the oldest kept),
        oldest first. When there is none yet, wait up to ``timeout`` seconds for one (0: do
        not wait) and return what came, possibly nothing. An event is in the log from the
        same atomic step as its change; the log keeps about ``events_maxlen`` events (per
        partition), so a reader further behind than that misses the oldest."""
        ...

    async def set_progress(self, tenant: str, task_id: str, token: str, body: bytes) -> bool:
        """Keep ``body`` (JSON, bounded by the engine) as the progress of ``tenant``'s running
        task ``task_id`` and log a ``progress`` event, in one step; False (nothing changed)
        unless ``token`` is its live lease."""
        ...

    async def events_end(self) -> str:
        """The position after the log's last event: reading after it gives only the events
        written from now on (``0-0`` when the log is empty; a cursor for a partitioned
        queue)."""
        ...

    async def wait_for_work(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the queue's wake signal and consume it.

        The signal is one pending token per queue, raised by every call that makes a task
        ready (push, release, the reaper, a retry coming due on claim, a dependency finishing,
        a DLQ requeue) and by a claim that leaves ready tasks behind, so that idle workers wake
        one after another. True when a token was taken. It is a hint, never a promise: the
        caller must still claim, and the claim may find nothing (another worker was faster).
        ``timeout`` 0 takes a pending token without waiting. An idle worker calls this instead
        of sleeping, so a push reaches it within a round trip instead of a poll interval.

        Scheduled tasks (a delay, a retry's backoff) become ready only when a claim moves them,
        so the wait also ends, with True and no token taken, once the first scheduled task is
        due by the backend's clock; a task scheduled earlier than that while the caller waits
        shortens the wait (the schedule signal). A delayed task thus starts about when it is
        due, not up to a poll interval later.
        """
        ...

    async def close(self) -> None: ...


class AsyncClaimsWhenReady(Protocol):
    """An optional capability of a backend (ADR 38): :meth:`AsyncQueueBackend.wait_for_work` and
    :meth:`AsyncQueueBackend.claim` in one round trip. The engine checks for the method and, on a
    backend without it, waits and then claims (two calls, the same result)."""

    async def claim_when_ready(
        self,
        timeout: float,
        *,
        worker_id: str = "",
        assigned: Sequence[str] | None = None,
        steal: Sequence[str] | None = None,
        count: int = 1,
        lease_seconds: float | None = None,
    ) -> list[Claimed]:
        """Wait as ``wait_for_work(timeout)`` does, then claim as ``claim`` does, the claim made
        when the wait ends, whether a wake token (or a due task) ended it or the timeout did.
        A claim that finds nothing after a wake (another worker was faster) or a schedule
        signal waits again for the time left. The claimed tasks (leased, exactly as by
        ``claim``), empty when the time ran out with nothing ready. Bad arguments raise
        ``TaskValidationError`` before any I/O, as ``claim`` and ``wait_for_work`` do."""
        ...


class AsyncFinishesAndClaims(Protocol):
    """An optional capability of a backend (ADR 40): :meth:`AsyncQueueBackend.finish_batch` and then
    :meth:`AsyncQueueBackend.claim` in one call, atomically, in that order. The engine checks for
    the method and, on a backend without it, finishes and then claims (two calls)."""

    async def finish_and_claim(
        self,
        items: Sequence[FinishItem],
        *,
        worker_id: str = "",
        assigned: Sequence[str] | None = None,
        steal: Sequence[str] | None = None,
        count: int = 1,
        lease_seconds: float | None = None,
    ) -> tuple[list[bool], list[Claimed]]:
        """Finish ``items`` as ``finish_batch(items)`` does (a lost lease is False for its item
        and changes nothing), then claim as ``claim`` does, the claim seeing what the finish
        freed (a tenant's ``max_running``, the queue's, dependents made ready). Returns the
        finish flags and the claimed tasks. Bad arguments raise ``TaskValidationError``
        before any I/O, as ``claim`` does; an error fails both parts (neither took effect,
        or, for ``OutcomeUnknownError``, it is not known whether both did)."""
        ...


class AsyncTakesIntake(Protocol):
    """An optional capability of a backend (ADR 47): the intake, a producer's append-only path.

    ``push_intake`` stores messages durably in one cheap write, with none of ``push``'s checks
    or placement; the backend checks, numbers and places them later, in intake order, when
    it *ingests*: at the start of every ``claim``, ``claim_when_ready`` and
    ``finish_and_claim`` (at most :data:`~fairque_core.domain.intake.INTAKE_CLAIM_LIMIT`
    entries per call) and on ``ingest``. Until then a message is in no tenant's queue: ``get``
    does not know it, ``cancel`` cannot reach it, sizes and fairness do not count it. Ingesting
    an entry is ``push`` of it at that moment (its ready time and sequence number are the
    ingest's), except that a refusal does not raise: see :class:`IngestReport`. The engine
    checks for the methods; on a backend without them ``push_intake`` is ``push_batch`` (the
    checks answered at once)."""

    async def push_intake(self, messages: Sequence[Message]) -> None:
        """Append ``messages`` to the intake, in order, in one round trip (grouped per
        partition on a partitioned queue). Only plain messages
        (:func:`~fairque_core.domain.intake.check_intake_message`): anything else raises
        ``TaskValidationError`` before any I/O, as does a bad id or an oversized payload. An
        empty sequence is a no-op. Wakes an idle worker when the intake was empty."""
        ...

    async def ingest(self, limit: int = 1000) -> IngestReport:
        """Move up to ``limit`` (>= 1) entries from the head of the intake into the queue, as
        the start of a claim does, and tell what became of them."""
        ...

    async def intake_size(self) -> int:
        """Entries waiting in the intake (all partitions)."""
        ...
