"""huey (RedisHuey) in the comparison harness (bench/peers/_common.py).

``defaults``: the consumer's defaults (one worker thread, blocking BRPOP dequeue), periodic
tasks off; ``tuned``: 8 worker threads; an int: that many worker threads. No bulk enqueue (huey's
``map`` enqueues one by one) and no asyncio producer or worker.
"""

from __future__ import annotations

from typing import Any

from _common import Base, Sink, Unsupported, hit, run
from huey import RedisHuey


class Adapter(Base):
    name = "huey"

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.huey = RedisHuey("compare", url=url)

        @self.huey.task()
        def noop(i: int, pushed_at: float) -> None:
            hit(pushed_at)

        self.noop = noop

    def enqueue(self, i: int, pushed_at: float) -> None:
        self.noop(i, pushed_at)

    def start_worker(self, sink: Sink, mode: str | int) -> Any:
        if mode == "async":
            raise Unsupported("no asyncio worker")
        workers = 8 if mode == "tuned" else mode if isinstance(mode, int) else 1
        consumer = self.huey.create_consumer(
            workers=workers, periodic=False, check_worker_health=False
        )
        consumer.start()
        return consumer

    def stop_worker(self, handle: Any) -> None:
        handle.stop(graceful=True)


if __name__ == "__main__":
    run(Adapter)
