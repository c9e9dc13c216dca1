"""InMemoryBackend: the reference model of the whole queue.

This is the executable specification of :class:`fairque_core.ports.QueueBackend`. The Lua
scripts of the Redis adapter mirror it step for step (a differential property test runs both
on the same operations with one fake clock), and users can run their handlers against it in
unit tests. It is pure Python and deterministic for a given clock and token source.

It is safe to share between threads: every public method runs under one re-entrant lock (a
call is atomic, as a script call is on Redis); ``wait_for_work`` waits without holding it.

This file holds push, claim, cancel and the reads. The rest of the model, by concept:
``leases.py`` (heartbeat, finish, fail, release, the reaper), ``dlq.py`` (the dead-letter
queue), ``intake.py`` (the intake, ADR 47, ingested at the start of a claim), ``store.py``
(records, tenants' ready work, state moves), ``wake.py`` (the wake signal), and the fair
choice of a tenant in :mod:`fairque_core.domain.fairness`.
"""

from __future__ import annotations

from collections.abc import Sequence

from fairque_core.domain.enums import TaskState
from fairque_core.domain.errors import TaskIdConflictError, TaskNotFoundError, TaskValidationError
from fairque_core.domain.intake import INTAKE_CLAIM_LIMIT
from fairque_core.domain.limits import LIMIT_COUNTERS
from fairque_core.domain.models import STALE_CLAIM_LIMIT, Claimed, Lease, Message, QueueSizes
from fairque_core.domain.scoring import STAT_COUNTERS, lease_ms, stride_for, to_ms
from fairque_core.domain.states import TaskEvent, next_state
from fairque_core.domain.validation import (
    check_tenant_page,
    check_wait_timeout,
    validate_id,
)
from fairque_core.memory import key_limits, limits
from fairque_core.memory.browse import BrowseOps
from fairque_core.memory.event_ops import EventOps
from fairque_core.memory.figures import FigureOps
from fairque_core.memory.intake import IntakeOps
from fairque_core.memory.leases import LeaseOps
from fairque_core.memory.limit_ops import LimitOps
from fairque_core.memory.pause import PauseOps
from fairque_core.memory.purge import OperatorOps
from fairque_core.memory.results import ResultOps
from fairque_core.memory.schedules import ScheduleOps
from fairque_core.memory.store import TaskRecord, UniqueHold, locked

__all__ = ["InMemoryBackend"]

_ALIVE = (TaskState.SCHEDULED, TaskState.DEFERRED, TaskState.QUEUED, TaskState.STARTED)


class InMemoryBackend(
    IntakeOps,
    LeaseOps,
    ScheduleOps,
    OperatorOps,
    ResultOps,
    FigureOps,
    LimitOps,
    PauseOps,
    BrowseOps,
    EventOps,
):
    """The reference backend. ``clock`` returns epoch seconds (default ``time.time``);
    ``token_source`` makes lease tokens (default :func:`fairque_core.ports.random_token`)."""

    # ------------------------------------------------------------------ push
    @locked
    def push(self, message: Message) -> bool:
        return self.push_batch([message])[0]

    @locked
    def push_batch(self, messages: Sequence[Message]) -> list[bool]:
        return [stored for stored, _holder in self.push_batch_detailed(messages)]

    @locked
    def push_batch_detailed(self, messages: Sequence[Message]) -> list[tuple[bool, str]]:
        for message in messages:
            self._check_message(message)
        now = self._now()
        # Dependencies must name a known task of the same tenant or one of it earlier in the
        # batch (another tenant's task reads exactly as an unknown one, ADR 63): check all
        # first, so a bad batch changes nothing (the Lua script does the same).
        owners: dict[str, str] = {}  # id -> the tenant of its first message in this batch
        for message in messages:
            for dep in message.depends_on:
                owner = owners.get(dep)
                if owner is None:
                    parent = self._live(dep, now)
                    owner = parent.message.tenant if parent is not None else None
                if owner != message.tenant:
                    raise TaskValidationError("depends_on", dep, "names no known task")
            self._check_owner(message, owners, now)
        if self._limits.on:
            limits.check_push(self, messages, now)  # max_queued: the whole batch or nothing
        return [self._push_one(message, now) for message in messages]

    def _check_owner(self, message: Message, owners: dict[str, str], now: int) -> None:
        """TaskIdConflictError when ``message``'s id is held by a live task of another tenant,
        or by an earlier message of the batch for another tenant (ADR 60)."""
        owner = owners.get(message.task_id)
        if owner is None:
            live = self._live(message.task_id, now)
            owner = live.message.tenant if live is not None else message.tenant
        if owner != message.tenant:
            raise TaskIdConflictError(message.task_id)
        owners[message.task_id] = owner

    def _push_one(self, message: Message, now: int) -> tuple[bool, str]:
        tenant = self._tenant(message.tenant)
        if self._live(message.task_id, now) is not None:
            self._bump("duplicates", tenant)
            return False, message.task_id
        if message.unique_key:
            slot = (message.tenant, message.unique_key)
            hold = self._unique.get(slot)
            if hold is not None and (hold.until_ms is None or hold.until_ms > now):
                self._bump("duplicates", tenant)
                return False, hold.task_id
            self._unique[slot] = UniqueHold(message.task_id)
        self._seq += 1
        due_ms = now + max(0, to_ms(message.delay))
        waiting: set[str] = set()
        failed_parent = ""
        for dep in message.depends_on:
            parent = self._live(dep, now)
            if parent is None:
                continue
            if parent.state in (TaskState.FAILED, TaskState.CANCELED):
                failed_parent = dep
            elif parent.state is not TaskState.FINISHED:
                waiting.add(dep)
                parent.dependents.append(message.task_id)
        if failed_parent or waiting:
            entry = TaskEvent.PUSH_WAITING
        elif due_ms > now:
            entry = TaskEvent.PUSH_DELAYED
        else:
            entry = TaskEvent.PUSH_READY
        rec = TaskRecord(
            message=message,
            state=next_state(None, entry),
            seq=self._seq,
            due_ms=due_ms,
            waiting=waiting,
        )
        self._records[message.task_id] = rec
        self._bump("pushed", tenant)
        self._first_push.setdefault(message.tenant, now)
        if failed_parent:  # waiting, then canceled in the same step
            self._move(rec, TaskEvent.DEPENDENCY_FAILED)
            rec.reason = f"dependency {failed_parent} did not finish"
            self._bump("canceled", tenant)
            self._tell("canceled", rec, "", rec.reason)
            self._close_record(rec, now)
        elif entry is TaskEvent.PUSH_DELAYED:
            self._schedule(message.task_id, rec, due_ms)
        elif entry is TaskEvent.PUSH_READY:
            self._make_ready(message.task_id, rec, now)
        return True, message.task_id

    # ------------------------------------------------------------------ claim
    def _move_due(self, now: int) -> None:
        due = sorted((ms, tid) for tid, ms in self._delayed.items() if ms <= now)
        for due_ms, task_id in due[: self._config.delayed_move_limit]:
            del self._delayed[task_id]
            rec = self._records[task_id]
            self._tenant(rec.message.tenant).scheduled -= 1
            if self._stale(task_id, rec, now):  # past its expiry: never ready (ADR 77)
                continue
            self._move(rec, TaskEvent.DUE)
            self._make_ready(task_id, rec, due_ms)
        if due:
            self._recompute_next_due()

    @locked
    def claim(
        self,
        *,
        worker_id: str = "",
        assigned: Sequence[str] | None = None,
        steal: Sequence[str] | None = None,
        count: int = 1,
        lease_seconds: float | None = None,
    ) -> list[Claimed]:
        for candidate in (*(assigned or ()), *(steal or ())):
            validate_id(candidate, "tenant")
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise TaskValidationError("count", count, "must be >= 1")
        span_ms = lease_ms(self._config.lease_seconds if lease_seconds is None else lease_seconds)
        groups: list[Sequence[str] | None]
        groups = [None] if not assigned and not steal else [assigned or (), steal or ()]
        pinned = groups != [None]
        now = self._now()
        ingested = 0
        if self._intake:  # the intake first, whatever count and a pause say (ADR 47)
            ingested = self._ingest(now, INTAKE_CLAIM_LIMIT).ingested
        self._move_due(now)
        if self._limits.on or self._keylim.limits:
            limits.unpark_due(self, now)
        claimed: list[Claimed] = []
        started: list[str] = []  # the key scopes of the tasks leased (ADR 79), each once
        stale: list[str] = []  # tenants of the tasks found past their expiry (ADR 77)
        popped, cap = 0, count + STALE_CLAIM_LIMIT  # at most `cap` pops (ADR 77)
        while len(claimed) < (0 if self._queue_paused else count) and popped < cap:
            if self._limits.on and not limits.queue_may_start(self, now):
                break  # the queue-wide max_running or rate
            tenant_id = self._fair.pick(groups)
            if tenant_id is None:
                break
            tenant = self._tenants[tenant_id]
            task_id = tenant.pop_ready()
            popped += 1
            self._fair.serve(tenant_id, still_ready=tenant.has_ready(), pinned=pinned)
            rec = self._records[task_id]
            if self._stale(task_id, rec, now):  # dead-lettered instead, its turn given back
                stale.append(tenant_id)
                continue
            if self._keylim.limits and rec.message.limit_key:
                if not key_limits.admit(self, task_id, rec, now):
                    stale.append(tenant_id)  # parked by its key: its turn given back
                    continue
                if rec.key_scope and rec.key_scope not in started:
                    started.append(rec.key_scope)
            self._move(rec, TaskEvent.CLAIM)
            rec.token = self._tokens()
            rec.worker_id = worker_id
            rec.deadline_ms = rec.claim_deadline_ms = now + span_ms
            rec.started_ms = now
            self._leases[task_id] = rec.deadline_ms
            tenant.leased += 1
            self._bump("claimed", tenant)
            if self._limits.on:
                limits.after_start(self, tenant_id, now)  # rate charged, cap checked
                limits.queue_started(self, now)
            lease = Lease(token=rec.token, deadline=rec.deadline_ms / 1000, worker_id=worker_id)
            claimed.append(Claimed(message=rec.message, lease=lease, recoveries=rec.recoveries))
        for tenant_id in stale:  # once the picks are done, as the Lua claim does
            self._fair.refund(tenant_id)
        for scope in started:  # a scope with room left puts one parked task back
            key_limits.settle(self, scope, now)
        if ((claimed or ingested or stale) and self._fair.has_active()) or self._intake:
            # ready work left behind by a claim that leased, ingested or dead-lettered stale
            # tasks, or entries left in the intake (even with nothing leased): pass the
            # signal on to the next worker
            self._wake.signal()
        return claimed

    # ------------------------------------------------------------------ cancel
    @locked
    def cancel(self, task_id: str, terminate: bool = False) -> bool:
        validate_id(task_id, "task_id")
        now = self._now()
        rec = self._live(task_id, now)
        if rec is None or rec.state not in _ALIVE:
            return False
        tenant = self._tenant(rec.message.tenant)
        if rec.state is TaskState.QUEUED:
            self._remove_ready(task_id, rec)
        elif rec.state is TaskState.SCHEDULED:
            del self._delayed[task_id]
            tenant.scheduled -= 1
            self._recompute_next_due()
        elif rec.state is TaskState.STARTED:
            self._attempt_ended(rec, "canceled", now)
            token = rec.token
            self._drop_lease(task_id, rec)
            # the token stays: that lease's heartbeat reports the cancel (ADR 76)
            rec.token, rec.terminate = token, bool(terminate)
        self._move(rec, TaskEvent.CANCEL)
        rec.reason = "canceled"
        self._bump("canceled", tenant)
        self._tell("canceled", rec, "", rec.reason)
        self._close_record(rec, now)
        self._cancel_dependents(task_id, rec, now)
        return True

    # ------------------------------------------------------------------ reads
    @locked
    def get_message(self, task_id: str) -> Message | None:
        validate_id(task_id, "task_id")
        rec = self._live(task_id, self._now())
        if rec is None or rec.state is TaskState.FINISHED:
            return None  # a finished task keeps its result, not its payload
        return rec.message

    @locked
    def get_state(self, task_id: str) -> TaskState | None:
        validate_id(task_id, "task_id")
        rec = self._live(task_id, self._now())
        return None if rec is None else rec.state

    @locked
    def get_result(self, task_id: str) -> bytes | None:
        validate_id(task_id, "task_id")
        rec = self._live(task_id, self._now())
        return None if rec is None else rec.result

    @locked
    def require(self, task_id: str) -> Message:
        """The stored message, or TaskNotFoundError."""
        message = self.get_message(task_id)
        if message is None:
            raise TaskNotFoundError(task_id)
        return message

    @locked
    def queue_sizes(self, tenants: Sequence[str]) -> dict[str, QueueSizes]:
        sizes: dict[str, QueueSizes] = {}
        for name in tenants:
            validate_id(name, "tenants")
            tenant = self._tenants.get(name)
            if tenant is None:
                sizes[name] = QueueSizes()
                continue
            sizes[name] = QueueSizes(
                critical=len(tenant.critical),
                normal=len(tenant.normal_live),
                scheduled=tenant.scheduled,
                leased=tenant.leased,
            )
        return sizes

    @locked
    def stats(self) -> dict[str, int]:
        out = dict(self._counters)
        out["ready"] = sum(len(t.critical) + len(t.normal_live) for t in self._tenants.values())
        out["scheduled"] = len(self._delayed)
        out["leased"] = len(self._leases)
        out["dlq"] = len(self._dlq)
        out["active_tenants"] = self._fair.active_count()
        out["paused"] = int(self._queue_paused)
        out["intake"] = len(self._intake)  # entries not yet ingested (ADR 47)
        return out

    @locked
    def tenant_stats(self, tenant: str) -> dict[str, int]:
        validate_id(tenant, "tenant")
        queues = self._tenants.get(tenant)
        if queues is None:
            zeros = dict.fromkeys((*STAT_COUNTERS, *LIMIT_COUNTERS), 0)
            return {**zeros, "ready": 0, "scheduled": 0, "leased": 0}
        out = dict(queues.counters)
        out["ready"] = len(queues.critical) + len(queues.normal_live)
        out["scheduled"] = queues.scheduled
        out["leased"] = queues.leased
        return out

    # ------------------------------------------------------------------ tenants
    @locked
    def list_tenants(self, *, limit: int = 100, offset: int = 0) -> tuple[list[str], int]:
        limit, offset = check_tenant_page(limit, offset)
        seen = sorted(self._first_push, key=lambda u: (self._first_push[u], u))
        return seen[offset : offset + limit], len(seen)

    @locked
    def set_tenant_weight(self, tenant: str, weight: float, *, tier: int = 0) -> None:
        validate_id(tenant, "tenant")
        stride = stride_for(weight)
        if isinstance(tier, bool) or not isinstance(tier, int) or not 0 <= tier <= 1000:
            raise TaskValidationError("tier", tier, "must be an int in [0, 1000]")
        self._tenant(tenant)
        self._fair.set_weight(tenant, stride, tier)

    # ------------------------------------------------------------------ waiting
    def wait_for_work(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for the wake signal (consumed) or a scheduled task coming
        due, whichever is first (see the port). Does not hold the model's lock."""
        check_wait_timeout(timeout)
        return self._wake.wait(timeout)

    def close(self) -> None:
        self._wake.close()
