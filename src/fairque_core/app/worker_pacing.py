"""How long a worker waits (ADR 14, 16): backoff after backend errors, the adaptive idle poll,
the claim linger, the wake listener's pause and the heartbeat interval. No I/O, no clock."""

from __future__ import annotations

import random

from fairque_core.app.config import WorkerConfig
from fairque_core.domain.errors import ConfigurationError

__all__ = [
    "BACKOFF_BASE_SECONDS",
    "BACKOFF_CAP_SECONDS",
    "CLAIM_LINGER_SECONDS",
    "IDLE_POLL_GROWTH",
    "IDLE_POLL_MIN_SECONDS",
    "Backoff",
    "IdlePoll",
    "heartbeat_interval",
    "listener_pause",
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
        return float(config.heartbeat_interval_seconds)
    return max(0.01, lease_seconds / 3)
