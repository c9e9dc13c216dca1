"""dramatiq (RedisBroker) in the comparison harness (bench/peers/_common.py).

``defaults``: ``Worker(broker)`` (8 worker threads, the default middleware); ``tuned``: 16
threads; an int: that many threads. No bulk enqueue (a group enqueues its messages one by one)
and no asyncio producer or worker.
"""

from __future__ import annotations

import logging
from typing import Any

import dramatiq
from _common import Base, Sink, Unsupported, hit, run
from dramatiq.brokers.redis import RedisBroker

logging.getLogger("dramatiq").setLevel(logging.WARNING)


class Adapter(Base):
    name = "dramatiq"

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.broker = RedisBroker(url=url)
        dramatiq.set_broker(self.broker)

        @dramatiq.actor(queue_name="compare", broker=self.broker)
        def noop(i: int, pushed_at: float) -> None:
            hit(pushed_at)

        self.noop = noop

    def enqueue(self, i: int, pushed_at: float) -> None:
        self.noop.send(i, pushed_at)

    def start_worker(self, sink: Sink, mode: str | int) -> Any:
        if mode == "async":
            raise Unsupported("no asyncio worker")
        threads = 16 if mode == "tuned" else mode if isinstance(mode, int) else 8
        worker = dramatiq.Worker(self.broker, worker_threads=threads)
        worker.start()
        return worker

    def stop_worker(self, handle: Any) -> None:
        handle.stop()

    def close(self) -> None:
        self.broker.close()


if __name__ == "__main__":
    run(Adapter)
