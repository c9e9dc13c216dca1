"""Samples the dashboard keeps in memory: queue counters over time, per-tenant dispatch counts.

The queue reports cumulative counters (``claimed``, ``finished``, ``retried``, ``dead`` ...);
rates are differences between two samples. A sample reads ``get_stats()`` once and, for the
fairness figures, the first ``tenant_limit`` tenants of the tenants index (one
``list_tenants`` page, then one ``get_tenant_fairness`` reading of them). What the window
covers is stated next to every figure computed from it.

Jain's fairness index over the servable tenants of the window, weight-normalised:
``J = (sum x)^2 / (n * sum x^2)`` with ``x_i = dispatches_i / weight_i``; 1.0 is perfectly fair.
Servable: backlogged at both ends of the window and not held by its own limits at any moment
of it (its cap, its rate, a pause: :func:`~fairque_core.domain.tenant_figures.held_between`);
a held tenant got what its limits allowed, is shown as limited with the reason, and is left
out (ADR 67).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from fairque_core import AsyncFairQueue
from fairque_core.domain.tenant_figures import TenantFairness, held_between

__all__ = ["FairnessWindow", "Sample", "Sampler", "TenantSample", "jain_index"]


@attrs.frozen(kw_only=True)
class TenantSample:
    claimed: int
    ready: int
    #: the tenant's fairness figures at the sample (its holds and hold counters)
    figures: TenantFairness | None = None


@attrs.frozen(kw_only=True)
class Sample:
    at: float  # the sampler's clock (monotonic seconds)
    counters: Mapping[str, int]
    tenants: Mapping[str, TenantSample] | None = None
    tenant_total: int = 0


@attrs.frozen(kw_only=True)
class FairnessWindow:
    """Dispatches per tenant between two samples, and what they cover. ``backlogged``: the
    servable tenants (compared); ``limited``: tenant -> why its own limits held it at some
    moment of the window (``cap``, ``rate``, ``paused``)."""

    seconds: float
    backlogged: tuple[str, ...]
    dispatches: Mapping[str, int]
    weights: Mapping[str, float]
    tracked: int
    tenant_total: int
    jain: float | None
    limited: Mapping[str, str] = attrs.field(factory=dict)

    def share(self, tenant: str) -> float | None:
        """A backlogged tenant's share of the backlogged tenants' dispatches (comparable with
        its fair share); another tenant's share of all dispatches."""
        if tenant not in self.dispatches:
            return None
        among = self.backlogged if tenant in self.backlogged else tuple(self.dispatches)
        total = sum(self.dispatches[t] for t in among)
        return self.dispatches[tenant] / total if total > 0 else None

    def fair_share(self, tenant: str) -> float | None:
        if tenant not in self.backlogged:
            return None
        total = sum(self.weights.get(t, 1.0) for t in self.backlogged)
        return self.weights.get(tenant, 1.0) / total if total > 0 else None


def jain_index(values: list[float]) -> float | None:
    """Jain's index of ``values``; None for no values or all zero."""
    if not values:
        return None
    squares = sum(v * v for v in values)
    if squares <= 0:
        return None
    return (sum(values) ** 2) / (len(values) * squares)


class Sampler:
    """Keeps the last ``keep`` samples, one every ``interval`` seconds while running."""

    def __init__(
        self,
        queue: AsyncFairQueue,
        *,
        interval: float = 2.0,
        keep: int = 300,
        tenant_limit: int = 1000,
        window_seconds: float = 60.0,
        weights: Callable[[], Mapping[str, float]] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._queue = queue
        self.interval = interval
        self.tenant_limit = tenant_limit
        self.window_seconds = window_seconds
        self._weights = weights or dict
        self._clock = clock
        self.samples: deque[Sample] = deque(maxlen=keep)
        self.last_error: str | None = None
        #: Weights the queue reported at the last sample (``get_tenant_weights``), if any.
        self.stored_weights: dict[str, float] = {}
        self._lock = asyncio.Lock()

    async def sample(self) -> Sample:
        """Take one sample now and keep it."""
        async with self._lock:
            stats = await self._queue.get_stats()
            counters = {
                k: int(v)
                for k, v in stats.items()
                if isinstance(v, (int, float)) and not isinstance(v, bool)
            }
            tenants, total = await self._tenant_sample()
            taken = Sample(at=self._clock(), counters=counters, tenants=tenants, tenant_total=total)
            self.samples.append(taken)
            return taken

    async def _tenant_sample(self) -> tuple[dict[str, TenantSample] | None, int]:
        if self.tenant_limit <= 0:
            return None, 0
        names, total = await self._queue.list_tenants(limit=min(self.tenant_limit, 1000))
        if not names:
            return {}, total
        # one read-only call: dispatches (claimed), ready work, holds and hold counters
        figures = await self._queue.get_tenant_fairness(list(names))
        reader = getattr(self._queue, "get_tenant_weights", None)
        if reader is not None:  # the queue's stored weights, when it can say them
            stored = await reader(names)
            self.stored_weights = {t: float(w) for t, (w, _tier) in stored.items()}
        out = {
            f.tenant: TenantSample(claimed=f.dispatched, ready=f.ready, figures=f) for f in figures
        }
        return out, total

    async def run(self) -> None:
        """Sample forever (until cancelled); a failed sample is noted and retried next tick."""
        while True:
            try:
                await self.sample()
                self.last_error = None
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # shown on the overview, never fatal
                self.last_error = f"{type(exc).__name__}: {exc}"
            await asyncio.sleep(self.interval)

    async def ensure_recent(self) -> None:
        """Take a sample if the last one is older than the interval (or there is none)."""
        if not self.samples or self._clock() - self.samples[-1].at >= self.interval:
            with contextlib.suppress(Exception):
                await self.sample()

    # ------------------------------------------------------------------ series
    def rate_series(self, *counters: str) -> list[tuple[float, float]]:
        """``(seconds ago, per second)`` of the sum of ``counters`` between samples."""
        out: list[tuple[float, float]] = []
        items = list(self.samples)
        if not items:
            return out
        now = items[-1].at
        for before, after in itertools.pairwise(items):
            dt = after.at - before.at
            if dt <= 0:
                continue
            delta = sum(after.counters.get(c, 0) - before.counters.get(c, 0) for c in counters)
            out.append((now - after.at, max(delta, 0) / dt))
        return out

    def failure_series(self) -> list[tuple[float, float]]:
        """``(seconds ago, failed attempts / attempts ended)`` between samples (0 when idle)."""
        out: list[tuple[float, float]] = []
        items = list(self.samples)
        if not items:
            return out
        now = items[-1].at
        for before, after in itertools.pairwise(items):

            def delta(name: str, a: Sample = after, b: Sample = before) -> int:
                return max(a.counters.get(name, 0) - b.counters.get(name, 0), 0)

            failed = delta("retried") + delta("dead")
            ended = failed + delta("finished")
            out.append((now - after.at, failed / ended if ended else 0.0))
        return out

    # ------------------------------------------------------------------ fairness
    def fairness(self) -> FairnessWindow | None:
        """Dispatches per tenant over the last window (None before two tenant samples)."""
        items = [s for s in self.samples if s.tenants is not None]
        if len(items) < 2:
            return None
        newest = items[-1]
        oldest = next(s for s in items if newest.at - s.at <= self.window_seconds)
        if oldest is newest:
            oldest = items[-2]
        assert newest.tenants is not None
        assert oldest.tenants is not None
        # A tenant missing from the oldest sample is a newcomer (counted from 0) when that
        # sample covered every tenant; otherwise it was past the tracking limit: left out. A
        # newcomer had no ready work at the window's start, so it is not backlogged over the
        # window (it counted as backlogged and dragged a fair queue's Jain index down)
        complete = len(oldest.tenants) >= oldest.tenant_total
        newcomer = TenantSample(claimed=0, ready=0)
        dispatches: dict[str, int] = {}
        backlogged: list[str] = []
        limited: dict[str, str] = {}
        for tenant, now in newest.tenants.items():
            then = oldest.tenants.get(tenant, newcomer if complete else None)
            if then is None:
                continue
            dispatches[tenant] = max(now.claimed - then.claimed, 0)
            held = held_between(then.figures, now.figures) if now.figures is not None else ""
            if held:
                limited[tenant] = held  # held by its own limits: got what they allowed
            elif now.ready > 0 and then.ready > 0:
                backlogged.append(tenant)
        weights = dict(self._weights())
        weights.update(self.stored_weights)
        values = [dispatches[t] / max(weights.get(t, 1.0), 1e-9) for t in backlogged]
        jain = jain_index(values)
        return FairnessWindow(
            seconds=newest.at - oldest.at,
            backlogged=tuple(backlogged),
            dispatches=dispatches,
            weights={t: weights.get(t, 1.0) for t in newest.tenants},
            tracked=len(newest.tenants),
            tenant_total=newest.tenant_total,
            jain=None if jain is None or math.isnan(jain) else jain,
            limited=limited,
        )

    def status(self) -> dict[str, Any]:
        return {
            "samples": len(self.samples),
            "interval": self.interval,
            "last_error": self.last_error,
        }
