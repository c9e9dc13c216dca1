"""The parts of a worker that serves several queues (ADR 69) that need no server: the wait on
every queue's wake signal, and how ``Worker``/``AsyncWorker`` read ``queues=``."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from fairque_core import (
    AsyncFairQueue,
    AsyncWorker,
    FairQueue,
    QueueConfig,
    Task,
    TaskHandler,
    Worker,
    WorkerConfig,
)
from fairque_core.app.worker.served import ServedQueues
from fairque_core.app.worker.wake_any import AsyncWakeAny, WakeAny
from fairque_core.domain.errors import QueueClosedError
from fairque_core.memory import AsyncInMemoryBackend, InMemoryBackend


def connect(name: str) -> FairQueue:
    return FairQueue(InMemoryBackend(queue=name, config=QueueConfig(name=name)))


def aconnect(name: str) -> AsyncFairQueue:
    return AsyncFairQueue(AsyncInMemoryBackend(queue=name, config=QueueConfig(name=name)))


class Signal:
    """A queue's wait for work, driven by the test: ``fire()`` wakes the waiter, once."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.calls = 0

    def wait(self, timeout: float) -> bool:
        self.calls += 1
        woke = self.event.wait(timeout)
        self.event.clear()
        return woke


def test_wake_any_returns_on_the_first_signal_and_keeps_a_late_one() -> None:
    a, b = Signal(), Signal()
    wake = WakeAny([a.wait, b.wait])
    threading.Timer(0.05, b.event.set).start()
    started = time.monotonic()
    assert wake.wait(5.0)
    assert time.monotonic() - started < 2.0
    # a's wait is still running (a thread cannot be cancelled): the next call waits on it
    # instead of starting another, and the wake it brings is not lost
    assert wake.running() == 1
    a.event.set()
    assert wake.wait(5.0)
    assert a.calls == 1
    assert not wake.wait(0.05)  # nothing pending: times out


def test_wake_any_raises_a_waits_error() -> None:
    def broken(timeout: float) -> bool:
        raise ConnectionError("down")

    quiet = Signal()
    with pytest.raises(ConnectionError):
        WakeAny([quiet.wait, broken]).wait(1.0)


def test_async_wake_any_cancels_the_others() -> None:
    cancelled: list[str] = []

    async def never(timeout: float) -> bool:
        try:
            await asyncio.sleep(timeout)
        except asyncio.CancelledError:
            cancelled.append("never")
            raise
        return False

    async def soon(timeout: float) -> bool:
        await asyncio.sleep(0.01)
        return True

    async def none(timeout: float) -> bool:
        await asyncio.sleep(timeout)
        return False

    async def scenario() -> None:
        assert await AsyncWakeAny([never, soon]).wait(5.0)
        assert cancelled == ["never"]
        assert not await AsyncWakeAny([none, none]).wait(0.02)

    asyncio.run(scenario())


def test_worker_reads_queues_and_refuses_what_it_cannot_serve() -> None:
    config = WorkerConfig(id="w")
    qa, qb = connect("qa"), connect("qb")
    try:
        worker = Worker(config, TaskHandler(), queues=[(qa, 3), qb])
        assert worker.queues == (qa, qb)
        assert worker.queue is qa
        assert isinstance(worker._calls, ServedQueues)
        assert [q["weight"] for q in worker.health()["queues"]] == [3.0, 1.0]
        one = Worker(config, TaskHandler(), queues=[qa])
        assert one._calls is qa  # one queue: the queue itself, no face
        assert "queues" not in one.health()
        with pytest.raises(TypeError, match="one of them"):
            Worker(config, TaskHandler(), qa, queues=[qb])
        with pytest.raises(TypeError, match="queue must be a FairQueue"):
            Worker(config, TaskHandler())
        with pytest.raises(ValueError, match="at least one queue"):
            Worker(config, TaskHandler(), queues=[])
        with pytest.raises(ValueError, match="given twice"):
            Worker(config, TaskHandler(), queues=[qa, qa])
        with pytest.raises(ValueError, match="queue weight"):
            Worker(config, TaskHandler(), queues=[(qa, 0), qb])
        with pytest.raises(ValueError, match="queue_order"):
            Worker(config, TaskHandler(), queues=[qa, qb], queue_order="random")
        with pytest.raises(TypeError, match="sync"):
            AsyncWorker(config, TaskHandler(), queues=[qa, qb])
        strict = Worker(WorkerConfig(id="s", queue_order="strict"), TaskHandler(), queues=[qa, qb])
        assert strict.health()["queue_order"] == "strict"
    finally:
        qa.close()
        qb.close()


def test_async_worker_takes_a_mapping_of_queues() -> None:
    async def scenario() -> None:
        qa, qb = aconnect("qa"), aconnect("qb")
        try:
            worker = AsyncWorker(WorkerConfig(id="w"), TaskHandler(), queues={qa: 1, qb: 2})
            assert [q["name"] for q in worker.health()["queues"]] == ["qa", "qb"]
            with pytest.raises(TypeError, match="asyncio"):
                Worker(WorkerConfig(id="w"), TaskHandler(), queues=[qa, qb])
        finally:
            await qa.close()
            await qb.close()

    asyncio.run(scenario())


def test_served_queues_route_every_call_to_the_tasks_queue() -> None:
    qa, qb = connect("qa"), connect("qb")
    served = ServedQueues([qa, qb], [1, 1])
    qa.push_batch([Task.create("a") for _ in range(3)])
    qb.push_batch([Task.create("b") for _ in range(3)])
    tasks = served.claim_batch(4)
    assert [t.tenant for t in tasks] == ["a", "a", "b", "b"]  # equal weights: 2 and 2
    renewed = served.heartbeat_leases(tasks)
    assert [t.task_id for t in renewed if isinstance(t, Task)] == [t.task_id for t in tasks]
    flags = served.finish_batch([(t, None) for t in tasks[:3]])
    assert flags == [True, True, True]
    served.release(tasks[3])
    assert qa.get_stats()["finished"] + qb.get_stats()["finished"] == 3
    assert qa.get_stats()["leased"] + qb.get_stats()["leased"] == 0
    with pytest.raises(ValueError, match="not claimed"):
        served.release(tasks[3])  # forgotten once released
    # the rest (the released task back in its own queue), then short
    rest = served.claim_batch(10)
    assert sorted(t.tenant for t in rest) == ["a", "b", "b"]
    assert served.health()[0]["idle"]
    assert served.health()[1]["idle"]


def test_a_failing_queue_is_left_out_and_reported() -> None:
    qa, qb = connect("qa"), connect("qb")
    served = ServedQueues([qa, qb], [1, 3])
    qa.push_batch([Task.create("a") for _ in range(4)])
    qb.close()  # its calls now raise
    tasks = served.claim_batch(4)
    assert [t.tenant for t in tasks] == ["a"] * 4  # b's places went to a
    assert [q["failing"] for q in served.health()] == [0, 1]
    qa.close()
    with pytest.raises(QueueClosedError):  # every queue failed: the loop sees the outage
        served.claim_batch(1)


def test_a_list_of_queues_with_weights_as_the_api_names_it() -> None:
    """``Worker(config, handler, [queue_a, queue_b], weights=[3, 1])`` (shared/API.md) is the
    same worker as ``queues=[(queue_a, 3), (queue_b, 1)]``."""
    from fairque_core import FairQueue, InMemoryBackend, TaskHandler, WorkerConfig
    from fairque_core.app.worker.worker import Worker

    qa = FairQueue(InMemoryBackend(queue="api-a"))
    qb = FairQueue(InMemoryBackend(queue="api-b"))
    worker = Worker(WorkerConfig(id="w"), TaskHandler(), [qa, qb], weights=[3, 1])
    assert worker.queues == (qa, qb)
    assert [q["weight"] for q in worker.health()["queues"]] == [3, 1]
    with pytest.raises(ValueError, match="one weight per queue"):
        Worker(WorkerConfig(id="w"), TaskHandler(), [qa, qb], weights=[3])
    with pytest.raises(TypeError, match="weights= goes with a list"):
        Worker(WorkerConfig(id="w"), TaskHandler(), qa, weights=[3])
