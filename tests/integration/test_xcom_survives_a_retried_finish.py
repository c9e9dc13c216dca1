"""A handler's XCom values survive a finish call that failed and was retried.

The engine took the values out of the task's context before the backend call and never put
them back: after one connection error on the worker's finish, the retried finish stored the
result but no XCom value (the task read FINISHED, ``xcom_pull`` gave None). The connection
error is raised by the backend before it sends anything, as a reset before the write would.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from fairque_core import (
    AsyncFairQueue,
    AsyncWorker,
    FairQueue,
    RegistryHandler,
    TaskRegistry,
    Worker,
    WorkerConfig,
    current_task_context,
)
from fairque_core.domain.errors import RedisConnectionError
from fairque_redis.backends.backend import RedisBackend
from fairque_redis.backends.backend_async import AsyncRedisBackend

pytestmark = pytest.mark.redis

_FINISHING = ("finish", "finish_batch", "finish_and_claim")

registry = TaskRegistry()


@registry.task("load", max_retries=0)
def load() -> int:
    current_task_context().xcom_push("columns", ["id", "amount"])
    return 3


class _FailsFirstFinish(RedisBackend):
    failures = 0

    def __getattribute__(self, name: str) -> Any:
        found = super().__getattribute__(name)
        if name in _FINISHING and not type(self).failures:

            def fail_once(*args: Any, **kwargs: Any) -> Any:
                type(self).failures += 1
                raise RedisConnectionError("connection reset before the write (injected)")

            return fail_once
        return found


class _AsyncFailsFirstFinish(AsyncRedisBackend):
    failures = 0

    def __getattribute__(self, name: str) -> Any:
        found = super().__getattribute__(name)
        if name in _FINISHING and not type(self).failures:

            async def fail_once(*args: Any, **kwargs: Any) -> Any:
                type(self).failures += 1
                raise RedisConnectionError("connection reset before the write (injected)")

            return fail_once
        return found


def _config() -> WorkerConfig:
    return WorkerConfig(id="w-" + uuid.uuid4().hex[:6], poll_interval_seconds=0.05)


def test_thread_worker_keeps_xcom_values_across_a_retried_finish(valkey_server: Any) -> None:
    backend = _FailsFirstFinish.from_url(valkey_server.url, queue="xr-" + uuid.uuid4().hex[:8])
    with FairQueue(backend) as queue:
        worker = Worker(_config(), RegistryHandler(registry), queue)
        worker.start()
        try:
            handle = queue.push(load("acme"))
            assert handle.get(timeout=20) == 3
        finally:
            worker.stop()
        assert _FailsFirstFinish.failures == 1
        assert queue.xcom_pull(handle, "columns", tenant="acme") == ["id", "amount"]


def test_async_worker_keeps_xcom_values_across_a_retried_finish(valkey_server: Any) -> None:
    async def scenario() -> None:
        backend = _AsyncFailsFirstFinish.from_url(
            valkey_server.url, queue="axr-" + uuid.uuid4().hex[:8]
        )
        async with AsyncFairQueue(backend) as queue:
            worker = AsyncWorker(_config(), RegistryHandler(registry), queue)
            runner = asyncio.ensure_future(worker.run())
            try:
                handle = await queue.push(load("acme"))
                assert await handle.get(timeout=20) == 3
            finally:
                await worker.stop()
                await runner
            assert _AsyncFailsFirstFinish.failures == 1
            assert await queue.xcom_pull(handle, "columns", tenant="acme") == ["id", "amount"]

    asyncio.run(scenario())
