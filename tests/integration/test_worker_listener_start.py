"""An idle worker's listener starts the tasks its claim brought (ADR 46), on Valkey: the thread
``Worker`` runs the first on the listener's own thread (another pool thread listens on),
``AsyncWorker`` starts them from its listener task; every task runs once and is finished, and
a stopped worker leaves no pool thread behind."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from fairque_core import FairQueue, Task, TaskHandler, WorkerConfig
from fairque_core.app.worker.worker import Worker
from fairque_core.app.worker.worker_async import AsyncWorker
from fairque_core.settings.accel import Accelerators

pytestmark = [pytest.mark.redis, pytest.mark.timeout(60)]

TASKS = 12
GAP = 0.02  # between pushes: the worker is idle (asleep, its listener waiting) at each


class Threads(TaskHandler):
    """Records the thread each task ran on, and every run."""

    def __init__(self) -> None:
        self.ran: list[tuple[str, int]] = []
        self.lock = threading.Lock()

    def process_task(self, task: Task) -> object:
        with self.lock:
            self.ran.append((task.task_id, threading.get_ident()))
        return None

    async def process_task_async(self, task: Task) -> object:
        return self.process_task(task)


def _config(worker_id: str) -> WorkerConfig:
    return WorkerConfig(
        id=worker_id,
        poll_interval_seconds=0.5,
        max_concurrent_tasks=4,
        graceful_shutdown_timeout=5.0,
    )


def _wait_until(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.005)


@pytest.fixture
def queue(valkey_server: Any) -> Iterator[FairQueue]:
    from fairque_redis import connect

    q = connect(valkey_server.url, queue=f"lstart{uuid.uuid4().hex[:10]}")
    yield q
    q.close()


def _claim_threads(queue: FairQueue) -> dict[str, int]:
    """Task id -> the thread whose ``claim_when_ready`` brought it (patched on this queue)."""
    claimed: dict[str, int] = {}
    inner = queue.claim_when_ready

    def recorded(*args: Any, **kwargs: Any) -> list[Task]:
        tasks = inner(*args, **kwargs)
        for task in tasks:
            claimed[task.task_id] = threading.get_ident()
        return tasks

    queue.claim_when_ready = recorded  # type: ignore[method-assign]
    return claimed


def _trickle(queue: FairQueue, handler: Threads) -> list[str]:
    ids = []
    for i in range(TASKS):
        ids.append(queue.push(Task.create(f"tenant-{i % 3}")))
        _wait_until(lambda: len(handler.ran) == len(ids), 10, f"task {i} ran")
        time.sleep(GAP)
    return ids


def _pool_threads(worker_id: str) -> list[threading.Thread]:
    prefix = f"fairque-{worker_id}-"
    return [t for t in threading.enumerate() if t.name.startswith(prefix) and t.name[-1].isdigit()]


@pytest.mark.parametrize("starts", [True, False], ids=["handoff-on", "handoff-off"])
def test_the_listener_thread_runs_the_task_its_claim_brought(
    queue: FairQueue, starts: bool
) -> None:
    accel = Accelerators() if starts else Accelerators(off={"handoff"})
    worker_id = f"ls-{int(starts)}"
    claimed = _claim_threads(queue)
    handler = Threads()
    worker = Worker(_config(worker_id), handler, queue, accel=accel)
    worker.start()
    try:
        _wait_until(lambda: worker.health()["waiting_for_work"], 10, "worker idle")
        ids = _trickle(queue, handler)
        _wait_until(lambda: queue.get_stats()["finished"] == TASKS, 10, "all finished")
        ran = dict(handler.ran)
        assert sorted(ran) == sorted(ids)
        assert len(handler.ran) == TASKS  # each once
        on_claimer = [t for t in ids if t in claimed and claimed[t] == ran[t]]
        if starts:
            # an idle worker's control thread sleeps when a push comes: the listener's thread
            # runs the task (a busy host may wake the loop first now and then)
            assert len(on_claimer) >= TASKS // 2
        else:
            assert on_claimer == []  # the loop starts every task on a pool thread
        assert len(_pool_threads(worker_id)) <= 4 + 2  # places, plus the listener's turn
        assert worker.health()["in_flight"] == 0
    finally:
        assert worker.stop(10)
    # the listener leaves once its wait ends (at most a poll interval); no pool thread waits
    # for a job that will never come
    _wait_until(lambda: not _pool_threads(worker_id), 5, "pool threads gone")


def test_the_async_listener_starts_its_tasks(valkey_server: Any) -> None:
    from fairque_redis import aconnect

    async def scenario() -> tuple[int, dict[str, Any], int]:
        queue = await aconnect(valkey_server.url, queue=f"alstart{uuid.uuid4().hex[:10]}")
        handler = Threads()
        worker = AsyncWorker(_config("als"), handler, queue, accel=Accelerators())
        await worker.start()
        try:
            deadline = time.monotonic() + 10
            while not worker.health()["waiting_for_work"]:
                assert time.monotonic() < deadline, "worker idle"
                await asyncio.sleep(0.005)
            for i in range(TASKS):
                await queue.push(Task.create(f"tenant-{i % 3}"))
                deadline = time.monotonic() + 10
                while len(handler.ran) <= i:
                    assert time.monotonic() < deadline, f"task {i} ran"
                    await asyncio.sleep(0.002)
                await asyncio.sleep(GAP)
            deadline = time.monotonic() + 10
            while (await queue.get_stats())["finished"] < TASKS:
                assert time.monotonic() < deadline, "all finished"
                await asyncio.sleep(0.01)
            return len(handler.ran), worker.health(), (await queue.get_stats())["finished"]
        finally:
            assert await worker.stop(10)
            await queue.close()

    runs, health, finished = asyncio.run(scenario())
    assert runs == TASKS
    assert finished == TASKS
    assert health["in_flight"] == 0
    assert health["processed"] == TASKS
