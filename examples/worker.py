"""Run a worker on the example tasks until the queue is empty (or for N seconds).

    uv run python examples/worker.py --until-empty         # the shared local server
    uv run python examples/worker.py --url redis://localhost:6379/0 --seconds 30

With no URL it uses the same shared local server as ``producer.py`` (see there).

The same worker from the command line, with the YAML config:

    cd examples && fairque worker --config fairque.yaml --handler tasks:registry
"""

from __future__ import annotations

import argparse
import os
import time

from tasks import registry

from fairque_core import WorkerConfig
from fairque_core.app.worker.handlers import RegistryHandler
from fairque_core.app.worker.worker import Worker
from fairque_redis import connect


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", default=None)
    parser.add_argument("--queue", default="default")
    parser.add_argument("--seconds", type=float, default=10.0, help="stop after this long")
    parser.add_argument("--until-empty", action="store_true", help="stop once nothing is left")
    args = parser.parse_args()

    config = WorkerConfig(
        id=f"example-worker-{os.getpid()}", max_concurrent_tasks=4, poll_interval_seconds=0.1
    )
    with connect(args.url, queue=args.queue, lease_seconds=30) as queue:
        worker = Worker(config, RegistryHandler(registry), queue)
        worker.start()
        deadline = time.monotonic() + args.seconds
        try:
            while time.monotonic() < deadline:
                time.sleep(0.1)
                if args.until_empty:
                    stats = queue.get_stats()
                    idle = worker.health()["in_flight"] == 0
                    if idle and not (stats["ready"] or stats["scheduled"] or stats["leased"]):
                        break
        finally:
            worker.stop()
        health = worker.health()
        print(f"processed {health['processed']} tasks, failed {health['failed']}")


if __name__ == "__main__":
    main()
