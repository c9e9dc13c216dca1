"""Issue 34, item 2: one bad value a handler hands in never wedges its worker.

Before the fix ``ctx.xcom_push("\\ud800", 1)`` (a lone surrogate, which no server can store)
was accepted; the worker's batched finish then failed on it every time, so none of the 20
other tasks it held finished and the poison task stayed started. Now the push raises a
TaskValidationError in the handler (naming the field), and a finish the server refuses for
one task ends that task alone (failed with the refusal) while the others finish.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from typing import Any

import pytest

from fairque_core import (
    AsyncFairQueue,
    AsyncWorker,
    FairQueue,
    RegistryHandler,
    TaskRegistry,
    TaskState,
    TaskValidationError,
    Worker,
    WorkerConfig,
    current_task_context,
)
from fairque_redis.backends.backend import RedisBackend
from fairque_redis.backends.backend_async import AsyncRedisBackend

pytestmark = pytest.mark.redis

OTHERS = 20

registry = TaskRegistry()
caught: dict[str, BaseException] = {}
_LOCK = threading.Lock()


@registry.task("poison", max_retries=0)
def poison(label: str) -> str:
    try:
        current_task_context().xcom_push("\ud800", 1)
    except Exception as exc:
        with _LOCK:
            caught[label] = exc
        raise
    return "stored"


@registry.task("ordinary", max_retries=0)
def ordinary(n: int) -> int:
    current_task_context().xcom_push("n", n)
    return n * 2


@registry.task("smuggles", max_retries=0)
def smuggles() -> str:
    """Gets an unstorable key past the entry check (as a plugin or a future code path
    might): the server refuses its finish, and that must not block the other tasks."""
    ctx = current_task_context()
    ctx.xcom_push("fine", 1)
    ctx._pushed["\udfff"] = ctx._pushed.pop("fine")
    return "smuggled"


def _config() -> WorkerConfig:
    return WorkerConfig(
        id="w-" + uuid.uuid4().hex[:6], poll_interval_seconds=0.05, max_concurrent_tasks=8
    )


def _queue_name() -> str:
    return "poison-" + uuid.uuid4().hex[:8]


def _check_refused(label: str) -> None:
    error = caught.pop(label)
    assert isinstance(error, TaskValidationError)
    assert error.field == "xcom key"


@pytest.mark.parametrize("bad", ["poison", "smuggles"])
def test_thread_worker_finishes_the_others(valkey_server: Any, bad: str) -> None:
    label = "thread-" + uuid.uuid4().hex[:6]
    with FairQueue(RedisBackend.from_url(valkey_server.url, queue=_queue_name())) as queue:
        first = queue.push(poison("default", label) if bad == "poison" else smuggles("default"))
        handles = [queue.push(ordinary("default", n)) for n in range(OTHERS)]
        worker = Worker(_config(), RegistryHandler(registry), queue)
        worker.start()
        try:
            assert [h.get(timeout=20) for h in handles] == [n * 2 for n in range(OTHERS)]
            assert queue.xcom_pull(handles[3], "n", tenant="default") == 3
            first_state = _wait_ended(lambda: queue.get_state(first.task_id))
        finally:
            worker.stop()
        assert first_state == TaskState.FAILED
    if bad == "poison":
        _check_refused(label)


def test_async_worker_finishes_the_others(valkey_server: Any) -> None:
    label = "async-" + uuid.uuid4().hex[:6]

    async def scenario() -> None:
        backend = AsyncRedisBackend.from_url(valkey_server.url, queue=_queue_name())
        async with AsyncFairQueue(backend) as queue:
            first = await queue.push(poison("default", label))
            smuggled = await queue.push(smuggles("default"))
            handles = [await queue.push(ordinary("default", n)) for n in range(OTHERS)]
            worker = AsyncWorker(_config(), RegistryHandler(registry), queue)
            runner = asyncio.ensure_future(worker.run())
            try:
                got = [await h.get(timeout=20) for h in handles]
                assert got == [n * 2 for n in range(OTHERS)]
                for handle in (first, smuggled):
                    for _ in range(200):
                        if await queue.get_state(handle.task_id) == TaskState.FAILED:
                            break
                        await asyncio.sleep(0.05)
                    assert await queue.get_state(handle.task_id) == TaskState.FAILED
            finally:
                await worker.stop()
                await runner

    asyncio.run(scenario())
    _check_refused(label)


def _wait_ended(state: Any) -> Any:
    import time

    deadline = time.monotonic() + 10
    found = state()
    while found != TaskState.FAILED and time.monotonic() < deadline:
        time.sleep(0.05)
        found = state()
    return found
