"""How long a worker waits (ADR 14, 16): backoff after backend errors, the adaptive idle poll,
the claim and ack lingers, the wake listener's pause, the heartbeat interval, and how deep the
adaptive prefetch goes (ADR 30). No I/O, no clock."""

from __future__ import annotations

import math
import random

from fairque_core.domain.errors import ConfigurationError
from fairque_core.domain.validation import validate_id
from fairque_core.settings.config import WorkerConfig

__all__ = [
    "ACK_LINGER_SECONDS",
    "BACKOFF_BASE_SECONDS",
    "BACKOFF_CAP_SECONDS",
    "CLAIM_LINGER_SECONDS",
    "IDLE_POLL_GROWTH",
    "IDLE_POLL_MIN_SECONDS",
    "LISTEN_MIN_WAIT_SECONDS",
    "PREFETCH_COVER",
    "PREFETCH_LEASE_FRACTION",
    "PREFETCH_MAX",
    "Backoff",
    "IdlePoll",
    "PrefetchGauge",
    "check_worker_config",
    "heartbeat_interval",
    "listener_pause",
    "prefetch_bound",
    "prefetch_depth",
]

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
#: ... but a claim handed to a listener whose wait blocks on the wake signal (ADR 38) waits at
#: least this long (at most ``poll_interval_seconds``): every push, every claim that leaves work
#: and every freed cap raises that signal, so a shorter poll finds nothing the signal would not
#: bring, while each of its rounds is a gap in which the listener is not waiting and a push
#: waits for the round to end (ADR 46). Under the Redis backend's 10 ms ``DUE_CHECK_SECONDS``,
#: so such a wait is still one round trip (no ``next_due`` call first).
LISTEN_MIN_WAIT_SECONDS = 0.008
#: Longest time a finished task's acknowledgement waits for the next claim to carry it (while
#: other tasks are still running, so that a claim is coming).
ACK_LINGER_SECONDS = 0.002

#: Adaptive prefetch (ADR 30): the claimed-but-unstarted tasks should keep the places busy for
#: ``PREFETCH_COVER`` claim round trips, never more than ``PREFETCH_MAX`` of them, and never more
#: than can start within ``PREFETCH_LEASE_FRACTION`` of the lease at the measured run time.
PREFETCH_COVER = 2.0
PREFETCH_MAX = 100
PREFETCH_LEASE_FRACTION = 0.1
#: Weight of the newest sample in the moving averages of run time and claim round trip.
EWMA_WEIGHT = 0.2
#: Run times below this count as this (a no-op handler measures a few microseconds).
MIN_RUN_SECONDS = 1e-6


class Backoff:
    """Capped exponential backoff with full jitter over consecutive backend errors."""

    def __init__(
        self,
        base: float = BACKOFF_BASE_SECONDS,
        cap: float = BACKOFF_CAP_SECONDS,
        rng: random.Random | None = None,
    ) -> None:
        self.base = base
        self.cap = cap
        self.failures = 0
        self.retry_at = 0.0
        self._rng = rng or random.Random()

    def fail(self, now: float) -> float:
        """Record one more failure; returns the delay until the next attempt."""
        self.failures += 1
        ceiling = min(self.cap, self.base * float(1 << min(self.failures, 16)))
        delay = ceiling / 2 + self._rng.uniform(0, ceiling / 2)
        self.retry_at = now + delay
        return delay

    def ok(self) -> None:
        self.failures = 0
        self.retry_at = 0.0

    def waiting(self, now: float) -> float:
        """Seconds left before backend calls may resume (0 when not backing off)."""
        return max(0.0, self.retry_at - now)


class IdlePoll:
    """The wait before the next claim when the queue came back short (adaptive backoff)."""

    def __init__(self, cap: float) -> None:
        self.cap = cap
        self.found()

    def found(self) -> None:
        """A claim returned work: poll again after the minimum, then back off from there."""
        self.wait = min(self.cap, IDLE_POLL_MIN_SECONDS)
        self._next = min(self.cap, self.wait * IDLE_POLL_GROWTH)

    def empty(self) -> None:
        """A claim returned nothing: wait the current step, grow the next one."""
        self.wait = self._next
        self._next = min(self.cap, self._next * IDLE_POLL_GROWTH)


def prefetch_bound(cap: int, run_seconds: float, lease_seconds: float) -> int:
    """Most unstarted tasks a worker may hold: with ``cap`` places each busy ``run_seconds`` per
    task, the last of them starts within ``PREFETCH_LEASE_FRACTION`` of the lease."""
    run = max(run_seconds, MIN_RUN_SECONDS)
    return max(0, math.floor(cap * PREFETCH_LEASE_FRACTION * lease_seconds / run))


def prefetch_depth(cap: int, run_seconds: float, trip_seconds: float, lease_seconds: float) -> int:
    """How many tasks to claim beyond the free places (ADR 30).

    Enough to keep ``cap`` places busy for ``PREFETCH_COVER`` claim round trips of
    ``trip_seconds`` (so large for fast tasks, 0 for tasks much slower than a round trip), at
    most ``PREFETCH_MAX`` and at most :func:`prefetch_bound`.
    """
    run = max(run_seconds, MIN_RUN_SECONDS)
    want = math.floor(cap * PREFETCH_COVER * max(0.0, trip_seconds) / run)
    return min(want, PREFETCH_MAX, prefetch_bound(cap, run, lease_seconds))


class PrefetchGauge:
    """Moving averages of the handlers' run time and of the claim round trip, and the prefetch
    depth they give. Nothing is prefetched before the first task has run."""

    def __init__(self, cap: int, lease_seconds: float) -> None:
        self.cap = cap
        self.lease_seconds = lease_seconds
        self.run: float | None = None
        self.trip: float | None = None
        # prefetch_depth's factors, as it computes them (the same floats): depth() runs after
        # every handler's end (ADR 51), so it spells the rule out instead of calling it
        self._cover = cap * PREFETCH_COVER
        self._bound = cap * PREFETCH_LEASE_FRACTION * lease_seconds

    def ran(self, seconds: float) -> None:
        self.run = seconds if self.run is None else self.run + EWMA_WEIGHT * (seconds - self.run)

    def tripped(self, seconds: float) -> None:
        seconds = max(0.0, seconds)
        self.trip = (
            seconds if self.trip is None else self.trip + EWMA_WEIGHT * (seconds - self.trip)
        )

    def depth(self) -> int:
        """``prefetch_depth(cap, run, trip, lease_seconds)`` of the current averages."""
        run, trip = self.run, self.trip
        if run is None or trip is None:
            return 0
        run = max(run, MIN_RUN_SECONDS)
        want = math.floor(self._cover * max(0.0, trip) / run)
        bound = math.floor(self._bound / run)
        return min(want, PREFETCH_MAX, max(0, bound))


def listener_pause(failures: int) -> float:
    """How long a wake listener pauses after ``failures`` failed waits in a row."""
    return min(BACKOFF_CAP_SECONDS, BACKOFF_BASE_SECONDS * float(1 << min(failures, 16)))


def heartbeat_interval(config: WorkerConfig, lease_seconds: float) -> float:
    """Seconds between lease extensions: the configured value, else a third of the lease."""
    if config.heartbeat_interval_seconds is not None:
        if config.heartbeat_interval_seconds <= 0:
            raise ConfigurationError(
                "heartbeat_interval_seconds must be > 0",
                path="worker.heartbeat_interval_seconds",
                value=config.heartbeat_interval_seconds,
            )
        if config.heartbeat_interval_seconds >= lease_seconds:
            raise ConfigurationError(
                f"heartbeat_interval_seconds must be shorter than the queue's lease "
                f"({lease_seconds:g} s): every lease would run out before its extension",
                path="worker.heartbeat_interval_seconds",
                value=config.heartbeat_interval_seconds,
            )
        return float(config.heartbeat_interval_seconds)
    return max(0.01, lease_seconds / 3)


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
    for tenant in (*config.assigned_tenants, *config.steal_targets):
        validate_id(tenant, "tenant")
