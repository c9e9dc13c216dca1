"""Issue 16, defect 6: the known bad inputs are refused with typed errors, on the model and
Valkey, and nothing is stored.

Before the fix: ``execute_after`` at 1e16 s overflowed the millisecond score and ran at once,
~1.8e305 raised ``OverflowError``, a 5 MB ``name`` (or big headers) slipped under a 1 MiB
``max_payload_bytes``, and a non-str ``name`` raised a bare ``TypeError``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from fairque_core import (
    FairQueue,
    FairQueueError,
    InMemoryBackend,
    PayloadTooLargeError,
    QueueConfig,
    Task,
    TaskState,
    TaskTypeError,
    TaskValidationError,
)
from fairque_core.domain.validation import MAX_EPOCH_SECONDS

MIB = 1_048_576


@pytest.fixture(params=["memory", pytest.param("valkey", marks=pytest.mark.redis)])
def queue(request: pytest.FixtureRequest) -> Iterator[FairQueue]:
    config = QueueConfig(name="badin-" + uuid.uuid4().hex[:8], max_payload_bytes=MIB)
    if request.param == "memory":
        made = FairQueue(InMemoryBackend(config=config))
    else:
        from fairque_redis.backends.backend import RedisBackend

        server = request.getfixturevalue("valkey_server")
        made = FairQueue(RedisBackend.from_url(server.url, config=config))
    with made:
        yield made


def _nothing_stored(queue: FairQueue) -> None:
    assert queue.get_stats()["pushed"] == 0
    assert queue.claim() is None


@pytest.mark.parametrize("when", [1e16, 1e17, 1.8e305, MAX_EPOCH_SECONDS + 1])
def test_execute_after_beyond_year_9999_is_refused(queue: FairQueue, when: float) -> None:
    with pytest.raises(TaskValidationError) as info:
        queue.push(Task.create("alice", execute_after=when))
    assert info.value.field == "execute_after"
    with pytest.raises(TaskValidationError):
        Task(task_id="t1", tenant="alice", execute_after=when)
    with pytest.raises(TaskValidationError):
        Task(task_id="t1", tenant="alice", created_at=when)
    _nothing_stored(queue)


def test_latest_execute_after_is_scheduled_not_run_at_once(queue: FairQueue) -> None:
    task_id = queue.push(Task.create("alice", execute_after=MAX_EPOCH_SECONDS))
    assert queue.get_state(task_id) is TaskState.SCHEDULED
    assert queue.claim() is None
    assert queue.get_queue_sizes("alice")["scheduled"] == 1


def test_overflowing_execute_after_is_not_an_overflow_error(queue: FairQueue) -> None:
    for value in (1.8e305, float("inf"), 10**400):
        with pytest.raises(FairQueueError):
            queue.push(Task.create("alice", execute_after=value))
    _nothing_stored(queue)


def test_name_counts_against_max_payload_bytes(queue: FairQueue) -> None:
    with pytest.raises(PayloadTooLargeError) as info:
        queue.push(Task.create("alice", payload={"a": 1}, name="n" * (5 * MIB)))
    assert info.value.limit == MIB
    assert info.value.size > 5 * MIB
    _nothing_stored(queue)


def test_headers_count_against_max_payload_bytes(queue: FairQueue) -> None:
    with pytest.raises(PayloadTooLargeError):
        queue.push(Task.create("alice", headers={"h": "v" * MIB}))
    with pytest.raises(PayloadTooLargeError):  # many small headers add up
        queue.push(Task.create("alice", headers={f"h{i}": "v" * 1000 for i in range(1100)}))
    _nothing_stored(queue)


def test_payload_name_and_headers_just_under_the_limit_are_stored(queue: FairQueue) -> None:
    task = Task.create(
        "alice", payload={"p": "x" * 1000}, name="n" * 1000, headers={"h": "v" * 1000}
    )
    task_id = queue.push(task)
    got = queue.get_task(task_id)
    assert got is not None
    assert (got.name, got.headers["h"], got.payload) == (task.name, task.headers["h"], task.payload)


@pytest.mark.parametrize("name", [123, None, b"bytes", ["a"], 1.5])
def test_non_string_name_is_a_typed_error(queue: FairQueue, name: object) -> None:
    with pytest.raises(TaskTypeError) as info:
        Task.create("alice", name=name)  # type: ignore[arg-type]
    assert isinstance(info.value, TypeError)
    assert isinstance(info.value, TaskValidationError)
    assert info.value.field == "name"
    with pytest.raises(TaskTypeError):
        Task(task_id="t1", tenant="alice", name=name)  # type: ignore[arg-type]
    _nothing_stored(queue)
