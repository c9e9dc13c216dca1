"""celery (Redis broker, no result backend) in the comparison harness (_common.py).

The worker is a ``WorkController`` in a thread of this process, as celery's own test helper
starts one, with the ``threads`` pool: ``defaults`` 10 threads (celery's default is a prefork
pool, one child process per core, whose tasks could not reach this process's counter);
``tuned`` 50; an int: that many. Prefetch multiplier, acks and the rest are celery's
defaults; heartbeats, mingle and gossip (events between workers) are off. Logging at WARNING.
No bulk enqueue (a group publishes one message per task) and no asyncio.
"""

from __future__ import annotations

import threading
from typing import Any

from _common import Base, Sink, Unsupported, hit, run
from celery import Celery
from celery.contrib.testing.worker import TestWorkController
from celery.worker import state


class Adapter(Base):
    name = "celery"

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.app = Celery("compare", broker=url)
        self.app.conf.task_default_queue = "compare"
        self.app.conf.broker_connection_retry_on_startup = True

        @self.app.task(name="noop")
        def noop(i: int, pushed_at: float) -> None:
            hit(pushed_at)

        self.noop = noop

    def enqueue(self, i: int, pushed_at: float) -> None:
        self.noop.delay(i, pushed_at)

    def start_worker(self, sink: Sink, mode: str | int) -> Any:
        if mode == "async":
            raise Unsupported("no asyncio worker")
        threads = 50 if mode == "tuned" else mode if isinstance(mode, int) else 10
        worker = TestWorkController(
            app=self.app,
            concurrency=threads,
            pool="threads",
            loglevel="WARNING",
            ready_callback=None,
            without_heartbeat=True,
            without_mingle=True,
            without_gossip=True,
        )
        thread = threading.Thread(target=worker.start, daemon=True)
        thread.start()
        worker.ensure_started()
        return thread

    def stop_worker(self, handle: Any) -> None:
        state.should_terminate = 0
        handle.join(15)
        state.should_terminate = None


if __name__ == "__main__":
    run(Adapter)
