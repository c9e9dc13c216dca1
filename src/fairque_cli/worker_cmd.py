"""``fairque worker``: run a Worker with a handler named ``module:attr`` until told to stop."""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import threading
import time
from types import FrameType
from typing import Any, TextIO

import attrs

from fairque_cli.context import (
    CliError,
    SubCommands,
    describe_target,
    load_config,
    open_queue,
    split_ids,
)
from fairque_core.app.config import FairQueueConfig
from fairque_core.app.engine import FairQueue
from fairque_core.app.handlers import RegistryHandler, TaskFunction, TaskHandler, TaskRegistry
from fairque_core.app.handlers import default_registry as _default_registry
from fairque_core.app.worker import Worker

__all__ = ["add_worker", "load_handler"]


def load_handler(spec: str) -> TaskHandler:
    """The handler named by ``module:attr`` (or ``module``, meaning its ``@task`` functions).

    ``attr`` may be a TaskHandler instance or subclass, a TaskRegistry, or a callable that
    returns one of those. The current directory is importable, as with ``python -m``.
    """
    module_name, _, attr = spec.partition(":")
    if not module_name:
        raise CliError(f"--handler must look like module:attr, got {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise CliError(f"cannot import handler module {module_name!r}: {exc}") from None
    if not attr:
        if not len(_default_registry):
            raise CliError(
                f"module {module_name!r} registered no @task functions; name the handler "
                "as module:attr"
            )
        return RegistryHandler(_default_registry)
    target: Any = module
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise CliError(f"module {module_name!r} has no attribute {attr!r}") from None
    return _as_handler(target, spec, call=True)


def _as_handler(target: Any, spec: str, *, call: bool) -> TaskHandler:
    if isinstance(target, TaskHandler):
        return target
    if isinstance(target, TaskRegistry):
        return RegistryHandler(target)
    if isinstance(target, type) and issubclass(target, TaskHandler):
        try:
            return target()
        except TypeError as exc:
            raise CliError(f"cannot create handler {spec}: {exc}") from None
    if isinstance(target, TaskFunction):
        raise CliError(
            f"{spec} is a single @task function; name its TaskRegistry (or the module) instead"
        )
    if call and callable(target):
        return _as_handler(target(), spec, call=False)
    raise CliError(
        f"{spec} is a {type(target).__name__}, not a TaskHandler, TaskHandler subclass "
        "or TaskRegistry"
    )


def _metrics_plugins(port: int) -> list[Any]:
    """An OpenTelemetry metrics plugin exported for Prometheus on ``port``.

    The worker then gives it the queue's ``get_stats`` (:func:`_observe_queue`), so
    ``/metrics`` also carries the queue gauges (tasks by state, depth, DLQ size) and the
    queue-wide counters (expired leases recovered, canceled, ...). The histograms use the
    plugin's seconds buckets.
    """
    try:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from opentelemetry.sdk.metrics import MeterProvider
        from prometheus_client import start_http_server

        from fairque_plugins.metrics import OpenTelemetryMetrics
    except ImportError as exc:
        raise CliError(
            f"--metrics-port needs the prometheus extra (pip install 'fairque[prometheus]'): {exc}"
        ) from None
    try:
        start_http_server(port)
    except OSError as exc:
        raise CliError(f"cannot serve metrics on port {port}: {exc.strerror or exc}") from None
    provider = MeterProvider(metric_readers=[PrometheusMetricReader()])
    return [OpenTelemetryMetrics(meter_provider=provider)]


def _observe_queue(plugins: list[Any], queue: FairQueue) -> None:
    """Let the metrics plugins read the queue's stats on scrapes (at most once a second)."""
    for plugin in plugins:
        plugin.observe_stats(queue.get_stats, queue=queue.name)


def _worker_config(config: FairQueueConfig, args: argparse.Namespace) -> FairQueueConfig:
    changes: dict[str, Any] = {}
    if args.id:
        changes["id"] = args.id
    if args.concurrency is not None:
        changes["max_concurrent_tasks"] = args.concurrency
    if args.user:
        changes["assigned_users"] = split_ids(args.user)
    if not changes:
        return config
    return attrs.evolve(config, worker=attrs.evolve(config.worker, **changes))


def _status_line(worker: Worker, started: float) -> str:
    h = worker.health()
    return (
        f"[{time.strftime('%H:%M:%S')}] {h['worker_id']} {h['state']}  "
        f"up {time.monotonic() - started:.0f}s  processed {h['processed']}  "
        f"failed {h['failed']}  dead {h['dead']}  in flight {h['in_flight']}"
        + ("  (backend unreachable, retrying)" if h.get("backing_off") else "")
    )


def _queue_empty(queue: FairQueue) -> bool:
    stats = queue.get_stats()
    return not any(int(stats.get(k, 0)) for k in ("ready", "scheduled", "leased"))


def _run_worker(args: argparse.Namespace, out: TextIO) -> int:
    config = _worker_config(load_config(args), args)
    handler = load_handler(args.handler)
    plugins = _metrics_plugins(args.metrics_port) if args.metrics_port else []
    queue = FairQueue.from_config(config, plugins=plugins) if plugins else open_queue(config)
    with queue:
        queue.get_stats()  # fail fast, with one line, when the server is unreachable
        _observe_queue(plugins, queue)
        worker = Worker(config.worker, handler, queue)
        err = sys.stderr
        err.write(
            f"fairque worker {config.worker.id}: queue {queue.name} on "
            f"{describe_target(config)}, handler {args.handler}, "
            f"{config.worker.max_concurrent_tasks} slots"
            + (f", metrics on :{args.metrics_port}" if args.metrics_port else "")
            + "\n"
        )
        err.flush()
        stop = threading.Event()

        def on_signal(signum: int, _frame: FrameType | None) -> None:
            if stop.is_set():
                worker.request_stop()  # a second signal: do not wait for the deadline
            stop.set()
            worker.request_stop()

        previous = [(sig, signal.signal(sig, on_signal)) for sig in (signal.SIGTERM, signal.SIGINT)]
        started = time.monotonic()
        next_status = started + args.status_every if args.status_every else float("inf")
        try:
            worker.start()
            while worker.state != "stopped" and not stop.is_set():
                now = time.monotonic()
                if args.max_seconds is not None and now - started >= args.max_seconds:
                    break
                if args.burst and _queue_empty(queue) and worker.health()["in_flight"] == 0:
                    break
                if now >= next_status:
                    err.write(_status_line(worker, started) + "\n")
                    err.flush()
                    next_status = now + args.status_every
                stop.wait(0.2)
            worker.stop()
        finally:
            for sig, old in previous:
                signal.signal(sig, old)
        err.write(_status_line(worker, started) + "\n")
        health = worker.health()
        out.write(f"processed {health['processed']} tasks, {health['failed']} failed\n")
    return 0


def add_worker(sub: SubCommands) -> None:
    p = sub.add_parser(
        "worker",
        help="run a worker",
        description="Run a worker with the handler named module:attr (a TaskHandler instance "
        "or class, or a TaskRegistry) until SIGTERM/SIGINT. The worker section of --config "
        "gives its id, assigned users, steal targets and limits.",
    )
    p.add_argument("--handler", required=True, metavar="MODULE:ATTR")
    p.add_argument("--id", default=None, help="worker id (overrides worker.id)")
    p.add_argument("--concurrency", type=int, default=None, help="max concurrent tasks")
    p.add_argument("--user", action="append", help="assigned tenant(s); repeat or comma-separate")
    p.add_argument("--metrics-port", type=int, default=None, metavar="N")
    p.add_argument("--burst", action="store_true", help="stop when the queue is empty")
    p.add_argument("--max-seconds", type=float, default=None, metavar="S", help="stop after S s")
    p.add_argument(
        "--status-every", type=float, default=10.0, metavar="S", help="status line period (0: off)"
    )
    p.set_defaults(func=_run_worker)
