"""The two Prometheus exports of fairque, each figure exported once (ADR 72).

* A **worker** (``fairque worker --metrics-port``, or :func:`worker_metrics` in your own
  process) exports what *it* does: the task counters of the attempts it ran
  (``fairque_tasks_{finished,failed,retried,dead_lettered,poisoned,released}_total``), the wait
  and run time histograms, and its own gauges (``fairque_worker_*``: slots, busy slots, leases,
  buffer, backend errors). Every worker's series are its own, so a Prometheus ``sum`` over the
  workers gives the queue's figure. It does not export the queue's state.
* The **exporter** (``fairque exporter``, or :func:`exporter_metrics`) exports what the *queue*
  holds, read from the server: ``fairque_queue_tasks{state}``, ``fairque_queue_depth``, the
  DLQ size, active tenants, the fairness gauges, ``fairque_workers{state}`` from the workers
  registry, and the server's counters of what no worker counts (``pushed``, ``duplicates``,
  ``claimed``, ``leases_recovered``, ``canceled``, ``dlq_requeued``). Run one per queue.

No family is exported by both: the worker drops the plugin's ``pushed`` and ``canceled``
counters (the server counts them, whoever pushed or canceled), the exporter drops the server's
counters of attempts' outcomes (the workers count them). Series carry no ``otel_scope_*``
labels; ``target_info`` names the service (``fairque-worker`` or ``fairque-exporter``, or
``OTEL_SERVICE_NAME``) and the instance (the worker id).
"""

from __future__ import annotations

import os

from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.view import DropAggregation, View
from opentelemetry.sdk.resources import Resource
from prometheus_client import CollectorRegistry

from fairque_plugins.metrics import OpenTelemetryMetrics

__all__ = [
    "EXPORTER_DROPS",
    "WORKER_DROPS",
    "exporter_metrics",
    "metrics_provider",
    "worker_metrics",
]

#: Instruments a worker does not export: counted by the server, exported by the exporter.
WORKER_DROPS: tuple[str, ...] = ("fairque.tasks.pushed", "fairque.tasks.canceled")
#: Instruments the exporter does not export: outcomes of attempts, counted by the workers.
EXPORTER_DROPS: tuple[str, ...] = (
    "fairque.queue.finished",
    "fairque.queue.retried",
    "fairque.queue.dead_lettered",
    "fairque.queue.released",
)


def metrics_provider(
    service: str, instance: str, registry: CollectorRegistry, drops: tuple[str, ...] = ()
) -> MeterProvider:
    """A meter provider exporting to ``registry`` in the Prometheus text format, without the
    ``otel_scope_*`` labels, with ``service.name`` ``service`` (``OTEL_SERVICE_NAME`` wins)
    and ``service.instance.id`` ``instance``, and without the instruments named in ``drops``."""
    name = os.environ.get("OTEL_SERVICE_NAME") or service
    resource = Resource.create({"service.name": name, "service.instance.id": instance})
    reader = PrometheusMetricReader(registry=registry, scope_info_enabled=False)
    views = [View(instrument_name=drop, aggregation=DropAggregation()) for drop in drops]
    return MeterProvider(metric_readers=[reader], resource=resource, views=views)


def worker_metrics(
    worker_id: str, registry: CollectorRegistry | None = None
) -> tuple[OpenTelemetryMetrics, CollectorRegistry]:
    """The metrics plugin of one worker process and the registry it exports to (a new one by
    default; serve it with ``prometheus_client``). Give the plugin to the worker's queue
    (``plugins=[...]``) and the worker to :meth:`OpenTelemetryMetrics.observe_worker`."""
    registry = CollectorRegistry(auto_describe=True) if registry is None else registry
    provider = metrics_provider("fairque-worker", worker_id, registry, WORKER_DROPS)
    return OpenTelemetryMetrics(meter_provider=provider), registry


def exporter_metrics(
    instance: str, registry: CollectorRegistry | None = None
) -> tuple[OpenTelemetryMetrics, CollectorRegistry]:
    """The metrics plugin of the queue exporter and its registry: give it the queue's
    ``get_stats`` (``observe_stats``), fairness figures (``observe_fairness``) and workers
    registry (``observe_workers``)."""
    registry = CollectorRegistry(auto_describe=True) if registry is None else registry
    provider = metrics_provider("fairque-exporter", instance, registry, EXPORTER_DROPS)
    return OpenTelemetryMetrics(meter_provider=provider), registry
