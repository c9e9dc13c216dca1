"""Expiry before start (ADR 77), end to end on Valkey with real time and a real worker: a task
pushed with ``expires_in=1`` while no worker runs, a worker started 2 s later, never runs; it
is in the DLQ as ``stale`` and its dependent is canceled; work pushed beside it runs."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from typing import Any

import pytest

from fairque_core import (
    AsyncFairQueue,
    FailureType,
    FairQueue,
    FairQueueConfig,
    QueueConfig,
    RedisConfig,
    TaskState,
    WorkerConfig,
)
from fairque_core.app.worker.handlers import RegistryHandler, TaskRegistry
from fairque_core.app.worker.worker import Worker
from fairque_core.app.worker.worker_async import AsyncWorker

pytestmark = [pytest.mark.redis, pytest.mark.timeout(30)]


@pytest.fixture(autouse=True)
def _no_autoload(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAIRQUE_DISABLE_PLUGIN_AUTOLOAD", "1")


def _config(server: Any) -> FairQueueConfig:
    name = f"xp-{uuid.uuid4().hex[:10]}"
    return FairQueueConfig(redis=RedisConfig(url=server.url), queue=QueueConfig(name=name))


def _worker_config(name: str) -> WorkerConfig:
    return WorkerConfig(id=name, poll_interval_seconds=0.05, max_concurrent_tasks=2)


def _until(pushed_at: float, seconds: float) -> None:
    """The worker starts ``seconds`` after the push: the scenario is about time passing."""
    left = pushed_at + seconds - time.time()
    if left > 0:
        time.sleep(left)


def test_a_stale_task_never_runs_on_a_thread_worker(valkey_server: Any) -> None:
    registry = TaskRegistry()
    ran: list[str] = []
    done = threading.Event()

    @registry.task("notify")
    def notify(what: str) -> str:
        ran.append(what)
        if what == "marker":
            done.set()
        return what

    with FairQueue.from_config(_config(valkey_server)) as queue:
        stale = notify.create("acme", "stale", expires_in=1)
        child = notify.create("acme", "child", depends_on=[stale.task_id])
        queue.push(stale)
        queue.push(child)
        pushed_at = time.time()
        assert queue.get_state(child.task_id) is TaskState.DEFERRED
        _until(pushed_at, 2)
        queue.push(notify.create("acme", "marker"))  # behind the stale task, same tenant
        worker = Worker(_worker_config("xp-thread"), RegistryHandler(registry), queue)
        worker.start()
        try:
            assert done.wait(10), "the worker never ran the marker"
        finally:
            worker.stop(5)
        assert ran == ["marker"]  # the stale task and its dependent never ran
        assert queue.get_state(stale.task_id) is TaskState.FAILED
        assert queue.get_state(child.task_id) is TaskState.CANCELED
        [entry] = queue.list_dlq(failure_type=FailureType.STALE)
        assert entry.entry_id == stale.task_id
        assert queue.list_dlq(failure_type=FailureType.EXPIRED) == []
        stats = queue.get_stats()
        assert (stats["stale"], stats["dead"], stats["claimed"]) == (1, 1, 1)


def test_a_stale_task_never_runs_on_an_async_worker(valkey_server: Any) -> None:
    registry = TaskRegistry()
    ran: list[str] = []

    @registry.task("notify")
    async def notify(what: str) -> str:
        ran.append(what)
        return what

    async def scenario() -> None:
        queue = await AsyncFairQueue.from_config(_config(valkey_server))
        async with queue:
            stale = notify.create("acme", "stale", expires_in=1)
            child = notify.create("acme", "child", depends_on=[stale.task_id])
            await queue.push_batch([stale, child])
            pushed_at = time.time()
            await asyncio.sleep(max(0.0, pushed_at + 2 - time.time()))
            await queue.push(notify.create("acme", "marker"))
            worker = AsyncWorker(_worker_config("xp-async"), RegistryHandler(registry), queue)
            await worker.start()
            deadline = asyncio.get_running_loop().time() + 10
            while worker.health()["processed"] < 1:
                assert asyncio.get_running_loop().time() < deadline
                await asyncio.sleep(0.02)
            await worker.stop(5)
            assert ran == ["marker"]
            assert await queue.get_state(stale.task_id) is TaskState.FAILED
            assert await queue.get_state(child.task_id) is TaskState.CANCELED
            entries = await queue.list_dlq(failure_type=FailureType.STALE)
            assert [e.entry_id for e in entries] == [stale.task_id]

    asyncio.run(scenario())
