"""The engines built from config through the ``fairque.backends`` entry points, on Valkey."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from fairque_core import (
    AsyncFairQueue,
    FairQueue,
    FairQueueConfig,
    QueueConfig,
    RedisConfig,
    Task,
    TaskState,
    WorkerConfig,
)
from fairque_core.app.worker.handlers import RegistryHandler, TaskRegistry
from fairque_core.app.worker.worker_async import AsyncWorker

pytestmark = [pytest.mark.redis, pytest.mark.timeout(30)]


@pytest.fixture(autouse=True)
def _no_autoload(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAIRQUE_DISABLE_PLUGIN_AUTOLOAD", "1")


def config_for(server: Any, **queue: Any) -> FairQueueConfig:
    name = f"fc-{uuid.uuid4().hex[:10]}"
    return FairQueueConfig(redis=RedisConfig(url=server.url), queue=QueueConfig(name=name, **queue))


def test_from_config_round_trip_and_weights(valkey_server: Any) -> None:
    config = config_for(valkey_server, tenant_weights={"heavy": 3.0})
    with FairQueue.from_config(config) as queue:
        for i in range(6):
            queue.push(Task.create("heavy", payload={"i": i}))
            queue.push(Task.create("light", payload={"i": i}))
        batch = queue.claim_batch(8)
        assert [t.tenant for t in batch].count("heavy") == 6
        assert queue.finish_batch([(t, t.payload["i"]) for t in batch]) == [True] * 8
        assert queue.get_result(batch[0].task_id) == batch[0].payload["i"]


def test_async_worker_on_async_redis_backend(valkey_server: Any) -> None:
    registry = TaskRegistry()

    @registry.task("double")
    async def double(x: int) -> int:
        await asyncio.sleep(0)
        return 2 * x

    async def scenario() -> list[Any]:
        queue = await AsyncFairQueue.from_config(config_for(valkey_server))
        async with queue:
            tasks = [double(f"u{i % 3}", i) for i in range(20)]
            await queue.push_batch(tasks)
            worker = AsyncWorker(
                WorkerConfig(id="aw", poll_interval_seconds=0.05, max_concurrent_tasks=5),
                RegistryHandler(registry),
                queue,
            )
            await worker.start()
            deadline = asyncio.get_running_loop().time() + 10
            while worker.health()["processed"] < 20:
                assert asyncio.get_running_loop().time() < deadline
                await asyncio.sleep(0.02)
            await worker.stop(5)
            states = [await queue.get_state(t.task_id) for t in tasks]
            assert states == [TaskState.FINISHED] * 20
            return [await queue.get_result(t.task_id) for t in tasks]

    assert asyncio.run(scenario()) == [2 * i for i in range(20)]
