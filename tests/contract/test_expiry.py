"""Expiry before start (ADR 77): a task not started by its ``expires_ms`` is never claimed; the
claim that finds it, ready or due, moves it to the DLQ as ``stale`` and counts no dispatch."""

from __future__ import annotations

from typing import Any

from fairque_core import FailureType, TaskState
from fairque_core.domain.models import STALE_CLAIM_LIMIT

from .helpers import claim_ids, msg


def _at(clock: Any, seconds: float) -> int:
    """The epoch ms ``seconds`` after the fake clock's now."""
    return round((clock.now + seconds) * 1000)


def _stale_ids(backend: Any) -> list[str]:
    return [e.entry_id for e in backend.list_dlq(failure_type=FailureType.STALE)]


def test_the_expiry_survives_the_round_trip(backend, clock):
    m = msg("a", expires_ms=_at(clock, 30))
    backend.push(m)
    assert backend.get_message("a") == m
    [c] = backend.claim()
    assert c.message == m
    assert c.message.expires_ms == m.expires_ms


def test_a_task_not_started_by_its_expiry_is_dead_lettered_not_claimed(backend, clock):
    backend.push_batch([msg("old", expires_ms=_at(clock, 1)), msg("fresh"), msg("b1", "bob")])
    clock.advance(2)  # no worker claimed for 2 s
    claimed = backend.claim(count=2)
    assert sorted(c.message.task_id for c in claimed) == ["b1", "fresh"]
    assert backend.get_state("old") is TaskState.FAILED
    [entry] = backend.list_dlq()
    assert (entry.entry_id, entry.failure_type) == ("old", FailureType.STALE)
    assert "not started by its expiry" in entry.reason
    assert entry.original_task.expires_ms == _at(clock, -1)
    assert _stale_ids(backend) == ["old"]
    assert backend.list_dlq(failure_type=FailureType.EXPIRED) == []
    stats = backend.stats()
    assert (stats["claimed"], stats["dead"], stats["stale"], stats["dlq"]) == (2, 1, 1, 1)
    alice = backend.tenant_stats("alice")
    assert (alice["claimed"], alice["dead"], alice["stale"], alice["ready"]) == (1, 1, 1, 0)


def test_the_expiry_instant_itself_is_too_late(backend, clock):
    backend.push(msg("a", expires_ms=_at(clock, 1)))
    clock.advance(0.999)
    assert claim_ids(backend, 1) == ["a"]
    backend.push(msg("b", expires_ms=_at(clock, 0.001)))
    clock.advance(0.001)
    assert backend.claim() == []
    assert _stale_ids(backend) == ["b"]


def test_a_claim_skips_stale_tasks_and_fills_its_count(backend, clock):
    backend.push_batch([msg(f"s{i}", expires_ms=_at(clock, 1)) for i in range(3)])
    backend.push_batch([msg("a1"), msg("a2")])
    clock.advance(1)
    assert sorted(claim_ids(backend, 1, count=2)) == ["a1", "a2"]
    assert sorted(_stale_ids(backend)) == ["s0", "s1", "s2"]
    assert backend.stats()["leased"] == 2


def test_a_scheduled_task_past_its_expiry_never_becomes_ready(backend, clock):
    backend.push(msg("later", delay=5, expires_ms=_at(clock, 2)))
    backend.push(msg("kept", delay=5, expires_ms=_at(clock, 60)))
    assert backend.get_state("later") is TaskState.SCHEDULED
    clock.advance(5)
    assert claim_ids(backend, 2) == ["kept"]
    assert backend.get_state("later") is TaskState.FAILED
    assert _stale_ids(backend) == ["later"]
    sizes = backend.queue_sizes(["alice"])["alice"]
    assert (sizes.scheduled, sizes.normal, sizes.leased) == (0, 0, 1)


def test_the_dependents_of_a_stale_task_are_canceled(backend, clock):
    backend.push(msg("parent", expires_ms=_at(clock, 1)))
    backend.push(msg("child", depends_on=["parent"]))
    backend.push(msg("grandchild", depends_on=["child"]))
    clock.advance(2)
    assert backend.claim(count=3) == []
    assert backend.get_state("parent") is TaskState.FAILED
    assert backend.get_state("child") is TaskState.CANCELED
    assert backend.get_state("grandchild") is TaskState.CANCELED
    assert backend.stats()["canceled"] == 2


def test_a_retry_keeps_the_expiry(backend, clock):
    backend.push(msg("a", expires_ms=_at(clock, 10)))
    [c] = backend.claim()
    assert backend.fail("a", c.lease.token, retry_delay=20, reason="boom") is TaskState.SCHEDULED
    clock.advance(20)
    assert backend.claim() == []
    [entry] = backend.list_dlq()
    assert (entry.entry_id, entry.failure_type) == ("a", FailureType.STALE)
    assert entry.original_task.retry_count == 1


def test_a_retry_before_the_expiry_runs(backend, clock):
    backend.push(msg("a", expires_ms=_at(clock, 10)))
    [c] = backend.claim()
    backend.fail("a", c.lease.token, retry_delay=2, reason="boom")
    clock.advance(2)
    assert claim_ids(backend, 1) == ["a"]


def test_a_stale_task_takes_no_turn_from_its_tenant(backend, clock):
    # alice's stale task is found by the first claim; her turn is given back when it ends,
    # so the claims that follow alternate as if it had never been pushed
    backend.push(msg("a0", expires_ms=_at(clock, 1)))
    backend.push_batch([msg("a1"), msg("a2"), msg("b1", "bob"), msg("b2", "bob")])
    clock.advance(1)
    claimed = [c.message.tenant for c in backend.claim(count=1)]
    claimed += [c.message.tenant for c in backend.claim(count=1)]
    assert sorted(claimed) == ["alice", "bob"]
    assert backend.tenant_stats("alice")["claimed"] == 1


def test_a_claim_pops_at_most_its_count_plus_the_stale_limit(backend, clock):
    # a backlog of stale tasks is cleared by successive claims, none of which runs long; the
    # claim that stopped passes the wake signal on
    stale = [msg(f"s{i:03d}", expires_ms=_at(clock, 1)) for i in range(STALE_CLAIM_LIMIT + 9)]
    for at in range(0, len(stale), 100):
        backend.push_batch(stale[at : at + 100])
    backend.push(msg("fresh"))
    clock.advance(1)
    while backend.wait_for_work(0):
        pass
    assert backend.claim(count=1) == []
    assert backend.stats()["stale"] == STALE_CLAIM_LIMIT + 1
    assert backend.wait_for_work(0) is True
    assert claim_ids(backend, 1) == ["fresh"]
    assert backend.stats()["stale"] == STALE_CLAIM_LIMIT + 9
