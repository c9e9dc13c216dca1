"""``fairque exporter``: the queue's state for Prometheus, exported once (ADR 72).

Serves ``/metrics`` with what the queue holds, read from the server at most once a second
whatever the number of scrapes: tasks by state, depth, DLQ size, active tenants, the fairness
gauges per tenant, the live and gone workers of the registry, and the server's counters of what
no worker counts (pushed, duplicates, claimed, leases recovered, canceled, DLQ requeues). The
workers' own ``/metrics`` carry what each of them did (:mod:`fairque_plugins.prometheus`). Run
one exporter per queue; ``/healthz`` and ``/readyz`` answer as the worker's do (ready while the
last read of the server succeeded).
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import threading
import time
from typing import Any, TextIO

from fairque_cli.checks import port_number, positive_float
from fairque_cli.context import CliError, SubCommands, describe_target, load_config, open_queue
from fairque_cli.logs import configure_logging
from fairque_cli.probes import DEFAULT_HOST, ProbeServer
from fairque_core.app.engine.queue import FairQueue
from fairque_core.app.worker.signal_latch import SignalLatch

__all__ = ["DEFAULT_EXPORTER_PORT", "FAIRNESS_TENANTS_PER_SCRAPE", "add_exporter"]

log = logging.getLogger("fairque.cli")

#: The exporter's default port.
DEFAULT_EXPORTER_PORT = 9464
#: Tenants whose fairness figures one reading covers (one script call); the plugin's tenant
#: attribute cap folds the rest into ``_other``.
FAIRNESS_TENANTS_PER_SCRAPE = 1000


class _Health:
    """The exporter's ``health()``: running until stopped, backing off while the last read of
    the queue's stats failed."""

    def __init__(self, queue: FairQueue) -> None:
        self._queue = queue
        self.state = "running"
        self.failed = False
        self._lock = threading.Lock()

    def stats(self) -> dict[str, Any]:
        try:
            stats = dict(self._queue.get_stats())
        except Exception:
            with self._lock:
                self.failed = True
            raise
        with self._lock:
            self.failed = False
        return stats

    def __call__(self) -> dict[str, Any]:
        with self._lock:
            return {"state": self.state, "backing_off": self.failed, "queue": self._queue.name}


def _observe(plugin: Any, queue: FairQueue, health: _Health) -> None:
    from fairque_core.app.worker.registry import WorkerRegistry

    plugin.observe_stats(health.stats, queue=queue.name)
    plugin.observe_fairness(
        lambda: queue.get_tenant_fairness(limit=FAIRNESS_TENANTS_PER_SCRAPE),
        queue=queue.name,
        strict_tiers=queue.config.strict_tiers,
    )
    plugin.observe_workers(WorkerRegistry(queue.backend).list, queue=queue.name)


def _run_exporter(args: argparse.Namespace, out: TextIO) -> int:
    configure_logging("INFO", "text")
    try:
        from fairque_plugins.prometheus import exporter_metrics
    except ImportError as exc:
        raise CliError(
            f"fairque exporter needs the prometheus extra (pip install 'fairque[prometheus]'): "
            f"{exc}"
        ) from None
    config = load_config(args)
    instance = f"{socket.gethostname().split('.')[0] or 'host'}-{os.getpid()}"
    plugin, registry = exporter_metrics(instance)
    with open_queue(config) as queue:
        queue.get_stats()  # fail fast, with one line, when the server is unreachable
        health = _Health(queue)
        _observe(plugin, queue, health)
        try:
            server = ProbeServer(args.port, health, host=args.host, registry=registry)
        except OSError as exc:
            raise CliError(
                f"cannot serve metrics on {args.host}:{args.port}: {exc.strerror or exc}"
            ) from None
        log.info(
            "fairque exporter: queue %s on %s, /metrics on %s:%d",
            queue.name,
            describe_target(config),
            args.host,
            server.port,
        )
        latch = SignalLatch()
        latch.install()
        started = time.monotonic()
        try:
            while not latch.received:
                if args.max_seconds is not None and time.monotonic() - started >= args.max_seconds:
                    break
                time.sleep(0.1)
        finally:
            latch.restore()
            health.state = "stopped"
            server.close()
    out.write("exporter stopped\n")
    return 0


def add_exporter(sub: SubCommands) -> None:
    p = sub.add_parser(
        "exporter",
        help="serve the queue's state for Prometheus (/metrics), once for all workers",
        description="Serve /metrics with the queue's state read from the server: tasks by "
        "state, depth, DLQ size, active tenants, fairness per tenant, live and gone workers, "
        "and the server's counters of pushes, claims, recovered leases, cancels and DLQ "
        "requeues. Run one per queue; each worker's --metrics-port carries what that worker "
        "did (task outcomes, busy slots). Stops on SIGTERM/SIGINT.",
    )
    p.add_argument(
        "--port",
        type=port_number,
        default=DEFAULT_EXPORTER_PORT,
        metavar="N",
        help=f"port of /metrics, /healthz and /readyz (default {DEFAULT_EXPORTER_PORT})",
    )
    p.add_argument(
        "--host",
        default=DEFAULT_HOST,
        metavar="HOST",
        help=f"address to bind (default {DEFAULT_HOST}; in a container use 0.0.0.0)",
    )
    p.add_argument(
        "--max-seconds", type=positive_float, default=None, metavar="S", help="stop after S s"
    )
    p.set_defaults(func=_run_exporter)
