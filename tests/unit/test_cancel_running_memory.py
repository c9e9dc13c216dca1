"""ADR 76 on the reference model: a cancel reaches the running task through the heartbeat.
Worker and AsyncWorker, real threads and time (heartbeat every 0.05 s); a canceled task that
was claimed but not started is dropped, never released or run."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from fairque_core import (
    FairQueue,
    InMemoryBackend,
    QueueConfig,
    Task,
    TaskCanceledError,
    TaskHandler,
    TaskState,
    WorkerConfig,
    current_task_context,
)
from fairque_core.app.engine.queue_async import AsyncFairQueue
from fairque_core.app.worker.worker import Worker
from fairque_core.app.worker.worker_async import AsyncWorker
from fairque_core.domain.outcomes import LEASE_CANCELED
from fairque_core.memory.async_model import AsyncInMemoryBackend

pytestmark = [pytest.mark.timeout(30), pytest.mark.usefixtures("handoff_on_and_off")]


def _config(**changes: Any) -> WorkerConfig:
    base: dict[str, Any] = {
        "id": "w",
        "max_concurrent_tasks": 1,
        "heartbeat_interval_seconds": 0.05,
        "poll_interval_seconds": 0.02,
    }
    base.update(changes)
    return WorkerConfig(**base)


class _Coop(TaskHandler):
    def __init__(self) -> None:
        self.started = threading.Event()
        self.stopped = threading.Event()
        self.ran: list[str] = []
        self.errors: list[BaseException] = []

    def process_task(self, task: Task) -> Any:
        self.ran.append(task.task_id)
        if task.payload.get("quick"):
            return "quick"
        ctx = current_task_context()
        assert not ctx.cancelled
        self.started.set()
        try:
            while True:
                ctx.raise_if_cancelled()
                time.sleep(0.005)
        except TaskCanceledError as exc:
            self.errors.append(exc)
            raise
        finally:
            self.stopped.set()


def test_a_thread_handler_sees_the_cancel_and_its_slot_runs_the_next_task() -> None:
    queue = FairQueue(InMemoryBackend(config=QueueConfig()))
    handler = _Coop()
    slow = queue.push(Task.create("a", payload={"slow": 1}, max_retries=3))
    quick = queue.push(Task.create("a", payload={"quick": 1}))
    worker = Worker(_config(), handler, queue)
    worker.start()
    try:
        assert handler.started.wait(5)
        assert queue.cancel(slow.task_id) is True
        assert handler.stopped.wait(5)
        deadline = time.monotonic() + 5
        while queue.get_state(quick.task_id) is not TaskState.FINISHED:
            assert time.monotonic() < deadline
            time.sleep(0.01)
    finally:
        assert worker.stop(5)
    assert [type(e) for e in handler.errors] == [TaskCanceledError]
    assert handler.ran == [slow.task_id, quick.task_id]  # not retried
    assert queue.get_state(slow.task_id) is TaskState.CANCELED
    health = worker.health()
    assert (health["canceled"], health["failed"], health["processed"]) == (1, 0, 1)


def test_an_async_handler_is_cancelled() -> None:
    async def scenario() -> tuple[list[str], str, dict[str, Any], TaskState | None]:
        queue = AsyncFairQueue(AsyncInMemoryBackend(config=QueueConfig()))
        ran: list[str] = []
        cancelled = asyncio.Event()
        started = asyncio.Event()

        class Slow(TaskHandler):
            async def process_task_async(self, task: Task) -> Any:
                ran.append(task.task_id)
                if task.payload.get("quick"):
                    return "quick"
                started.set()
                try:
                    await asyncio.sleep(60)
                except asyncio.CancelledError:
                    cancelled.set()
                    raise
                return "late"

        slow = await queue.push(Task.create("a", payload={"slow": 1}))
        quick = await queue.push(Task.create("a", payload={"quick": 1}))
        worker = AsyncWorker(_config(), Slow(), queue)
        await worker.start()
        try:
            await asyncio.wait_for(started.wait(), 5)
            assert await queue.cancel(slow.task_id) is True
            await asyncio.wait_for(cancelled.wait(), 5)
            for _ in range(500):
                if await queue.get_state(quick.task_id) is TaskState.FINISHED:
                    break
                await asyncio.sleep(0.01)
        finally:
            assert await worker.stop(5)
        return ran, quick.task_id, worker.health(), await queue.get_state(slow.task_id)

    ran, quick_id, health, state = asyncio.run(scenario())
    assert ran[1:] == [quick_id]
    assert state is TaskState.CANCELED
    assert (health["canceled"], health["failed"], health["processed"]) == (1, 0, 1)


def test_a_canceled_buffered_task_is_dropped_not_run() -> None:
    """Two slots' worth claimed by a one-slot worker with prefetch: the buffered one is
    canceled; it never runs, nothing is released for it."""
    queue = FairQueue(InMemoryBackend(config=QueueConfig()))
    handler = _Coop()
    slow = queue.push(Task.create("a", payload={"slow": 1}))
    buffered = queue.push(Task.create("a", payload={"quick": 1}))
    worker = Worker(_config(), handler, queue, prefetch=1)
    worker.start()
    try:
        assert handler.started.wait(5)
        deadline = time.monotonic() + 5
        while queue.get_state(buffered.task_id) is not TaskState.STARTED:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert queue.cancel(buffered.task_id) is True
        while worker.health()["canceled"] < 1:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert queue.cancel(slow.task_id) is True
        assert handler.stopped.wait(5)
    finally:
        assert worker.stop(5)
    assert handler.ran == [slow.task_id]
    assert worker.health()["released"] == 0


def test_heartbeat_batch_hides_the_marker_heartbeat_leases_keeps_it() -> None:
    queue = FairQueue(InMemoryBackend(config=QueueConfig()))
    queue.push(Task.create("a"))
    [task] = queue.claim_batch(1)
    queue.cancel(task.task_id)
    assert queue.heartbeat_batch([task]) == [None]
    assert queue.heartbeat_leases([task]) == [LEASE_CANCELED]
