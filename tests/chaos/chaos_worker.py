"""A worker process for the chaos tests: ``python chaos_worker.py --url ... --history ...``.

Runs a fairque :class:`Worker` whose handler records ``exec:start`` / ``exec:end`` (task id,
attempt, lease token) in a JSON-lines history (see ``history.py``), and whose backend records
every exception a backend call raises (``error``: operation, exception type, whether it is one
of fairque's typed errors). ``--client fairque`` builds the client the way fairque does
(``RedisBackend.from_url``: redis-py retries off); ``--client redis-default`` hands in a
``redis.Redis(host=..., port=...)`` with redis-py's own default retries (ADR 11: used as is).
Prints ``ready`` once running, and its ``health()`` as JSON when stopped by SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any
from urllib.parse import urlsplit

# run as a script, so its own directory is on sys.path: history.py is importable as is
from history import History

from fairque_core import FairQueue, QueueConfig, Task, TaskHandler, WorkerConfig
from fairque_core.app.worker.worker import Worker
from fairque_core.domain.errors import FairQueueError
from fairque_redis.backends.backend import RedisBackend


class RecordingBackend:
    """Delegates to a backend and records every exception its calls raise (then re-raises)."""

    def __init__(self, backend: RedisBackend, history: History) -> None:
        self._backend = backend
        self._history = history

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._backend, name)
        if not callable(attr):
            return attr
        history = self._history

        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return attr(*args, **kwargs)
            except BaseException as exc:
                history.record(
                    "error",
                    op=name,
                    error=type(exc).__name__,
                    typed=isinstance(exc, FairQueueError),
                    message=str(exc)[:200],
                )
                raise

        return call


class Handler(TaskHandler):
    def __init__(self, history: History, sleep: float) -> None:
        self.history = history
        self.sleep = sleep

    def process_task(self, task: Task) -> object:
        token = task.lease.token if task.lease is not None else ""
        self.history.record("exec:start", task.task_id, attempt=task.retry_count, token=token)
        time.sleep(float(task.payload.get("sleep", self.sleep)))
        if task.retry_count < int(task.payload.get("fail_times", 0)):  # a flaky handler
            self.history.record("exec:fail", task.task_id, attempt=task.retry_count, token=token)
            raise RuntimeError(f"planned failure {task.retry_count + 1}")
        self.history.record("exec:end", task.task_id, attempt=task.retry_count, token=token)
        return None


def build_backend(args: argparse.Namespace, config: QueueConfig) -> RedisBackend:
    timeout = args.socket_timeout or None
    if args.client == "fairque":
        return RedisBackend.from_url(
            args.url,
            queue=args.queue,
            cluster=bool(args.cluster),
            config=config,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
        )
    import redis

    parts = urlsplit(args.url)
    client = redis.Redis(
        host=parts.hostname or "127.0.0.1",
        port=parts.port or 6379,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
    )
    return RedisBackend(client, queue=args.queue, config=config)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--queue", required=True)
    parser.add_argument("--history", required=True)
    parser.add_argument("--id", default="chaos")
    parser.add_argument("--client", choices=("fairque", "redis-default"), default="fairque")
    parser.add_argument("--lease", type=float, default=2.0)
    parser.add_argument("--reaper", type=float, default=0.5)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--sleep", type=float, default=0.0)
    parser.add_argument("--poll", type=float, default=0.05)
    parser.add_argument("--socket-timeout", type=float, default=0.0)
    parser.add_argument("--shutdown", type=float, default=5.0)
    parser.add_argument("--tenants", default="", help="comma-separated: serve only these")
    parser.add_argument("--cluster", type=int, default=0, help="1: a cluster client")
    parser.add_argument("--result-ttl", type=float, default=3600.0)
    args = parser.parse_args()
    history = History(args.history)
    config = QueueConfig(
        name=args.queue, lease_seconds=args.lease, result_ttl_seconds=args.result_ttl
    )
    backend = build_backend(args, config)
    queue = FairQueue(RecordingBackend(backend, history), config=config)  # type: ignore[arg-type]
    worker = Worker(
        WorkerConfig(
            id=args.id,
            max_concurrent_tasks=args.concurrency,
            poll_interval_seconds=args.poll,
            reaper_interval_seconds=args.reaper,
            graceful_shutdown_timeout=args.shutdown,
            task_timeout_seconds=60.0,
            assigned_tenants=[t for t in args.tenants.split(",") if t],
        ),
        Handler(history, args.sleep),
        queue,
    )
    print("ready", flush=True)
    worker.run()
    print(json.dumps({"pid": os.getpid(), **worker.health()}, default=str), flush=True)
    backend.close()
    history.close()


if __name__ == "__main__":
    main()
