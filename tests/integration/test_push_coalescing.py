"""Concurrent ``AsyncFairQueue.push`` calls share push calls (ADR 35), each caller keeping its
own answer.

On Valkey the pushes run truly concurrently (``asyncio.gather``) and the server's INFO
commandstats counts the push calls. On the reference model a gate in front of its push call
holds the first call in flight while the test lines the others up, so which pushes share a call
is exact there. No timed assertion.
"""

from __future__ import annotations

import asyncio
import contextvars
import uuid
from collections.abc import Sequence
from typing import Any

import pytest

from fairque_core import (
    AsyncFairQueue,
    AsyncInMemoryBackend,
    Message,
    PayloadTooLargeError,
    QueueConfig,
    RedisConnectionError,
    Task,
    TaskState,
    TaskValidationError,
    TenantQueueFullError,
)
from fairque_core.ports.hooks import hookimpl

pytestmark = [pytest.mark.timeout(60), pytest.mark.usefixtures("accelerators_on")]


def _config(**fields: Any) -> QueueConfig:
    return QueueConfig(name="co-" + uuid.uuid4().hex[:10], **fields)


class GatedModel(AsyncInMemoryBackend):
    """The reference model with a gate before each push call (open unless a test closes it),
    recording how many messages each push call carried."""

    def __init__(self, config: QueueConfig) -> None:
        super().__init__(queue=config.name, config=config)
        self.gate = asyncio.Event()
        self.gate.set()
        self.calls: list[int] = []

    async def push_batch_detailed(self, messages: Sequence[Message]) -> list[tuple[bool, str]]:
        self.calls.append(len(messages))
        await self.gate.wait()
        return await super().push_batch_detailed(messages)


async def _line_up(queue: AsyncFairQueue, gated: GatedModel, tasks: list[Task]) -> list[Any]:
    """Push ``tasks`` so that the first is in flight while all the others arrive; answers (or
    exceptions) in order."""
    gated.gate.clear()
    before = len(gated.calls)
    calls = [asyncio.ensure_future(queue.push(t)) for t in tasks]
    while (
        len(gated.calls) == before
        or len(queue._coalescer._waiting) + sum(c.done() for c in calls[1:]) < len(calls) - 1
    ):
        await asyncio.sleep(0)
    gated.gate.set()
    return list(await asyncio.gather(*calls, return_exceptions=True))


def test_pushes_that_arrive_during_a_call_go_in_the_next_one() -> None:
    async def scenario() -> None:
        gated = GatedModel(_config())
        async with AsyncFairQueue(gated) as queue:
            tasks = [Task.create(f"u{i % 7}", payload={"i": i}) for i in range(100)]
            handles = await _line_up(queue, gated, tasks)
            assert gated.calls == [1, 99]
            assert [str(h) for h in handles] == [t.task_id for t in tasks]
            assert not any(h.duplicate for h in handles)
            assert (await queue.get_stats())["pushed"] == 100
            # with nothing in flight, every push is its own call, sent at once
            gated.calls.clear()
            for t in [Task.create("solo") for _ in range(5)]:
                await queue.push(t)
            assert gated.calls == [1] * 5

    asyncio.run(scenario())


def test_each_caller_gets_its_own_outcome_on_the_model() -> None:
    async def scenario() -> None:
        gated = GatedModel(_config(max_payload_bytes=300))
        async with AsyncFairQueue(gated) as queue:
            await queue.set_tenant_limits("capped", max_queued=2)
            await _check_isolation(queue, lambda tasks: _line_up(queue, gated, tasks))
            # after the earlier push of `known`: the leader, the group (refused whole), then singles
            assert gated.calls[1:] == [1, 8] + [1] * 8

    asyncio.run(scenario())


async def _check_isolation(queue: AsyncFairQueue, push_all: Any) -> None:
    first = Task.create("alice")
    known = Task.create("alice")
    await queue.push(known)
    capped = [Task.create("capped", payload={"i": i}) for i in range(4)]
    orphan = Task.create("bob", depends_on=["no-such-task"])
    again = Task.create("bob")
    tasks = [first, *capped, orphan, again, again, known]
    big = Task.create("bob", payload={"blob": "x" * 1000})
    answers = await push_all([*tasks, big])
    by_position = dict(enumerate(answers))
    assert str(by_position[0]) == first.task_id
    # the tenant's cap admits two of its four pushes, in the order they were made
    assert [str(a) for a in answers[1:3]] == [t.task_id for t in capped[:2]]
    assert all(isinstance(a, TenantQueueFullError) for a in answers[3:5])
    assert isinstance(answers[5], TaskValidationError)  # the unknown dependency, its own
    assert (answers[6].duplicate, answers[7].duplicate) == (False, True)
    assert answers[8].duplicate  # an id the queue already knew
    assert isinstance(answers[9], PayloadTooLargeError)  # refused before joining any call
    for task in (first, *capped[:2], again):
        assert await queue.get_state(task.task_id) is TaskState.QUEUED
    for task in (*capped[2:], orphan, big):
        assert await queue.get_state(task.task_id) is None


def test_a_caller_canceled_while_waiting_is_left_out() -> None:
    async def scenario() -> None:
        gated = GatedModel(_config())
        async with AsyncFairQueue(gated) as queue:
            gated.gate.clear()
            lead, gone, kept = Task.create("a"), Task.create("b"), Task.create("c")
            first = asyncio.ensure_future(queue.push(lead))
            while not gated.calls:
                await asyncio.sleep(0)
            waiting = [asyncio.ensure_future(queue.push(t)) for t in (gone, kept)]
            while len(queue._coalescer._waiting) < 2:
                await asyncio.sleep(0)
            waiting[0].cancel()
            gated.gate.set()
            await first
            assert await waiting[1] == kept.task_id
            with pytest.raises(asyncio.CancelledError):
                await waiting[0]
            assert gated.calls == [1, 1]  # the canceled push was never sent
            assert await queue.get_state(gone.task_id) is None

    asyncio.run(scenario())


class ContextRecorder:
    """A plugin that notes, per ``pushed`` event, the pusher's context variable."""

    def __init__(self, var: contextvars.ContextVar[str]) -> None:
        self.var = var
        self.seen: dict[str, str] = {}

    @hookimpl
    def fairque_task_event(self, event: str, task: Task) -> None:
        if event == "pushed":
            self.seen[task.task_id] = self.var.get("")


def test_pushed_events_run_in_each_callers_context() -> None:
    var: contextvars.ContextVar[str] = contextvars.ContextVar("who")
    recorder = ContextRecorder(var)

    async def scenario() -> None:
        gated = GatedModel(_config())
        async with AsyncFairQueue(gated, plugins=[recorder]) as queue:
            tasks = [Task.create("u", payload={"i": i}) for i in range(10)]

            async def push_as(task: Task) -> Any:
                var.set(task.task_id)
                return await queue.push(task)

            gated.gate.clear()
            calls = [asyncio.ensure_future(push_as(t)) for t in tasks]
            while len(queue._coalescer._waiting) < 9:
                await asyncio.sleep(0)
            gated.gate.set()
            await asyncio.gather(*calls)
            assert gated.calls == [1, 9]
            assert recorder.seen == {t.task_id: t.task_id for t in tasks}

    asyncio.run(scenario())


# ---------------------------------------------------------------- on Valkey


def _evalsha_calls(url: str) -> int:
    import redis

    with redis.Redis.from_url(url) as client:
        stats = client.info("commandstats")  # script calls: FCALL, or EVALSHA (ADR 41)
        return sum(int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in ("fcall", "evalsha"))


async def _redis_queue(url: str, **fields: Any) -> AsyncFairQueue:
    from fairque_redis.backends.backend_async import AsyncRedisBackend

    config = _config(**fields)
    queue = AsyncFairQueue(AsyncRedisBackend.from_url(url, queue=config.name, config=config))
    await queue.push(Task.create("warm"))  # the first write also registers the queue
    return queue


@pytest.mark.redis
def test_100_concurrent_pushes_take_two_calls_on_valkey(valkey_server: Any) -> None:
    url = valkey_server.url

    async def pushed_calls(coalesce: bool) -> int:
        queue = await _redis_queue(url)
        queue.coalesce_pushes = coalesce
        try:
            tasks = [Task.create(f"u{i % 10}", payload={"i": i}) for i in range(100)]
            before = _evalsha_calls(url)
            handles = await asyncio.gather(*(queue.push(t) for t in tasks))
            calls = _evalsha_calls(url) - before
            assert [str(h) for h in handles] == [t.task_id for t in tasks]
            assert (await queue.get_stats())["pushed"] == 101
            await queue.purge_all()
        finally:
            await queue.close()
        return calls

    # the leader's own call, then one call for the 99 that arrived meanwhile
    assert asyncio.run(pushed_calls(True)) == 2
    assert asyncio.run(pushed_calls(False)) == 100


@pytest.mark.redis
def test_each_caller_gets_its_own_outcome_on_valkey(valkey_server: Any) -> None:
    async def scenario() -> None:
        queue = await _redis_queue(valkey_server.url, max_payload_bytes=300)
        try:
            await queue.set_tenant_limits("capped", max_queued=2)

            async def push_all(tasks: list[Task]) -> list[Any]:
                calls = (queue.push(t) for t in tasks)
                return list(await asyncio.gather(*calls, return_exceptions=True))

            await _check_isolation(queue, push_all)
            await queue.purge_all()
        finally:
            await queue.close()

    asyncio.run(scenario())


@pytest.mark.redis
def test_a_failed_call_is_every_callers_error() -> None:
    from fairque_redis.servers.embedded import EmbeddedValkey, ServerBinaryNotFoundError

    try:
        server = EmbeddedValkey()
    except ServerBinaryNotFoundError as exc:
        pytest.skip(f"embedded Valkey unavailable: {exc}")

    async def scenario() -> list[Any]:
        with server:
            queue = await _redis_queue(server.url)
            server.stop()
            try:
                pushes = (queue.push(Task.create("alice")) for _ in range(10))
                answers = await asyncio.gather(*pushes, return_exceptions=True)
                assert queue._coalescer.groups == 1  # the nine that came during the leader's call
                return list(answers)
            finally:
                await queue.close()

    answers = asyncio.run(scenario())
    assert all(isinstance(a, RedisConnectionError) for a in answers), answers
