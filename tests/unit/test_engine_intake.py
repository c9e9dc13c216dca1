"""The engine's intake (ADR 47) over the reference model: the client path, the events, the
handles, and the fallback on a backend without the capability."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from fairque_core import (
    FailureType,
    IngestReport,
    PayloadTooLargeError,
    QueueConfig,
    ResultTimeoutError,
    Task,
    TaskFailedError,
    TaskNotFoundError,
    TaskState,
    TaskValidationError,
)
from fairque_core.app.engine.queue import FairQueue
from fairque_core.app.engine.queue_async import AsyncFairQueue
from fairque_core.memory.async_model import AsyncInMemoryBackend
from fairque_core.memory.model import InMemoryBackend
from fairque_testing.queues import FakeClock

from ._engine_helpers import RecordingHost

pytestmark = pytest.mark.usefixtures("accelerators_on")  # tests of accelerators

_INTAKE_METHODS = frozenset({"push_intake", "ingest", "intake_size"})


class WithoutIntake:
    """A backend like the model but without the optional intake (a third-party one)."""

    def __init__(self, model: Any) -> None:
        self._model = model

    def __getattr__(self, name: str) -> Any:
        if name in _INTAKE_METHODS:
            raise AttributeError(name)
        return getattr(self._model, name)


@pytest.fixture
def model() -> InMemoryBackend:
    return InMemoryBackend(FakeClock(), config=QueueConfig(lease_seconds=10, max_payload_bytes=600))


def test_push_intake_goes_through_the_push_path_then_waits_for_a_claim(
    model: InMemoryBackend,
) -> None:
    host = RecordingHost()
    host.extra_headers = {"x-recorded": "1"}
    queue = FairQueue(model, plugin_host=host)
    task = Task.create("alice", payload={"n": 1})
    handle = queue.push_intake(task)
    assert queue.takes_intake
    assert (handle, handle.duplicate, handle.intake) == (task.task_id, False, True)
    assert host.infos == [{"event": "pushed", "duplicate": False, "intake": True}]
    assert queue.get_state(task.task_id) is None  # not ingested yet
    assert queue.intake_size() == 1
    [claimed] = queue.claim_batch(5)
    assert claimed.task_id == task.task_id
    assert claimed.headers == {"x-recorded": "1"}  # the plugin's headers, as push adds them
    assert claimed.payload == {"n": 1}


def test_the_size_limit_and_the_plain_check_come_before_any_io(model: InMemoryBackend) -> None:
    queue = FairQueue(model, plugin_host=RecordingHost())
    with pytest.raises(PayloadTooLargeError):
        queue.push_intake(Task.create("alice", payload={"s": "x" * 700}))
    with pytest.raises(TaskValidationError):
        queue.push_intake(Task.create("alice", execute_after=time.time() + 60))
    with pytest.raises(TaskValidationError):
        queue.push_intake_batch([Task.create("alice"), Task.create("alice", unique_key="u")])
    assert queue.push_intake_batch([]) == []
    assert model.intake_size() == 0


@pytest.mark.parametrize("limit", [0, -3, True, 1.5])
def test_ingest_checks_its_limit(model: InMemoryBackend, limit: Any) -> None:
    for backend in (model, WithoutIntake(model)):
        with pytest.raises(TaskValidationError):
            FairQueue(backend).ingest(limit)


def test_a_handle_waits_while_its_task_is_in_the_intake(model: InMemoryBackend) -> None:
    queue = FairQueue(model)
    handle = queue.push_intake(Task.create("alice", payload={"n": 2}))
    with pytest.raises(ResultTimeoutError):  # not TaskNotFoundError: it is not ingested yet
        handle.get(timeout=0.05)
    plain = queue.result(handle)  # a handle that does not know it came through the intake
    with pytest.raises(TaskNotFoundError):
        plain.get(timeout=0.05)

    def worker() -> None:
        time.sleep(0.05)
        [task] = queue.claim_batch(1)
        queue.finish(task, {"done": task.payload["n"]})

    thread = threading.Thread(target=worker)
    thread.start()
    try:
        assert handle.get(timeout=5) == {"done": 2}
    finally:
        thread.join()


def test_a_rejected_tasks_handle_raises_task_failed(model: InMemoryBackend) -> None:
    queue = FairQueue(model)
    queue.set_tenant_limits("alice", max_queued=1)
    first, second = queue.push_intake_batch([Task.create("alice"), Task.create("alice")])
    assert queue.ingest() == IngestReport(ingested=1, rejected=1)
    with pytest.raises(TaskFailedError) as info:
        second.get(timeout=1)
    assert info.value.failure_type == FailureType.REJECTED
    assert "max_queued 1" in info.value.reason
    assert queue.get_state(first) is TaskState.QUEUED


def test_without_the_capability_push_intake_is_a_push(model: InMemoryBackend) -> None:
    host = RecordingHost()
    queue = FairQueue(WithoutIntake(model), plugin_host=host)  # type: ignore[arg-type]
    assert not queue.takes_intake
    task = Task.create("alice", payload={"n": 3})
    handle = queue.push_intake(task)
    assert (handle.duplicate, handle.intake) == (False, False)
    assert queue.get_state(task.task_id) is TaskState.QUEUED  # the checks answered at once
    again = queue.push_intake_batch([task])[0]
    assert again.duplicate  # known at once, as push knows it
    assert host.infos == [
        {"event": "pushed", "duplicate": False},
        {"event": "pushed", "duplicate": True},
    ]
    assert queue.ingest() == IngestReport()
    assert queue.intake_size() == 0
    assert model.intake_size() == 0
    with pytest.raises(TaskValidationError):  # the same tasks are taken as with the intake
        queue.push_intake(Task.create("alice", depends_on=[task.task_id]))


def test_async_push_intake_with_and_without_grouping() -> None:
    async def main() -> None:
        backend = AsyncInMemoryBackend(FakeClock())
        for coalesce in (True, False):
            queue = AsyncFairQueue(backend, coalesce_pushes=coalesce)
            tasks = [Task.create("alice", payload={"i": i}) for i in range(3)]
            handles = [await queue.push_intake(t) for t in tasks]
            assert [h.intake for h in handles] == [True] * 3
            assert await queue.intake_size() == 3
            assert await queue.ingest(2) == IngestReport(ingested=2, left=1)
            got = await queue.claim_batch(5)
            assert [t.task_id for t in got] == [t.task_id for t in tasks]
            for t in got:
                await queue.finish(t, t.payload["i"])
            assert [await h.get(timeout=1) for h in handles] == [0, 1, 2]

    asyncio.run(main())


def test_async_grouped_intake_calls_give_each_caller_its_own_error() -> None:
    """A group refused whole by the backend for one message's sake is sent again one by one
    (the push coalescer's rule): the others are stored, the bad one gets its error."""

    async def main() -> None:
        backend = AsyncInMemoryBackend(FakeClock())
        queue = AsyncFairQueue(backend)
        append = backend.push_intake
        calls: list[int] = []

        async def picky(messages: Any) -> None:
            calls.append(len(messages))
            await asyncio.sleep(0)
            if any(m.tenant == "refused" for m in messages):
                raise TaskValidationError("tenant", "refused", "refused by this backend")
            await append(messages)

        backend.push_intake = picky  # type: ignore[method-assign]
        tasks = [Task.create("refused" if i == 3 else "alice") for i in range(6)]
        results = await asyncio.gather(
            *(queue.push_intake(t) for t in tasks), return_exceptions=True
        )
        assert isinstance(results[3], TaskValidationError)
        assert [r for i, r in enumerate(results) if i != 3] == [
            t.task_id for i, t in enumerate(tasks) if i != 3
        ]
        assert await queue.intake_size() == 5
        assert calls[:2] == [1, 5]  # the leader alone, then the five that waited, refused whole

    asyncio.run(main())
