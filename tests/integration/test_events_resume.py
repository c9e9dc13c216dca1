"""Issue 31's acceptance for queue events (ADR 71), with a real worker on real servers: a
consumer started after 1,000 completions reads part of the log, stops, and a second one
resumes from the saved id while more tasks complete; together they see every completion
exactly once. Sync iterators on the model, Valkey and a 3-partition queue; the async
iterator on Valkey. ``stop()`` ends a blocked ``follow`` iteration from another thread."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from fairque_core import (
    FairQueue,
    InMemoryBackend,
    Priority,
    QueueConfig,
    Task,
    TaskHandler,
    WorkerConfig,
)
from fairque_core.app.worker.worker import Worker
from fairque_redis import aconnect, connect

pytestmark = [pytest.mark.timeout(180)]

FIRST = 1000
MORE = 500
SAVED_AFTER = 400


class Nothing(TaskHandler):
    def process_task(self, task: Task) -> object:
        return None


@pytest.fixture(params=["memory", "valkey", "valkey-p3"])
def queue(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[FairQueue]:
    monkeypatch.setenv("FAIRQUE_DISABLE_PLUGIN_AUTOLOAD", "1")
    name = f"ev-{uuid.uuid4().hex[:8]}"
    if request.param == "memory":
        q = FairQueue(InMemoryBackend(queue=name, config=QueueConfig(name=name)))
    else:
        url = str(request.getfixturevalue("valkey_server").url)
        q = connect(url, queue=name, partitions=3 if request.param == "valkey-p3" else 1)
    with q:
        yield q


def _push(queue: FairQueue, n: int, start: int) -> set[str]:
    tasks = [
        Task.create(f"t{i % 7}", Priority.NORMAL, {"i": i}, task_id=f"task-{i}")
        for i in range(start, start + n)
    ]
    queue.push_batch(tasks)
    return {t.task_id for t in tasks}


def _drain(queue: FairQueue, finished: int) -> None:
    """Run a worker until the queue counts ``finished`` completions."""
    config = WorkerConfig(id=f"w-{uuid.uuid4().hex[:6]}", max_concurrent_tasks=8)
    worker = Worker(config, Nothing(), queue)
    worker.start()
    try:
        deadline = time.monotonic() + 120
        while queue.get_stats()["finished"] < finished:
            assert time.monotonic() < deadline, queue.get_stats()
            time.sleep(0.05)
    finally:
        worker.stop(10)


def test_a_consumer_resumes_from_a_saved_id_missing_none(queue: FairQueue) -> None:
    pushed = _push(queue, FIRST, 0)
    _drain(queue, FIRST)
    # started after 1,000 completions: reads some of the log, saves its place, stops
    seen: list[str] = []
    first = queue.events("0", block=0.5)
    for event in first:
        if event.type == "completed":
            seen.append(event.task_id)
        if len(seen) == SAVED_AFTER:
            first.stop()
    saved = first.cursor
    assert saved is not None
    # more work completes while nobody listens
    pushed |= _push(queue, MORE, FIRST)
    _drain(queue, FIRST + MORE)
    # a new consumer resumes from the saved id
    second = queue.events(saved, block=0.5)
    for event in second:
        if event.type == "completed":
            seen.append(event.task_id)
        if len(seen) == FIRST + MORE:
            second.stop()
    assert len(seen) == len(set(seen)) == FIRST + MORE  # each once
    assert set(seen) == pushed  # none missed
    assert list(queue.events(second.cursor, follow=False)) == []  # nothing left over


@pytest.mark.redis
def test_the_async_iterator_resumes_too(valkey_server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAIRQUE_DISABLE_PLUGIN_AUTOLOAD", "1")
    name = f"ev-{uuid.uuid4().hex[:8]}"

    async def scenario() -> None:
        queue = await aconnect(str(valkey_server.url), queue=name)
        async with queue:
            ids = [f"a{i}" for i in range(50)]
            for task_id in ids:
                await queue.push(Task.create("acme", Priority.NORMAL, {}, task_id=task_id))
            for claimed in await queue.claim_batch(50):
                await queue.finish(claimed)
            got: list[str] = []
            stream = queue.events("0", follow=False, count=8)
            async for event in stream:
                got.append(event.task_id)
                if len(got) == 20:
                    break
            async for event in queue.events(stream.cursor, follow=False):
                got.append(event.task_id)
            assert got == ids

    asyncio.run(scenario())


def test_stop_ends_a_blocked_follow_from_another_thread(queue: FairQueue) -> None:
    stream = queue.events(block=0.2)
    ended = threading.Event()

    def consume() -> None:
        for _event in stream:
            pass
        ended.set()

    thread = threading.Thread(target=consume)
    thread.start()
    stream.stop()
    assert ended.wait(10)
    thread.join()
