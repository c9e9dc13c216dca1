"""Cancel in every state, and the read side: get_state, get_message, get_result."""

from __future__ import annotations

import pytest

from fairque_core import LeaseLostError, Priority, QueueConfig, TaskState
from fairque_core.domain.outcomes import LEASE_CANCELED, LEASE_TERMINATE

from .helpers import claim_ids, msg


def test_cancel_queued(backend):
    backend.push(msg("t1"))
    backend.push(msg("t2"))
    assert backend.cancel("t1") is True
    assert backend.get_state("t1") is TaskState.CANCELED
    assert backend.get_message("t1") == msg("t1")
    stats = backend.stats()
    assert (stats["canceled"], stats["ready"]) == (1, 1)
    assert backend.queue_sizes(["alice"])["alice"].normal == 1
    assert claim_ids(backend, 3) == ["t2"]


def test_cancel_queued_critical(backend):
    backend.push(msg("c1", priority=Priority.CRITICAL))
    backend.push(msg("c2", priority=Priority.CRITICAL))
    assert backend.cancel("c1") is True
    assert backend.queue_sizes(["alice"])["alice"].critical == 1
    assert claim_ids(backend, 3) == ["c2"]


def test_cancel_the_last_ready_task_deactivates_the_tenant(backend):
    backend.push(msg("a1", "a"))
    backend.push(msg("b1", "b"))
    assert backend.stats()["active_tenants"] == 2
    backend.cancel("a1")
    assert backend.stats()["active_tenants"] == 1
    assert claim_ids(backend, 2) == ["b1"]
    assert backend.stats()["active_tenants"] == 0


def test_cancel_scheduled(backend, clock):
    backend.push(msg("later", delay=5))
    assert backend.cancel("later") is True
    assert backend.get_state("later") is TaskState.CANCELED
    assert backend.stats()["scheduled"] == 0
    assert backend.queue_sizes(["alice"])["alice"].scheduled == 0
    clock.advance(10)
    assert backend.claim() == []


def test_cancel_started(backend):
    backend.push(msg("t1"))
    [c] = backend.claim()
    assert backend.cancel("t1") is True
    assert backend.get_state("t1") is TaskState.CANCELED
    stats = backend.stats()
    assert (stats["leased"], stats["canceled"]) == (0, 1)
    assert backend.queue_sizes(["alice"])["alice"].leased == 0
    with pytest.raises(LeaseLostError):
        backend.finish("t1", c.lease.token)
    with pytest.raises(LeaseLostError):
        backend.heartbeat("t1", c.lease.token)
    assert backend.get_state("t1") is TaskState.CANCELED


def test_heartbeat_reports_the_cancel_of_a_running_task(backend):
    """ADR 76: the canceled lease's heartbeat entry tells the worker, not a plain loss."""
    backend.push(msg("t1"))
    backend.push(msg("t2"))
    backend.push(msg("t3"))
    claimed = {c.message.task_id: c.lease.token for c in backend.claim(count=3)}
    assert backend.cancel("t1") is True
    assert backend.cancel("t2", terminate=True) is True
    beats = backend.heartbeat_batch(
        [("t1", claimed["t1"]), ("t2", claimed["t2"]), ("t3", claimed["t3"]), ("t1", "other")]
    )
    assert beats[0] == LEASE_CANCELED
    assert beats[1] == LEASE_TERMINATE
    assert beats[2] is not None
    assert beats[2] > 0
    assert beats[3] is None  # another lease of that task: lost, not told
    with pytest.raises(LeaseLostError):  # the single heartbeat still raises
        backend.heartbeat("t1", claimed["t1"])
    # nothing recorded over the cancel: a finish and a fail of that lease are refused
    with pytest.raises(LeaseLostError):
        backend.finish("t1", claimed["t1"], b"late")
    assert backend.finish_batch([("t2", claimed["t2"], None)]) == [False]
    assert backend.get_state("t1") is TaskState.CANCELED
    assert backend.get_state("t2") is TaskState.CANCELED
    assert backend.stats()["finished"] == 0


def test_heartbeat_of_a_lease_lost_then_canceled_is_a_loss(backend, clock):
    """A lease the reaper took back is lost; the task's cancel afterwards is not its own."""
    backend.push(msg("t1"))
    [first] = backend.claim()
    clock.advance(3600)
    assert backend.requeue_expired() == 1
    [second] = backend.claim()
    assert backend.cancel("t1") is True
    beats = backend.heartbeat_batch([("t1", first.lease.token), ("t1", second.lease.token)])
    assert beats == [None, LEASE_CANCELED]


def test_cancel_started_is_not_redelivered(backend, clock):
    backend.push(msg("t1"))
    backend.claim()
    backend.cancel("t1")
    clock.advance(3600)
    assert backend.requeue_expired() == 0
    assert backend.claim() == []


def test_cancel_deferred(backend):
    backend.push(msg("parent"))
    backend.push(msg("child", depends_on=["parent"]))
    assert backend.get_state("child") is TaskState.DEFERRED
    assert backend.cancel("child") is True
    assert backend.get_state("child") is TaskState.CANCELED
    [c] = backend.claim()
    backend.finish("parent", c.lease.token)
    assert backend.get_state("child") is TaskState.CANCELED
    assert backend.claim() == []


def test_cancel_scheduled_retry(backend):
    backend.push(msg("t1"))
    [c] = backend.claim()
    backend.fail("t1", c.lease.token, retry_delay=5)
    assert backend.cancel("t1") is True
    assert backend.stats()["scheduled"] == 0


@pytest.mark.parametrize("final", ["finished", "failed", "canceled"])
def test_cancel_in_a_final_state_is_refused(backend, final):
    backend.push(msg("t1"))
    if final == "canceled":
        backend.cancel("t1")
    else:
        [c] = backend.claim()
        if final == "finished":
            backend.finish("t1", c.lease.token, b"r")
        else:
            backend.fail("t1", c.lease.token, retry_delay=None)
    state = backend.get_state("t1")
    stats = backend.stats()
    assert backend.cancel("t1") is False
    assert backend.get_state("t1") is state
    assert backend.stats() == stats


def test_cancel_unknown(backend):
    assert backend.cancel("never-pushed") is False
    assert backend.stats()["canceled"] == 0


def test_reads_of_unknown_ids(backend):
    assert backend.get_state("nope") is None
    assert backend.get_message("nope") is None
    assert backend.get_result("nope") is None


def test_state_through_a_whole_life(backend, clock):
    backend.push(msg("t", delay=1))
    seen = [backend.get_state("t")]
    clock.advance(1)
    backend.push(msg("other", "zed"))  # unrelated work does not disturb it
    seen.append(backend.get_state("t"))
    [c] = backend.claim(assigned=["alice"])
    seen.append(backend.get_state("t"))
    backend.fail("t", c.lease.token, retry_delay=1)
    seen.append(backend.get_state("t"))
    clock.advance(1)
    [c] = backend.claim(assigned=["alice"])
    seen.append(backend.get_state("t"))
    assert backend.get_message("t").retry_count == 1
    backend.finish("t", c.lease.token, b"42")
    seen.append(backend.get_state("t"))
    assert seen == [
        TaskState.SCHEDULED,
        TaskState.SCHEDULED,  # due, but moved only by a claim
        TaskState.STARTED,
        TaskState.SCHEDULED,
        TaskState.STARTED,
        TaskState.FINISHED,
    ]
    assert backend.get_result("t") == b"42"
    assert backend.get_message("t") is None  # a finished task keeps its result, not its payload


@pytest.mark.parametrize("final", ["finished", "canceled"])
def test_closed_records_expire_after_the_result_ttl(make_backend, clock, final):
    backend = make_backend(QueueConfig(result_ttl_seconds=10))
    backend.push(msg("t1"))
    if final == "finished":
        [c] = backend.claim()
        backend.finish("t1", c.lease.token, b"r")
    else:
        backend.cancel("t1")
    clock.advance(9.999)
    assert backend.get_state("t1") is not None
    clock.advance(0.001)
    assert backend.get_state("t1") is None
    assert backend.get_message("t1") is None
    assert backend.get_result("t1") is None
    # The id is free again: a new push is a new task.
    assert backend.push(msg("t1", body=b"again")) is True
    assert backend.get_state("t1") is TaskState.QUEUED
    assert backend.get_message("t1").body == b"again"
    assert claim_ids(backend, 2) == ["t1"]


def test_failed_records_stay_until_purged(make_backend, clock):
    backend = make_backend(QueueConfig(result_ttl_seconds=10))
    backend.push(msg("t1"))
    [c] = backend.claim()
    backend.fail("t1", c.lease.token, retry_delay=None)
    clock.advance(100)
    assert backend.get_state("t1") is TaskState.FAILED
    assert [e.entry_id for e in backend.list_dlq()] == ["t1"]
