"""Which tenants a limit holds during a simulation, and until when (ADR 28's limits).

:func:`fairque_testing.simulate` asks the queue, never guesses: before the run it reads every
tenant's limits in force (``get_tenant_limits``: its own, else its tier's defaults) and keeps
the tenants that have a rate or a concurrency cap, or are paused. After each claim that served
one of them it reads the tenant's status again: at its cap, or with its next start in the
future, it is *held*, from its last dispatch of that claim on. A cap lets go when the claim's
tasks are finished; a rate at the first whole millisecond the queue lets the tenant start again
(the backends compare whole milliseconds, :func:`fairque_core.domain.scoring.to_ms`). The
trace gets a :class:`~fairque_testing.Held` and an :class:`~fairque_testing.Unheld` event for
each hold, so the report does not count a held tenant as owed a share.
"""

from __future__ import annotations

from collections.abc import Iterable

from fairque_core import FairQueue
from fairque_core.domain.limits import LimitStatus
from fairque_core.domain.scoring import to_ms

__all__ = ["HoldTracker"]


def _release_ms(status: LimitStatus, now_ms: int) -> int | None:
    """The first whole millisecond the rate lets the tenant start again (None: now)."""
    if status.next_start_at is None:
        return None
    at_us = round(status.next_start_at * 1_000_000)
    release = -(-at_us // 1000)
    return release if release > now_ms else None


class HoldTracker:
    """The limited tenants of one simulation and the holds on them."""

    def __init__(self, queue: FairQueue, tenants: Iterable[str]) -> None:
        self._queue = queue
        self.limited: set[str] = set()
        self.paused: set[str] = set()
        for tenant in tenants:
            status = queue.get_tenant_limits(tenant)
            if status.paused:
                self.paused.add(tenant)
            if status.effective.rate is not None or status.effective.max_running is not None:
                self.limited.add(tenant)
        #: held tenant -> the millisecond its rate lets it go (None: at the claim's finish)
        self.held: dict[str, int | None] = {}
        limits = queue.config.limits
        #: seconds between starts under a queue-wide rate (0: none)
        self.queue_interval = 1.0 / limits.rate if limits.rate else 0.0

    def check(self, tenant: str, now: float) -> str | None:
        """After a claim that served ``tenant`` (before it is finished): the reason a limit now
        holds it (``"cap"``, ``"rate"``) and the hold recorded, or None."""
        if tenant not in self.limited:
            return None
        status = self._queue.get_tenant_limits(tenant)
        release = _release_ms(status, to_ms(now))
        if status.capped:
            self.held[tenant] = release
            return "cap"
        if release is not None:
            self.held[tenant] = release
            return "rate"
        return None

    def after_finish(self, tenants: Iterable[str]) -> list[str]:
        """The claim's tasks are finished: the tenants only a cap held are let go."""
        freed = [t for t in tenants if t in self.held and self.held[t] is None]
        for tenant in freed:
            del self.held[tenant]
        return freed

    def due(self, now: float) -> list[str]:
        """The tenants whose rate lets them go at ``now`` (removed from the holds)."""
        now_ms = to_ms(now)
        freed = [t for t, ms in self.held.items() if ms is not None and ms <= now_ms]
        for tenant in freed:
            del self.held[tenant]
        return freed

    def let_go(self, tenant: str) -> bool:
        """``tenant`` was served: whatever held it has let go (True when it was held)."""
        if tenant in self.held:
            del self.held[tenant]
            return True
        return False

    def next_release(self, waiting: Iterable[str]) -> float | None:
        """Epoch seconds of the first release among the held tenants of ``waiting`` (those
        with ready work): a moment inside that millisecond, safe from rounding."""
        times = [ms for t in waiting if (ms := self.held.get(t)) is not None]
        return (min(times) + 0.5) / 1000 if times else None
