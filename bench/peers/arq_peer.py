"""arq in the comparison harness (bench/peers/_common.py).

Pushes are asyncio only (``await pool.enqueue_job(...)``). The worker is ``arq.Worker`` with its
defaults (at most 10 jobs at once, polling every 0.5 s when idle, results kept an hour) on its
own loop in a thread, signal handling off; ``tuned``: ``max_jobs=100, poll_delay=0.01``; an int
sets ``max_jobs``. No bulk enqueue.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from _common import Base, LoopThread, Sink, hit, run
from arq import create_pool
from arq.connections import RedisSettings
from arq.worker import Worker


async def noop(ctx: dict[str, Any], i: int, pushed_at: float) -> None:
    hit(pushed_at)


class Adapter(Base):
    name = "arq"
    async_only = True

    async def async_enqueuer(
        self,
    ) -> tuple[Callable[[int, float], Awaitable[object]], Callable[[], Awaitable[object]]]:
        pool = await create_pool(RedisSettings.from_dsn(self.url))

        def push(i: int, pushed_at: float) -> Awaitable[object]:
            return pool.enqueue_job("noop", i, pushed_at)

        async def close() -> None:
            await pool.aclose()

        return push, close

    def start_worker(self, sink: Sink, mode: str | int) -> Any:
        options: dict[str, Any] = {}
        if mode == "tuned":
            options = {"max_jobs": 100, "poll_delay": 0.01}
        elif isinstance(mode, int):
            options = {"max_jobs": mode}

        async def main(stop: asyncio.Event) -> None:
            worker = Worker(
                [noop],
                redis_settings=RedisSettings.from_dsn(self.url),
                handle_signals=False,
                **options,
            )
            running = asyncio.ensure_future(worker.main())
            await stop.wait()
            running.cancel()
            await asyncio.gather(running, return_exceptions=True)
            await worker.close()

        return LoopThread(main)

    def stop_worker(self, handle: Any) -> None:
        handle.stop()


if __name__ == "__main__":
    run(Adapter)
