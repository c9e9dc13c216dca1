"""Idle workers wake on the queue's wake signal, not at their next poll.

The adaptive idle poll is switched off here (its first wait is the whole poll interval, 30 s),
so a task that starts within seconds can only have been started because the push woke the
worker. Sync and async workers, on the in-memory model and on Valkey.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable, Iterator

import pytest

from fairque_core import (
    AsyncFairQueue,
    FairQueue,
    InMemoryBackend,
    QueueConfig,
    Task,
    TaskHandler,
    WorkerConfig,
)
from fairque_core.app.worker import pacing as wc
from fairque_core.app.worker.worker import Worker
from fairque_core.app.worker.worker_async import AsyncWorker
from fairque_core.memory.async_model import AsyncInMemoryBackend

pytestmark = [pytest.mark.timeout(60), pytest.mark.usefixtures("handoff_on_and_off")]  # ADR 65

POLL = 30.0  # far longer than any wait below: only the signal can start a task in time
PROMPT = 10.0  # generous for a loaded CI machine; the signal path takes milliseconds


@pytest.fixture(autouse=True)
def _no_adaptive_poll(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAIRQUE_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.setattr(wc, "IDLE_POLL_MIN_SECONDS", POLL)


@pytest.fixture(params=["memory", pytest.param("valkey", marks=pytest.mark.redis)])
def url(request: pytest.FixtureRequest) -> str | None:
    if request.param == "memory":
        return None
    return str(request.getfixturevalue("valkey_server").url)


class Starts(TaskHandler):
    """Records which worker started which task, and when."""

    def __init__(self) -> None:
        self.started: dict[str, tuple[str, float]] = {}
        self.lock = threading.Lock()
        self.hold = threading.Event()  # tasks wait on it, so each worker keeps its one place

    def process_task(self, task: Task) -> object:
        with self.lock:
            self.started[task.task_id] = (threading.current_thread().name, time.monotonic())
        self.hold.wait(PROMPT)
        return None

    async def process_task_async(self, task: Task) -> object:
        with self.lock:
            current = asyncio.current_task()
            name = current.get_name() if current is not None else "?"
            self.started[task.task_id] = (name, time.monotonic())
        await asyncio.get_running_loop().run_in_executor(None, self.hold.wait, PROMPT)
        return None


def _config(worker_id: str, cap: int = 1) -> WorkerConfig:
    return WorkerConfig(
        id=worker_id,
        poll_interval_seconds=POLL,
        max_concurrent_tasks=cap,
        graceful_shutdown_timeout=5.0,
        reaper_interval_seconds=POLL,
    )


def _sync_queue(url: str | None, name: str) -> FairQueue:
    if url is None:
        return FairQueue(InMemoryBackend(queue=name, config=QueueConfig(name=name)))
    from fairque_redis import connect

    return connect(url, queue=name)


def _wait_until(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.005)


@pytest.fixture
def sync_queue(url: str | None) -> Iterator[FairQueue]:
    queue = _sync_queue(url, f"wake{uuid.uuid4().hex[:10]}")
    yield queue
    queue.close()


def test_a_push_wakes_an_idle_thread_worker(sync_queue: FairQueue) -> None:
    handler = Starts()
    worker = Worker(_config("w1"), handler, sync_queue)
    worker.start()
    try:
        _wait_until(lambda: worker.health()["waiting_for_work"], PROMPT, "worker idle")
        pushed_at = time.monotonic()
        task_id = sync_queue.push(Task.create("alice"))
        _wait_until(lambda: task_id in handler.started, PROMPT, "task started")
        assert handler.started[task_id][1] - pushed_at < PROMPT
        assert worker.health()["claimed"] == 1
    finally:
        handler.hold.set()
        assert worker.stop(10)


def test_idle_workers_wake_one_after_another(sync_queue: FairQueue) -> None:
    """One push of three tasks wakes three idle one-place workers: the push raises the signal,
    and each claim that leaves work behind raises it again for the next worker."""
    handler = Starts()
    workers = [Worker(_config(f"w{i}"), handler, sync_queue) for i in range(3)]
    for worker in workers:
        worker.start()
    try:
        for worker in workers:
            _wait_until(lambda w=worker: w.health()["waiting_for_work"], PROMPT, "worker idle")
        ids = sync_queue.push_batch([Task.create(f"user{i}") for i in range(3)])
        _wait_until(lambda: len(handler.started) == 3, PROMPT, "three tasks started")
        assert sorted(handler.started) == sorted(ids)
        assert [w.health()["claimed"] for w in workers] == [1, 1, 1]
    finally:
        handler.hold.set()
        for worker in workers:
            assert worker.stop(10)


def test_a_stopping_worker_does_not_wait_for_its_listener(sync_queue: FairQueue) -> None:
    worker = Worker(_config("w1"), Starts(), sync_queue)
    worker.start()
    _wait_until(lambda: worker.health()["waiting_for_work"], PROMPT, "worker idle")
    started = time.monotonic()
    assert worker.stop(PROMPT)
    assert time.monotonic() - started < PROMPT
    assert worker.health()["waiting_for_work"] is False


def test_a_push_wakes_an_idle_async_worker(url: str | None) -> None:
    async def scenario() -> tuple[float, float, int]:
        name = f"awake{uuid.uuid4().hex[:10]}"
        queue: AsyncFairQueue
        if url is None:
            queue = AsyncFairQueue(AsyncInMemoryBackend(queue=name, config=QueueConfig(name=name)))
        else:
            from fairque_redis import aconnect

            queue = await aconnect(url, queue=name)
        handler = Starts()
        worker = AsyncWorker(_config("aw", cap=2), handler, queue)
        await worker.start()
        try:
            deadline = time.monotonic() + PROMPT
            while not worker.health()["waiting_for_work"]:
                assert time.monotonic() < deadline, "worker idle"
                await asyncio.sleep(0.005)
            pushed_at = time.monotonic()
            task_id = await queue.push(Task.create("alice"))
            while task_id not in handler.started:
                assert time.monotonic() < pushed_at + PROMPT, "task started"
                await asyncio.sleep(0.005)
            return pushed_at, handler.started[task_id][1], worker.health()["claimed"]
        finally:
            handler.hold.set()
            assert await worker.stop(10)
            await queue.close()

    pushed_at, started_at, claimed = asyncio.run(scenario())
    assert started_at - pushed_at < PROMPT
    assert claimed == 1


def test_without_the_signal_the_same_worker_waits_its_poll(
    sync_queue: FairQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The control: with the wake signal silenced the pushed task is NOT started promptly, so
    the tests above do measure the signal and not some other wake-up."""
    monkeypatch.setattr(
        sync_queue, "wait_for_work", lambda timeout: time.sleep(min(timeout, 0.05)) or False
    )
    # the listener's claims (ADR 38) wait on the same signal: silenced, they bring nothing
    monkeypatch.setattr(
        sync_queue,
        "claim_when_ready",
        lambda count, *args, timeout, **kwargs: time.sleep(min(timeout, 0.05)) or [],
    )
    handler = Starts()
    worker = Worker(_config("w1"), handler, sync_queue)
    worker.start()
    try:
        _wait_until(lambda: worker.health()["waiting_for_work"], PROMPT, "worker idle")
        task_id = sync_queue.push(Task.create("alice"))
        time.sleep(1.0)
        assert task_id not in handler.started
        assert worker.health()["claimed"] == 0
    finally:
        handler.hold.set()
        assert worker.stop(10)


def test_a_delayed_task_starts_when_due_not_at_the_next_poll(sync_queue: FairQueue) -> None:
    """The idle worker's wait ends at the first due time, so a delayed task (or a retry's
    backoff) starts about when it is due, while the poll interval here is 30 s."""
    handler = Starts()
    worker = Worker(_config("w1"), handler, sync_queue)
    worker.start()
    try:
        _wait_until(lambda: worker.health()["waiting_for_work"], PROMPT, "worker idle")
        delay = 0.5
        due_wall = time.time() + delay
        due_mono = time.monotonic() + delay
        task_id = sync_queue.push(Task.create("alice", execute_after=due_wall))
        _wait_until(lambda: task_id in handler.started, delay + PROMPT, "delayed task started")
        started = handler.started[task_id][1]
        assert started >= due_mono - 0.01, "started before it was due"
        assert started - due_mono < PROMPT
    finally:
        handler.hold.set()
        assert worker.stop(10)


def test_a_delayed_task_starts_when_due_on_an_async_worker(url: str | None) -> None:
    async def scenario() -> tuple[float, float]:
        name = f"adue{uuid.uuid4().hex[:10]}"
        queue: AsyncFairQueue
        if url is None:
            queue = AsyncFairQueue(AsyncInMemoryBackend(queue=name, config=QueueConfig(name=name)))
        else:
            from fairque_redis import aconnect

            queue = await aconnect(url, queue=name)
        handler = Starts()
        worker = AsyncWorker(_config("aw", cap=2), handler, queue)
        await worker.start()
        try:
            deadline = time.monotonic() + PROMPT
            while not worker.health()["waiting_for_work"]:
                assert time.monotonic() < deadline, "worker idle"
                await asyncio.sleep(0.005)
            due_mono = time.monotonic() + 0.5
            task_id = await queue.push(Task.create("alice", execute_after=time.time() + 0.5))
            while task_id not in handler.started:
                assert time.monotonic() < due_mono + PROMPT, "delayed task started"
                await asyncio.sleep(0.005)
            return due_mono, handler.started[task_id][1]
        finally:
            handler.hold.set()
            assert await worker.stop(10)
            await queue.close()

    due_mono, started = asyncio.run(scenario())
    assert started >= due_mono - 0.01, "started before it was due"
    assert started - due_mono < PROMPT
