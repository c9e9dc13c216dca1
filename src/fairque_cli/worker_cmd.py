"""``fairque worker``: run a Worker with a handler named ``module:attr`` until told to stop."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import os
import secrets
import socket
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, TextIO, cast

import attrs

from fairque_cli.checks import (
    non_negative_float,
    port_number,
    positive_float,
    positive_int,
    queue_weight,
)
from fairque_cli.context import (
    CliError,
    SubCommands,
    UsageError,
    add_tenant_flag,
    describe_target,
    error_name,
    load_config,
    open_queue,
    split_ids,
)
from fairque_cli.logs import LOG_FORMATS, TaskLogPlugin, configure_logging
from fairque_cli.probes import DEFAULT_HOST, ProbeServer
from fairque_cli.supervisor import CHILD_ENV, TERMINATED, run_supervised
from fairque_core.app.engine.queue import FairQueue
from fairque_core.app.worker.handlers import (
    RegistryHandler,
    TaskFunction,
    TaskHandler,
    TaskRegistry,
)
from fairque_core.app.worker.handlers import default_registry as _default_registry
from fairque_core.app.worker.signal_latch import SignalLatch
from fairque_core.app.worker.worker import Worker
from fairque_core.domain.models import Task
from fairque_core.domain.queue_picker import QUEUE_ORDERS
from fairque_core.settings.config import FairQueueConfig, WorkerConfig

__all__ = ["add_worker", "default_worker_id", "load_handler", "served_queues"]

log = logging.getLogger("fairque.cli")
_DEFAULT_ID = WorkerConfig().id
_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


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
    except (Exception, SystemExit) as exc:  # the user's module failed at import: its error
        raise CliError(
            f"cannot import handler module {module_name!r}: {error_name(exc)}: {exc}"
        ) from exc
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
        except (Exception, SystemExit) as exc:  # the user's constructor failed: its error
            raise CliError(f"cannot create handler {spec}: {error_name(exc)}: {exc}") from exc
    if isinstance(target, TaskFunction):
        raise CliError(
            f"{spec} is a single @task function; name its TaskRegistry (or the module) instead"
        )
    if call and callable(target):
        try:
            made = target()
        except (Exception, SystemExit) as exc:  # the user's factory failed: its error
            raise CliError(f"cannot create handler {spec}: {error_name(exc)}: {exc}") from exc
        return _as_handler(made, spec, call=False)
    raise CliError(
        f"{spec} is a {type(target).__name__}, not a TaskHandler, TaskHandler subclass "
        "or TaskRegistry"
    )


def _metrics_plugin(worker_id: str) -> tuple[Any, Any]:
    """The OpenTelemetry metrics plugin of this worker and the Prometheus registry it exports
    to, served on the worker's HTTP port with ``/healthz`` and ``/readyz``
    (:class:`~fairque_cli.probes.ProbeServer`): the task counters and histograms of the
    attempts this worker runs and its own gauges (slots, busy slots, leases, buffer, backend
    errors), not the queue's state, which ``fairque exporter`` exports once (ADR 72)."""
    try:
        from fairque_plugins.prometheus import worker_metrics
    except ImportError as exc:
        raise CliError(
            f"--metrics-port needs the prometheus extra (pip install 'fairque[prometheus]'): {exc}"
        ) from None
    return worker_metrics(worker_id)


def default_worker_id() -> str:
    """A worker id unique across hosts and processes: ``host-pid-random``."""
    host = socket.gethostname().split(".")[0] or "host"
    host = "".join(c if c.isalnum() or c in "-_" else "-" for c in host)[:40]
    return f"{host}-{os.getpid()}-{secrets.token_hex(3)}"


def _worker_config(config: FairQueueConfig, args: argparse.Namespace) -> FairQueueConfig:
    changes: dict[str, Any] = {}
    if args.id:
        changes["id"] = args.id
    elif config.worker.id == _DEFAULT_ID:
        changes["id"] = default_worker_id()
    if args.concurrency is not None:
        changes["max_concurrent_tasks"] = args.concurrency
    if args.tenant:
        changes["assigned_tenants"] = split_ids(args.tenant)
    if not changes:
        return config
    return attrs.evolve(config, worker=attrs.evolve(config.worker, **changes))


def _status_line(worker: Worker, started: float) -> str:
    h = worker.health()
    return (
        f"{h['worker_id']} {h['state']}  "
        f"up {time.monotonic() - started:.0f}s  processed {h['processed']}  "
        f"failed {h['failed']}  dead {h['dead']}  in flight {h['in_flight']}"
        + ("  (backend unreachable, retrying)" if h.get("backing_off") else "")
    )


def _nothing_ready(queues: Sequence[FairQueue]) -> bool:
    return all(not int(queue.get_stats().get("ready", 0)) for queue in queues)


def served_queues(args: argparse.Namespace, config: FairQueueConfig) -> list[tuple[str, float]]:
    """The queues ``fairque worker`` serves with their weights (ADR 69), in order: its
    ``--queue NAME[:WEIGHT]`` flags, else the worker section's ``queues``, else the queue
    section's name. A queue named twice is a usage error."""
    specs = list(getattr(args, "queues", None) or ())
    if not specs:
        if config.worker.queues:
            return list(config.worker.queues.items())
        return [(config.queue.name, 1.0)]
    out: list[tuple[str, float]] = []
    for spec in specs:
        name, colon, weight = spec.partition(":")
        try:
            out.append((name, queue_weight(weight) if colon else 1.0))
        except argparse.ArgumentTypeError as exc:
            raise UsageError(f"--queue {spec}: weight {exc}") from None
    names = [name for name, _ in out]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise UsageError(f"--queue {twice[0]} given twice: a worker serves each queue once")
    return out


def _queue_config(config: FairQueueConfig, name: str) -> FairQueueConfig:
    """``config`` for the served queue ``name``: the queue section's settings, that name."""
    if name == config.queue.name:
        return config
    return attrs.evolve(config, queue=attrs.evolve(config.queue, name=name))


class _BurstWatch:
    """When ``--burst`` stops: no task was ready, and every claim the worker had sent by the
    time it read so has been answered, and it holds no task.

    "Nothing ready and nothing in flight" alone can be true while a task is on its way to the
    worker: a claim (the worker's own, or its listener's, ADR 38) takes the task out of the
    ready count when the server runs it, before its reply comes back. A task that was ready
    when the worker started is still ready, or was taken by a claim sent before the ready count
    read none; once those claims are settled (``health()["claims_settled"]`` has reached the
    ``claims_sent`` read after the count), their tasks are in ``in_flight`` until finished.
    ``health`` is the worker's; ``queues`` the queue it serves, or a list of every queue it
    serves (nothing ready in any)."""

    def __init__(
        self, health: Callable[[], dict[str, Any]], queues: FairQueue | Sequence[FairQueue]
    ) -> None:
        self._health = health
        self._queues: list[FairQueue] = (
            list(queues) if isinstance(queues, (list, tuple)) else [cast(FairQueue, queues)]
        )
        self._mark: int | None = None  # claims sent when the queue was last seen with none ready

    def done(self) -> bool:
        if self._mark is None:
            if not _nothing_ready(self._queues):
                return False
            self._mark = int(self._health()["claims_sent"])
        health = self._health()
        if health["in_flight"]:
            self._mark = None  # it has work: read the ready count again once that is done
            return False
        return int(health["claims_settled"]) >= self._mark


def _banner(config: FairQueueConfig, worker: Worker, args: argparse.Namespace) -> str:
    w = config.worker
    q = worker.queue.config
    if len(worker.queues) == 1:
        served = f"queue {worker.queue.name}"
    else:
        shares = ", ".join(f"{s['name']} ({s['weight']:g})" for s in worker.health()["queues"])
        served = f"queues {shares} {worker.health()['queue_order']}"
    return (
        f"fairque worker {w.id}: {served} on {describe_target(config)}, "
        f"handler {args.handler}, concurrency {w.max_concurrent_tasks}, "
        f"task timeout {w.task_timeout_seconds:g}s, lease {q.lease_seconds:g}s, "
        f"shutdown grace {w.graceful_shutdown_timeout:g}s"
        + (f", tenants {','.join(w.assigned_tenants)}" if w.assigned_tenants else "")
        + (f", metrics on {args.metrics_host}:{args.metrics_port}" if args.metrics_port else "")
        + (", burst" if args.burst else "")
    )


def _signalled(latch: SignalLatch, worker: Worker) -> bool:
    """Hand the signals received since the last look to the worker; whether any came."""
    for signum in latch.take():
        worker.on_signal(signum)  # a second one: no more waiting for running tasks
    return latch.received > 0


def _drain(worker: Worker, started: float, latch: SignalLatch) -> None:
    """Wait for the running tasks after a stop, saying so every few seconds (a countdown)."""
    grace = worker.config.graceful_shutdown_timeout
    deadline = time.monotonic() + grace + 5.0
    next_note = 0.0
    while not worker.stop(timeout=0.25):
        _signalled(latch, worker)
        now = time.monotonic()
        if now >= deadline:
            log.warning("worker %s did not stop in time; exiting", worker.config.id)
            return
        running = int(worker.health()["in_flight"])
        if running and now >= next_note and latch.received < 2:
            left = max(0.0, started + grace - now)
            log.warning(
                "stopping: waiting for %d running task%s to finish (%.0f s left; "
                "Ctrl-C again to stop now, their leases then expire and they run again)",
                running,
                "" if running == 1 else "s",
                left,
            )
            next_note = now + 5.0


def _serve_probes(args: argparse.Namespace, worker: Worker, registry: Any) -> ProbeServer:
    port, host = args.metrics_port, args.metrics_host
    try:
        return ProbeServer(port, worker.health, host=host, registry=registry)
    except OSError as exc:
        raise CliError(f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}") from None


def _terminate(task: Task) -> None:
    """A running task was canceled with ``terminate=True`` (ADR 76): this child process ends
    at once, its handler's thread with it; the supervisor starts a new one. The other tasks
    it held are given back by the reaper when their leases expire, as after a crash."""
    log.warning("task %s canceled with terminate: this worker process ends", task.task_id)
    logging.shutdown()
    os._exit(TERMINATED)


def _run_worker(args: argparse.Namespace, out: TextIO) -> int:
    configure_logging(args.log_level, args.log_format)
    if args.processes > 1:
        # what every child would refuse, refused once here (a child's refusal restarted it)
        served_queues(args, load_config(args))
        load_handler(args.handler)
        if args.metrics_port and args.metrics_port + args.processes - 1 > 65535:
            raise CliError(
                f"--metrics-port {args.metrics_port} with --processes {args.processes}: the "
                f"children take ports up to {args.metrics_port + args.processes - 1} (> 65535)"
            )
        return run_supervised(args)
    config = _worker_config(load_config(args), args)
    served = served_queues(args, config)
    order = args.queue_order or config.worker.queue_order
    handler = load_handler(args.handler)
    plugins: list[Any] = [TaskLogPlugin()]
    metrics, registry = _metrics_plugin(config.worker.id) if args.metrics_port else (None, None)
    if metrics is not None:
        plugins.append(metrics)
    with contextlib.ExitStack() as opened:
        queues: list[FairQueue] = []
        for name, _ in served:
            queue = open_queue(_queue_config(config, name), plugins=plugins, apply_tenants=True)
            queues.append(opened.enter_context(queue))
            queue.get_stats()  # fail fast, with one line, when the server is unreachable
        weights = [weight for _, weight in served]
        worker = Worker(
            config.worker,
            handler,
            queues=list(zip(queues, weights, strict=True)),
            queue_order=order,
        )
        if metrics is not None:
            metrics.observe_worker(worker)
        if os.environ.get(CHILD_ENV) == "1":  # under --processes: a terminating cancel ends us
            worker.on_terminate = _terminate
        probes = _serve_probes(args, worker, registry) if args.metrics_port else None
        log.info("%s", _banner(config, worker, args))
        # the handler only records a signal (a handler that set an Event deadlocked on a
        # second signal); this thread acts on it (worker.on_signal) in its waits below
        latch = SignalLatch()
        latch.install()
        started = time.monotonic()
        next_status = started + args.status_every if args.status_every else float("inf")
        try:
            worker.start()
            burst = _BurstWatch(worker.health, queues)
            while worker.state != "stopped" and not _signalled(latch, worker):
                now = time.monotonic()
                if args.max_seconds is not None and now - started >= args.max_seconds:
                    break
                if args.burst and burst.done():
                    log.info("burst: no task is ready, stopping")
                    break
                if now >= next_status:
                    log.info("%s", _status_line(worker, started))
                    next_status = now + args.status_every
                time.sleep(0.1)
            worker.request_stop()
            _drain(worker, time.monotonic(), latch)
        finally:
            latch.restore()
            if probes is not None:
                probes.close()
        log.info("%s", _status_line(worker, started))
        health = worker.health()
        out.write(f"processed {health['processed']} tasks, {health['failed']} failed\n")
    return 0


def add_worker(sub: SubCommands) -> None:
    p = sub.add_parser(
        "worker",
        help="run a worker",
        description="Run a worker with the handler named module:attr (a TaskHandler instance "
        "or class, or a TaskRegistry) until SIGTERM/SIGINT; a first signal stops claiming and "
        "waits for running tasks (worker.graceful_shutdown_timeout), a second stops at once. "
        "The worker section of --config gives its id, assigned tenants, steal targets, "
        "limits and the queues it serves (worker.queues); the queue section's tenant weights "
        "and tiers are written to the server at start. --queue NAME[:WEIGHT] may be repeated: "
        "the worker serves each queue, sharing its claims by weight (or in order with "
        "--queue-order strict), each queue fair across its own tenants.",
    )
    p.add_argument("--handler", required=True, metavar="MODULE:ATTR")
    p.add_argument(
        "--id", default=None, help="worker id (default: worker.id, else HOST-PID-RANDOM)"
    )
    p.add_argument(
        "--concurrency", type=positive_int, default=None, metavar="N", help="max concurrent tasks"
    )
    add_tenant_flag(p, many=True, help="assigned tenant(s); repeat or comma-separate")
    p.add_argument(
        "--queue-order",
        choices=QUEUE_ORDERS,
        default=None,
        help="with several --queue: weighted (stride scheduling by the weights, the default) "
        "or strict (a later queue only when the earlier ones have nothing ready); default: "
        "worker.queue_order",
    )
    p.add_argument(
        "--metrics-port",
        type=port_number,
        default=None,
        metavar="N",
        help="serve /metrics (Prometheus: this worker's task counters and gauges), /healthz "
        "and /readyz on this port (needs the prometheus extra)",
    )
    p.add_argument(
        "--metrics-host",
        default=DEFAULT_HOST,
        metavar="HOST",
        help=f"the address the --metrics-port binds (default {DEFAULT_HOST}; in a container "
        "use 0.0.0.0 so that Prometheus and the probes reach it)",
    )
    p.add_argument(
        "--processes",
        type=positive_int,
        default=1,
        metavar="N",
        help="run N worker processes under a supervisor that restarts dead ones (default 1)",
    )
    p.add_argument(
        "--burst",
        action="store_true",
        help="stop as soon as no task is ready and none is running here; tasks scheduled for "
        "later (delays, retry backoff) are left for the next run, however soon they are due",
    )
    p.add_argument(
        "--max-seconds", type=positive_float, default=None, metavar="S", help="stop after S s"
    )
    p.add_argument(
        "--status-every",
        type=non_negative_float,
        default=10.0,
        metavar="S",
        help="status line period in seconds (0: off; default 10)",
    )
    p.add_argument(
        "--log-level",
        type=str.upper,
        choices=_LEVELS,
        default="INFO",
        help="log level (default INFO; DEBUG logs every task)",
    )
    p.add_argument(
        "--log-format", choices=LOG_FORMATS, default="text", help="text (default) or json lines"
    )
    p.set_defaults(func=_run_worker)
