"""The machine's floor in the comparison harness (bench/peers/_common.py): redis-py alone.

Not a task queue and never a "best peer": what one Redis list and redis-py cost on this machine,
so that every row of ``compare.py`` can be read against what any Python queue on this server
pays at least. A task is a small JSON document (``{"i": .., "t": ..}``) in one list:

- enqueue: one ``LPUSH`` per task; bulk: one ``LPUSH`` of 1,000 values;
- async producer: ``redis.asyncio``'s ``LPUSH``, 100 at a time with ``asyncio.gather``;
- worker ``defaults``: one thread, ``BRPOP`` one task at a time, ``json.loads``, the no-op;
  ``tuned``: ``RPOP`` of up to 100 at once (``BRPOP`` when the list is empty). No lease, no
  acknowledgement, no retry: a worker that dies loses what it popped.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import redis
import redis.asyncio as aredis
from _common import Base, Sink, Unsupported, hit, run

KEY = "floor:tasks"


class Adapter(Base):
    name = "floor"

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.client = redis.Redis.from_url(url)

    def enqueue(self, i: int, pushed_at: float) -> None:
        self.client.lpush(KEY, json.dumps({"i": i, "t": pushed_at}))

    def enqueue_bulk(self, items: list[tuple[int, float]]) -> None:
        self.client.lpush(KEY, *(json.dumps({"i": i, "t": t}) for i, t in items))

    async def async_enqueuer(
        self,
    ) -> tuple[Callable[[int, float], Awaitable[object]], Callable[[], Awaitable[object]]]:
        client = aredis.Redis.from_url(self.url)

        def push(i: int, pushed_at: float) -> Awaitable[object]:
            return client.lpush(KEY, json.dumps({"i": i, "t": pushed_at}))

        return push, client.aclose

    def start_worker(self, sink: Sink, mode: str | int) -> Any:
        if mode not in ("defaults", "tuned"):
            raise Unsupported("the floor has one thread, sync")
        stop = threading.Event()
        client = redis.Redis.from_url(self.url)
        batch = 100 if mode == "tuned" else 1

        def loop() -> None:
            while not stop.is_set():
                got: list[bytes] = []
                if batch > 1:
                    got = client.rpop(KEY, batch) or []
                if not got:
                    popped = client.brpop([KEY], timeout=0.1)
                    got = [popped[1]] if popped else []
                for raw in got:
                    hit(float(json.loads(raw)["t"]))

        thread = threading.Thread(target=loop, daemon=True)
        thread.start()
        return stop, thread, client

    def stop_worker(self, handle: Any) -> None:
        stop, thread, client = handle
        stop.set()
        thread.join(5)
        client.close()


if __name__ == "__main__":
    run(Adapter)
