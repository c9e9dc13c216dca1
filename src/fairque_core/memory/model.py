"""InMemoryBackend: the reference model of the whole queue.

This is the executable specification of :class:`fairque_core.ports.QueueBackend`. The Lua
scripts of the Redis adapter mirror it step for step (a differential property test runs both
on the same operations with one fake clock), and users can run their handlers against it in
unit tests. It is pure Python and deterministic for a given clock and token source.

It is safe to share between threads: every public method runs under one re-entrant lock (a
call is atomic, as a script call is on Redis); ``wait_for_work`` waits without holding it.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from functools import wraps
from typing import Concatenate, ParamSpec, TypeVar

import attrs

from fairque_core.app.config import QueueConfig
from fairque_core.domain.enums import FailureType, TaskState
from fairque_core.domain.errors import (
    LeaseLostError,
    PayloadTooLargeError,
    TaskNotFoundError,
    TaskValidationError,
)
from fairque_core.domain.models import Claimed, DLQEntry, Lease, Message, QueueSizes
from fairque_core.domain.scoring import STAT_COUNTERS, seq_member, static_score, stride_for, to_ms
from fairque_core.domain.validation import (
    check_tenant_page,
    check_wait_timeout,
    validate_id,
    validate_queue_name,
)
from fairque_core.ports import Clock, TokenSource, random_token

__all__ = ["InMemoryBackend"]

_DEFAULT_STRIDE = stride_for(1.0)
_ALIVE = (TaskState.SCHEDULED, TaskState.DEFERRED, TaskState.QUEUED, TaskState.STARTED)


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _locked(
    method: Callable[Concatenate[InMemoryBackend, _P], _R],
) -> Callable[Concatenate[InMemoryBackend, _P], _R]:
    """Run ``method`` under the model's lock (one atomic step, like one script call)."""

    @wraps(method)
    def locked(self: InMemoryBackend, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        with self._lock:
            return method(self, *args, **kwargs)

    return locked


def _check_limit(field: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise TaskValidationError(field, value, "must be an int >= 0")


@attrs.define
class _Record:
    message: Message
    state: TaskState
    seq: int
    ready_ms: int = 0
    due_ms: int = 0
    token: str = ""
    worker_id: str = ""
    deadline_ms: int = 0
    recoveries: int = 0
    waiting: set[str] = attrs.field(factory=set)
    dependents: list[str] = attrs.field(factory=list)
    failure_type: FailureType | None = None
    reason: str = ""
    moved_ms: int = 0
    result: bytes | None = None
    expires_ms: int | None = None


@attrs.define
class _Tenant:
    critical: deque[str] = attrs.field(factory=deque)
    normal: list[tuple[int, str]] = attrs.field(factory=list)  # heap of (score, member)
    normal_live: dict[str, str] = attrs.field(factory=dict)  # member -> task id
    stride: int = _DEFAULT_STRIDE
    tier: int = 0
    pass_: int = 0
    scheduled: int = 0
    leased: int = 0
    counters: dict[str, int] = attrs.field(factory=lambda: dict.fromkeys(STAT_COUNTERS, 0))

    def has_ready(self) -> bool:
        return bool(self.critical) or bool(self.normal_live)

    def pop_ready(self) -> str:
        if self.critical:
            return self.critical.popleft()
        while True:
            _score, member = heapq.heappop(self.normal)
            task_id = self.normal_live.pop(member, None)
            if task_id is not None:
                return task_id


class InMemoryBackend:
    """The reference backend. ``clock`` returns epoch seconds (default ``time.time``)."""

    def __init__(
        self,
        clock: Clock | None = None,
        *,
        queue: str = "default",
        config: QueueConfig | None = None,
        token_source: TokenSource | None = None,
    ) -> None:
        self._queue = validate_queue_name(queue)
        self._config = config if config is not None else QueueConfig(name=queue)
        self._clock: Clock = clock if clock is not None else time.time
        self._tokens: TokenSource = token_source if token_source is not None else random_token
        self._horizon_ms = to_ms(self._config.aging_horizon_seconds)
        self._records: dict[str, _Record] = {}
        self._tenants: dict[str, _Tenant] = {}
        self._active: dict[int, dict[str, int]] = {}  # tier -> tenant -> pass
        self._delayed: dict[str, int] = {}  # task id -> due ms
        self._leases: dict[str, int] = {}  # task id -> deadline ms
        self._dlq: dict[str, int] = {}  # task id -> moved ms
        self._first_push: dict[str, int] = {}  # tenant -> ms of its first counted push
        self._vtime = 0
        self._seq = 0
        self._counters = dict.fromkeys(STAT_COUNTERS, 0)
        self._closed = False
        # one lock around every public method (re-entrant: batch methods call single ones)
        self._lock = threading.RLock()
        # the wake signal (at most one pending token); the only state touched off the model lock
        self._wake = threading.Condition(threading.Lock())
        self._wake_pending = False
        # the earliest due time in _delayed (ms, None = nothing scheduled), for waiters
        self._next_due: int | None = None

    # ------------------------------------------------------------------ helpers
    @property
    def queue(self) -> str:
        return self._queue

    @property
    def config(self) -> QueueConfig:
        return self._config

    def _now(self) -> int:
        return to_ms(self._clock())

    def _bump(self, name: str, tenant: _Tenant, by: int = 1) -> None:
        self._counters[name] += by
        tenant.counters[name] += by

    def _tenant(self, user_id: str) -> _Tenant:
        tenant = self._tenants.get(user_id)
        if tenant is None:
            tenant = _Tenant()
            self._tenants[user_id] = tenant
        return tenant

    def _tier_of(self, tenant: _Tenant) -> int:
        return tenant.tier if self._config.strict_tiers else 0

    def _live(self, task_id: str, now: int) -> _Record | None:
        rec = self._records.get(task_id)
        if rec is not None and rec.expires_ms is not None and rec.expires_ms <= now:
            del self._records[task_id]
            return None
        return rec

    def _activate(self, user_id: str, tenant: _Tenant) -> None:
        tier = self._tier_of(tenant)
        active = self._active.setdefault(tier, {})
        if user_id not in active:
            tenant.pass_ = max(tenant.pass_, self._vtime)
            active[user_id] = tenant.pass_

    def _deactivate(self, user_id: str, tenant: _Tenant) -> None:
        tier = self._tier_of(tenant)
        active = self._active.get(tier)
        if active is not None:
            active.pop(user_id, None)
            if not active:
                del self._active[tier]

    def _make_ready(self, task_id: str, rec: _Record, ready_ms: int, *, head: bool = False) -> None:
        """Put a task into its tenant's ready structures (critical FIFO or scored set)."""
        user_id = rec.message.user_id
        tenant = self._tenant(user_id)
        rec.state = TaskState.QUEUED
        rec.ready_ms = ready_ms
        if rec.message.priority.is_critical:
            if head:
                tenant.critical.appendleft(task_id)
            else:
                tenant.critical.append(task_id)
        else:
            member = seq_member(rec.seq, task_id)
            score = static_score(rec.message.priority, ready_ms, self._horizon_ms)
            heapq.heappush(tenant.normal, (score, member))
            tenant.normal_live[member] = task_id
        self._activate(user_id, tenant)
        self._signal()

    def _signal(self) -> None:
        with self._wake:
            if not self._wake_pending:
                self._wake_pending = True
                self._wake.notify()

    def _remove_ready(self, task_id: str, rec: _Record) -> None:
        user_id = rec.message.user_id
        tenant = self._tenant(user_id)
        if rec.message.priority.is_critical:
            tenant.critical.remove(task_id)
        else:
            tenant.normal_live.pop(seq_member(rec.seq, task_id), None)
        if not tenant.has_ready():
            self._deactivate(user_id, tenant)

    def _schedule(self, task_id: str, rec: _Record, due_ms: int) -> None:
        rec.state = TaskState.SCHEDULED
        rec.due_ms = due_ms
        self._delayed[task_id] = due_ms
        self._tenant(rec.message.user_id).scheduled += 1
        if self._next_due is None or due_ms < self._next_due:
            self._set_next_due(due_ms)

    def _set_next_due(self, due_ms: int | None) -> None:
        """Publish the earliest due time; waiters look again when it moved earlier (the
        schedule signal of the Redis backend)."""
        with self._wake:
            earlier = due_ms is not None and (self._next_due is None or due_ms < self._next_due)
            self._next_due = due_ms
            if earlier:
                self._wake.notify_all()

    def _recompute_next_due(self) -> None:
        self._set_next_due(min(self._delayed.values()) if self._delayed else None)

    def _drop_lease(self, task_id: str, rec: _Record) -> None:
        self._leases.pop(task_id, None)
        self._tenant(rec.message.user_id).leased -= 1
        rec.token = ""
        rec.worker_id = ""
        rec.deadline_ms = 0

    def _leased(self, task_id: str, token: str, now: int) -> _Record:
        rec = self._live(task_id, now)
        if rec is None or rec.state is not TaskState.STARTED or rec.token != token:
            raise LeaseLostError(task_id)
        return rec

    def _close_record(self, rec: _Record, now: int) -> None:
        rec.expires_ms = now + to_ms(self._config.result_ttl_seconds)

    def _cancel_dependents(self, task_id: str, rec: _Record, now: int) -> None:
        stack = [(task_id, rec)]
        while stack:
            parent_id, parent = stack.pop()
            for child_id in parent.dependents:
                child = self._live(child_id, now)
                if child is None or child.state is not TaskState.DEFERRED:
                    continue
                child.state = TaskState.CANCELED
                child.reason = f"dependency {parent_id} did not finish"
                self._bump("canceled", self._tenant(child.message.user_id))
                self._close_record(child, now)
                stack.append((child_id, child))

    def _release_dependents(self, rec: _Record, task_id: str, now: int) -> None:
        for child_id in rec.dependents:
            child = self._live(child_id, now)
            if child is None or child.state is not TaskState.DEFERRED:
                continue
            child.waiting.discard(task_id)
            if not child.waiting:
                self._enter(child_id, child, now)

    def _enter(self, task_id: str, rec: _Record, now: int) -> None:
        """A task whose dependencies are met: ready now or scheduled for its delay."""
        delay_ms = to_ms(rec.message.delay)
        if delay_ms > 0 and rec.due_ms > now:
            self._schedule(task_id, rec, rec.due_ms)
        else:
            self._make_ready(task_id, rec, now)

    def _to_dlq(
        self, task_id: str, rec: _Record, failure_type: FailureType, reason: str, now: int
    ) -> None:
        rec.state = TaskState.FAILED
        rec.failure_type = failure_type
        rec.reason = reason
        rec.moved_ms = now
        self._dlq[task_id] = now
        self._bump("dead", self._tenant(rec.message.user_id))
        self._cancel_dependents(task_id, rec, now)

    def _check_message(self, message: Message) -> None:
        validate_id(message.task_id, "task_id")
        validate_id(message.user_id, "user_id")
        for dep in message.depends_on:
            validate_id(dep, "depends_on")
        if len(message.body) > self._config.max_payload_bytes:
            raise PayloadTooLargeError(len(message.body), self._config.max_payload_bytes)

    # ------------------------------------------------------------------ push
    @_locked
    def push(self, message: Message) -> bool:
        return self.push_batch([message])[0]

    @_locked
    def push_batch(self, messages: Sequence[Message]) -> list[bool]:
        for message in messages:
            self._check_message(message)
        now = self._now()
        # Dependencies must name a known task or one earlier in the batch: check all first,
        # so a bad batch changes nothing (the Lua script does the same).
        seen: set[str] = set()
        for message in messages:
            for dep in message.depends_on:
                if dep not in seen and self._live(dep, now) is None:
                    raise TaskValidationError("depends_on", dep, "names no known task")
            seen.add(message.task_id)
        results: list[bool] = []
        for message in messages:
            results.append(self._push_one(message, now))
        return results

    def _push_one(self, message: Message, now: int) -> bool:
        tenant = self._tenant(message.user_id)
        if self._live(message.task_id, now) is not None:
            self._bump("duplicates", tenant)
            return False
        self._seq += 1
        rec = _Record(message=message, state=TaskState.QUEUED, seq=self._seq)
        rec.due_ms = now + max(0, to_ms(message.delay))
        self._records[message.task_id] = rec
        self._bump("pushed", tenant)
        self._first_push.setdefault(message.user_id, now)
        failed_parent = ""
        for dep in message.depends_on:
            parent = self._live(dep, now)
            if parent is None:
                continue
            if parent.state in (TaskState.FAILED, TaskState.CANCELED):
                failed_parent = dep
            elif parent.state is not TaskState.FINISHED:
                rec.waiting.add(dep)
                parent.dependents.append(message.task_id)
        if failed_parent:
            rec.state = TaskState.CANCELED
            rec.reason = f"dependency {failed_parent} did not finish"
            self._bump("canceled", tenant)
            self._close_record(rec, now)
        elif rec.waiting:
            rec.state = TaskState.DEFERRED
        elif rec.due_ms > now:
            self._schedule(message.task_id, rec, rec.due_ms)
        else:
            self._make_ready(message.task_id, rec, now)
        return True

    # ------------------------------------------------------------------ claim
    def _move_due(self, now: int) -> None:
        due = sorted((ms, tid) for tid, ms in self._delayed.items() if ms <= now)
        for due_ms, task_id in due[: self._config.delayed_move_limit]:
            del self._delayed[task_id]
            rec = self._records[task_id]
            self._tenant(rec.message.user_id).scheduled -= 1
            self._make_ready(task_id, rec, due_ms)
        if due:
            self._recompute_next_due()

    def _pick(self, groups: Iterable[Sequence[str] | None]) -> str | None:
        for group in groups:
            if group is None:
                if not self._active:
                    return None
                tier = max(self._active)
                active = self._active[tier]
                return min(active, key=lambda uid: (active[uid], uid))
            best: tuple[int, int, str] | None = None
            for user_id in group:
                tenant = self._tenants.get(user_id)
                if tenant is None:
                    continue
                tier = self._tier_of(tenant)
                if user_id not in self._active.get(tier, {}):
                    continue
                key = (-tier, tenant.pass_, user_id)
                if best is None or key < best:
                    best = key
            if best is not None:
                return best[2]
        return None

    @_locked
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
            validate_id(candidate, "user_id")
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise TaskValidationError("count", count, "must be >= 1")
        lease_ms = to_ms(self._config.lease_seconds if lease_seconds is None else lease_seconds)
        if lease_ms <= 0:
            raise TaskValidationError("lease_seconds", lease_seconds, "must be > 0")
        groups: list[Sequence[str] | None]
        groups = [None] if not assigned and not steal else [assigned or (), steal or ()]
        now = self._now()
        self._move_due(now)
        claimed: list[Claimed] = []
        for _ in range(count):
            picked = self._pick(groups)
            if picked is None:
                break
            user_id = picked
            tenant = self._tenants[user_id]
            task_id = tenant.pop_ready()
            self._vtime = tenant.pass_
            tenant.pass_ += tenant.stride
            tier = self._tier_of(tenant)
            if tenant.has_ready():
                self._active[tier][user_id] = tenant.pass_
            else:
                self._deactivate(user_id, tenant)
            rec = self._records[task_id]
            rec.state = TaskState.STARTED
            rec.token = self._tokens()
            rec.worker_id = worker_id
            rec.deadline_ms = now + lease_ms
            self._leases[task_id] = rec.deadline_ms
            tenant.leased += 1
            self._bump("claimed", tenant)
            claimed.append(self._claimed(task_id, rec))
        if claimed and self._active:
            self._signal()  # ready work left behind: pass the signal on to the next idle worker
        return claimed

    def _claimed(self, task_id: str, rec: _Record) -> Claimed:
        lease = Lease(token=rec.token, deadline=rec.deadline_ms / 1000, worker_id=rec.worker_id)
        return Claimed(message=rec.message, lease=lease, recoveries=rec.recoveries)

    # ------------------------------------------------------------------ leases
    @_locked
    def heartbeat(self, task_id: str, token: str, lease_seconds: float | None = None) -> float:
        now = self._now()
        rec = self._leased(task_id, token, now)
        lease_ms = to_ms(self._config.lease_seconds if lease_seconds is None else lease_seconds)
        rec.deadline_ms = now + lease_ms
        self._leases[task_id] = rec.deadline_ms
        return rec.deadline_ms / 1000

    @_locked
    def heartbeat_batch(
        self, items: Sequence[tuple[str, str]], lease_seconds: float | None = None
    ) -> list[float | None]:
        deadlines: list[float | None] = []
        for task_id, token in items:
            try:
                deadlines.append(self.heartbeat(task_id, token, lease_seconds))
            except LeaseLostError:
                deadlines.append(None)
        return deadlines

    @_locked
    def finish(self, task_id: str, token: str, result: bytes | None = None) -> None:
        now = self._now()
        done = self._live(task_id, now)
        if done is not None and done.state is TaskState.FINISHED and token and done.token == token:
            return  # a repeat of this lease's finish (its reply was lost): done, nothing changes
        rec = self._leased(task_id, token, now)
        self._drop_lease(task_id, rec)
        rec.token = token  # kept, so that a repeat of this finish is recognised
        rec.state = TaskState.FINISHED
        rec.result = result
        self._bump("finished", self._tenant(rec.message.user_id))
        self._close_record(rec, now)
        self._release_dependents(rec, task_id, now)

    @_locked
    def finish_batch(self, items: Sequence[tuple[str, str, bytes | None]]) -> list[bool]:
        done: list[bool] = []
        for task_id, token, result in items:
            try:
                self.finish(task_id, token, result)
            except LeaseLostError:
                done.append(False)
            else:
                done.append(True)
        return done

    @_locked
    def fail(
        self,
        task_id: str,
        token: str,
        *,
        retry_delay: float | None,
        failure_type: FailureType = FailureType.FAILED,
        reason: str = "",
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
        self._drop_lease(task_id, rec)
        rec.token = token  # kept until the next claim, so that a repeat is recognised
        tenant = self._tenant(rec.message.user_id)
        if retry_delay is not None:
            rec.message = attrs.evolve(rec.message, retry_count=rec.message.retry_count + 1)
            rec.reason = reason
            self._bump("retried", tenant)
            self._schedule(task_id, rec, now + max(0, to_ms(retry_delay)))
        else:
            self._to_dlq(task_id, rec, failure_type, reason, now)
        return rec.state

    @_locked
    def release(self, task_id: str, token: str) -> None:
        now = self._now()
        rec = self._leased(task_id, token, now)
        self._drop_lease(task_id, rec)
        self._bump("released", self._tenant(rec.message.user_id))
        self._make_ready(task_id, rec, rec.ready_ms, head=True)

    @_locked
    def requeue_expired(self, limit: int = 100) -> int:
        _check_limit("limit", limit)
        now = self._now()
        expired = sorted((ms, tid) for tid, ms in self._leases.items() if ms <= now)[:limit]
        for _deadline, task_id in expired:
            rec = self._records[task_id]
            self._drop_lease(task_id, rec)
            rec.recoveries += 1
            tenant = self._tenant(rec.message.user_id)
            if rec.recoveries > self._config.max_recoveries:
                reason = f"lease expired {rec.recoveries} times"
                self._to_dlq(task_id, rec, FailureType.EXPIRED, reason, now)
            else:
                self._bump("recovered", tenant)
                self._make_ready(task_id, rec, rec.ready_ms, head=True)
        return len(expired)

    # ------------------------------------------------------------------ cancel and reads
    @_locked
    def cancel(self, task_id: str) -> bool:
        validate_id(task_id, "task_id")
        now = self._now()
        rec = self._live(task_id, now)
        if rec is None or rec.state not in _ALIVE:
            return False
        tenant = self._tenant(rec.message.user_id)
        if rec.state is TaskState.QUEUED:
            self._remove_ready(task_id, rec)
        elif rec.state is TaskState.SCHEDULED:
            del self._delayed[task_id]
            tenant.scheduled -= 1
            self._recompute_next_due()
        elif rec.state is TaskState.STARTED:
            self._drop_lease(task_id, rec)
        rec.state = TaskState.CANCELED
        rec.reason = "canceled"
        self._bump("canceled", tenant)
        self._close_record(rec, now)
        self._cancel_dependents(task_id, rec, now)
        return True

    @_locked
    def get_message(self, task_id: str) -> Message | None:
        validate_id(task_id, "task_id")
        rec = self._live(task_id, self._now())
        return None if rec is None else rec.message

    @_locked
    def get_state(self, task_id: str) -> TaskState | None:
        validate_id(task_id, "task_id")
        rec = self._live(task_id, self._now())
        return None if rec is None else rec.state

    @_locked
    def get_result(self, task_id: str) -> bytes | None:
        validate_id(task_id, "task_id")
        rec = self._live(task_id, self._now())
        return None if rec is None else rec.result

    @_locked
    def queue_sizes(self, user_ids: Sequence[str]) -> dict[str, QueueSizes]:
        sizes: dict[str, QueueSizes] = {}
        for user_id in user_ids:
            validate_id(user_id, "user_id")
            tenant = self._tenants.get(user_id)
            if tenant is None:
                sizes[user_id] = QueueSizes()
                continue
            sizes[user_id] = QueueSizes(
                critical=len(tenant.critical),
                normal=len(tenant.normal_live),
                scheduled=tenant.scheduled,
                leased=tenant.leased,
            )
        return sizes

    @_locked
    def stats(self) -> dict[str, int]:
        out = dict(self._counters)
        out["ready"] = sum(len(t.critical) + len(t.normal_live) for t in self._tenants.values())
        out["scheduled"] = len(self._delayed)
        out["leased"] = len(self._leases)
        out["dlq"] = len(self._dlq)
        out["active_tenants"] = sum(len(a) for a in self._active.values())
        return out

    @_locked
    def tenant_stats(self, user_id: str) -> dict[str, int]:
        validate_id(user_id, "user_id")
        tenant = self._tenants.get(user_id)
        if tenant is None:
            return {**dict.fromkeys(STAT_COUNTERS, 0), "ready": 0, "scheduled": 0, "leased": 0}
        out = dict(tenant.counters)
        out["ready"] = len(tenant.critical) + len(tenant.normal_live)
        out["scheduled"] = tenant.scheduled
        out["leased"] = tenant.leased
        return out

    @_locked
    def list_tenants(self, *, limit: int = 100, offset: int = 0) -> tuple[list[str], int]:
        limit, offset = check_tenant_page(limit, offset)
        seen = sorted(self._first_push, key=lambda u: (self._first_push[u], u))
        return seen[offset : offset + limit], len(seen)

    @_locked
    def set_tenant_weight(self, user_id: str, weight: float, *, tier: int = 0) -> None:
        validate_id(user_id, "user_id")
        stride = stride_for(weight)
        if isinstance(tier, bool) or not isinstance(tier, int) or not 0 <= tier <= 1000:
            raise TaskValidationError("tier", tier, "must be an int in [0, 1000]")
        tenant = self._tenant(user_id)
        was_active = user_id in self._active.get(self._tier_of(tenant), {})
        if was_active:
            self._deactivate(user_id, tenant)
        tenant.stride = stride
        tenant.tier = tier
        if was_active:
            tier_eff = self._tier_of(tenant)
            self._active.setdefault(tier_eff, {})[user_id] = tenant.pass_

    # ------------------------------------------------------------------ DLQ
    @_locked
    def list_dlq(
        self, *, limit: int = 100, offset: int = 0, failure_type: FailureType | None = None
    ) -> list[DLQEntry]:
        _check_limit("limit", limit)
        _check_limit("offset", offset)
        entries: list[DLQEntry] = []
        for moved_ms, task_id in sorted((ms, tid) for tid, ms in self._dlq.items()):
            rec = self._records[task_id]
            if failure_type is not None and rec.failure_type is not failure_type:
                continue
            entries.append(
                DLQEntry(
                    entry_id=task_id,
                    original_task=rec.message,
                    failure_type=rec.failure_type or FailureType.FAILED,
                    reason=rec.reason,
                    moved_at=moved_ms / 1000,
                )
            )
        return entries[offset : offset + limit]

    def _dlq_ids(self, entry_ids: Sequence[str] | None) -> list[str]:
        if entry_ids is None:
            return [tid for _ms, tid in sorted((ms, tid) for tid, ms in self._dlq.items())]
        for entry_id in entry_ids:
            validate_id(entry_id, "entry_id")
        return list(dict.fromkeys(tid for tid in entry_ids if tid in self._dlq))

    @_locked
    def requeue_dlq(self, entry_ids: Sequence[str] | None = None) -> int:
        now = self._now()
        ids = self._dlq_ids(entry_ids)
        for task_id in ids:
            del self._dlq[task_id]
            rec = self._records[task_id]
            rec.message = attrs.evolve(rec.message, retry_count=0)
            rec.recoveries = 0
            rec.failure_type = None
            rec.reason = ""
            self._bump("dlq_requeued", self._tenant(rec.message.user_id))
            self._make_ready(task_id, rec, now)
        return len(ids)

    @_locked
    def purge_dlq(self, entry_ids: Sequence[str] | None = None) -> int:
        ids = self._dlq_ids(entry_ids)
        for task_id in ids:
            del self._dlq[task_id]
            del self._records[task_id]
        return len(ids)

    @_locked
    def require(self, task_id: str) -> Message:
        """The stored message, or TaskNotFoundError."""
        message = self.get_message(task_id)
        if message is None:
            raise TaskNotFoundError(task_id)
        return message

    def wait_for_work(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for the wake signal (consumed) or a scheduled task coming
        due, whichever is first (see the port)."""
        check_wait_timeout(timeout)
        deadline = time.monotonic() + timeout
        with self._wake:
            while True:
                if self._wake_pending:
                    self._wake_pending = False
                    return True
                due_in = None if self._next_due is None else self._next_due - self._now()
                if due_in is not None and due_in <= 0:
                    return True
                remaining = deadline - time.monotonic()
                if self._closed or remaining <= 0:
                    return False
                # clock time and waiting time are both seconds; an injected clock that stands
                # still is only looked at again when the wait ends or a signal comes
                self._wake.wait(remaining if due_in is None else min(remaining, due_in / 1000))

    def close(self) -> None:
        with self._wake:
            self._closed = True
            self._wake.notify_all()
