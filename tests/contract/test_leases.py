"""Leases: claim, heartbeat, expiry and redelivery by the reaper, stale tokens, release."""

from __future__ import annotations

import pytest

from fairque_core import FailureType, LeaseLostError, Priority, QueueConfig, TaskState

from .helpers import claim_ids, msg, snapshot


def test_claim_hands_out_a_lease(make_backend, clock):
    backend = make_backend(QueueConfig(lease_seconds=30))
    m = msg("t1", headers={"traceparent": "00-abc-def-01"}, name="email.send")
    backend.push(m)
    [claimed] = backend.claim(worker_id="w1")
    assert claimed.message == m
    assert claimed.lease.token
    assert claimed.lease.worker_id == "w1"
    assert claimed.lease.deadline == pytest.approx(clock() + 30, abs=0.001)
    assert claimed.recoveries == 0
    assert backend.get_state("t1") is TaskState.STARTED
    sizes = backend.queue_sizes(["alice"])["alice"]
    assert (sizes.normal, sizes.leased) == (0, 1)


def test_claim_lease_seconds_override(make_backend, clock):
    backend = make_backend(QueueConfig(lease_seconds=30))
    backend.push(msg("t1"))
    [claimed] = backend.claim(lease_seconds=5)
    assert claimed.lease.deadline == pytest.approx(clock() + 5, abs=0.001)
    clock.advance(5)
    assert backend.requeue_expired() == 1


def test_tokens_differ_between_claims(backend):
    backend.push(msg("t1"))
    backend.push(msg("t2"))
    a, b = backend.claim(count=2)
    assert a.lease.token != b.lease.token


def test_leased_task_is_not_handed_out_again(backend, clock):
    backend.push(msg("only"))
    assert claim_ids(backend, 1) == ["only"]
    clock.advance(10)
    assert backend.requeue_expired() == 0
    assert backend.claim(count=5) == []


@pytest.mark.parametrize("lease_seconds", [0, -1, 1e-9, 1e16, float("nan"), 10**400, "5"])
def test_bad_lease_seconds_rejected(backend, lease_seconds):
    """Below 1 ms (it rounds to 0 ms) or beyond the year-9999 span (a lease of 1e16 s was
    lost at its first heartbeat): refused, typed, for the claim and the heartbeat."""
    backend.push(msg("t1"))
    with pytest.raises(ValueError, match="lease"):
        backend.claim(lease_seconds=lease_seconds)
    assert backend.get_state("t1") is TaskState.QUEUED
    [claimed] = backend.claim()
    with pytest.raises(ValueError, match="lease"):
        backend.heartbeat("t1", claimed.lease.token, lease_seconds)
    assert backend.get_state("t1") is TaskState.STARTED


def test_the_longest_lease_is_kept_by_a_heartbeat(backend):
    backend.push(msg("t1"))
    [claimed] = backend.claim(lease_seconds=1e9)
    deadline = backend.heartbeat("t1", claimed.lease.token, 1e9)
    assert deadline > 1e9
    backend.finish("t1", claimed.lease.token)
    assert backend.get_state("t1") is TaskState.FINISHED


def test_bad_count_rejected(backend):
    backend.push(msg("t1"))
    with pytest.raises(ValueError, match="count"):
        backend.claim(count=0)
    assert backend.get_state("t1") is TaskState.QUEUED


def test_heartbeat_extends_the_lease(make_backend, clock):
    backend = make_backend(QueueConfig(lease_seconds=10))
    backend.push(msg("t1"))
    [c] = backend.claim()
    clock.advance(8)
    deadline = backend.heartbeat("t1", c.lease.token)
    assert deadline == pytest.approx(clock() + 10, abs=0.001)
    clock.advance(8)  # past the first deadline, inside the extended one
    assert backend.requeue_expired() == 0
    assert backend.get_state("t1") is TaskState.STARTED
    deadline = backend.heartbeat("t1", c.lease.token, lease_seconds=60)
    assert deadline == pytest.approx(clock() + 60, abs=0.001)
    clock.advance(59)
    assert backend.requeue_expired() == 0
    backend.finish("t1", c.lease.token, b"ok")
    assert backend.get_state("t1") is TaskState.FINISHED


def test_expired_lease_is_redelivered(make_backend, clock):
    backend = make_backend(QueueConfig(lease_seconds=30))
    backend.push(msg("t1"))
    [first] = backend.claim()
    clock.advance(29.999)
    assert backend.requeue_expired() == 0
    clock.advance(0.001)
    assert backend.requeue_expired() == 1
    assert backend.get_state("t1") is TaskState.QUEUED
    assert backend.stats()["recovered"] == 1
    assert backend.stats()["leased"] == 0
    [second] = backend.claim()
    assert second.message.task_id == "t1"
    assert second.recoveries == 1
    assert second.lease.token != first.lease.token
    with pytest.raises(LeaseLostError):
        backend.finish("t1", first.lease.token)
    backend.finish("t1", second.lease.token)
    assert backend.get_state("t1") is TaskState.FINISHED


def test_recovered_task_keeps_its_old_place(make_backend, clock):
    backend = make_backend(QueueConfig(lease_seconds=5))
    for tid in ["a", "b", "c"]:
        backend.push(msg(tid))
        clock.advance(1)
    assert claim_ids(backend, 1) == ["a"]
    backend.push(msg("d"))
    backend.push(msg("e", priority=Priority.VERY_HIGH))
    clock.advance(5)
    assert backend.requeue_expired() == 1
    # Scored by when it first became ready: ahead of b, c and d, still behind a newer
    # VERY_HIGH task that outranks it.
    assert claim_ids(backend, 5) == ["e", "a", "b", "c", "d"]


def test_recovered_critical_task_goes_back_to_the_head(make_backend, clock):
    backend = make_backend(QueueConfig(lease_seconds=5))
    for tid in ["c1", "c2", "c3"]:
        backend.push(msg(tid, priority=Priority.CRITICAL))
    assert claim_ids(backend, 1) == ["c1"]
    clock.advance(6)
    assert backend.requeue_expired() == 1
    assert claim_ids(backend, 3) == ["c1", "c2", "c3"]


def test_reaper_limit(make_backend, clock):
    backend = make_backend(QueueConfig(lease_seconds=5))
    for i in range(5):
        backend.push(msg(f"t{i}"))
    assert len(backend.claim(count=5)) == 5
    clock.advance(6)
    assert backend.requeue_expired(limit=2) == 2
    assert backend.stats()["leased"] == 3
    assert backend.requeue_expired(limit=2) == 2
    assert backend.requeue_expired(limit=2) == 1
    assert backend.requeue_expired(limit=2) == 0
    assert backend.stats()["ready"] == 5


def test_reaper_takes_the_oldest_deadlines_first(make_backend, clock):
    backend = make_backend(QueueConfig(lease_seconds=5))
    for tid in ["a", "b", "c"]:
        backend.push(msg(tid))
    [a] = backend.claim()
    clock.advance(1)
    [b] = backend.claim()
    clock.advance(1)
    [c] = backend.claim()
    clock.advance(10)
    assert backend.requeue_expired(limit=1) == 1
    assert backend.get_state("a") is TaskState.QUEUED
    assert backend.get_state("b") is TaskState.STARTED
    assert backend.get_state("c") is TaskState.STARTED
    assert {a.lease.token, b.lease.token, c.lease.token} != {""}


def test_too_many_recoveries_go_to_the_dlq_as_expired(make_backend, clock):
    backend = make_backend(QueueConfig(lease_seconds=5, max_recoveries=2))
    backend.push(msg("poison"))
    for expected_recoveries in range(3):
        [c] = backend.claim()
        assert c.recoveries == expected_recoveries
        clock.advance(6)
        assert backend.requeue_expired() == 1
    assert backend.get_state("poison") is TaskState.FAILED
    assert backend.claim() == []
    [entry] = backend.list_dlq()
    assert entry.entry_id == "poison"
    assert entry.failure_type is FailureType.EXPIRED
    assert entry.original_task.task_id == "poison"
    assert entry.moved_at == pytest.approx(clock(), abs=0.001)
    stats = backend.stats()
    assert (stats["recovered"], stats["dead"], stats["dlq"], stats["leased"]) == (2, 1, 1, 0)


def test_max_recoveries_zero_sends_the_first_expiry_to_the_dlq(make_backend, clock):
    backend = make_backend(QueueConfig(lease_seconds=5, max_recoveries=0))
    backend.push(msg("t"))
    backend.claim()
    clock.advance(5)
    assert backend.requeue_expired() == 1
    assert [e.failure_type for e in backend.list_dlq()] == [FailureType.EXPIRED]


@pytest.mark.parametrize("op", ["finish", "fail_retry", "fail_dead", "heartbeat", "release"])
def test_stale_token_changes_nothing(make_backend, clock, op):
    backend = make_backend(QueueConfig(lease_seconds=5))
    backend.push(msg("t1"))
    backend.push(msg("t2", tenant="bob"))
    [old] = backend.claim(assigned=["alice"])
    clock.advance(6)
    backend.requeue_expired()
    [live] = backend.claim(assigned=["alice"])
    assert live.lease.token != old.lease.token
    before = snapshot(backend, ["t1", "t2"], ["alice", "bob"])
    calls = {
        "finish": lambda tok: backend.finish("t1", tok, b"x"),
        "fail_retry": lambda tok: backend.fail("t1", tok, retry_delay=1.0),
        "fail_dead": lambda tok: backend.fail("t1", tok, retry_delay=None, reason="boom"),
        "heartbeat": lambda tok: backend.heartbeat("t1", tok),
        "release": lambda tok: backend.release("t1", tok),
    }
    for token in [old.lease.token, "not-a-token", ""]:
        with pytest.raises(LeaseLostError):
            calls[op](token)
    assert snapshot(backend, ["t1", "t2"], ["alice", "bob"]) == before
    # The live lease still works.
    backend.heartbeat("t1", live.lease.token)
    backend.finish("t1", live.lease.token, b"done")
    assert backend.get_result("t1") == b"done"


@pytest.mark.parametrize("state", ["queued", "unknown", "finished"])
def test_lease_ops_without_a_lease_raise(backend, state):
    backend.push(msg("t1"))
    token = "tok-x"
    if state == "finished":
        [c] = backend.claim()
        token = c.lease.token
        backend.finish("t1", token)
    task_id = "nope" if state == "unknown" else "t1"
    before = snapshot(backend, ["t1"], ["alice"])
    if state == "finished":
        backend.finish(task_id, token)  # the same lease's finish again: recognised, a no-op
    else:
        with pytest.raises(LeaseLostError):
            backend.finish(task_id, token)
    with pytest.raises(LeaseLostError):
        backend.heartbeat(task_id, token)
    with pytest.raises(LeaseLostError):
        backend.fail(task_id, token, retry_delay=None)
    with pytest.raises(LeaseLostError):
        backend.release(task_id, token)
    assert snapshot(backend, ["t1"], ["alice"]) == before


def test_expired_but_unreaped_lease_still_finishes(make_backend, clock):
    backend = make_backend(QueueConfig(lease_seconds=5))
    backend.push(msg("t1"))
    [c] = backend.claim()
    clock.advance(7)
    backend.finish("t1", c.lease.token, b"late")
    assert backend.get_state("t1") is TaskState.FINISHED
    assert backend.requeue_expired() == 0


def test_release_puts_the_task_back_at_the_head(backend, clock):
    for tid in ["a", "b"]:
        backend.push(msg(tid))
    [c] = backend.claim()
    assert c.message.task_id == "a"
    clock.advance(3)
    backend.push(msg("crit-not", priority=Priority.NORMAL))
    backend.release("a", c.lease.token)
    assert backend.get_state("a") is TaskState.QUEUED
    assert backend.get_message("a").retry_count == 0
    stats = backend.stats()
    assert (stats["released"], stats["leased"], stats["ready"]) == (1, 0, 3)
    [again] = backend.claim()
    assert again.message.task_id == "a"
    assert again.recoveries == 0
    with pytest.raises(LeaseLostError):
        backend.finish("a", c.lease.token)


def test_finish_stores_the_result(backend):
    backend.push(msg("t1"))
    [c] = backend.claim()
    assert backend.get_result("t1") is None
    backend.finish("t1", c.lease.token, b"\x00\xffbinary result")
    assert backend.get_result("t1") == b"\x00\xffbinary result"
    assert backend.get_state("t1") is TaskState.FINISHED
    stats = backend.stats()
    assert (stats["finished"], stats["leased"], stats["ready"]) == (1, 0, 0)
    backend.finish("t1", c.lease.token, b"again")  # a repeat: recognised, changes nothing
    assert backend.get_result("t1") == b"\x00\xffbinary result"
    assert backend.stats()["finished"] == 1


def test_finish_without_result(backend):
    backend.push(msg("t1"))
    [c] = backend.claim()
    backend.finish("t1", c.lease.token)
    assert backend.get_state("t1") is TaskState.FINISHED
    assert backend.get_result("t1") is None


def test_finish_batch(backend):
    for tid in ["a", "b", "c"]:
        backend.push(msg(tid))
    claims = {c.message.task_id: c for c in backend.claim(count=3)}
    flags = backend.finish_batch(
        [
            ("a", claims["a"].lease.token, b"ra"),
            ("b", "stale", b"rb"),
            ("c", claims["c"].lease.token, None),
            ("a", claims["a"].lease.token, b"again"),
            ("zz", "x", None),
        ]
    )
    # the repeat of a's finish (same token) is recognised: success, the first result stays
    assert flags == [True, False, True, True, False]
    assert backend.get_state("a") is TaskState.FINISHED
    assert backend.get_result("a") == b"ra"
    assert backend.get_state("b") is TaskState.STARTED
    assert backend.get_state("c") is TaskState.FINISHED
    assert backend.stats()["finished"] == 2
    assert backend.finish_batch([]) == []


def test_heartbeat_batch_extends_live_leases_and_reports_lost_ones(make_backend, clock):
    backend = make_backend(QueueConfig(lease_seconds=10))
    for tid in ["a", "b", "c"]:
        backend.push(msg(tid))
    claims = {c.message.task_id: c for c in backend.claim(count=3)}
    backend.finish("c", claims["c"].lease.token)
    clock.advance(8)
    deadlines = backend.heartbeat_batch(
        [
            ("a", claims["a"].lease.token),
            ("b", "stale"),
            ("c", claims["c"].lease.token),  # finished: no lease any more
            ("zz", "x"),  # unknown task
            ("b", claims["b"].lease.token),
        ],
        lease_seconds=20,
    )
    assert deadlines[1:4] == [None, None, None]
    assert deadlines[0] == deadlines[4] == pytest.approx(clock() + 20, abs=0.001)
    clock.advance(15)  # past the first deadlines, inside the extended ones
    assert backend.requeue_expired() == 0
    assert [backend.get_state(t) for t in "abc"] == [
        TaskState.STARTED,
        TaskState.STARTED,
        TaskState.FINISHED,
    ]
    clock.advance(6)
    assert backend.requeue_expired() == 2, "the extended leases do expire"
    assert backend.heartbeat_batch([]) == []


def test_heartbeat_batch_with_stale_tokens_changes_nothing(make_backend, clock):
    backend = make_backend(QueueConfig(lease_seconds=5))
    backend.push(msg("t1"))
    backend.push(msg("t2", tenant="bob"))
    [old] = backend.claim(assigned=["alice"])
    clock.advance(6)
    backend.requeue_expired()
    [live] = backend.claim(assigned=["alice"])
    before = snapshot(backend, ["t1", "t2"], ["alice", "bob"])
    stale = [("t1", old.lease.token), ("t1", ""), ("t2", "not-a-token")]
    assert backend.heartbeat_batch(stale) == [None, None, None]
    assert snapshot(backend, ["t1", "t2"], ["alice", "bob"]) == before
    [deadline] = backend.heartbeat_batch([("t1", live.lease.token)], lease_seconds=1)
    assert deadline == pytest.approx(clock() + 1, abs=0.001)
    clock.advance(1)
    assert backend.requeue_expired() == 1, "the live lease now ends at the new deadline"


def test_a_repeated_finish_is_recognised_and_changes_nothing(make_backend, clock):
    """A finish whose reply was lost is sent again with the same token: it succeeds, and
    neither the result, the counters nor the state change; other tokens stay refused."""
    backend = make_backend(QueueConfig(lease_seconds=5))
    backend.push(msg("t1"))
    [c] = backend.claim()
    backend.finish("t1", c.lease.token, b"first")
    before = snapshot(backend, ["t1"], ["alice"])
    backend.finish("t1", c.lease.token, b"second")  # no LeaseLostError
    assert backend.finish_batch([("t1", c.lease.token, b"third")]) == [True]
    assert snapshot(backend, ["t1"], ["alice"]) == before
    assert backend.get_result("t1") == b"first"
    assert backend.stats()["finished"] == 1
    for token in ["", "other"]:
        with pytest.raises(LeaseLostError):
            backend.finish("t1", token)
    with pytest.raises(LeaseLostError):
        backend.heartbeat("t1", c.lease.token)
    with pytest.raises(LeaseLostError):
        backend.fail("t1", c.lease.token, retry_delay=None)


@pytest.mark.parametrize("retry_delay", [5.0, None])
def test_a_repeated_fail_is_recognised_and_changes_nothing(make_backend, clock, retry_delay):
    backend = make_backend(QueueConfig(lease_seconds=5))
    backend.push(msg("t1"))
    [c] = backend.claim()
    state = backend.fail("t1", c.lease.token, retry_delay=retry_delay, reason="boom")
    assert state is (TaskState.SCHEDULED if retry_delay else TaskState.FAILED)
    before = snapshot(backend, ["t1"], ["alice"])
    again = backend.fail("t1", c.lease.token, retry_delay=retry_delay, reason="boom")
    assert again is state
    assert snapshot(backend, ["t1"], ["alice"]) == before
    assert backend.get_message("t1").retry_count == (1 if retry_delay else 0)
    with pytest.raises(LeaseLostError):
        backend.fail("t1", "other", retry_delay=retry_delay)
    with pytest.raises(LeaseLostError):
        backend.finish("t1", c.lease.token)
    if retry_delay:
        clock.advance(6)
        [second] = backend.claim()
        assert second.lease.token != c.lease.token
        with pytest.raises(LeaseLostError):  # the task was claimed again: not a repeat any more
            backend.fail("t1", c.lease.token, retry_delay=retry_delay)
        backend.finish("t1", second.lease.token)
