"""What the in-memory model stores, and the steps every operation is built from.

* :class:`TaskRecord`: one task (its message, state, lease, dependencies, result);
* :class:`TenantQueues`: one tenant's ready work (critical FIFO, scored heap) and counters;
* :class:`ModelStore`: the queue's state and the shared steps: a state move through the
  transition table (:mod:`fairque_core.domain.states`), making a task ready, scheduling it,
  dropping a lease, the dependency cascade. The fair order of tenants is a
  :class:`~fairque_core.domain.fairness.FairState`; the wake signal a
  :class:`~fairque_core.memory.wake.WakeSignal`.

Operations are in ``model.py`` (push, claim, cancel, reads), ``leases.py`` and ``dlq.py``;
each public one runs under the store's lock (:func:`locked`).
"""

from __future__ import annotations

import heapq
import threading
import time
from collections import deque
from collections.abc import Callable
from functools import wraps
from typing import Concatenate, ParamSpec, TypeVar

from fairque_core.domain.enums import TaskState
from fairque_core.domain.errors import LeaseLostError, PayloadTooLargeError
from fairque_core.domain.fairness import FairState
from fairque_core.domain.limits import LIMIT_COUNTERS
from fairque_core.domain.models import Message
from fairque_core.domain.scoring import STAT_COUNTERS, seq_member, static_score, to_ms
from fairque_core.domain.states import TaskEvent, next_state
from fairque_core.domain.task_records import ATTEMPTS_KEPT, StoredAttempt
from fairque_core.domain.validation import (
    MAX_EPOCH_SECONDS,
    check_duration,
    check_expires_ms,
    validate_id,
    validate_queue_name,
)
from fairque_core.memory import key_limits, limits
from fairque_core.memory.events import EventLog, event_text
from fairque_core.memory.records import TaskRecord, TenantQueues, UniqueHold
from fairque_core.memory.wake import WakeSignal
from fairque_core.ports import Clock, TokenSource, random_token
from fairque_core.settings.config import QueueConfig

__all__ = ["ModelStore", "TaskRecord", "TenantQueues", "UniqueHold", "locked"]

_Store = TypeVar("_Store", bound="ModelStore")
_P = ParamSpec("_P")
_R = TypeVar("_R")


def locked(
    method: Callable[Concatenate[_Store, _P], _R],
) -> Callable[Concatenate[_Store, _P], _R]:
    """Run ``method`` under the store's lock: one atomic step, as one script call on Redis."""

    @wraps(method)
    def run_locked(self: _Store, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        with self._lock:
            return method(self, *args, **kwargs)

    return run_locked


class ModelStore:
    """The model's state and shared steps. ``clock`` returns epoch seconds (default
    ``time.time``)."""

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
        self._records: dict[str, TaskRecord] = {}
        self._tenants: dict[str, TenantQueues] = {}
        self._fair = FairState(strict_tiers=self._config.strict_tiers)
        self._delayed: dict[str, int] = {}  # task id -> due ms
        self._leases: dict[str, int] = {}  # task id -> deadline ms
        self._dlq: dict[str, int] = {}  # task id -> moved ms
        self._first_push: dict[str, int] = {}  # tenant -> ms of its first counted push
        self._intake: deque[Message] = deque()  # pushed, not yet ingested (memory/intake.py)
        self._seq = 0
        self._counters = dict.fromkeys((*STAT_COUNTERS, *LIMIT_COUNTERS), 0)
        # flow control (memory/limits.py): untouched until a limit is first set
        self._limits = limits.LimitState()
        # limits by key (memory/key_limits.py, ADR 79): untouched until a key limit is set
        self._keylim = key_limits.KeyLimitState()
        # pause (memory/pause.py): paused tenants stay out of the active sets; a paused queue
        # leases nothing (tenant hashes' and meta's ``pau`` field on Redis)
        self._paused: set[str] = set()
        # times each tenant was paused (the tenant hash's ``npau``): the fairness figures tell
        # from it that a pause began between two readings (ADR 67)
        self._pauses: dict[str, int] = {}
        self._queue_paused = False
        # one lock around every public method (re-entrant: batch methods call single ones)
        self._lock = threading.RLock()
        self._wake = WakeSignal(self._now)
        # result waiters (wait_done) sleep on this; every end of a task notifies all of them
        self._done = threading.Condition(self._lock)
        # (tenant, unique key) -> [holding task id, until ms (None while the task lives)]
        self._unique: dict[tuple[str, str], UniqueHold] = {}
        # the event log (ADR 71, memory/events.py); blocked readers wait on its condition
        self._events = EventLog(self._config.events_maxlen, threading.Condition(self._lock))

    @property
    def queue(self) -> str:
        return self._queue

    @property
    def config(self) -> QueueConfig:
        return self._config

    def _now(self) -> int:
        return to_ms(self._clock())

    def _bump(self, name: str, tenant: TenantQueues, by: int = 1) -> None:
        self._counters[name] += by
        tenant.counters[name] += by

    def _tell(
        self, kind: str, rec: TaskRecord, failure_type: str | None = None, text: str = ""
    ) -> None:
        """Log a task's event (``lua/_include/events.lua`` fq_event_task): with a failure
        type (``""`` for none) its text goes with it."""
        message = rec.message
        fields = {"id": message.task_id, "u": message.tenant, "n": message.name}
        if failure_type is not None:
            fields["ft"] = failure_type
            fields["err"] = event_text(text)
        self._events.add(self._now(), kind, **fields)

    def _tenant(self, tenant_id: str) -> TenantQueues:
        tenant = self._tenants.get(tenant_id)
        if tenant is None:
            tenant = TenantQueues()
            self._tenants[tenant_id] = tenant
        return tenant

    def _live(self, task_id: str, now: int) -> TaskRecord | None:
        rec = self._records.get(task_id)
        if rec is not None and rec.expires_ms is not None and rec.expires_ms <= now:
            del self._records[task_id]
            return None
        return rec

    def _move(self, rec: TaskRecord, event: TaskEvent) -> None:
        """Change ``rec``'s state along the transition table (InvalidTransition is a model bug)."""
        rec.state = next_state(rec.state, event)

    def _check_message(self, message: Message) -> None:
        validate_id(message.task_id, "task_id")
        validate_id(message.tenant, "tenant")
        for dep in message.depends_on:
            validate_id(dep, "depends_on")
        if message.unique_key:
            check_duration(message.unique_window, "unique_window")
        if message.limit_key:  # (ADR 79)
            validate_id(message.limit_key, "limit_key")
        check_duration(message.delay, "delay", -MAX_EPOCH_SECONDS)
        check_expires_ms(message.expires_ms)
        if len(message.body) > self._config.max_payload_bytes:
            raise PayloadTooLargeError(len(message.body), self._config.max_payload_bytes)

    # ------------------------------------------------------------------ ready and scheduled
    def _make_ready(
        self, task_id: str, rec: TaskRecord, ready_ms: int, *, head: bool = False
    ) -> None:
        """Put a (queued) task into its tenant's ready structures (critical FIFO or scored
        heap); the tenant becomes active and the wake signal is set."""
        tenant_id = rec.message.tenant
        tenant = self._tenant(tenant_id)
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
        if self._limits.on or self._paused:
            limits.admit(self, tenant_id, self._now())  # unless paused, capped or throttled
        else:
            self._fair.activate(tenant_id)
        self._wake.signal()

    def _remove_ready(self, task_id: str, rec: TaskRecord) -> None:
        if rec.parked_scope:  # parked by its limit key: in no queue of its tenant (ADR 79)
            key_limits.forget_parked(self, task_id, rec)
            return
        tenant_id = rec.message.tenant
        tenant = self._tenant(tenant_id)
        if rec.message.priority.is_critical:
            tenant.critical.remove(task_id)
        else:
            tenant.normal_live.pop(seq_member(rec.seq, task_id), None)
        if not tenant.has_ready():
            self._fair.deactivate(tenant_id)

    def _schedule(self, task_id: str, rec: TaskRecord, due_ms: int) -> None:
        """Hold a (scheduled) task until ``due_ms``."""
        rec.due_ms = due_ms
        self._delayed[task_id] = due_ms
        self._tenant(rec.message.tenant).scheduled += 1
        self._wake.lower_next_due(due_ms)

    def _recompute_next_due(self) -> None:
        """The earliest due time of a scheduled task or a parked tenant (or the queue's rate)."""
        due = min(self._delayed.values()) if self._delayed else None
        parked = self._limits.parked
        if parked:
            first = min(parked.values())
            due = first if due is None else min(due, first)
        self._wake.set_next_due(due)

    # ------------------------------------------------------------------ leases and records
    def _drop_lease(self, task_id: str, rec: TaskRecord) -> None:
        self._leases.pop(task_id, None)
        self._tenant(rec.message.tenant).leased -= 1
        rec.token = ""
        rec.worker_id = ""
        rec.deadline_ms = 0
        if self._limits.on:
            limits.lease_ended(self, rec.message.tenant, self._now())
        if rec.key_scope:
            key_limits.lease_ended(self, rec, self._now())

    def _leased(self, task_id: str, token: str, now: int) -> TaskRecord:
        rec = self._live(task_id, now)
        if rec is None or rec.state is not TaskState.STARTED or rec.token != token:
            raise LeaseLostError(task_id)
        return rec

    def _attempt_ended(self, rec: TaskRecord, outcome: str, now: int, error: str = "") -> None:
        """Keep the attempt of the lease ``rec`` holds (call before the lease is dropped): its
        worker, start, end, outcome and failure record; the last ATTEMPTS_KEPT are kept."""
        rec.attempt_count += 1
        rec.attempts.append(
            StoredAttempt(
                number=rec.attempt_count,
                outcome=outcome,
                started_ms=rec.started_ms,
                ended_ms=now,
                worker_id=rec.worker_id,
                error=error,
            )
        )
        del rec.attempts[:-ATTEMPTS_KEPT]

    def _close_record(self, rec: TaskRecord, now: int) -> None:
        rec.expires_ms = now + to_ms(self._config.result_ttl_seconds)
        self._ended(rec, now)

    def _ended(self, rec: TaskRecord, now: int) -> None:
        """The task ended (finished, failed for good, canceled): its unique key is held for
        its window from now (or freed), and every result waiter is woken."""
        rec.ended_ms = now
        message = rec.message
        if message.unique_key:
            hold = self._unique.get((message.tenant, message.unique_key))
            if hold is not None and hold.task_id == message.task_id:
                window = to_ms(message.unique_window)
                if window > 0:
                    hold.until_ms = now + window
                else:
                    del self._unique[(message.tenant, message.unique_key)]
        self._done.notify_all()

    def _forget_finished(self, task_id: str, rec: TaskRecord) -> None:
        """A finish with ``keep=False`` (ADR 78): the record goes, unless something needs it
        (dependents, XCom values, an armed waiter, a unique key held for a window)."""
        message = rec.message
        if (
            rec.dependents
            or rec.xcom
            or rec.waited
            or (message.unique_key and to_ms(message.unique_window) > 0)
        ):
            return
        del self._records[task_id]

    # ------------------------------------------------------------------ dependencies
    def _cancel_dependents(self, task_id: str, rec: TaskRecord, now: int) -> None:
        stack = [(task_id, rec)]
        while stack:
            parent_id, parent = stack.pop()
            for child_id in parent.dependents:
                child = self._live(child_id, now)
                if child is None or child.state is not TaskState.DEFERRED:
                    continue
                self._move(child, TaskEvent.DEPENDENCY_FAILED)
                child.reason = f"dependency {parent_id} did not finish"
                self._bump("canceled", self._tenant(child.message.tenant))
                self._tell("canceled", child, "", child.reason)
                self._close_record(child, now)
                stack.append((child_id, child))

    def _release_dependents(self, rec: TaskRecord, task_id: str, now: int) -> None:
        for child_id in rec.dependents:
            child = self._live(child_id, now)
            if child is None or child.state is not TaskState.DEFERRED:
                continue
            child.waiting.discard(task_id)
            if not child.waiting:
                self._enter(child_id, child, now)

    def _enter(self, task_id: str, rec: TaskRecord, now: int) -> None:
        """A deferred task whose dependencies are met: ready now or scheduled for its delay."""
        delay_ms = to_ms(rec.message.delay)
        if delay_ms > 0 and rec.due_ms > now:
            self._move(rec, TaskEvent.DEPENDENCIES_MET_DELAYED)
            self._schedule(task_id, rec, rec.due_ms)
        else:
            self._move(rec, TaskEvent.DEPENDENCIES_MET)
            self._make_ready(task_id, rec, now)
