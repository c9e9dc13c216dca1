"""taskiq with taskiq-redis's ``RedisStreamBroker`` in the comparison harness (_common.py).

The stream broker is the one with acknowledgements (``ListQueueBroker`` has none). Pushes are
asyncio only (``await task.kiq(...)``). The worker is taskiq's ``Receiver`` with the
``taskiq worker`` command's defaults (at most 100 tasks at once, no prefetch cap, ack when the
result is saved), on its own loop in a thread; ``tuned`` and an int set ``max_async_tasks``
(tuned: 500). No bulk enqueue.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from _common import Base, LoopThread, Sink, hit, run
from taskiq.acks import AcknowledgeType
from taskiq.receiver import Receiver
from taskiq_redis import RedisStreamBroker

logging.getLogger("taskiq").setLevel(logging.WARNING)


async def noop(i: int, pushed_at: float) -> None:
    hit(pushed_at)


def _broker(url: str) -> tuple[RedisStreamBroker, Any]:
    broker = RedisStreamBroker(url, queue_name="compare")
    return broker, broker.task(task_name="noop")(noop)


class Adapter(Base):
    name = "taskiq"
    async_only = True

    async def async_enqueuer(
        self,
    ) -> tuple[Callable[[int, float], Awaitable[object]], Callable[[], Awaitable[object]]]:
        broker, task = _broker(self.url)
        await broker.startup()

        def push(i: int, pushed_at: float) -> Awaitable[object]:
            return task.kiq(i, pushed_at)  # type: ignore[no-any-return]

        return push, broker.shutdown

    def start_worker(self, sink: Sink, mode: str | int) -> Any:
        max_tasks = 500 if mode == "tuned" else mode if isinstance(mode, int) else 100

        async def main(stop: asyncio.Event) -> None:
            broker, _ = _broker(self.url)
            broker.is_worker_process = True
            receiver = Receiver(
                broker,
                executor=ThreadPoolExecutor(),
                max_async_tasks=max_tasks,
                ack_type=AcknowledgeType.WHEN_SAVED,
            )
            await receiver.listen(stop)
            await broker.shutdown()

        return LoopThread(main)

    def stop_worker(self, handle: Any) -> None:
        handle.stop()


if __name__ == "__main__":
    run(Adapter)
