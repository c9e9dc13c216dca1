"""``finish_and_claim`` (ADR 40) in the engine and the workers, on real servers: the engine's
one call where the backend has it (Valkey) and its fallback (finish, then claim) where it
has not (the reference model, the partitioned queue); events and poison as ``finish_batch``
and ``claim_batch`` have them; ``durability="replicated"`` still waits after the call; a
worker's acknowledgements ride on its claim (one round trip, where they were two).

Round trips are counted on the client, as in test_claim_when_ready.py: its connections are
a subclass that counts every ``send_packed_command`` (``Sends``, tests/conftest.py).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest
import redis
import redis.asyncio

from conftest import Sends
from fairque_core import (
    AsyncFairQueue,
    FairQueue,
    QueueConfig,
    Task,
    TaskHandler,
    TaskState,
    Worker,
    WorkerConfig,
)
from fairque_core.app.worker.worker_async import AsyncWorker
from fairque_core.domain.enums import Priority
from fairque_core.domain.errors import NotReplicatedError, TaskValidationError
from fairque_core.domain.models import Message
from fairque_core.ports.hooks import hookimpl
from fairque_redis.backends.backend import RedisBackend
from fairque_redis.backends.backend_async import AsyncRedisBackend
from fairque_redis.durability.modes import Durability

pytestmark = [pytest.mark.redis, pytest.mark.timeout(60)]


@pytest.fixture
def queue_name() -> str:
    return f"fac-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def counted(valkey_server: Any, queue_name: str) -> Iterator[tuple[FairQueue, Sends, Events]]:
    sends = Sends()
    pool = redis.ConnectionPool.from_url(valkey_server.url, connection_class=sends.sync_class)
    backend = RedisBackend(redis.Redis(connection_pool=pool), queue=queue_name)
    events = Events()
    fq = FairQueue(backend, config=QueueConfig(name=queue_name), plugins=[events])
    assert fq.finish_and_claim([], 1) == ([], [])  # the server checks, the script loaded
    yield fq, sends, events
    backend.purge_all()
    fq.close()
    backend.client.close()


class Events:
    """A plugin that records the engine's task events."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    @hookimpl
    def fairque_task_event(self, event: str, task: Task) -> None:
        if event in ("started", "finished"):
            self.seen.append((event, task.task_id))


def test_the_engine_makes_one_call_with_events_as_the_two(counted: Any) -> None:
    fq, sends, events = counted
    assert fq.combines_finish_and_claim
    fq.push_batch([Task.create("alice", task_id=f"t{i}") for i in range(4)])
    held = fq.claim_batch(2, worker_id="w")
    events.seen.clear()
    sent = sends.count
    flags, tasks = fq.finish_and_claim(
        [(held[0], {"ok": 1}), (held[1], None)], 5, worker_id="w", run_seconds=[0.1, 0.2]
    )
    assert sends.count - sent == 1
    assert flags == [True, True]
    assert [t.task_id for t in tasks] == ["t2", "t3"]
    assert events.seen == [
        ("finished", "t0"),
        ("finished", "t1"),
        ("started", "t2"),
        ("started", "t3"),
    ]
    assert all(t.lease is not None and t.lease.worker_id == "w" for t in tasks)
    assert fq.get_result("t0") == {"ok": 1}
    assert fq.get_state("t2") is TaskState.STARTED
    # a task without a lease, a lost lease: False, the others as usual
    flags, more = fq.finish_and_claim([(held[0], 1), (Task.create("alice"), 2), (tasks[0], 3)], 1)
    assert (flags, more) == ([True, False, True], [])
    with pytest.raises(TaskValidationError):
        fq.finish_and_claim([(tasks[1], None)], 0)
    assert fq.get_state("t3") is TaskState.STARTED  # refused before any I/O


def test_the_engine_falls_back_on_backends_without_it(valkey_server: Any, queue_name: str) -> None:
    from fairque_core import InMemoryBackend
    from fairque_redis.partitioned.backend import PartitionedBackend

    backends = (
        InMemoryBackend(),
        PartitionedBackend.from_url(valkey_server.url, queue=f"{queue_name}-p", partitions=3),
    )
    for backend in backends:
        fq = FairQueue(backend, config=QueueConfig(name=backend.queue))
        try:
            assert not fq.combines_finish_and_claim
            fq.set_tenant_limits("alice", max_running=1)
            fq.push_batch([Task.create("alice", task_id=f"a{i}") for i in range(2)])
            [first] = fq.claim_batch(2)
            flags, tasks = fq.finish_and_claim([(first, "r")], 2)
            assert flags == [True]
            assert [t.task_id for t in tasks] == ["a1"]  # the cap freed by the finish
            assert fq.get_result("a0") == "r"
        finally:
            fq.purge_all()
            fq.close()


def test_a_poisoned_claim_goes_to_the_dlq_and_the_rest_is_claimed(counted: Any) -> None:
    fq, _sends, _events = counted
    backend = fq.backend
    fq.push(Task.create("alice", task_id="p0"))
    [held] = fq.claim_batch(1)
    bad = Message(
        task_id="bad",
        tenant="alice",
        priority=Priority.NORMAL,
        body=b"\xff not json",
        created_at=time.time(),
    )
    backend.push(bad)
    fq.push(Task.create("alice", task_id="good"))
    flags, tasks = fq.finish_and_claim([(held, None)], 1)
    assert flags == [True]
    assert [t.task_id for t in tasks] == ["good"]  # poison took the place: claimed again
    assert fq.get_state("bad") is TaskState.FAILED


def test_async_engine_one_call(valkey_server: Any, queue_name: str) -> None:
    sends = Sends()

    async def main() -> None:
        pool = redis.asyncio.ConnectionPool.from_url(
            valkey_server.url, connection_class=sends.async_class
        )
        client = redis.asyncio.Redis(connection_pool=pool)
        fq = AsyncFairQueue(AsyncRedisBackend(client, queue=queue_name))
        try:
            assert fq.combines_finish_and_claim
            await fq.push_batch([Task.create("bob", task_id=f"b{i}") for i in range(3)])
            [held] = await fq.claim_batch(1)
            sent = sends.count
            flags, tasks = await fq.finish_and_claim([(held, "x")], 3)
            assert sends.count - sent == 1
            assert flags == [True]
            assert [t.task_id for t in tasks] == ["b1", "b2"]
            assert await fq.get_result("b0") == "x"
        finally:
            await fq.purge_all()
            await fq.close()
            await client.aclose()

    asyncio.run(main())


def test_replicated_durability_waits_after_the_call(valkey_server: Any, queue_name: str) -> None:
    """No replica on the session's Valkey: the wait runs out after both parts were applied;
    the error carries the finish flags and the claimed tasks (leased, the caller's)."""
    replicated = Durability("replicated", timeout_ms=50)
    backend = RedisBackend.from_url(valkey_server.url, queue=queue_name, durability=replicated)
    fq = FairQueue(backend, config=QueueConfig(name=queue_name))
    plain = RedisBackend.from_url(valkey_server.url, queue=queue_name)
    try:
        plain.push_batch(
            [
                Message(task_id=f"r{i}", tenant="u", priority=Priority.NORMAL, body=b"{}")
                for i in range(3)
            ]
        )
        [held] = plain.claim()
        with pytest.raises(NotReplicatedError) as caught:
            backend.finish_and_claim([("r0", held.lease.token, b"1")], count=1)
        assert caught.value.operation == "finish_claim"
        flags, claimed = caught.value.result
        assert flags == [True]
        assert [c.message.task_id for c in claimed] == ["r1"]
        assert plain.get_state("r0") is TaskState.FINISHED
        assert plain.get_state("r1") is TaskState.STARTED
        # the engine: the claimed tasks come decoded in the error's result
        [task1] = fq.claim_batch(1)  # r2 (claims do not wait)
        with pytest.raises(NotReplicatedError) as again:
            fq.finish_and_claim([(task1, None)], 1)
        assert again.value.result == ([True], [])
        assert plain.get_state("r2") is TaskState.FINISHED
    finally:
        plain.purge_all()
        plain.close()
        fq.close()


# ---------------------------------------------------------------------------- in the workers


class Echo(TaskHandler):
    def process_task(self, task: Task) -> object:
        return task.task_id


def _counting(base: Any) -> Any:
    """A subclass of the engine ``base`` that counts its finish_and_claim and finish_batch
    calls (the worker's acknowledgements go through one or the other)."""

    class Counting(base):  # type: ignore[misc, valid-type]
        calls: ClassVar[dict[str, int]]

        def finish_and_claim(self, *args: Any, **kwargs: Any) -> Any:
            self.calls["finish_and_claim"] += 1
            return super().finish_and_claim(*args, **kwargs)

        def finish_batch(self, *args: Any, **kwargs: Any) -> Any:
            self.calls["finish_batch"] += 1
            return super().finish_batch(*args, **kwargs)

    Counting.calls = {"finish_and_claim": 0, "finish_batch": 0}
    return Counting


WORKER = WorkerConfig(
    id="fac", max_concurrent_tasks=4, poll_interval_seconds=0.2, reaper_interval_seconds=30.0
)
TASKS = 80


@pytest.mark.parametrize("combined", [True, False])
def test_a_thread_workers_acks_ride_on_its_claims(
    valkey_server: Any, queue_name: str, combined: bool
) -> None:
    queue_class = _counting(FairQueue)
    fq = queue_class(RedisBackend.from_url(valkey_server.url, queue=queue_name))
    worker_class = type("W", (Worker,), {"combined_acks": combined})
    worker = worker_class(WORKER, Echo(), fq, prefetch=4)
    try:
        fq.push_batch([Task.create(f"u{i % 5}", task_id=f"w{i}") for i in range(TASKS)])
        worker.start()
        deadline = time.monotonic() + 30
        while fq.get_stats()["finished"] < TASKS:
            assert time.monotonic() < deadline, fq.get_stats()
            time.sleep(0.01)
        worker.stop()
        assert worker.health()["processed"] == TASKS
        assert fq.get_result("w7") == "w7"
        if combined:
            assert queue_class.calls["finish_and_claim"] > 0, queue_class.calls
        else:
            assert queue_class.calls["finish_and_claim"] == 0, queue_class.calls
            assert queue_class.calls["finish_batch"] > 0, queue_class.calls
    finally:
        fq.purge_all()
        fq.close()


@pytest.mark.parametrize("combined", [True, False])
def test_an_async_workers_acks_ride_on_its_claims(
    valkey_server: Any, queue_name: str, combined: bool
) -> None:
    queue_class = _counting(AsyncFairQueue)

    async def main() -> None:
        fq = queue_class(AsyncRedisBackend.from_url(valkey_server.url, queue=queue_name))
        worker_class = type("AW", (AsyncWorker,), {"combined_acks": combined})
        worker = worker_class(WORKER, Echo(), fq, prefetch=4)
        try:
            await fq.push_batch([Task.create(f"u{i % 5}", task_id=f"a{i}") for i in range(TASKS)])
            await worker.start()
            deadline = time.monotonic() + 30
            while (await fq.get_stats())["finished"] < TASKS:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.01)
            await worker.stop()
            assert worker.health()["processed"] == TASKS
            assert await fq.get_result("a7") == "a7"
        finally:
            await fq.purge_all()
            await fq.close()

    asyncio.run(main())
    if combined:
        assert queue_class.calls["finish_and_claim"] > 0, queue_class.calls
    else:
        assert queue_class.calls["finish_and_claim"] == 0, queue_class.calls
        assert queue_class.calls["finish_batch"] > 0, queue_class.calls
