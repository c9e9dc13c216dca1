"""fairque in the comparison harness (bench/peers/_common.py); runs in the project's environment.

Tasks go to 100 tenants in turn (``bench_worker.TENANTS``), as in bench/bench_worker.py; the
queue is filled with ``bench_worker.fill`` (``push_batch`` of 1,000). Worker modes:
``defaults`` is ``Worker(WorkerConfig(), ...)`` with no ``prefetch`` argument; ``tuned`` is
``max_concurrent_tasks=100, prefetch=50``; ``async`` is ``AsyncWorker`` with the defaults and
an async no-op handler; an int is ``max_concurrent_tasks`` with the default prefetch.
With the spec's ``"push": "intake"`` (compare.py's ``*_intake`` measures) the producer's
side pushes through the intake (``push_intake``, ``push_intake_batch``; ADR 47) instead of
``push``/``push_batch``. Public fairque names only.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for bench_worker

from _common import Base, LoopThread, Sink, run
from bench_worker import TENANTS, fill

from fairque_core import AsyncWorker, Task, TaskHandler, Worker, WorkerConfig
from fairque_redis import aconnect, connect

QUEUE = "compare"


def _task(i: int, pushed_at: float, tenant: str | None = None) -> Task:
    return Task.create(tenant or f"tenant-{i % TENANTS}", payload={"t": pushed_at})


class SinkHandler(TaskHandler):
    def __init__(self, sink: Sink) -> None:
        self.sink = sink

    def process_task(self, task: Task) -> object:
        self.sink(float(task.payload.get("t", 0.0)))
        return None

    async def process_task_async(self, task: Task) -> object:
        self.sink(float(task.payload.get("t", 0.0)))
        return None


class Adapter(Base):
    name = "fairque"

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.queue = connect(url, queue=QUEUE)

    def enqueue(self, i: int, pushed_at: float) -> None:
        if self.push_mode == "intake":
            self.queue.push_intake(_task(i, pushed_at))
        else:
            self.queue.push(_task(i, pushed_at))

    def enqueue_bulk(self, items: list[tuple[int, float]]) -> None:
        if self.push_mode == "intake":
            self.queue.push_intake_batch([_task(i, t) for i, t in items])
        else:
            self.queue.push_batch([_task(i, t) for i, t in items])

    def enqueue_as(self, tenant: str, i: int, pushed_at: float) -> None:
        self.queue.push(_task(i, pushed_at, tenant))

    def enqueue_bulk_as(self, tenant: str, items: list[tuple[int, float]]) -> None:
        self.queue.push_batch([_task(i, t, tenant) for i, t in items])

    def fill(self, n: int) -> None:
        fill(self.queue, n)

    async def async_enqueuer(
        self,
    ) -> tuple[Callable[[int, float], Awaitable[object]], Callable[[], Awaitable[object]]]:
        aqueue = await aconnect(self.url, queue=QUEUE)

        def push(i: int, pushed_at: float) -> Awaitable[object]:
            if self.push_mode == "intake":
                return aqueue.push_intake(_task(i, pushed_at))
            return aqueue.push(_task(i, pushed_at))

        return push, aqueue.close

    def start_worker(self, sink: Sink, mode: str | int) -> Any:
        if mode == "async":
            return self._start_async(sink)
        queue = connect(self.url, queue=QUEUE)
        kwargs: dict[str, Any] = {}
        if mode == "tuned":
            config = WorkerConfig(id="compare", max_concurrent_tasks=100)
            kwargs["prefetch"] = 50
        elif isinstance(mode, int):
            config = WorkerConfig(id="compare", max_concurrent_tasks=mode)
        else:
            config = WorkerConfig(id="compare")
        worker = Worker(config, SinkHandler(sink), queue, **kwargs)
        worker.start()
        return ("thread", worker, queue)

    def _start_async(self, sink: Sink) -> Any:
        async def main(stop: asyncio.Event) -> None:
            queue = await aconnect(self.url, queue=QUEUE)
            worker = AsyncWorker(WorkerConfig(id="compare-async"), SinkHandler(sink), queue)
            await worker.start()
            await stop.wait()
            await worker.stop(10)
            await queue.close()

        return ("async", LoopThread(main), None)

    def stop_worker(self, handle: Any) -> None:
        kind, worker, queue = handle
        if kind == "async":
            worker.stop()
            return
        worker.stop(10)
        queue.close()

    def close(self) -> None:
        self.queue.close()


if __name__ == "__main__":
    run(Adapter)
