"""FairQueue / AsyncFairQueue over the in-memory reference backend."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import attrs
import pytest

from fairque_core import (
    DependencyCycleError,
    FailureType,
    FairQueueConfig,
    LeaseLostError,
    Message,
    PayloadTooLargeError,
    Priority,
    QueueConfig,
    RedisConfig,
    Task,
    TaskState,
    TaskValidationError,
)
from fairque_core.app.engine.queue import FairQueue
from fairque_core.app.engine.queue_async import AsyncFairQueue
from fairque_core.memory.async_model import AsyncInMemoryBackend
from fairque_core.memory.model import InMemoryBackend
from fairque_testing.queues import FakeClock

from ._engine_helpers import RecordingHost


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def host() -> RecordingHost:
    return RecordingHost()


@pytest.fixture
def backend(clock: FakeClock) -> InMemoryBackend:
    return InMemoryBackend(clock, config=QueueConfig(lease_seconds=10, max_payload_bytes=2000))


@pytest.fixture
def queue(backend: InMemoryBackend, host: RecordingHost) -> Iterator[FairQueue]:
    with FairQueue(backend, plugin_host=host) as q:
        yield q


def test_push_pop_finish_round_trip(queue: FairQueue, host: RecordingHost) -> None:
    task = Task.create("alice", Priority.HIGH, {"n": 1, "s": "x"}, name="job")
    assert queue.push(task) == task.task_id
    assert queue.get_state(task.task_id) is TaskState.QUEUED
    got = queue.claim(worker_id="w1")
    assert got is not None
    assert got.task_id == task.task_id
    assert got.payload == {"n": 1, "s": "x"}
    assert got.name == "job"
    assert got.lease is not None
    assert got.lease.worker_id == "w1"
    assert queue.get_state(task.task_id) is TaskState.STARTED
    queue.finish(got, {"ok": True})
    assert queue.get_state(task.task_id) is TaskState.FINISHED
    assert queue.get_result(task.task_id) == {"ok": True}
    assert [e for e, _ in host.events] == ["pushed", "started", "finished"]
    assert queue.claim() is None


def test_push_is_idempotent_and_get_task_decodes(queue: FairQueue) -> None:
    task = Task.create("alice", payload={"a": [1, 2]}, task_id="t-1")
    queue.push(task)
    queue.push(task)
    assert queue.get_stats()["duplicates"] == 1
    stored = queue.get_task("t-1")
    assert stored is not None
    assert stored.payload == {"a": [1, 2]}
    assert stored.task is not None
    assert stored.task.lease is None
    assert queue.get_task("nope") is None


def test_push_headers_are_merged_before_encoding(queue: FairQueue, host: RecordingHost) -> None:
    host.extra_headers = {"traceparent": "00-abc-def-01"}
    queue.push(Task.create("alice", headers={"mine": "1"}))
    got = queue.claim()
    assert got is not None
    assert dict(got.headers) == {"mine": "1", "traceparent": "00-abc-def-01"}


def test_payload_size_limit_before_any_write(queue: FairQueue) -> None:
    with pytest.raises(PayloadTooLargeError):
        queue.push(Task.create("alice", payload={"blob": "x" * 5000}))
    assert queue.get_stats()["pushed"] == 0


def test_execute_after_becomes_a_delay(queue: FairQueue, clock: FakeClock) -> None:
    # the engine computes the delay from the wall clock; the model waits on its own clock
    task = Task.create("alice", execute_after=__import__("time").time() + 30)
    queue.push(task)
    assert queue.get_state(task.task_id) is TaskState.SCHEDULED
    assert queue.claim() is None
    clock.advance(31)
    assert queue.claim() is not None


def test_push_batch_orders_parents_first_and_keeps_fifo(queue: FairQueue, clock: FakeClock) -> None:
    child = Task.create("alice", task_id="child", depends_on=["parent"])
    parent = Task.create("alice", task_id="parent")
    other = Task.create("alice", task_id="other")
    assert queue.push_batch([child, parent, other]) == ["child", "parent", "other"]
    assert queue.get_state("child") is TaskState.DEFERRED
    first = queue.claim()
    assert first is not None
    assert first.task_id == "parent"
    clock.advance(1)  # the child becomes ready when its parent finishes, after "other"
    queue.finish(first)
    ids = [t.task_id for t in queue.claim_batch(5)]
    assert ids == ["other", "child"]


def test_push_batch_cycle_rejected_before_any_write(queue: FairQueue) -> None:
    a = Task.create("alice", task_id="a", depends_on=["b"])
    b = Task.create("alice", task_id="b", depends_on=["a"])
    ok = Task.create("alice", task_id="ok")
    with pytest.raises(DependencyCycleError):
        queue.push_batch([ok, a, b])
    assert queue.get_stats()["pushed"] == 0
    assert queue.get_state("ok") is None


def test_self_dependency_rejected(queue: FairQueue) -> None:
    with pytest.raises(TaskValidationError):
        queue.push(Task.create("alice", task_id="me", depends_on=["me"]))


def test_poisoned_payload_goes_to_dlq_and_pop_continues(
    queue: FairQueue, backend: InMemoryBackend, host: RecordingHost
) -> None:
    backend.push(
        Message(task_id="bad", tenant="alice", priority=Priority.NORMAL, body=b"{not json")
    )
    backend.push(Message(task_id="list", tenant="alice", priority=Priority.NORMAL, body=b"[1, 2]"))
    queue.push(Task.create("alice", payload={"fine": 1}, task_id="good"))
    got = queue.claim()
    assert got is not None
    assert got.task_id == "good"
    dlq = {e.entry_id: e for e in queue.list_dlq()}
    assert set(dlq) == {"bad", "list"}
    assert all(e.failure_type is FailureType.POISONED for e in dlq.values())
    assert "TaskSerializationError" in dlq["bad"].reason
    assert ("dead", "bad") in [(e, t.task_id) for e, t in host.events]


def test_pop_batch_only_poison_returns_empty(queue: FairQueue, backend: InMemoryBackend) -> None:
    for i in range(3):
        backend.push(Message(task_id=f"p{i}", tenant="u", priority=Priority.LOW, body=b"\xff"))
    assert queue.claim_batch(2) == []
    assert queue.get_stats()["dlq"] == 3


def test_retries_then_dlq(queue: FairQueue, clock: FakeClock, host: RecordingHost) -> None:
    host.retry_delay = 0.0
    queue.push(Task.create("alice", task_id="flaky", max_retries=2))
    states = []
    for _ in range(3):
        got = queue.claim()
        assert got is not None
        states.append(queue.fail(got, RuntimeError("boom")))
    assert states == [TaskState.SCHEDULED, TaskState.SCHEDULED, TaskState.FAILED]
    [entry] = queue.list_dlq()
    assert entry.failure_type is FailureType.FAILED
    assert entry.original_task.retry_count == 2
    kinds = [e for e, _ in host.events if e in ("retried", "dead")]
    assert kinds == ["retried", "retried", "dead"]


def test_unknown_task_error_is_poison_whatever_the_policy(
    queue: FairQueue, host: RecordingHost
) -> None:
    from fairque_core import UnknownTaskError

    host.retry_delay = 0.0
    queue.push(Task.create("alice", task_id="x", name="nope"))
    got = queue.claim()
    assert got is not None
    assert queue.fail(got, UnknownTaskError("nope")) is TaskState.FAILED
    assert queue.list_dlq()[0].failure_type is FailureType.POISONED


def test_lease_needed_for_acks(queue: FairQueue) -> None:
    task = Task.create("alice")
    queue.push(task)
    with pytest.raises(LeaseLostError):
        queue.finish(task)
    with pytest.raises(LeaseLostError):
        queue.fail(task, RuntimeError())
    got = queue.claim()
    assert got is not None
    stale = attrs.evolve(got, lease=attrs.evolve(got.lease, token="stale"))
    with pytest.raises(LeaseLostError):
        queue.finish(stale)


def test_heartbeat_extends_and_release_returns(queue: FairQueue, clock: FakeClock) -> None:
    queue.push(Task.create("alice", task_id="t"))
    got = queue.claim()
    assert got is not None
    assert got.lease is not None
    clock.advance(5)
    beat = queue.heartbeat(got)
    assert beat.lease is not None
    assert beat.lease.deadline == pytest.approx(got.lease.deadline + 5)
    queue.release(beat)
    assert queue.get_state("t") is TaskState.QUEUED
    again = queue.claim()
    assert again is not None
    assert again.retry_count == 0


def test_requeue_expired_and_finish_batch(queue: FairQueue, clock: FakeClock) -> None:
    for i in range(4):
        queue.push(Task.create("alice", task_id=f"t{i}"))
    first = queue.claim_batch(2)
    clock.advance(11)
    assert queue.requeue_expired() == 2
    batch = queue.claim_batch(4)
    assert len(batch) == 4
    flags = queue.finish_batch([(t, i) for i, t in enumerate(batch)] + [(first[0], None)])
    assert flags == [True, True, True, True, False]
    assert queue.get_result(batch[3].task_id) == 3


def test_sizes_stats_weights_cancel_and_dlq_admin(queue: FairQueue) -> None:
    queue.set_tenant_weight("alice", 2.0)
    queue.push(Task.create("alice", task_id="a1"))
    queue.push(Task.create("bob", Priority.CRITICAL, task_id="b1"))
    assert queue.get_queue_sizes("alice")["normal"] == 1
    sizes = queue.get_queue_sizes_batch(["alice", "bob"])
    assert sizes["bob"]["critical"] == 1
    assert queue.cancel("a1") is True
    assert queue.cancel("a1") is False
    got = queue.claim()
    assert got is not None
    queue.fail(got, TaskValidationError("x", 1, "bad"))  # policy decides; the stub dead-letters
    assert queue.requeue_dlq() == 1
    got = queue.claim()
    assert got is not None
    queue.fail(got, RuntimeError("again"))
    assert queue.purge_dlq() == 1
    assert queue.get_stats()["dlq"] == 0


def test_from_config_memory_applies_weights(host: RecordingHost) -> None:
    config = FairQueueConfig(
        redis=RedisConfig(url="memory://"),
        queue=QueueConfig(name="q1", tenant_weights={"alice": 3.0}),
    )
    with FairQueue.from_config(config, plugin_host=host) as queue:
        assert queue.name == "q1"
        for i in range(6):
            queue.push(Task.create("alice", task_id=f"a{i}"))
            queue.push(Task.create("bob", task_id=f"b{i}"))
        tenants = [t.tenant for t in queue.claim_batch(8)]
        assert tenants.count("alice") == 6
        assert tenants.count("bob") == 2


def test_from_config_unknown_scheme() -> None:
    from fairque_core import ConfigurationError

    config = FairQueueConfig(redis=RedisConfig(url="nosuch://x"))
    with pytest.raises(ConfigurationError, match="nosuch"):
        FairQueue.from_config(config, plugin_host=RecordingHost())


def test_default_plugin_host_round_trip(backend: InMemoryBackend) -> None:
    pytest.importorskip("fairque_core.app.plugins.host")
    with FairQueue(backend) as queue:
        queue.push(Task.create("alice", payload={"k": "v"}))
        got = queue.claim()
        assert got is not None
        assert got.payload == {"k": "v"}
        queue.finish(got, [1, 2])
        assert queue.get_result(got.task_id) == [1, 2]


def test_async_engine_round_trip(clock: FakeClock, host: RecordingHost) -> None:
    async def scenario() -> dict[str, Any]:
        backend = AsyncInMemoryBackend(clock, config=QueueConfig(lease_seconds=5))
        async with AsyncFairQueue(backend, plugin_host=host) as queue:
            ids = await queue.push_batch(
                [Task.create("a", payload={"i": i}, task_id=f"t{i}") for i in range(3)]
            )
            await backend.push(Message(task_id="bad", tenant="a", priority=Priority.LOW, body=b"x"))
            got = await queue.claim_batch(5)
            assert [t.task_id for t in got] == ids
            assert await queue.finish_batch([(t, None) for t in got[:2]]) == [True, True]
            beat = await queue.heartbeat(got[2])
            assert await queue.fail(beat, RuntimeError("x")) is TaskState.FAILED
            assert (await queue.list_dlq(failure_type=FailureType.POISONED))[0].entry_id == "bad"
            return await queue.get_stats()

    stats = asyncio.run(scenario())
    assert stats["finished"] == 2
    assert stats["dlq"] == 2


def test_list_tenants_sync_and_async(queue: FairQueue, clock: FakeClock) -> None:
    queue.push(Task.create("zed"))
    clock.advance(1)
    queue.push_batch([Task.create("bob"), Task.create("amy"), Task.create("zed")])
    assert queue.list_tenants() == (["zed", "amy", "bob"], 3)
    assert queue.list_tenants(limit=1, offset=1) == (["amy"], 3)
    for bad in ({"limit": 1001}, {"limit": True}, {"offset": -1}, {"offset": 1.0}):
        with pytest.raises(TaskValidationError):
            queue.list_tenants(**bad)

    async def scenario() -> tuple[list[str], int]:
        backend = AsyncInMemoryBackend(clock)
        async with AsyncFairQueue(backend) as aqueue:
            await aqueue.push(Task.create("solo"))
            with pytest.raises(TaskValidationError):
                await aqueue.list_tenants(limit=-1)
            return await aqueue.list_tenants(limit=1000)

    assert asyncio.run(scenario()) == (["solo"], 1)


def test_result_must_be_json(queue: FairQueue) -> None:
    from fairque_core import TaskSerializationError

    queue.push(Task.create("alice"))
    got = queue.claim()
    assert got is not None
    with pytest.raises(TaskSerializationError):
        queue.finish(got, object())
    queue.finish(got, json.loads('{"fine": [1]}'))


class _NoBatchHeartbeat:
    """A backend without ``heartbeat_batch`` (a third-party one): the engine loops instead."""

    def __init__(self, inner: InMemoryBackend) -> None:
        self._inner = inner
        self.single_heartbeats = 0

    def heartbeat(self, task_id: str, token: str, lease_seconds: float | None = None) -> float:
        self.single_heartbeats += 1
        return self._inner.heartbeat(task_id, token, lease_seconds)

    def __getattr__(self, name: str) -> Any:
        if name == "heartbeat_batch":
            raise AttributeError(name)
        return getattr(self._inner, name)


@pytest.mark.parametrize("batched", [True, False])
def test_heartbeat_batch(backend: InMemoryBackend, clock: FakeClock, batched: bool) -> None:
    wrapped = backend if batched else _NoBatchHeartbeat(backend)
    with FairQueue(wrapped) as queue:  # type: ignore[arg-type]
        queue.push_batch([Task.create("alice", task_id=t) for t in ("a", "b", "c")])
        a, b, c = queue.claim_batch(3)
        queue.finish(c, None)
        unleased = Task.create("alice", task_id="never-claimed")
        clock.advance(5)
        beats = queue.heartbeat_batch([a, b, c, unleased])
        assert beats[2] is None, "finished: no lease any more"
        assert beats[3] is None, "never claimed: no lease"
        for old, new in zip((a, b), beats[:2], strict=True):
            assert new is not None
            assert new.lease is not None
            assert old.lease is not None
            assert new.task_id == old.task_id
            assert new.lease.token == old.lease.token
            assert new.lease.deadline == pytest.approx(old.lease.deadline + 5)
        assert queue.heartbeat_batch([]) == []
    if not batched:
        assert wrapped.single_heartbeats == 3  # type: ignore[union-attr]


def test_async_heartbeat_batch(clock: FakeClock) -> None:
    async def scenario() -> list[Task | None]:
        backend = AsyncInMemoryBackend(clock, config=QueueConfig(lease_seconds=5))
        async with AsyncFairQueue(backend) as queue:
            await queue.push_batch([Task.create("a", task_id=t) for t in ("x", "y")])
            x, y = await queue.claim_batch(2)
            await queue.finish(y, None)
            clock.advance(2)
            return [x, *await queue.heartbeat_batch([x, y])]

    x, beat_x, beat_y = asyncio.run(scenario())
    assert beat_y is None
    assert beat_x is not None
    assert beat_x.lease is not None
    assert x is not None
    assert x.lease is not None
    assert beat_x.lease.deadline == pytest.approx(x.lease.deadline + 2)
