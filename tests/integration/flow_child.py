"""A worker process for the flow-control acceptance tests (``test_flow_control.py``,
``test_key_limits_workers.py``).

``python flow_child.py --url URL --queue Q --log FILE [--cluster] [--concurrency N]``: runs a
Worker (no prefetch, so a handler starts right after its claim) whose handler appends one JSON
line per start and end (tenant, task id, pid, limit key, time) to ``--log`` with one ``write`` on an
``O_APPEND`` descriptor, sleeps the payload's ``sleep`` seconds, and stops on SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import os
import time

from fairque_core import Task, TaskHandler, WorkerConfig
from fairque_core.app.worker.worker import Worker
from fairque_redis import connect


class LoggingHandler(TaskHandler):
    def __init__(self, log_path: str) -> None:
        self.fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.pid = os.getpid()

    def log(self, task: Task, event: str) -> None:
        line = {"tenant": task.tenant, "id": task.task_id, "pid": self.pid, "event": event}
        line["key"] = task.limit_key
        line["t"] = time.time()
        os.write(self.fd, (json.dumps(line) + "\n").encode())

    def process_task(self, task: Task) -> object:
        self.log(task, "start")
        time.sleep(float(task.payload.get("sleep", 0.0)))
        self.log(task, "end")
        return None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--queue", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--id", default="flow")
    parser.add_argument("--cluster", action="store_true")
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()
    queue = connect(args.url, queue=args.queue, cluster=args.cluster)
    worker = Worker(
        WorkerConfig(
            id=args.id,
            max_concurrent_tasks=args.concurrency,
            poll_interval_seconds=0.05,
            reaper_interval_seconds=0.5,
            graceful_shutdown_timeout=10.0,
        ),
        LoggingHandler(args.log),
        queue,
        prefetch=0,
    )
    print("ready", flush=True)
    worker.run()
    queue.close()


if __name__ == "__main__":
    main()
