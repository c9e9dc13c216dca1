"""``health()`` counts the tasks an idle worker's listener has claimed (ADR 38) before the worker
loop has booked them, and says which claims are still unanswered, on a real Valkey.

The control loop is held still on purpose: the queue below is a ``FairQueue`` (or
``AsyncFairQueue``) whose reaper call waits on a gate while the test wants. The loop makes
every reaper call itself, so while it waits there, nothing the listener brings can reach the
loop's books; only the driver's accounting can show it. ``LateReplyQueue`` holds a claim's
reply back the same way after the server has run it. The timeouts only bound a hang; the
checks are on states, never on how long something took.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from fairque_core import (
    AsyncFairQueue,
    FairQueue,
    QueueConfig,
    Task,
    TaskHandler,
    TaskState,
    WorkerConfig,
)
from fairque_core.app.worker import pacing as worker_pacing
from fairque_core.app.worker.worker import Worker
from fairque_core.app.worker.worker_async import AsyncWorker
from fairque_redis.backends.backend import RedisBackend
from fairque_redis.backends.backend_async import AsyncRedisBackend

pytestmark = [
    pytest.mark.redis,
    pytest.mark.timeout(90),
    pytest.mark.usefixtures("handoff_on_and_off"),
]  # ADR 65

HANG = 20.0  # only a hung worker takes this long


def wait_until(cond: Callable[[], bool], timeout: float = HANG) -> bool:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.002)
    return True


async def await_until(cond: Callable[[], bool], timeout: float = HANG) -> bool:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.002)
    return True


class ReaperGate:
    """Holds the worker's next reaper call (``armed``) until ``opened``; ``entered`` is set
    when the control loop is waiting there."""

    def __init__(self) -> None:
        self.armed = threading.Event()
        self.entered = threading.Event()
        self.opened = threading.Event()


class GatedQueue(FairQueue):
    gate: ReaperGate

    def requeue_expired(self, limit: int = 100) -> int:
        if self.gate.armed.is_set() and not self.gate.opened.is_set():
            self.gate.entered.set()
            self.gate.opened.wait(HANG)
        return super().requeue_expired(limit)


class AsyncGatedQueue(AsyncFairQueue):
    gate: ReaperGate

    async def requeue_expired(self, limit: int = 100) -> int:
        if self.gate.armed.is_set() and not self.gate.opened.is_set():
            self.gate.entered.set()
            await asyncio.get_running_loop().run_in_executor(None, self.gate.opened.wait, HANG)
        return await super().requeue_expired(limit)


class Hold(TaskHandler):
    """Each task waits for ``release`` (threads and asyncio alike); ``started`` records it."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()

    def process_task(self, task: Task) -> object:
        self.started.set()
        self.release.wait(HANG)
        return None

    async def process_task_async(self, task: Task) -> object:
        self.started.set()
        await asyncio.get_running_loop().run_in_executor(None, self.release.wait, HANG)
        return None


def _config(name: str) -> WorkerConfig:
    # a long poll: the listener's claim waits for the push; a short reaper interval: the
    # control loop soon reaches the gated reaper call
    return WorkerConfig(
        id=name,
        max_concurrent_tasks=2,
        poll_interval_seconds=30.0,
        reaper_interval_seconds=0.2,
        graceful_shutdown_timeout=5.0,
    )


@pytest.fixture(autouse=True)
def _long_idle_poll(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every claim handed to the listener waits up to the whole poll interval (as it does once
    a worker has been idle a while), so that one is out while the loop waits at the gate."""
    monkeypatch.setenv("FAIRQUE_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.setattr(worker_pacing, "IDLE_POLL_MIN_SECONDS", 30.0)


@pytest.fixture
def name() -> str:
    return f"hc{uuid.uuid4().hex[:10]}"


@pytest.fixture
def sync_queue(valkey_server: Any, name: str) -> Iterator[GatedQueue]:
    queue = GatedQueue(
        RedisBackend.from_url(valkey_server.url, queue=name), config=QueueConfig(name=name)
    )
    queue.gate = ReaperGate()
    yield queue
    queue.gate.opened.set()
    queue.close()


def test_a_task_the_listener_claimed_is_in_flight_before_the_loop_books_it(
    sync_queue: GatedQueue,
) -> None:
    queue, gate, handler = sync_queue, sync_queue.gate, Hold()
    worker = Worker(_config(queue.name), handler, queue, prefetch=0)
    worker.start()
    try:
        assert wait_until(lambda: bool(worker.health()["waiting_for_work"])), "never idle"
        gate.armed.set()
        assert gate.entered.wait(HANG), "the control loop never reached the reaper"
        task_id = queue.push(Task.create("alice"))
        assert wait_until(lambda: queue.get_state(task_id) == TaskState.STARTED), "not claimed"
        # the listener has the task; the loop waits at the gate and has not booked it
        assert wait_until(lambda: worker.health()["in_flight"] >= 1, 10.0), (
            f"a task the listener claimed is missing from health(): {worker.health()}"
        )
        health = worker.health()
        assert not handler.started.is_set()
        assert health["executing"] == 0  # not started: the loop has not seen it yet
        assert health["claims_settled"] == health["claims_sent"]  # its claim was answered
        gate.opened.set()
        # from here to the end of the handler it is in flight at every look
        looks = 0
        while not handler.started.is_set() or looks < 200:
            assert worker.health()["in_flight"] == 1, worker.health()
            looks += 1
            time.sleep(0.001)
        handler.release.set()
        assert wait_until(lambda: worker.health()["processed"] == 1)
        assert worker.health()["in_flight"] == 0
    finally:
        gate.opened.set()
        handler.release.set()
        assert worker.stop(10.0)


def test_the_async_worker_counts_its_listeners_tasks_too(valkey_server: Any, name: str) -> None:
    handler = Hold()

    async def scenario() -> None:
        backend = AsyncRedisBackend.from_url(valkey_server.url, queue=name)
        queue = AsyncGatedQueue(backend, config=QueueConfig(name=name))
        gate = queue.gate = ReaperGate()
        worker = AsyncWorker(_config(name), handler, queue, prefetch=0)
        await worker.start()
        try:
            assert await await_until(lambda: bool(worker.health()["waiting_for_work"]))
            gate.armed.set()
            assert await await_until(gate.entered.is_set), "the loop never reached the reaper"
            task_id = await queue.push(Task.create("alice"))
            state: list[TaskState | None] = [None]

            async def claimed() -> bool:
                state[0] = await queue.get_state(task_id)
                return state[0] == TaskState.STARTED

            deadline = time.monotonic() + HANG
            while not await claimed():
                assert time.monotonic() < deadline, f"not claimed: {state[0]}"
                await asyncio.sleep(0.002)
            assert await await_until(lambda: worker.health()["in_flight"] >= 1, 10.0), (
                f"a task the listener claimed is missing from health(): {worker.health()}"
            )
            assert not handler.started.is_set()
            assert worker.health()["executing"] == 0
            gate.opened.set()
            looks = 0
            while not handler.started.is_set() or looks < 200:
                assert worker.health()["in_flight"] == 1, worker.health()
                looks += 1
                await asyncio.sleep(0.001)
            handler.release.set()
            assert await await_until(lambda: worker.health()["processed"] == 1)
            assert worker.health()["in_flight"] == 0
        finally:
            gate.opened.set()
            handler.release.set()
            assert await worker.stop(10.0)
            await queue.close()

    asyncio.run(scenario())


class LateReplyQueue(FairQueue):
    """The reply of its first claim that brings tasks reaches the worker only once ``deliver``
    is set; the server has run that claim (``held`` is set then)."""

    held: threading.Event
    deliver: threading.Event

    def claim_batch(self, *args: Any, **kwargs: Any) -> Any:
        got = super().claim_batch(*args, **kwargs)
        if got and not self.held.is_set():
            self.held.set()
            self.deliver.wait(HANG)
        return got


def test_a_claim_whose_reply_is_on_its_way_is_not_settled(valkey_server: Any, name: str) -> None:
    """Nothing is ready and nothing is in flight while a claim's reply is on its way; the
    claim's number says so, and once it is settled its tasks are in flight."""
    queue = LateReplyQueue(
        RedisBackend.from_url(valkey_server.url, queue=name), config=QueueConfig(name=name)
    )
    queue.held, queue.deliver = threading.Event(), threading.Event()
    handler = Hold()
    worker = Worker(_config(name), handler, queue, prefetch=0)
    ids = [queue.push(Task.create("alice")) for _ in range(2)]
    worker.start()
    try:
        assert queue.held.wait(HANG), "the worker never claimed"
        assert all(queue.get_state(task_id) == TaskState.STARTED for task_id in ids)
        assert queue.get_stats()["ready"] == 0
        health = worker.health()
        assert health["in_flight"] == 0  # on its way: in no count yet
        assert health["claims_settled"] < health["claims_sent"]
        mark = health["claims_sent"]
        queue.deliver.set()
        assert wait_until(lambda: worker.health()["claims_settled"] >= mark)
        health = worker.health()
        assert health["in_flight"] == 2, health  # the handlers hold them
        handler.release.set()
        assert wait_until(lambda: worker.health()["processed"] == 2)
        assert worker.health()["in_flight"] == 0
    finally:
        queue.deliver.set()
        handler.release.set()
        assert worker.stop(10.0)
        queue.close()
