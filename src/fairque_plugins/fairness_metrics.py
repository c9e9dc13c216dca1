"""OpenTelemetry gauges of the queue's fairness, read from ``get_tenant_fairness``.

Used by :meth:`fairque_plugins.metrics.OpenTelemetryMetrics.observe_fairness`. One reading
(the source: e.g. ``lambda: queue.get_tenant_fairness(limit=1000)``) serves every instrument
of a collection and is taken at most once per ``ttl`` seconds; the previous reading is kept,
so each new one also gives the window between the two
(:func:`~fairque_core.domain.tenant_figures.fairness_window`).

Per tenant (attributes ``queue`` and ``tenant``, capped as the other tenant metrics):
``fairque.tenant.lag`` (turns ahead of its tier's virtual time), ``fairque.tenant.ready``,
``fairque.tenant.oldest_ready_age`` (s), ``fairque.tenant.share_ratio`` (window share over
fair share, backlogged tenants only, from the second reading on) and
``fairque.tenant.starving`` (1 with attribute ``reason``, else 0) and
``fairque.tenant.limited`` (1 with attribute ``reason`` while a limit holds its ready work:
``cap``, ``rate``, ``paused`` at some moment of the window, or at the reading also
``queue_paused``; else 0). Past the cap the tenants are one
:data:`~fairque_plugins.metrics.OTHER_TENANT` series holding their worst case: summed ready
tasks, the largest lag and oldest age, the lowest share ratio, starving if any is, limited if
any is.

And ``fairque.tenant.info`` (value 1, attributes ``queue``, ``tenant``, ``tier`` (the stored
tier rank) and ``weight``; tenants past the cap are left out), for joins in PromQL: backlog
age or wait time per tier, share against weight (ADR 72).

Per queue (attribute ``queue``): ``fairque.queue.fairness.jain`` (Jain's index over the
tenants that could be served through the window: backlogged and not held by their own limits,
dispatches divided by weight; 1.0 is perfectly fair) and ``fairque.queue.starving_tenants``
(every tenant read, whatever the cap).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence

import attrs
from opentelemetry.metrics import CallbackOptions, Meter, Observation

from fairque_core.domain.tenant_figures import (
    FairnessWindow,
    TenantFairness,
    fairness_window,
)

__all__ = ["FairnessReadings", "FairnessSource", "create_fairness_instruments"]

#: A callable returning fairness figures of one queue's tenants (``get_tenant_fairness``).
FairnessSource = Callable[[], Sequence[TenantFairness]]

_log = logging.getLogger("fairque.plugins.metrics")


@attrs.frozen
class _Reading:
    at: float
    figures: tuple[TenantFairness, ...]
    window: FairnessWindow | None


#: The shortest span between two fairness readings, whatever the TTL: one collection calls
#: the gauges' callbacks one after the other, and a reading per callback gave windows of
#: milliseconds (no shares, no Jain index) and seven source reads per scrape.
MIN_READING_SECONDS = 0.5


class FairnessReadings:
    """One queue's source, read at most once per ``ttl`` seconds (at least
    :data:`MIN_READING_SECONDS`), counted from the end of the last reading so that a slow
    source is not read again by the next callback of the same collection (a failure is logged
    and leaves the queue out until the next reading)."""

    def __init__(
        self, queue: str, source: FairnessSource, ttl: float, *, strict_tiers: bool = False
    ) -> None:
        self.queue = queue
        self._source = source
        self._ttl = max(ttl, MIN_READING_SECONDS)
        self._strict = strict_tiers
        self._lock = threading.Lock()
        self._tried: float | None = None
        self._last: _Reading | None = None
        self._failed = False

    def read(self) -> _Reading | None:
        with self._lock:
            now = time.monotonic()
            if self._tried is not None and now - self._tried < self._ttl:
                return None if self._failed else self._last
            try:
                figures = tuple(self._source())
            except Exception:
                _log.exception("fairness source for queue %r failed", self.queue)
                self._failed = True
                return None
            finally:
                self._tried = time.monotonic()
            self._failed = False
            window = None
            if self._last is not None:
                seconds = now - self._last.at
                window = fairness_window(
                    self._last.figures, figures, seconds, strict_tiers=self._strict
                )
            self._last = _Reading(now, figures, window)
            return self._last


@attrs.define
class _Merged:
    ready: int = 0
    lag: float = 0.0
    oldest: float | None = None
    ratio: float | None = None
    reason: str = ""
    limited: str = ""


def _merge(
    into: _Merged, figure: TenantFairness, ratio: float | None, reason: str, limited: str
) -> None:
    into.ready += figure.ready
    into.lag = max(into.lag, figure.lag)
    if figure.oldest_ready_age is not None:
        into.oldest = max(into.oldest or 0.0, figure.oldest_ready_age)
    if ratio is not None:
        into.ratio = ratio if into.ratio is None else min(into.ratio, ratio)
    into.reason = into.reason or reason
    into.limited = into.limited or limited


def _with_reason(attributes: dict[str, str], reason: str) -> dict[str, str]:
    return {**attributes, "reason": reason} if reason else attributes


def create_fairness_instruments(
    meter: Meter,
    readings: Callable[[], list[FairnessReadings]],
    label: Callable[[str], str] | None,
) -> None:
    """Create the fairness gauges on ``meter``. ``readings`` lists the queues' readers at
    collection time; ``label`` maps a tenant to its attribute value (None: no ``tenant``
    attribute, so the per-tenant gauges report the queue's worst case)."""

    def per_tenant() -> list[tuple[str, str | None, _Merged]]:
        out: list[tuple[str, str | None, _Merged]] = []
        for reader in readings():
            reading = reader.read()
            if reading is None:
                continue
            merged: dict[str | None, _Merged] = {}
            for figure in reading.figures:
                key = label(figure.tenant) if label is not None else None
                ratio, reason = None, figure.starving_reason
                limited = figure.limited_reason
                if reading.window is not None:
                    w = reading.window.tenants.get(figure.tenant)
                    if w is not None:
                        ratio, reason = w.share_ratio, w.starving_reason
                        limited = w.limited_reason or limited  # held in the window
                _merge(merged.setdefault(key, _Merged()), figure, ratio, reason, limited)
            out += [(reader.queue, key, m) for key, m in merged.items()]
        return out

    def attributes(queue: str, tenant: str | None) -> dict[str, str]:
        return {"queue": queue} if tenant is None else {"queue": queue, "tenant": tenant}

    def gauge(pick: Callable[[_Merged], float | None]) -> Callable[..., Iterable[Observation]]:
        def callback(_options: CallbackOptions) -> Iterable[Observation]:
            observations = []
            for queue, tenant, merged in per_tenant():
                value = pick(merged)
                if value is not None:
                    observations.append(Observation(value, attributes(queue, tenant)))
            return observations

        return callback

    def starving(_options: CallbackOptions) -> Iterable[Observation]:
        return [
            Observation(1 if m.reason else 0, _with_reason(attributes(queue, tenant), m.reason))
            for queue, tenant, m in per_tenant()
        ]

    def limited(_options: CallbackOptions) -> Iterable[Observation]:
        return [
            Observation(1 if m.limited else 0, _with_reason(attributes(queue, t), m.limited))
            for queue, t, m in per_tenant()
        ]

    def jain(_options: CallbackOptions) -> Iterable[Observation]:
        out = []
        for reader in readings():
            reading = reader.read()
            window = reading.window if reading is not None else None
            if window is not None and window.jain is not None:
                out.append(Observation(window.jain, {"queue": reader.queue}))
        return out

    def starving_count(_options: CallbackOptions) -> Iterable[Observation]:
        out = []
        for reader in readings():
            reading = reader.read()
            if reading is None:
                continue
            count = sum(1 for f in reading.figures if f.starving)
            if reading.window is not None:
                count = sum(1 for w in reading.window.tenants.values() if w.starving)
            out.append(Observation(count, {"queue": reader.queue}))
        return out

    def info(_options: CallbackOptions) -> Iterable[Observation]:
        out = []
        for reader in readings():
            reading = reader.read()
            if reading is None or label is None:
                continue
            for figure in reading.figures:
                if label(figure.tenant) != figure.tenant:
                    continue  # past the cap: one _other series cannot carry a weight
                attributes = {
                    "queue": reader.queue,
                    "tenant": figure.tenant,
                    "tier": str(figure.tier),
                    "weight": f"{figure.weight:g}",
                }
                out.append(Observation(1, attributes))
        return out

    make = meter.create_observable_gauge
    make(
        "fairque.tenant.info",
        callbacks=[info],
        unit="1",
        description="1 per tenant, with its tier rank and weight as labels (for joins)",
    )
    make(
        "fairque.tenant.lag",
        callbacks=[gauge(lambda m: m.lag)],
        unit="{turn}",
        description="Turns the tenant is ahead of its tier's virtual time (0 = next in line)",
    )
    make(
        "fairque.tenant.ready",
        callbacks=[gauge(lambda m: m.ready)],
        unit="{task}",
        description="Ready tasks of the tenant",
    )
    make(
        "fairque.tenant.oldest_ready_age",
        callbacks=[gauge(lambda m: m.oldest)],
        unit="s",
        description="Seconds the tenant's oldest head task has been ready",
    )
    make(
        "fairque.tenant.share_ratio",
        callbacks=[gauge(lambda m: m.ratio)],
        unit="1",
        description="Share of dispatches over fair share, between two readings (1.0 = fair)",
    )
    make(
        "fairque.tenant.starving",
        callbacks=[starving],
        unit="1",
        description="1 when the tenant is starving (attribute reason: lag or unserved)",
    )
    make(
        "fairque.tenant.limited",
        callbacks=[limited],
        unit="1",
        description="1 while a limit holds the tenant's ready work (attribute reason: cap, "
        "rate, paused or queue_paused)",
    )
    make(
        "fairque.queue.fairness.jain",
        callbacks=[jain],
        unit="1",
        description="Jain's index over the tenants that could be served, dispatches per weight",
    )
    make(
        "fairque.queue.starving_tenants",
        callbacks=[starving_count],
        unit="{tenant}",
        description="Tenants starving at the last reading",
    )
