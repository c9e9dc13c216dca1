"""OpenTelemetry metrics: task counters, wait and run time histograms, queue gauges.

What this process did, from the engine's task events (attributes ``queue``, ``priority`` and,
capped, ``tenant``):

* counters ``fairque.tasks.pushed`` (new tasks only, not duplicate ids),
  ``fairque.tasks.finished``, ``fairque.tasks.failed`` (every failed attempt, with
  ``failure_type``), ``fairque.tasks.retried``, ``fairque.tasks.dead_lettered`` (with
  ``failure_type``), ``fairque.tasks.poisoned`` (the ``poisoned`` part of dead_lettered),
  ``fairque.tasks.released`` and ``fairque.tasks.canceled``;
* histograms ``fairque.task.wait_time`` (s, ready to claimed) and ``fairque.task.run_time``
  (s, per attempt, finished or failed), with :data:`SECONDS_BUCKETS` as explicit bucket
  boundaries (an OpenTelemetry advisory: a View of your own still takes precedence).

What the queue holds, read from ``get_stats()`` once :meth:`OpenTelemetryMetrics.observe_stats`
is given a source (attribute ``queue``; the figures are queue-wide, the same in every process
that reports them):

* gauges ``fairque.queue.tasks`` (attribute ``state``: intake (stored by ``push_intake``, not
  yet ingested, ADR 47), ready, scheduled, leased (claimed by a worker: running, buffered or
  being acknowledged; the tasks *running* are the workers' ``fairque.worker.busy_slots``), and
  each of intake and deferred only when the backend reports it), ``fairque.queue.depth``
  (their sum),
  ``fairque.queue.dlq_size`` and ``fairque.queue.active_tenants``;
* counters (cumulative since the queue was created) named in :data:`QUEUE_COUNTERS`, among
  them ``fairque.queue.leases_recovered`` (expired leases the reaper gave back) and
  ``fairque.queue.canceled``.

And per worker, once :meth:`OpenTelemetryMetrics.observe_worker` is given a worker, its
slots, busy slots, leases, buffer and backend errors; and the registry's count of live and
gone workers once :meth:`OpenTelemetryMetrics.observe_workers` is given a registry (see
:mod:`fairque_plugins.worker_metrics`).

Export each figure once (ADR 72): the queue-wide gauges and counters from one process (``fairque
exporter``), the task counters and histograms and the worker gauges from each worker, so that
a Prometheus ``sum`` over the workers adds up (:mod:`fairque_plugins.prometheus`).

And per tenant, once :meth:`OpenTelemetryMetrics.observe_depth` is given a source, the gauge
``fairque.tenant.depth`` (attributes ``queue``, ``tenant``).

And the fairness gauges, once :meth:`OpenTelemetryMetrics.observe_fairness` is given a source
of ``get_tenant_fairness`` readings: per tenant ``fairque.tenant.lag``, ``.ready``,
``.oldest_ready_age``, ``.share_ratio``, ``.starving`` and ``.limited``, per queue
``fairque.queue.fairness.jain`` and ``fairque.queue.starving_tenants`` (see
:mod:`fairque_plugins.fairness_metrics`).

Cardinality: ``tenant`` takes at most ``max_tenants`` distinct values (default
:data:`DEFAULT_MAX_TENANTS`, the first ones seen); every later tenant is reported as
:data:`OTHER_TENANT`. ``tenant_attribute=False`` leaves the attribute out altogether. Hooks
only record: nothing here blocks or does I/O. The stats source is called from the metrics
collection, at most once per ``stats_ttl_seconds`` whatever the number of instruments.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

from fairque_core.ports.hooks import hookimpl
from fairque_plugins.fairness_metrics import (
    FairnessReadings,
    FairnessSource,
    create_fairness_instruments,
)
from fairque_plugins.worker_metrics import (
    WorkerSource,
    WorkersSource,
    create_registry_instruments,
    create_worker_instruments,
)

if TYPE_CHECKING:
    from opentelemetry.util.types import AttributeValue

    from fairque_core.domain.models import Task

__all__ = [
    "DEFAULT_MAX_TENANTS",
    "OTHER_TENANT",
    "QUEUE_COUNTERS",
    "SECONDS_BUCKETS",
    "DepthSource",
    "OpenTelemetryMetrics",
    "StatsSource",
]

#: A callable returning the current depth of each tenant of one queue.
DepthSource = Callable[[], Mapping[str, int]]
#: A callable returning a queue's ``get_stats()`` dict.
StatsSource = Callable[[], Mapping[str, Any]]

#: Bucket boundaries (seconds) of the wait and run time histograms: 1 ms to 1 h.
SECONDS_BUCKETS: tuple[float, ...] = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
    900.0,
    3600.0,
)
#: How many distinct ``tenant`` values are reported before the rest become :data:`OTHER_TENANT`.
DEFAULT_MAX_TENANTS = 100
#: The ``tenant`` value of every tenant past the cap.
OTHER_TENANT = "_other"

_log = logging.getLogger("fairque.plugins.metrics")

# event -> (instrument, description); failed and dead also carry failure_type
_COUNTERS = {
    "pushed": ("fairque.tasks.pushed", "Tasks accepted by the queue"),
    "finished": ("fairque.tasks.finished", "Tasks that succeeded"),
    "failed": ("fairque.tasks.failed", "Failed attempts"),
    "retried": ("fairque.tasks.retried", "Failed attempts scheduled again"),
    "dead": ("fairque.tasks.dead_lettered", "Tasks moved to the dead-letter queue"),
    "released": ("fairque.tasks.released", "Claimed tasks given back without an attempt"),
    "canceled": ("fairque.tasks.canceled", "Tasks canceled before they ran"),
}
_WITH_FAILURE_TYPE = frozenset({"failed", "dead"})
_POISONED = "poisoned"

#: ``get_stats()`` counter -> (instrument, description) of the queue-wide counters.
QUEUE_COUNTERS: Mapping[str, tuple[str, str]] = {
    "pushed": ("fairque.queue.pushed", "Tasks stored by the queue"),
    "duplicates": ("fairque.queue.duplicates", "Pushes of a task id the queue already had"),
    "claimed": ("fairque.queue.claimed", "Claims handed to workers"),
    "finished": ("fairque.queue.finished", "Tasks that succeeded"),
    "retried": ("fairque.queue.retried", "Failed attempts scheduled again"),
    "dead": ("fairque.queue.dead_lettered", "Tasks moved to the dead-letter queue"),
    "recovered": (
        "fairque.queue.leases_recovered",
        "Expired leases the reaper made ready again",
    ),
    "released": ("fairque.queue.released", "Claims given back without an attempt"),
    "canceled": ("fairque.queue.canceled", "Tasks canceled"),
    "dlq_requeued": ("fairque.queue.dlq_requeued", "Dead-letter entries queued again"),
}
# fairque.queue.tasks state -> get_stats() key
# intake: entries not yet ingested (ADR 47); a queue that does not report it leaves it out
_STATES = (
    ("intake", "intake"),
    ("ready", "ready"),
    ("scheduled", "scheduled"),
    ("deferred", "deferred"),
)
_LEASED_KEY = "leased"


def _seconds(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) and value >= 0 else None


def _count(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    try:
        number = int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return None
    return number if number >= 0 else None


def _key(key: str) -> Callable[[Mapping[str, Any]], int | None]:
    """Pick ``stats[key]`` as a count (None when missing or not a count)."""

    def pick(stats: Mapping[str, Any]) -> int | None:
        return _count(stats.get(key))

    return pick


class _CachedStats:
    """One stats source, called at most once per ``ttl`` seconds (failures are cached too)."""

    def __init__(self, queue: str, source: StatsSource, ttl: float) -> None:
        self.queue = queue
        self._source = source
        self._ttl = ttl
        self._lock = threading.Lock()
        self._at: float | None = None
        self._value: dict[str, Any] | None = None

    def read(self) -> dict[str, Any] | None:
        with self._lock:
            now = time.monotonic()
            if self._at is not None and now - self._at < self._ttl:
                return self._value
            try:
                self._value = dict(self._source())
            except Exception:
                _log.exception("stats source for queue %r failed", self.queue)
                self._value = None
            self._at = time.monotonic()
            return self._value


class OpenTelemetryMetrics:
    """Record fairque task metrics with an OpenTelemetry meter.

    ``meter_provider`` defaults to the global one (a no-op until an SDK is configured).
    ``max_tenants`` caps the distinct values of the ``tenant`` attribute (see the module
    docstring); ``stats_ttl_seconds`` is how long one ``get_stats()`` answer serves the queue
    gauges and counters (set it near your collection interval); ``bucket_boundaries`` are the
    histograms' explicit bucket boundaries in seconds.
    """

    fairque_plugin_name = "fairque.metrics"

    def __init__(
        self,
        meter_provider: metrics.MeterProvider | None = None,
        *,
        tenant_attribute: bool = True,
        max_tenants: int = DEFAULT_MAX_TENANTS,
        stats_ttl_seconds: float = 1.0,
        bucket_boundaries: Iterable[float] = SECONDS_BUCKETS,
    ) -> None:
        if isinstance(max_tenants, bool) or not isinstance(max_tenants, int) or max_tenants < 0:
            raise ValueError(f"max_tenants must be an int >= 0, got {max_tenants!r}")
        ttl = _seconds(stats_ttl_seconds)
        if ttl is None:
            raise ValueError(f"stats_ttl_seconds must be >= 0, got {stats_ttl_seconds!r}")
        bounds = [float(b) for b in bucket_boundaries]
        if any(not math.isfinite(b) for b in bounds) or bounds != sorted(set(bounds)):
            raise ValueError("bucket_boundaries must be finite and strictly increasing")
        self._meter = metrics.get_meter("fairque", meter_provider=meter_provider)
        self.tenant_attribute = tenant_attribute
        self.max_tenants = max_tenants
        self.stats_ttl_seconds = ttl
        self._tenants: frozenset[str] = frozenset()
        self._counters = {
            event: self._meter.create_counter(name, unit="{task}", description=text)
            for event, (name, text) in _COUNTERS.items()
        }
        self._poisoned = self._meter.create_counter(
            "fairque.tasks.poisoned", unit="{task}", description="Tasks dead-lettered as poisoned"
        )
        self._wait = self._meter.create_histogram(
            "fairque.task.wait_time",
            unit="s",
            description="Seconds from ready to claimed",
            explicit_bucket_boundaries_advisory=bounds,
        )
        self._run = self._meter.create_histogram(
            "fairque.task.run_time",
            unit="s",
            description="Seconds one attempt ran",
            explicit_bucket_boundaries_advisory=bounds,
        )
        self._depth_sources: list[tuple[str, DepthSource]] = []
        self._stats_sources: list[_CachedStats] = []
        self._lock = threading.Lock()
        self._depth_gauge = False
        self._stats_instruments = False
        self._fairness_sources: list[FairnessReadings] = []
        self._workers: list[WorkerSource] = []
        self._slots: dict[str, int] = {}
        self._registries: list[tuple[str, WorkersSource]] = []

    # ------------------------------------------------------------------ tenants
    def tenant_label(self, tenant: str) -> str:
        """The ``tenant`` attribute value reported for ``tenant`` (itself, or OTHER_TENANT)."""
        if tenant in self._tenants:
            return tenant
        with self._lock:
            if tenant in self._tenants:
                return tenant
            if len(self._tenants) < self.max_tenants:
                self._tenants = self._tenants | {tenant}
                return tenant
        return OTHER_TENANT

    def _attributes(self, task: Task, queue: str) -> dict[str, AttributeValue]:
        out: dict[str, AttributeValue] = {"queue": queue, "priority": int(task.priority)}
        if self.tenant_attribute:
            out["tenant"] = self.tenant_label(task.tenant)
        return out

    # ------------------------------------------------------------------ events
    @hookimpl
    def fairque_task_event(
        self, event: str, task: Task, queue: str, info: Mapping[str, Any]
    ) -> None:
        if event == "pushed" and info.get("duplicate"):
            return
        attributes = self._attributes(task, queue)
        counter = self._counters.get(event)
        if counter is not None:
            extra = attributes
            if event in _WITH_FAILURE_TYPE:
                extra = dict(attributes)
                failure = info.get("failure_type")
                extra["failure_type"] = "failed" if failure is None else str(failure)
                if event == "dead" and extra["failure_type"] == _POISONED:
                    self._poisoned.add(1, attributes)
            counter.add(1, extra)
        if event == "started":
            wait = _seconds(info.get("wait_seconds"))
            if wait is not None:
                self._wait.record(wait, attributes)
        elif event in ("finished", "failed"):
            run = _seconds(info.get("run_seconds"))
            if run is not None:
                self._run.record(run, attributes)

    # ------------------------------------------------------------------ per-tenant depth
    def observe_depth(self, source: DepthSource, *, queue: str = "default") -> None:
        """Report ``source()`` (``{tenant: depth}``) as ``fairque.tenant.depth`` on collection.

        Call once per queue; the gauge is created on the first call. Tenants past the cap are
        summed into OTHER_TENANT. A source that raises is logged and skipped for that
        collection.
        """
        with self._lock:
            self._depth_sources.append((queue, source))
            if self._depth_gauge:
                return
            self._depth_gauge = True
        self._meter.create_observable_gauge(
            "fairque.tenant.depth",
            callbacks=[self._observe_depth],
            unit="{task}",
            description="Tasks waiting or running, per tenant",
        )

    def _observe_depth(self, _options: CallbackOptions) -> Iterable[Observation]:
        with self._lock:
            sources = list(self._depth_sources)
        observations: list[Observation] = []
        for queue, source in sources:
            try:
                depths = dict(source())
            except Exception:
                _log.exception("queue depth source for %r failed", queue)
                continue
            if not self.tenant_attribute:
                observations.append(Observation(sum(depths.values()), {"queue": queue}))
                continue
            merged: dict[str, int] = {}
            for tenant, depth in depths.items():
                label = self.tenant_label(tenant)
                merged[label] = merged.get(label, 0) + depth
            observations += [
                Observation(depth, {"queue": queue, "tenant": label})
                for label, depth in merged.items()
            ]
        return observations

    # ------------------------------------------------------------------ fairness
    def observe_fairness(
        self, source: FairnessSource, *, queue: str = "default", strict_tiers: bool = False
    ) -> None:
        """Report the fairness gauges from ``source()`` (``get_tenant_fairness`` figures, e.g.
        ``lambda: queue.get_tenant_fairness(limit=1000)``), read at most once per
        ``stats_ttl_seconds``; shares and Jain's index compare each reading with the one
        before (``strict_tiers``: the queue's mode). Call once per queue; the instruments
        are created on the first call. A source that raises is logged and skipped."""
        reader = FairnessReadings(queue, source, self.stats_ttl_seconds, strict_tiers=strict_tiers)
        with self._lock:
            self._fairness_sources.append(reader)
            if len(self._fairness_sources) > 1:
                return
        label = self.tenant_label if self.tenant_attribute else None
        create_fairness_instruments(self._meter, self._fairness_readers, label)

    def _fairness_readers(self) -> list[FairnessReadings]:
        with self._lock:
            return list(self._fairness_sources)

    # ------------------------------------------------------------------ workers
    def observe_worker(self, worker: Any) -> None:
        """Report the gauges of ``worker`` (a ``Worker`` or ``AsyncWorker``: its slots, busy
        slots, leases, buffer, and its backend errors) from its ``health()`` on collection,
        attributes ``queue`` and ``worker`` (its id). Call in the worker's own process."""
        queue = str(getattr(worker.queue, "name", ""))
        worker_id = str(worker.config.id)
        with self._lock:
            self._workers.append((queue, worker_id, worker.health))
            self._slots[worker_id] = int(worker.config.max_concurrent_tasks)
            if len(self._workers) > 1:
                return
        create_worker_instruments(self._meter, self._worker_sources, self._slots.__getitem__)

    def _worker_sources(self) -> list[WorkerSource]:
        with self._lock:
            return list(self._workers)

    def observe_workers(self, source: WorkersSource, *, queue: str = "default") -> None:
        """Report ``fairque.workers`` (live and gone workers) from ``source()``, e.g.
        ``WorkerRegistry(queue.backend).list``. Call once per queue, in one process."""
        with self._lock:
            self._registries.append((queue, source))
            if len(self._registries) > 1:
                return
        create_registry_instruments(self._meter, self._registry_sources)

    def _registry_sources(self) -> list[tuple[str, WorkersSource]]:
        with self._lock:
            return list(self._registries)

    # ------------------------------------------------------------------ queue stats
    def observe_stats(self, source: StatsSource, *, queue: str = "default") -> None:
        """Report the queue gauges and counters from ``source()`` (a ``get_stats()`` dict).

        Pass ``queue.get_stats`` of a :class:`~fairque_core.FairQueue` (an ``AsyncFairQueue``
        needs a synchronous callable, e.g. one returning the last stats your loop read). Call
        once per queue; the instruments are created on the first call. A source that raises
        is logged and the queue is left out of that collection.
        """
        with self._lock:
            self._stats_sources.append(_CachedStats(queue, source, self.stats_ttl_seconds))
            if self._stats_instruments:
                return
            self._stats_instruments = True
        gauge = self._meter.create_observable_gauge
        gauge(
            "fairque.queue.tasks",
            callbacks=[self._observe_tasks],
            unit="{task}",
            description="Tasks in the queue by state (intake, ready, scheduled, deferred, leased)",
        )
        gauge(
            "fairque.queue.depth",
            callbacks=[self._stats_callback(self._depth_of)],
            unit="{task}",
            description="Tasks waiting or running in the queue",
        )
        gauge(
            "fairque.queue.dlq_size",
            callbacks=[self._stats_callback(_key("dlq"))],
            unit="{task}",
            description="Entries in the dead-letter queue",
        )
        gauge(
            "fairque.queue.active_tenants",
            callbacks=[self._stats_callback(_key("active_tenants"))],
            unit="{tenant}",
            description="Tenants with ready tasks",
        )
        for key, (name, text) in QUEUE_COUNTERS.items():
            self._meter.create_observable_counter(
                name,
                callbacks=[self._stats_callback(_key(key))],
                unit="{task}",
                description=f"{text} (queue-wide, cumulative)",
            )

    def _stats(self) -> list[tuple[str, dict[str, Any]]]:
        with self._lock:
            sources = list(self._stats_sources)
        out: list[tuple[str, dict[str, Any]]] = []
        for cached in sources:
            stats = cached.read()
            if stats is not None:
                out.append((cached.queue, stats))
        return out

    def _stats_callback(
        self, pick: Callable[[Mapping[str, Any]], int | None]
    ) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def callback(_options: CallbackOptions) -> Iterable[Observation]:
            observations: list[Observation] = []
            for queue, stats in self._stats():
                value = pick(stats)
                if value is not None:
                    observations.append(Observation(value, {"queue": queue}))
            return observations

        return callback

    @staticmethod
    def _states(stats: Mapping[str, Any]) -> list[tuple[str, int]]:
        out: list[tuple[str, int]] = []
        for state, key in (*_STATES, ("leased", _LEASED_KEY)):
            value = _count(stats.get(key))
            if value is not None:
                out.append((state, value))
        return out

    def _depth_of(self, stats: Mapping[str, Any]) -> int | None:
        states = self._states(stats)
        return sum(v for _, v in states) if states else None

    def _observe_tasks(self, _options: CallbackOptions) -> Iterable[Observation]:
        return [
            Observation(value, {"queue": queue, "state": state})
            for queue, stats in self._stats()
            for state, value in self._states(stats)
        ]
