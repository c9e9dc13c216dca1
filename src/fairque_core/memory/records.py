"""The reference model's records: a task, a unique-key hold, a tenant's queues.

Plain data shared by the model's store (:mod:`fairque_core.memory.store`) and its steps
(limits, leases, ...), apart from both so that no step imports the store.
"""

from __future__ import annotations

import heapq
from collections import deque

import attrs

from fairque_core.domain.enums import FailureType, TaskState
from fairque_core.domain.limits import LIMIT_COUNTERS
from fairque_core.domain.models import Message
from fairque_core.domain.scoring import STAT_COUNTERS
from fairque_core.domain.task_records import StoredAttempt

__all__ = ["TaskRecord", "TenantQueues", "UniqueHold"]


@attrs.define
class TaskRecord:
    message: Message
    state: TaskState
    seq: int
    ready_ms: int = 0
    due_ms: int = 0
    token: str = ""
    worker_id: str = ""
    terminate: bool = False  # canceled while started, with terminate=True (ADR 76)
    deadline_ms: int = 0
    # the deadline the claim gave: a lease still at it was never heartbeated (never started)
    claim_deadline_ms: int = 0
    recoveries: int = 0
    waiting: set[str] = attrs.field(factory=set)
    dependents: list[str] = attrs.field(factory=list)
    failure_type: FailureType | None = None
    reason: str = ""
    moved_ms: int = 0
    result: bytes | None = None
    expires_ms: int | None = None
    # the failure record stored with a final failure, and the XCom values written at finish
    error: str = ""
    xcom: dict[str, bytes] = attrs.field(factory=dict)
    # the task's story (ADR 70): when its last attempt started and when it ended (ms, 0: not
    # yet), its last ATTEMPTS_KEPT attempts and how many there were, and, once finished, the
    # size of a payload too long to keep whole (its body is then the preview)
    started_ms: int = 0
    ended_ms: int = 0
    attempts: list[StoredAttempt] = attrs.field(factory=list)
    attempt_count: int = 0
    body_size: int | None = None
    # the last value the handler reported with ctx.set_progress (JSON bytes; issue 32)
    progress: bytes | None = None
    # a result waiter armed on it before it ended (wait_done; Redis's `wt`): its record is
    # kept whatever the finish's `keep` (ADR 78)
    waited: bool = False
    # limits by key (ADR 79): the scope its lease is counted in (Redis: `lc`), and the scope
    # it is parked in while its key holds it (`kp`); "" for none
    key_scope: str = ""
    parked_scope: str = ""


@attrs.define
class UniqueHold:
    """Who holds a (tenant, unique key): its task, and until when once the task ended."""

    task_id: str
    until_ms: int | None = None


@attrs.define
class TenantQueues:
    critical: deque[str] = attrs.field(factory=deque)
    normal: list[tuple[int, str]] = attrs.field(factory=list)  # heap of (score, member)
    normal_live: dict[str, str] = attrs.field(factory=dict)  # member -> task id
    scheduled: int = 0
    leased: int = 0
    counters: dict[str, int] = attrs.field(
        factory=lambda: dict.fromkeys((*STAT_COUNTERS, *LIMIT_COUNTERS), 0)
    )

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
