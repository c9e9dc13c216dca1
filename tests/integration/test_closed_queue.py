"""A queue after ``close()``: every call is a QueueClosedError, and no connection is reopened.

Before, a call after ``close()`` went to the backend's client, which opened a new connection
that nothing owned or closed again (the server's client list grew by one per closed queue).
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
import redis

from fairque_core import AsyncFairQueue, FairQueue, QueueClosedError, Task
from fairque_redis.backends.backend import RedisBackend
from fairque_redis.backends.backend_async import AsyncRedisBackend

pytestmark = pytest.mark.redis


def _clients(url: str, name: str) -> int:
    """Connections to the server whose client name is ``name``."""
    with redis.Redis.from_url(url) as probe:
        return sum(1 for c in probe.client_list() if c.get("name") == name)


def test_sync_queue_calls_after_close_are_typed_and_open_nothing(valkey_server) -> None:
    name = f"closed-{uuid.uuid4().hex[:8]}"
    backend = RedisBackend.from_url(valkey_server.url, queue=name, client_name=name)
    queue = FairQueue(backend)
    queue.push(Task.create("a"))
    assert _clients(valkey_server.url, name) >= 1
    queue.close()
    assert _clients(valkey_server.url, name) == 0
    calls = [
        lambda: queue.push(Task.create("a")),
        lambda: queue.claim_batch(5),
        lambda: queue.get_queue_sizes("a"),
        queue.get_stats,
        lambda: queue.get_task("nope"),
    ]
    for call in calls:
        with pytest.raises(QueueClosedError) as info:
            call()
        assert info.value.queue == name
        assert isinstance(info.value, RuntimeError)
    assert _clients(valkey_server.url, name) == 0
    queue.close()  # a second close is a no-op
    assert "closed" in str(info.value)


def test_async_queue_calls_after_close_are_typed_and_open_nothing(valkey_server) -> None:
    name = f"aclosed-{uuid.uuid4().hex[:8]}"

    async def scenario() -> None:
        backend = AsyncRedisBackend.from_url(valkey_server.url, queue=name, client_name=name)
        queue = AsyncFairQueue(backend)
        handle = await queue.push(Task.create("a"))
        await queue.close()
        assert _clients(valkey_server.url, name) == 0
        with pytest.raises(QueueClosedError):
            await queue.push(Task.create("a"))
        with pytest.raises(QueueClosedError):
            await queue.claim_batch(5)
        with pytest.raises(QueueClosedError):
            await queue.get_queue_sizes("a")
        with pytest.raises(QueueClosedError):
            await handle.get(timeout=0.1)
        assert _clients(valkey_server.url, name) == 0
        await queue.close()

    asyncio.run(scenario())


def test_close_settles_coalesced_pushes_before_it_closes(valkey_server) -> None:
    """Pushes in flight when close() starts are sent (their group call runs before the queue
    counts as closed); a push after close() is refused."""
    name = f"settle-{uuid.uuid4().hex[:8]}"

    async def scenario() -> tuple[int, int]:
        backend = AsyncRedisBackend.from_url(valkey_server.url, queue=name)
        queue = AsyncFairQueue(backend)
        pushes = [asyncio.ensure_future(queue.push(Task.create(f"t{n % 3}"))) for n in range(50)]
        await asyncio.sleep(0)  # the pushes start and join the coalescer's groups
        await queue.close()
        results = await asyncio.gather(*pushes, return_exceptions=True)
        stored = sum(1 for r in results if not isinstance(r, BaseException))
        refused = sum(1 for r in results if isinstance(r, QueueClosedError))
        return stored, refused

    stored, refused = asyncio.run(scenario())
    assert stored + refused == 50
    assert stored >= 1
    with redis.Redis.from_url(valkey_server.url) as raw:
        queued = sum(1 for _ in raw.scan_iter(match=f"fq:{{{name}}}:task:*", count=1000))
    assert queued == stored  # every push that returned a handle was stored, no other


def test_a_worker_whose_queue_is_closed_stops(valkey_server) -> None:
    """Every call of a closed queue raises QueueClosedError: the worker stopped backing off
    and logging a traceback for ever; it now stops."""
    from fairque_core import AsyncWorker, TaskHandler, Worker, WorkerConfig

    class Idle(TaskHandler):
        def process_task(self, task):  # type: ignore[no-untyped-def]
            return None

    config = WorkerConfig(id="closed-w", poll_interval_seconds=0.05)
    queue = FairQueue(RedisBackend.from_url(valkey_server.url, queue=f"cw-{uuid.uuid4().hex[:8]}"))
    worker = Worker(config, Idle(), queue)
    worker.start()
    time.sleep(0.2)
    queue.close()
    deadline = time.monotonic() + 10
    while worker.health()["state"] != "stopped":
        assert time.monotonic() < deadline, "the worker of a closed queue kept running"
        time.sleep(0.05)
    assert "QueueClosedError" in str(worker.health()["last_error"])

    async def scenario() -> None:
        name = f"acw-{uuid.uuid4().hex[:8]}"
        aqueue = AsyncFairQueue(AsyncRedisBackend.from_url(valkey_server.url, queue=name))
        aworker = AsyncWorker(config, Idle(), aqueue)
        runner = asyncio.ensure_future(aworker.run())
        await asyncio.sleep(0.2)
        await aqueue.close()
        await asyncio.wait_for(runner, 10)
        assert aworker.health()["state"] == "stopped"

    asyncio.run(scenario())
