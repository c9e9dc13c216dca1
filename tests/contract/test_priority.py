"""Priority inside one tenant: order by static score, critical FIFO first, aging, delays."""

from __future__ import annotations

import pytest

from fairque_core import Priority, QueueConfig, TaskState

from .helpers import claim_ids, msg


def test_higher_priority_first_when_pushed_together(backend):
    order = [Priority.VERY_LOW, Priority.NORMAL, Priority.VERY_HIGH, Priority.LOW, Priority.HIGH]
    for p in order:
        assert backend.push(msg(f"p{int(p)}", priority=p))
    assert claim_ids(backend, 10) == ["p5", "p4", "p3", "p2", "p1"]


def test_fifo_within_one_priority(backend, clock):
    ids = [f"t{i}" for i in range(6)]
    for i, tid in enumerate(ids):
        backend.push(msg(tid))
        if i % 2:
            clock.advance(0.001)
    assert claim_ids(backend, 10) == ids


def test_same_millisecond_ties_keep_push_order_not_id_order(backend):
    for tid in ["zz", "mm", "aa"]:
        backend.push(msg(tid, priority=Priority.LOW))
    assert claim_ids(backend, 3) == ["zz", "mm", "aa"]


def test_critical_fifo_before_normal(backend, clock):
    backend.push(msg("n-high", priority=Priority.VERY_HIGH))
    clock.advance(1)
    backend.push(msg("c1", priority=Priority.CRITICAL))
    backend.push(msg("n-low", priority=Priority.VERY_LOW))
    clock.advance(1)
    backend.push(msg("c2", priority=Priority.CRITICAL))
    backend.push(msg("c3", priority=Priority.CRITICAL))
    sizes = backend.queue_sizes(["alice"])["alice"]
    assert (sizes.critical, sizes.normal) == (3, 2)
    assert claim_ids(backend, 10) == ["c1", "c2", "c3", "n-high", "n-low"]


def test_critical_pushed_later_overtakes_normal_backlog(backend, clock):
    for i in range(3):
        backend.push(msg(f"n{i}", priority=Priority.VERY_HIGH))
    assert claim_ids(backend, 1) == ["n0"]
    clock.advance(60)
    backend.push(msg("crit", priority=Priority.CRITICAL))
    assert claim_ids(backend, 3) == ["crit", "n1", "n2"]


@pytest.mark.parametrize(
    ("gap", "expected"),
    [
        (119.999, ["high", "low"]),  # overtaken: became ready less than (4-2)/5*300 s later
        (120.0, ["low", "high"]),  # equal score: push order decides
        (121.0, ["low", "high"]),  # aging: the old LOW task is no longer overtaken
    ],
)
def test_aging_bounds_overtaking(make_backend, clock, gap, expected):
    backend = make_backend(QueueConfig(aging_horizon_seconds=300.0))
    backend.push(msg("low", priority=Priority.LOW))
    clock.advance(gap)
    backend.push(msg("high", priority=Priority.HIGH))
    assert claim_ids(backend, 2) == expected


def test_aging_horizon_is_configurable(make_backend, clock):
    backend = make_backend(QueueConfig(aging_horizon_seconds=10.0))
    backend.push(msg("low", priority=Priority.VERY_LOW))
    clock.advance(8.5)  # (5-1)/5*10 = 8 s of head start is all VERY_HIGH gets
    backend.push(msg("high", priority=Priority.VERY_HIGH))
    assert claim_ids(backend, 2) == ["low", "high"]


def test_delayed_task_not_claimable_before_due(backend, clock):
    assert backend.push(msg("later", delay=10))
    assert backend.get_state("later") is TaskState.SCHEDULED
    sizes = backend.queue_sizes(["alice"])["alice"]
    assert (sizes.scheduled, sizes.normal, sizes.critical) == (1, 0, 0)
    assert backend.claim() == []
    clock.advance(9.998)
    assert backend.claim() == []
    assert backend.get_state("later") is TaskState.SCHEDULED
    clock.advance(0.002)
    got = backend.claim()
    assert [c.message.task_id for c in got] == ["later"]
    assert backend.get_state("later") is TaskState.STARTED
    assert backend.queue_sizes(["alice"])["alice"].scheduled == 0


def test_delayed_critical_task_waits_too(backend, clock):
    backend.push(msg("crit-later", priority=Priority.CRITICAL, delay=5))
    backend.push(msg("now", priority=Priority.VERY_LOW))
    assert claim_ids(backend, 2) == ["now"]
    clock.advance(5)
    assert claim_ids(backend, 2) == ["crit-later"]


def test_delayed_tasks_become_ready_at_their_due_time(backend, clock):
    backend.push(msg("d10", delay=10))
    backend.push(msg("d5", delay=5))
    backend.push(msg("d7", delay=7))
    clock.advance(30)
    backend.push(msg("fresh"))
    # All NORMAL: ordered by when each became ready (its due time), the fresh one last.
    assert claim_ids(backend, 5) == ["d5", "d7", "d10", "fresh"]


def test_zero_and_negative_delay_are_ready_now(backend):
    backend.push(msg("zero", delay=0))
    backend.push(msg("neg", delay=-5))
    assert backend.get_state("zero") is TaskState.QUEUED
    assert backend.get_state("neg") is TaskState.QUEUED
    assert sorted(claim_ids(backend, 3)) == ["neg", "zero"]
