"""OpenTelemetry gauges of the workers: one worker's own slots, and the registry's live count.

Used by :meth:`fairque_plugins.metrics.OpenTelemetryMetrics.observe_worker` and
:meth:`~fairque_plugins.metrics.OpenTelemetryMetrics.observe_workers` (ADR 72).

Per worker, read from its ``health()`` at collection time (attributes ``queue`` and
``worker``; export them from the worker's own process, so that a Prometheus ``sum`` over the
workers' scrapes adds up):

* ``fairque.worker.slots`` (its ``max_concurrent_tasks``), ``fairque.worker.busy_slots``
  (slots running a handler now: the queue's *running* tasks are the sum of these),
  ``fairque.worker.leased_tasks`` (the tasks it holds a lease on: running, buffered, or
  waiting for their acknowledgement), ``fairque.worker.buffered_tasks`` (claimed, waiting for
  a slot), ``fairque.worker.server_unsafe`` (1 while the server's settings, watched after
  connect, are unsafe: its claims are refused; issue 34), gauges;
* ``fairque.worker.backend_errors``, a counter: failed calls to the server since it started.

Per queue, read from the workers registry (export it once, from ``fairque exporter``):
``fairque.workers`` (attribute ``state``: ``live``, or ``gone`` for a record not rewritten
for three of its beat intervals). Busy slots are not summed here from the records: they come
from the workers themselves, once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from opentelemetry.metrics import CallbackOptions, Meter, Observation

from fairque_core.ports.workers import WorkerInfo

__all__ = [
    "WorkerSource",
    "WorkersSource",
    "create_registry_instruments",
    "create_worker_instruments",
]

#: ``(queue, worker id, health)``: a worker whose ``health()`` the gauges read.
WorkerSource = tuple[str, str, Callable[[], Mapping[str, Any]]]
#: A callable returning the registry's workers of one queue (``WorkerRegistry.list``).
WorkersSource = Callable[[], Sequence[WorkerInfo]]

_log = logging.getLogger("fairque.plugins.metrics")

# instrument -> (health() key, unit, description)
_GAUGES = {
    "fairque.worker.slots": ("slots", "{slot}", "Tasks the worker may run at once"),
    "fairque.worker.busy_slots": ("executing", "{slot}", "Slots running a handler now"),
    "fairque.worker.leased_tasks": (
        "in_flight",
        "{task}",
        "Tasks the worker holds a lease on (running, buffered or being acknowledged)",
    ),
    "fairque.worker.buffered_tasks": ("buffered", "{task}", "Claimed tasks waiting for a slot"),
    "fairque.worker.server_unsafe": (
        "server_unsafe",
        "1",
        "1 while the server's settings are unsafe (an evicting maxmemory-policy): claims refused",
    ),
}


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def create_worker_instruments(
    meter: Meter, workers: Callable[[], list[WorkerSource]], slots: Callable[[str], int]
) -> None:
    """Create the per-worker instruments on ``meter``; ``workers`` lists the observed workers
    at collection time, ``slots`` gives a worker's concurrency by id."""

    def readings() -> list[tuple[dict[str, str], Mapping[str, Any]]]:
        out: list[tuple[dict[str, str], Mapping[str, Any]]] = []
        for queue, worker_id, health in workers():
            try:
                snapshot = dict(health())
            except Exception:
                _log.exception("health of worker %r failed", worker_id)
                continue
            snapshot["slots"] = slots(worker_id)
            out.append(({"queue": queue, "worker": worker_id}, snapshot))
        return out

    def pick(key: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def callback(_options: CallbackOptions) -> Iterable[Observation]:
            observations = []
            for attributes, health in readings():
                value = _number(health.get(key))
                if value is not None:
                    observations.append(Observation(value, attributes))
            return observations

        return callback

    for name, (key, unit, text) in _GAUGES.items():
        meter.create_observable_gauge(name, callbacks=[pick(key)], unit=unit, description=text)
    meter.create_observable_counter(
        "fairque.worker.backend_errors",
        callbacks=[pick("backend_errors")],
        unit="{error}",
        description="Failed calls to the server since the worker started",
    )


def create_registry_instruments(
    meter: Meter, sources: Callable[[], list[tuple[str, WorkersSource]]]
) -> None:
    """Create ``fairque.workers`` (by ``state``: live, gone) on ``meter``; ``sources`` lists
    ``(queue, WorkerRegistry.list)`` pairs at collection time."""

    def callback(_options: CallbackOptions) -> Iterable[Observation]:
        observations = []
        for queue, source in sources():
            try:
                infos = list(source())
            except Exception:
                _log.exception("workers registry of queue %r failed", queue)
                continue
            gone = sum(1 for info in infos if info.stale)
            observations.append(Observation(len(infos) - gone, {"queue": queue, "state": "live"}))
            observations.append(Observation(gone, {"queue": queue, "state": "gone"}))
        return observations

    meter.create_observable_gauge(
        "fairque.workers",
        callbacks=[callback],
        unit="{worker}",
        description="Workers in the registry: live, or gone (no record for 3 beat intervals)",
    )
