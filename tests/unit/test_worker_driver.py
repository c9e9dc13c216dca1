"""What the worker drivers share (``fairque_core.app.worker.driver``): which queue call each
action of the loop means (for a sync and an async queue alike), whose tasks a claim asks for,
and what the wake listener does with what it heard. No I/O: the calls are built, not made."""

from __future__ import annotations

import functools

import pytest

from fairque_core import FairQueue, InMemoryBackend, Task, WorkerConfig
from fairque_core.app.engine.queue_async import AsyncFairQueue
from fairque_core.app.worker import actions as wa
from fairque_core.app.worker.driver import ClaimScope, queue_call
from fairque_core.app.worker.handlers import TaskHandler
from fairque_core.app.worker.pacing import listener_pause
from fairque_core.app.worker.worker import Worker
from fairque_core.app.worker.worker_async import AsyncWorker
from fairque_core.memory.async_model import AsyncInMemoryBackend

SCOPE = ClaimScope(["a", "b"], ["c"], "w7")


def _queues() -> list[FairQueue | AsyncFairQueue]:
    return [FairQueue(InMemoryBackend()), AsyncFairQueue(AsyncInMemoryBackend())]


def _slot() -> wa.Slot:
    return wa.Slot(Task.create("alice"), claimed_at=0.0, run_seconds=1.5)


def _parts(call: object) -> tuple[object, tuple[object, ...], dict[str, object]]:
    assert isinstance(call, functools.partial)
    return call.func, call.args, call.keywords


@pytest.mark.parametrize("queue", _queues(), ids=["sync", "async"])
def test_each_queue_calling_action_is_its_queue_method(queue: FairQueue | AsyncFairQueue) -> None:
    slot = _slot()
    error = ValueError("boom")
    ack = wa.Ack([(slot, 42)])
    expected = [
        (
            wa.Claim(3),
            queue.claim_batch,
            (3, ["a", "b"]),
            {"steal": ["c"], "worker_id": "w7"},
        ),
        (ack, queue.finish_batch, ([(slot.task, 42)],), {"run_seconds": [1.5]}),
        (wa.Fail(slot, error), queue.fail, (slot.task, error), {"run_seconds": 1.5}),
        (wa.Release(slot), queue.release, (slot.task,), {}),
        (wa.Heartbeat([slot.task]), queue.heartbeat_leases, ([slot.task],), {}),
        (wa.Reap(25), queue.requeue_expired, (25,), {}),
    ]
    for action, method, args, kwargs in expected:
        assert _parts(queue_call(queue, action, SCOPE)) == (method, args, kwargs), action


def test_a_claim_carrying_acks_means_the_claim_alone() -> None:
    queue = FairQueue(InMemoryBackend())
    claim = wa.Claim(2, acks=wa.Ack([(_slot(), None)]))
    func, args, _kwargs = _parts(queue_call(queue, claim, SCOPE))
    assert (func, args) == (queue.claim_batch, (2, ["a", "b"]))


@pytest.mark.parametrize(
    "action",
    [wa.Sleep(0.0, listen=False), wa.Run([]), wa.Expire([]), wa.STOPPED],
    ids=["sleep", "run", "expire", "stopped"],
)
def test_an_action_that_calls_no_queue_is_a_type_error(action: wa.Action) -> None:
    with pytest.raises(TypeError, match="not a queue call"):
        queue_call(FairQueue(InMemoryBackend()), action, SCOPE)


def test_the_claim_scope_of_a_config() -> None:
    assert ClaimScope.of(WorkerConfig(id="w1")) == ClaimScope(None, None, "w1")
    config = WorkerConfig(id="w2", assigned_tenants=["a"], steal_targets=["b", "c"])
    assert ClaimScope.of(config) == ClaimScope(["a"], ["b", "c"], "w2")


def test_a_claim_made_through_the_call_returns_the_queued_task() -> None:
    queue = FairQueue(InMemoryBackend())
    task = Task.create("alice")
    queue.push(task)
    claimed = queue_call(queue, wa.Claim(5), ClaimScope(None, None, "w1"))()
    assert [t.task_id for t in claimed] == [task.task_id]


@pytest.mark.parametrize("driver", [Worker, AsyncWorker], ids=["sync", "async"])
def test_the_listener_wakes_the_loop_and_backs_off_on_errors(driver: type) -> None:
    queue = (
        FairQueue(InMemoryBackend()) if driver is Worker else AsyncFairQueue(AsyncInMemoryBackend())
    )
    worker = driver(WorkerConfig(id="w1"), TaskHandler(), queue)
    worker._listen.set()
    assert worker._listened(False) is None  # timed out: listen on
    assert worker._listen.is_set()
    assert not worker._wake.is_set()
    error = ConnectionError("down")
    assert [worker._listened(error) for _ in range(3)] == [listener_pause(n) for n in (1, 2, 3)]
    assert worker._listened(True) is None  # the signal came: wake the loop, stop listening
    assert worker._wake.is_set()
    assert not worker._listen.is_set()
    assert worker._listened(error) == listener_pause(1)  # the count restarted


def test_starting_twice_is_refused() -> None:
    worker = Worker(WorkerConfig(id="w1"), TaskHandler(), FairQueue(InMemoryBackend()))
    worker.start()
    try:
        with pytest.raises(RuntimeError, match="already started"):
            worker.start()
    finally:
        assert worker.stop(timeout=10)
