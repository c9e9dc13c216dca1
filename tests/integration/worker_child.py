"""A worker process for the integration tests: ``python worker_child.py --url ... --log ...``.

Its handler appends one JSON line per event (``start`` / ``end``) to ``--log`` with a single
``write`` on an ``O_APPEND`` descriptor, so lines from several processes never interleave.
Sleep length per task comes from ``--sleep`` (this process) unless the payload names one.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from fairque_core import FairQueue, QueueConfig, Task, TaskHandler, WorkerConfig
from fairque_core.app.worker.worker import Worker
from fairque_redis.backends.backend import RedisBackend


class LoggingHandler(TaskHandler):
    def __init__(self, log_path: str, sleep: float) -> None:
        self.fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.sleep = sleep
        self.pid = os.getpid()

    def log(self, task: Task, event: str) -> None:
        line = {
            "id": task.task_id,
            "pid": self.pid,
            "event": event,
            "t": time.time(),
            "attempt": task.retry_count,
        }
        os.write(self.fd, (json.dumps(line) + "\n").encode())

    def process_task(self, task: Task) -> object:
        self.log(task, "start")
        time.sleep(float(task.payload.get("sleep", self.sleep)))
        self.log(task, "end")
        return None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--queue", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--id", default="child")
    parser.add_argument("--sleep", type=float, default=0.1)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--prefetch", type=int, default=0)
    parser.add_argument("--lease", type=float, default=2.0)
    parser.add_argument("--shutdown", type=float, default=10.0)
    args = parser.parse_args()
    config = QueueConfig(name=args.queue, lease_seconds=args.lease)
    queue = FairQueue(RedisBackend.from_url(args.url, queue=args.queue, config=config))
    worker = Worker(
        WorkerConfig(
            id=args.id,
            max_concurrent_tasks=args.concurrency,
            poll_interval_seconds=0.05,
            reaper_interval_seconds=0.5,
            graceful_shutdown_timeout=args.shutdown,
            task_timeout_seconds=120.0,
        ),
        LoggingHandler(args.log, args.sleep),
        queue,
        prefetch=args.prefetch,
    )
    print("ready", flush=True)
    worker.run()
    print(json.dumps(worker.health()), flush=True)
    queue.close()
    sys.exit(0)


if __name__ == "__main__":
    main()
