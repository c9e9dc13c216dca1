"""OpenTelemetry metrics: task counters, wait and run time histograms, queue depth.

Instruments (attributes ``queue``, ``tenant``, ``priority``):

* counters ``fairque.tasks.pushed`` (new tasks only, not duplicate ids),
  ``fairque.tasks.finished``, ``fairque.tasks.failed`` (every failed attempt),
  ``fairque.tasks.retried`` and ``fairque.tasks.dead_lettered`` (plus ``failure_type``);
* histograms ``fairque.task.wait_time`` (s, ready to claimed) and ``fairque.task.run_time``
  (s, per attempt, finished or failed);
* observable gauge ``fairque.queue.depth`` (attributes ``queue``, ``tenant``) once
  :meth:`OpenTelemetryMetrics.observe_depth` is given a source.

Every tenant is a separate time series; with very many tenants pass
``tenant_attribute=False``. Hooks only record: nothing here blocks or does I/O.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

from fairque_core.app.hookspecs import hookimpl

if TYPE_CHECKING:
    from opentelemetry.util.types import AttributeValue

    from fairque_core.domain.models import Task

__all__ = ["DepthSource", "OpenTelemetryMetrics"]

#: A callable returning the current depth of each tenant of one queue.
DepthSource = Callable[[], Mapping[str, int]]

_log = logging.getLogger("fairque.plugins.metrics")

_COUNTERS = {
    "pushed": ("fairque.tasks.pushed", "Tasks accepted by the queue"),
    "finished": ("fairque.tasks.finished", "Tasks that succeeded"),
    "failed": ("fairque.tasks.failed", "Failed attempts"),
    "retried": ("fairque.tasks.retried", "Failed attempts scheduled again"),
    "dead": ("fairque.tasks.dead_lettered", "Tasks moved to the dead-letter queue"),
}


def _seconds(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) and value >= 0 else None


class OpenTelemetryMetrics:
    """Record fairque task metrics with an OpenTelemetry meter.

    ``meter_provider`` defaults to the global one (a no-op until an SDK is configured).
    """

    fairque_plugin_name = "fairque.metrics"

    def __init__(
        self,
        meter_provider: metrics.MeterProvider | None = None,
        *,
        tenant_attribute: bool = True,
    ) -> None:
        self._meter = metrics.get_meter("fairque", meter_provider=meter_provider)
        self.tenant_attribute = tenant_attribute
        self._counters = {
            event: self._meter.create_counter(name, unit="{task}", description=text)
            for event, (name, text) in _COUNTERS.items()
        }
        self._wait = self._meter.create_histogram(
            "fairque.task.wait_time", unit="s", description="Seconds from ready to claimed"
        )
        self._run = self._meter.create_histogram(
            "fairque.task.run_time", unit="s", description="Seconds one attempt ran"
        )
        self._sources: list[tuple[str, DepthSource]] = []
        self._lock = threading.Lock()
        self._gauge_created = False

    def _attributes(self, task: Task, queue: str) -> dict[str, AttributeValue]:
        out: dict[str, AttributeValue] = {"queue": queue, "priority": int(task.priority)}
        if self.tenant_attribute:
            out["tenant"] = task.user_id
        return out

    @hookimpl
    def fairque_task_event(
        self, event: str, task: Task, queue: str, info: Mapping[str, Any]
    ) -> None:
        if event == "pushed" and info.get("duplicate"):
            return
        attributes = self._attributes(task, queue)
        counter = self._counters.get(event)
        if counter is not None:
            extra = dict(attributes)
            if event == "dead" and info.get("failure_type") is not None:
                extra["failure_type"] = str(info["failure_type"])
            counter.add(1, extra)
        if event == "started":
            wait = _seconds(info.get("wait_seconds"))
            if wait is not None:
                self._wait.record(wait, attributes)
        elif event in ("finished", "failed"):
            run = _seconds(info.get("run_seconds"))
            if run is not None:
                self._run.record(run, attributes)

    def observe_depth(self, source: DepthSource, *, queue: str = "default") -> None:
        """Report ``source()`` (``{tenant: depth}``) as ``fairque.queue.depth`` on collection.

        Call once per queue; the gauge is created on the first call. A source that raises is
        logged and skipped for that collection.
        """
        with self._lock:
            self._sources.append((queue, source))
            if self._gauge_created:
                return
            self._gauge_created = True
        self._meter.create_observable_gauge(
            "fairque.queue.depth",
            callbacks=[self._observe],
            unit="{task}",
            description="Tasks waiting or running, per tenant",
        )

    def _observe(self, _options: CallbackOptions) -> Iterable[Observation]:
        with self._lock:
            sources = list(self._sources)
        observations: list[Observation] = []
        for queue, source in sources:
            try:
                depths = dict(source())
            except Exception:
                _log.exception("queue depth source for %r failed", queue)
                continue
            for tenant, depth in depths.items():
                attributes: dict[str, AttributeValue] = {"queue": queue}
                if self.tenant_attribute:
                    attributes["tenant"] = tenant
                observations.append(Observation(depth, attributes))
        return observations
