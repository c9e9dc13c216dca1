"""Pieces shared by the thread worker and the asyncio worker (no I/O here)."""

from __future__ import annotations

import logging
import random
import time
from typing import Any, Protocol

import attrs

from fairque_core.app.config import WorkerConfig
from fairque_core.domain.errors import ConfigurationError, TaskSerializationError, UnknownTaskError
from fairque_core.domain.models import Task
from fairque_core.domain.validation import validate_id

__all__ = [
    "Backoff",
    "IdlePoll",
    "Slot",
    "Stats",
    "after_claim",
    "check_worker_config",
    "heartbeat_interval",
    "logger",
]

logger = logging.getLogger("fairque.worker")

#: Handler errors that dead-letter a task as POISONED (counted apart in ``health()``).
POISON_ERRORS = (UnknownTaskError, TaskSerializationError)
#: Backoff after a backend error: first wait, and the cap of the exponential growth.
BACKOFF_BASE_SECONDS = 0.05
BACKOFF_CAP_SECONDS = 2.0
#: Longest wait for more free places before claiming for fewer than a quarter of them.
CLAIM_LINGER_SECONDS = 0.002
#: Idle polling: right after a claim found work the next empty-queue wait is this short, and it
#: doubles with every empty claim up to ``poll_interval_seconds`` (low pick-up latency under a
#: steady trickle of tasks, no busy polling once the queue stays empty).
IDLE_POLL_MIN_SECONDS = 0.0005
IDLE_POLL_GROWTH = 2.0
#: Most leases one heartbeat call extends (a worker holding more sends several calls).
HEARTBEAT_BATCH = 500
#: How many reaper batches one reaper tick may run when every batch comes back full.
REAPER_ROUNDS = 10
REAPER_LIMIT = 100


@attrs.define(eq=False)
class Slot:
    """One task this worker holds a lease on, from claim until acknowledged or released."""

    task: Task
    claimed_at: float
    started_at: float | None = None
    timed_out: bool = False
    zombie: bool = False  # timed out, its thread still running, its slot already given back
    lost: bool = False  # lease lost: the outcome is dropped
    run_seconds: float = 0.0


@attrs.define
class Stats:
    """What ``health()`` reports, besides the live sizes."""

    processed: int = 0
    failed: int = 0
    retried: int = 0
    dead: int = 0
    poisoned: int = 0
    timed_out: int = 0
    lease_lost: int = 0
    released: int = 0
    claimed: int = 0
    backend_errors: int = 0
    last_error: str | None = None
    last_error_at: float | None = None
    last_claim_at: float | None = None

    def note_error(self, error: BaseException) -> None:
        self.backend_errors += 1
        self.last_error = f"{type(error).__name__}: {error}"
        self.last_error_at = time.time()

    def as_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)


class Backoff:
    """Capped exponential backoff with full jitter over consecutive backend errors."""

    def __init__(
        self, base: float = BACKOFF_BASE_SECONDS, cap: float = BACKOFF_CAP_SECONDS
    ) -> None:
        self.base = base
        self.cap = cap
        self.failures = 0
        self.retry_at = 0.0

    def fail(self, now: float) -> float:
        """Record one more failure; returns the delay until the next attempt."""
        self.failures += 1
        ceiling = min(self.cap, self.base * float(1 << min(self.failures, 16)))
        delay = ceiling / 2 + random.uniform(0, ceiling / 2)
        self.retry_at = now + delay
        return delay

    def ok(self) -> None:
        self.failures = 0
        self.retry_at = 0.0

    def waiting(self, now: float) -> float:
        """Seconds left before backend calls may resume (0 when not backing off)."""
        return max(0.0, self.retry_at - now)


class IdlePoll:
    """The wait before the next claim when the queue came back empty (adaptive backoff)."""

    def __init__(self, cap: float) -> None:
        self.cap = cap
        self.wait = min(cap, IDLE_POLL_MIN_SECONDS)
        self._next = min(cap, self.wait * IDLE_POLL_GROWTH)

    def found(self) -> None:
        """A claim returned work: poll again after the minimum, then back off from there."""
        self.wait = min(self.cap, IDLE_POLL_MIN_SECONDS)
        self._next = min(self.cap, self.wait * IDLE_POLL_GROWTH)

    def empty(self) -> None:
        """A claim returned nothing: wait the current step, grow the next one."""
        self.wait = self._next
        self._next = min(self.cap, self._next * IDLE_POLL_GROWTH)


def book_lease_lost(slot: Slot, held: dict[str, Slot], stats: Stats, worker_id: str) -> None:
    """A heartbeat found ``slot``'s lease lost: mark it (a running task's outcome is dropped
    when it completes) and forget it now if it has not started."""
    task_id = slot.task.task_id
    slot.lost = True
    stats.lease_lost += 1
    logger.warning("worker %s: lease on %s lost", worker_id, task_id)
    if slot.started_at is None:
        held.pop(task_id, None)


class Flag(Protocol):
    """What a ``threading.Event`` and an ``asyncio.Event`` have in common here."""

    def set(self) -> None: ...

    def clear(self) -> None: ...


def after_claim(poll: IdlePoll, listen: Flag, *, got: int, asked: int) -> bool:
    """Book a claim's outcome; True when it came back short (the queue had less than asked).

    The idle poll steps (back to its minimum after work, one step longer after nothing), and
    the wake listener listens only while claims come back short: a worker whose claims are
    full has no use for the wake signal and must leave it to idle workers (ADR 16).
    """
    if got:
        poll.found()
    else:
        poll.empty()
    short = got < asked
    if short:
        listen.set()
    else:
        listen.clear()
    return short


def check_worker_config(config: WorkerConfig) -> None:
    """Reject a worker config that could never work, before any thread starts."""
    if not isinstance(config.max_concurrent_tasks, int) or config.max_concurrent_tasks < 1:
        raise ConfigurationError(
            "max_concurrent_tasks must be an int >= 1",
            path="worker.max_concurrent_tasks",
            value=config.max_concurrent_tasks,
        )
    for field in ("poll_interval_seconds", "task_timeout_seconds", "reaper_interval_seconds"):
        value = getattr(config, field)
        if not isinstance(value, (int, float)) or value <= 0:
            raise ConfigurationError(f"{field} must be > 0", path=f"worker.{field}", value=value)
    if config.graceful_shutdown_timeout < 0:
        raise ConfigurationError(
            "graceful_shutdown_timeout must be >= 0",
            path="worker.graceful_shutdown_timeout",
            value=config.graceful_shutdown_timeout,
        )
    if config.claim_batch_size < 0:
        raise ConfigurationError(
            "claim_batch_size must be >= 0",
            path="worker.claim_batch_size",
            value=config.claim_batch_size,
        )
    for user_id in (*config.assigned_users, *config.steal_targets):
        validate_id(user_id, "user_id")


def heartbeat_interval(config: WorkerConfig, lease_seconds: float) -> float:
    """Seconds between lease extensions: the configured value, else a third of the lease."""
    if config.heartbeat_interval_seconds is not None:
        if config.heartbeat_interval_seconds <= 0:
            raise ConfigurationError(
                "heartbeat_interval_seconds must be > 0",
                path="worker.heartbeat_interval_seconds",
                value=config.heartbeat_interval_seconds,
            )
        return float(config.heartbeat_interval_seconds)
    return max(0.01, lease_seconds / 3)


def claim_size(config: WorkerConfig, free: int) -> int:
    """How many tasks to claim now for ``free`` open places."""
    if config.claim_batch_size > 0:
        return min(free, config.claim_batch_size)
    return free


def safe_callback(name: str, call: Any, *args: Any) -> None:
    """Run a handler callback; its exceptions are logged, never propagated."""
    try:
        call(*args)
    except Exception:
        logger.exception("handler callback %s raised", name)
