"""Failed attempts: retries with backoff, the dead-letter queue (types, list, requeue, purge)."""

from __future__ import annotations

import pytest

from fairque_core import FailureType, QueueConfig, TaskState

from .helpers import claim_ids, msg


def _claim_one(backend, task_id):
    [c] = backend.claim()
    assert c.message.task_id == task_id
    return c


def test_fail_with_retry_delay_schedules_a_retry(backend, clock):
    backend.push(msg("t1"))
    c = _claim_one(backend, "t1")
    state = backend.fail("t1", c.lease.token, retry_delay=5.0, reason="flaky")
    assert state is TaskState.SCHEDULED
    assert backend.get_state("t1") is TaskState.SCHEDULED
    assert backend.get_message("t1").retry_count == 1
    stats = backend.stats()
    assert (stats["retried"], stats["scheduled"], stats["leased"], stats["dead"]) == (1, 1, 0, 0)
    assert backend.queue_sizes(["alice"])["alice"].scheduled == 1
    clock.advance(4.999)
    assert backend.claim() == []
    clock.advance(0.001)
    c2 = _claim_one(backend, "t1")
    assert c2.message.retry_count == 1
    assert c2.recoveries == 0
    assert backend.fail("t1", c2.lease.token, retry_delay=10.0) is TaskState.SCHEDULED
    assert backend.get_message("t1").retry_count == 2


def test_retry_with_zero_delay_is_ready_at_once(backend):
    backend.push(msg("t1"))
    c = _claim_one(backend, "t1")
    assert backend.fail("t1", c.lease.token, retry_delay=0) is TaskState.SCHEDULED
    c2 = _claim_one(backend, "t1")
    assert c2.message.retry_count == 1


def test_retried_task_becomes_ready_at_its_due_time(backend, clock):
    backend.push(msg("r"))
    c = _claim_one(backend, "r")
    backend.fail("r", c.lease.token, retry_delay=2)
    clock.advance(1)
    backend.push(msg("n1"))
    clock.advance(5)
    backend.push(msg("n2"))
    # ready at t+2 < t+6: ahead of n2, behind n1 (ready at t+1)
    assert claim_ids(backend, 3) == ["n1", "r", "n2"]


def test_fail_without_retry_goes_to_the_dlq(backend, clock):
    backend.push(msg("t1"))
    c = _claim_one(backend, "t1")
    clock.advance(2)
    state = backend.fail("t1", c.lease.token, retry_delay=None, reason="ValueError: boom")
    assert state is TaskState.FAILED
    assert backend.get_state("t1") is TaskState.FAILED
    [entry] = backend.list_dlq()
    assert entry.entry_id == "t1"
    assert entry.failure_type is FailureType.FAILED
    assert entry.reason == "ValueError: boom"
    assert entry.original_task.task_id == "t1"
    assert entry.original_task.body == msg("t1").body
    assert entry.moved_at == pytest.approx(clock(), abs=0.001)
    stats = backend.stats()
    assert (stats["dead"], stats["dlq"], stats["leased"], stats["ready"]) == (1, 1, 0, 0)
    assert backend.claim() == []


def _dlq_three_types(make_backend, clock):
    backend = make_backend(QueueConfig(lease_seconds=5, max_recoveries=0))
    for tid in ["f", "x", "p"]:
        backend.push(msg(tid))
    cf = _claim_one(backend, "f")
    backend.fail("f", cf.lease.token, retry_delay=None, reason="retries exhausted")
    clock.advance(1)
    _claim_one(backend, "x")
    clock.advance(5)
    assert backend.requeue_expired() == 1
    clock.advance(1)
    cp = _claim_one(backend, "p")
    backend.fail(
        "p", cp.lease.token, retry_delay=None, failure_type=FailureType.POISONED, reason="bad json"
    )
    return backend


def test_dlq_types_and_filter(make_backend, clock):
    backend = _dlq_three_types(make_backend, clock)
    entries = backend.list_dlq()
    assert [(e.entry_id, e.failure_type) for e in entries] == [
        ("f", FailureType.FAILED),
        ("x", FailureType.EXPIRED),
        ("p", FailureType.POISONED),
    ]
    assert [e.reason for e in entries][::2] == ["retries exhausted", "bad json"]
    assert [e.entry_id for e in backend.list_dlq(failure_type=FailureType.EXPIRED)] == ["x"]
    assert [e.entry_id for e in backend.list_dlq(failure_type=FailureType.POISONED)] == ["p"]
    assert [e.entry_id for e in backend.list_dlq(failure_type=FailureType.FAILED)] == ["f"]
    assert [e.entry_id for e in backend.list_dlq(limit=2)] == ["f", "x"]
    assert [e.entry_id for e in backend.list_dlq(offset=1, limit=1)] == ["x"]
    assert backend.list_dlq(offset=3) == []
    assert backend.stats()["dlq"] == 3


def test_requeue_dlq_some(make_backend, clock):
    backend = _dlq_three_types(make_backend, clock)
    assert backend.requeue_dlq(["p", "unknown-id", "f"]) == 2
    assert [e.entry_id for e in backend.list_dlq()] == ["x"]
    assert backend.get_state("p") is TaskState.QUEUED
    assert backend.get_state("f") is TaskState.QUEUED
    assert backend.get_message("f").retry_count == 0
    stats = backend.stats()
    assert (stats["dlq_requeued"], stats["dlq"], stats["ready"]) == (2, 1, 2)
    assert sorted(claim_ids(backend, 3)) == ["f", "p"]
    assert backend.requeue_dlq(["f"]) == 0  # no longer in the DLQ


def test_requeue_dlq_resets_retries_and_recoveries(make_backend, clock):
    backend = make_backend(QueueConfig(lease_seconds=5, max_recoveries=1))
    backend.push(msg("t"))
    c = _claim_one(backend, "t")
    backend.fail("t", c.lease.token, retry_delay=0)
    _claim_one(backend, "t")
    clock.advance(5)
    backend.requeue_expired()
    c = _claim_one(backend, "t")
    assert (c.recoveries, c.message.retry_count) == (1, 1)
    clock.advance(5)
    backend.requeue_expired()
    assert backend.get_state("t") is TaskState.FAILED
    assert backend.requeue_dlq() == 1
    c = _claim_one(backend, "t")
    assert (c.recoveries, c.message.retry_count) == (0, 0)


def test_requeue_dlq_all(make_backend, clock):
    backend = _dlq_three_types(make_backend, clock)
    assert backend.requeue_dlq() == 3
    assert backend.list_dlq() == []
    assert backend.stats()["dlq"] == 0
    assert backend.requeue_dlq() == 0


def test_purge_dlq_some_and_all(make_backend, clock):
    backend = _dlq_three_types(make_backend, clock)
    assert backend.purge_dlq(["x", "nope"]) == 1
    assert backend.get_state("x") is None
    assert backend.get_message("x") is None
    assert [e.entry_id for e in backend.list_dlq()] == ["f", "p"]
    assert backend.purge_dlq() == 2
    assert backend.list_dlq() == []
    assert backend.get_state("f") is None
    assert backend.stats()["dlq"] == 0
    assert backend.purge_dlq() == 0
    # A purged id is free again.
    assert backend.push(msg("f"))
    assert backend.get_state("f") is TaskState.QUEUED


def test_requeue_and_purge_ignore_tasks_not_in_the_dlq(backend):
    backend.push(msg("alive"))
    assert backend.requeue_dlq(["alive"]) == 0
    assert backend.purge_dlq(["alive"]) == 0
    assert backend.get_state("alive") is TaskState.QUEUED
