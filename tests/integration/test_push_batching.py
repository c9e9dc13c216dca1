"""The producer buffer ``queue.batcher()`` (ADR 35), sync and async, on the reference model and
on Valkey: when a buffer is sent (size, delay, flush, exit, exit by an exception), what each
pending push says, per-task refusals against a failed call, checks at push time, and a batcher
shared by threads. No timed assertion: a delay flush is awaited with a generous timeout and only
its outcome is checked.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from fairque_core import (
    AsyncFairQueue,
    AsyncInMemoryBackend,
    BatcherClosedError,
    BatchPushError,
    FairQueue,
    InMemoryBackend,
    PayloadTooLargeError,
    QueueConfig,
    RedisConnectionError,
    Task,
    TaskHandle,
    TaskState,
    TaskValidationError,
    TenantQueueFullError,
)
from fairque_core.app.engine.handles_async import AsyncTaskHandle

pytestmark = pytest.mark.timeout(60)

KINDS = ["memory", pytest.param("valkey", marks=pytest.mark.redis)]
# A delay no test waits for: the buffer goes only by size, flush or exit.
NEVER_MS = 60_000.0


def _config(**fields: Any) -> QueueConfig:
    return QueueConfig(name="bt-" + uuid.uuid4().hex[:10], **fields)


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def server_url(kind: str, request: pytest.FixtureRequest) -> str | None:
    if kind == "memory":
        return None
    return str(request.getfixturevalue("valkey_server").url)


@pytest.fixture
def make_queue(server_url: str | None) -> Iterator[Callable[..., FairQueue]]:
    made: list[FairQueue] = []

    def factory(**fields: Any) -> FairQueue:
        config = _config(**fields)
        if server_url is None:
            queue = FairQueue(InMemoryBackend(queue=config.name, config=config))
        else:
            from fairque_redis.backends.backend import RedisBackend

            backend = RedisBackend.from_url(server_url, queue=config.name, config=config)
            queue = FairQueue(backend)
        made.append(queue)
        return queue

    yield factory
    for queue in made:
        queue.purge_all()
        queue.close()


def _evalsha_calls(url: str) -> int:
    import redis

    with redis.Redis.from_url(url) as client:
        stats = client.info("commandstats")  # script calls: FCALL, or EVALSHA (ADR 41)
        return sum(int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in ("fcall", "evalsha"))


def _tasks(tenant: str, n: int) -> list[Task]:
    return [Task.create(tenant, payload={"i": i}) for i in range(n)]


# ---------------------------------------------------------------- sync: when a buffer is sent


def test_a_full_buffer_is_sent_in_one_call(make_queue, server_url) -> None:
    queue = make_queue()
    queue.push(Task.create("warm"))  # the backend's first write also registers the queue
    with queue.batcher(max_size=3, max_delay_ms=NEVER_MS) as b:
        first = [b.push(t) for t in _tasks("alice", 2)]
        assert len(b) == 2
        assert not any(p.done() for p in first)  # buffered: not stored, not acknowledged
        assert queue.get_state(first[0].task_id) is None
        before = _evalsha_calls(server_url) if server_url else 0
        third = b.push(Task.create("bob"))
        if server_url:
            assert _evalsha_calls(server_url) - before == 1  # the three in one push call
        assert len(b) == 0
        pendings = [*first, third]
        assert all(p.done() for p in pendings)
        handles = [p.result(timeout=0) for p in pendings]
    assert all(isinstance(h, TaskHandle) and not h.duplicate for h in handles)
    assert [str(h) for h in handles] == [p.task_id for p in pendings]
    assert all(queue.get_state(h) is TaskState.QUEUED for h in handles)
    assert queue.get_stats()["pushed"] == 4


def test_the_timer_sends_a_buffer_that_is_not_full(make_queue) -> None:
    queue = make_queue()
    with queue.batcher(max_size=1000, max_delay_ms=20) as b:
        pending = b.push(Task.create("alice"))
        handle = pending.result(timeout=20)  # sent by the timer thread, not by flush or exit
        assert len(b) == 0
        assert queue.get_state(handle) is TaskState.QUEUED


def test_flush_and_exit_send_what_is_buffered(make_queue) -> None:
    queue = make_queue()
    with queue.batcher(max_size=100, max_delay_ms=NEVER_MS) as b:
        early = [b.push(t) for t in _tasks("alice", 3)]
        b.flush()
        assert all(p.done() for p in early)
        late = [b.push(t) for t in _tasks("alice", 4)]
        assert not any(p.done() for p in late)
    assert all(p.done() for p in late)
    assert queue.get_stats()["pushed"] == 7
    with pytest.raises(BatcherClosedError):
        b.push(Task.create("alice"))


def test_an_exception_in_the_block_still_sends_the_buffer(make_queue) -> None:
    queue = make_queue()
    pending: list[Any] = []

    def fail_inside() -> None:
        with queue.batcher(max_delay_ms=NEVER_MS) as b:
            pending.extend(b.push(t) for t in _tasks("alice", 5))
            raise KeyError("boom")

    with pytest.raises(KeyError, match="boom") as raised:
        fail_inside()
    assert not getattr(raised.value, "__notes__", [])  # the send after it went through
    assert [queue.get_state(p.result(timeout=0)) for p in pending] == [TaskState.QUEUED] * 5


def test_checks_run_at_push_time_and_buffer_nothing(make_queue) -> None:
    queue = make_queue(max_payload_bytes=200)
    with queue.batcher(max_delay_ms=NEVER_MS) as b:
        b.push(Task.create("alice"))
        with pytest.raises(PayloadTooLargeError):
            b.push(Task.create("alice", payload={"blob": "x" * 500}))
        with pytest.raises(TaskValidationError):
            b.push(Task.create("alice", task_id="self", depends_on=["self"]))
        with pytest.raises(TaskValidationError):
            b.push("not a task")  # type: ignore[arg-type]
        assert len(b) == 1
    assert queue.get_stats()["pushed"] == 1


def test_a_refused_task_fails_alone_and_flush_raises_for_it(make_queue) -> None:
    queue = make_queue()
    queue.set_tenant_limits("capped", max_queued=1)
    ok1, capped1, capped2, orphan, ok2 = (
        Task.create("alice"),
        Task.create("capped"),
        Task.create("capped"),
        Task.create("alice", depends_on=["no-such-task"]),
        Task.create("bob"),
    )
    b = queue.batcher(max_delay_ms=NEVER_MS)
    pending = {t.task_id: b.push(t) for t in (ok1, capped1, capped2, orphan, ok2)}
    with pytest.raises(BatchPushError) as failed:
        b.flush()
    assert set(failed.value.errors) == {capped2.task_id, orphan.task_id}
    assert isinstance(failed.value.errors[capped2.task_id], TenantQueueFullError)
    assert isinstance(failed.value.__cause__, (TenantQueueFullError, TaskValidationError))
    with pytest.raises(TenantQueueFullError):
        pending[capped2.task_id].result(timeout=0)
    with pytest.raises(TaskValidationError):
        pending[orphan.task_id].result(timeout=0)
    assert isinstance(pending[orphan.task_id].exception(timeout=0), TaskValidationError)
    for task in (ok1, capped1, ok2):  # stored as single pushes would have stored them
        assert queue.get_state(pending[task.task_id].result(timeout=0)) is TaskState.QUEUED
    assert queue.get_state(capped2.task_id) is None
    b.close()  # the failures were raised once, by flush


def test_a_duplicate_id_in_one_batch_is_a_duplicate(make_queue) -> None:
    queue = make_queue()
    task = Task.create("alice")
    with queue.batcher(max_delay_ms=NEVER_MS) as b:
        first, again = b.push(task), b.push(task)
    assert (first.result().duplicate, again.result().duplicate) == (False, True)


@pytest.mark.redis
def test_a_failed_call_fails_every_push_of_it() -> None:
    from fairque_redis.backends.backend import RedisBackend
    from fairque_redis.servers.embedded import EmbeddedValkey, ServerBinaryNotFoundError

    try:
        server = EmbeddedValkey()
    except ServerBinaryNotFoundError as exc:
        pytest.skip(f"embedded Valkey unavailable: {exc}")
    with server:
        config = _config()
        queue = FairQueue(RedisBackend.from_url(server.url, queue=config.name, config=config))
        b = queue.batcher(max_delay_ms=NEVER_MS)
        pending = [b.push(t) for t in _tasks("alice", 3)]
        server.stop()
        with pytest.raises(BatchPushError) as failed:
            b.close()
        queue.close()
    assert set(failed.value.errors) == {p.task_id for p in pending}
    for p in pending:
        assert isinstance(p.exception(timeout=0), RedisConnectionError)


def test_one_batcher_shared_by_threads(make_queue) -> None:
    queue = make_queue()
    per_thread, threads = 60, 6
    results: dict[str, list[Any]] = {}
    with queue.batcher(max_size=16, max_delay_ms=2) as b:

        def produce(tenant: str) -> None:
            results[tenant] = [b.push(t) for t in _tasks(tenant, per_thread)]

        workers = [threading.Thread(target=produce, args=(f"t{i}",)) for i in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    assert queue.get_stats()["pushed"] == per_thread * threads
    claimed = queue.claim_batch(per_thread * threads)
    for tenant, pendings in results.items():
        ids = [p.result(timeout=0) for p in pendings]
        # each thread's pushes keep their order (FIFO inside the tenant)
        assert [t.task_id for t in claimed if t.tenant == tenant] == ids


# ---------------------------------------------------------------- async


@pytest.fixture
def make_async_queue(server_url: str | None) -> Callable[..., AsyncFairQueue]:
    """An async queue for the running loop (closed by the test's own ``async with``)."""

    def factory(**fields: Any) -> AsyncFairQueue:
        config = _config(**fields)
        if server_url is None:
            return AsyncFairQueue(AsyncInMemoryBackend(queue=config.name, config=config))
        from fairque_redis.backends.backend_async import AsyncRedisBackend

        return AsyncFairQueue(
            AsyncRedisBackend.from_url(server_url, queue=config.name, config=config)
        )

    return factory


def test_async_batcher_size_delay_flush_and_exit(make_async_queue) -> None:
    async def scenario() -> None:
        async with make_async_queue() as queue:
            async with queue.batcher(max_size=3, max_delay_ms=NEVER_MS) as b:
                two = [await b.push(t) for t in _tasks("alice", 2)]
                assert not any(p.done() for p in two)
                with pytest.raises(asyncio.InvalidStateError):
                    two[0].result()
                third = await b.push(Task.create("bob"))  # full: sent before push returns
                assert all(p.done() for p in [*two, third])
                handle = await third
                assert isinstance(handle, AsyncTaskHandle)
                assert await queue.get_state(handle) is TaskState.QUEUED
                last = await b.push(Task.create("carol"))
            assert last.done()  # sent by the exit
            async with queue.batcher(max_size=1000, max_delay_ms=20) as timed:
                pending = await timed.push(Task.create("dave"))
                handle = await asyncio.wait_for(pending.wait(), 20)  # the loop timer sent it
                assert len(timed) == 0
            assert (await queue.get_stats())["pushed"] == 5
            await queue.purge_all()

    asyncio.run(scenario())


def test_async_batcher_exception_path_and_refusals(make_async_queue) -> None:
    async def scenario() -> None:
        async with make_async_queue() as queue:
            await queue.set_tenant_limits("capped", max_queued=1)
            tasks = [Task.create("alice"), Task.create("capped"), Task.create("capped")]
            pending: list[Any] = []

            async def fail_inside() -> None:
                async with queue.batcher(max_delay_ms=NEVER_MS) as b:
                    pending.extend([await b.push(t) for t in tasks])
                    _ = 1 / 0

            with pytest.raises(ZeroDivisionError) as raised:
                await fail_inside()
            # sent at exit; the refusal of the third is on its pending push, and (3.11+) a
            # note on the block's exception says the batch had a failure
            if sys.version_info >= (3, 11):
                assert "1 batched push failed" in raised.value.__notes__[0]
            assert [p.done() for p in pending] == [True, True, True]
            assert await queue.get_state(await pending[0]) is TaskState.QUEUED
            assert await queue.get_state(await pending[1]) is TaskState.QUEUED
            with pytest.raises(TenantQueueFullError):
                await pending[2]
            b2 = queue.batcher(max_delay_ms=NEVER_MS)
            await b2.push(Task.create("capped"))
            with pytest.raises(BatchPushError):
                await b2.close()
            with pytest.raises(BatcherClosedError):
                await b2.push(Task.create("alice"))
            await queue.purge_all()

    asyncio.run(scenario())


def test_async_batcher_shared_by_coroutines(make_async_queue) -> None:
    async def scenario() -> None:
        async with make_async_queue() as queue:
            async with queue.batcher(max_size=10, max_delay_ms=2) as b:

                async def produce(tenant: str) -> list[str]:
                    pendings = []
                    for t in _tasks(tenant, 25):
                        pendings.append(await b.push(t))
                        await asyncio.sleep(0)
                    return [p.task_id for p in pendings]

                sent = await asyncio.gather(*(produce(f"c{i}") for i in range(4)))
            assert (await queue.get_stats())["pushed"] == 100
            claimed = await queue.claim_batch(100)
            for i, ids in enumerate(sent):
                assert [t.task_id for t in claimed if t.tenant == f"c{i}"] == ids
            await queue.purge_all()

    asyncio.run(scenario())


def test_batcher_settings_are_checked() -> None:
    queue = FairQueue(InMemoryBackend())
    for bad in ({"max_size": 0}, {"max_size": True}, {"max_delay_ms": 0}, {"max_delay_ms": "5"}):
        with pytest.raises(TaskValidationError):
            queue.batcher(**bad)
    assert repr(queue.batcher(max_size=7, max_delay_ms=3)).startswith("PushBatcher(")


def test_a_cancelled_sender_leaves_the_others_an_unknown_outcome_not_its_cancellation() -> None:
    """Coroutine B's push fills a shared batcher and sends the batch; B is cancelled while
    the call is out (the server holds its reply). Coroutine A, never cancelled, gets
    OutcomeUnknownError for its push (push again: idempotent by id), not B's CancelledError,
    which a producer's ``except Exception`` would not catch."""
    import redis

    from fairque_core import OutcomeUnknownError, Task
    from fairque_redis import aconnect
    from fairque_redis.servers.embedded import EmbeddedValkey

    async def scenario(url: str) -> None:  # a server of its own: the test pauses it
        queue = await aconnect(url, queue="bc-" + uuid.uuid4().hex[:8])
        raw = redis.Redis.from_url(url)
        try:
            batcher = queue.batcher(max_size=2, max_delay_ms=10_000)
            pending_a = await batcher.push(Task.create("acme"))
            raw.execute_command("CLIENT", "PAUSE", "300", "ALL")
            filler = asyncio.create_task(batcher.push(Task.create("bob")))
            await asyncio.sleep(0.05)
            filler.cancel()
            with pytest.raises(asyncio.CancelledError):
                await filler
            with pytest.raises(OutcomeUnknownError) as info:
                await pending_a
            assert isinstance(info.value.__cause__, asyncio.CancelledError)
        finally:
            await asyncio.sleep(0.35)  # the pause ends
            raw.close()
            await queue.close()

    with EmbeddedValkey() as server:
        asyncio.run(scenario(server.url))
