"""tenant_fairness: per-tenant fairness figures, the same on every backend (issue 11).

Weight and tier, ready depth, leases held, dispatches (``claimed``), lag in turns ((pass -
virtual time of the tier) / stride, 0 while idle), the oldest head task's wait, and the lag
alarm; named tenants or a page of the tenants index; read-only and checked before any I/O.
"""

from __future__ import annotations

import pytest

from fairque_core import FairQueue, Priority, QueueConfig, TaskValidationError
from fairque_core.domain.tenant_figures import TenantFairness, fairness_window

from .helpers import msg
from .test_validation import no_commands


def _by_tenant(figures: list[TenantFairness]) -> dict[str, TenantFairness]:
    return {f.tenant: f for f in figures}


def test_an_empty_queue_and_an_unknown_tenant(backend):
    assert backend.tenant_fairness() == []
    assert backend.tenant_fairness([]) == []
    [ghost] = backend.tenant_fairness(["ghost"])
    assert ghost == TenantFairness(
        tenant="ghost",
        weight=1.0,
        tier=0,
        ready=0,
        running=0,
        lag=0.0,
        dispatched=0,
        oldest_ready_age=None,
    )
    assert not ghost.backlogged
    assert not ghost.starving


def test_depth_running_dispatches_lag_and_weight(backend, clock):
    backend.set_tenant_weight("bob", 2.0)
    backend.push_batch([msg(f"a{i}", "alice") for i in range(3)])
    backend.push_batch([msg(f"b{i}", "bob") for i in range(3)])
    backend.push(msg("c0", "carol"))
    [first] = backend.claim(worker_id="w")  # alice: activated first, all passes 0
    assert first.message.tenant == "alice"
    got = _by_tenant(backend.tenant_fairness(["alice", "bob", "carol"]))
    assert got["alice"].ready == 2
    assert got["alice"].running == 1
    assert got["alice"].dispatched == 1
    assert got["alice"].lag == 1.0  # one turn ahead of the virtual time: just served
    assert got["bob"].lag == 0.0
    assert got["bob"].weight == 2.0
    assert got["bob"].ready == 3
    assert got["carol"].lag == 0.0
    claimed = backend.claim(worker_id="w", count=2)  # bob, then carol (passes 0, 0)
    assert [c.message.tenant for c in claimed] == ["bob", "carol"]
    got = _by_tenant(backend.tenant_fairness(["alice", "bob", "carol"]))
    assert got["bob"].lag == 1.0  # a weight-2 turn: half the stride, one turn all the same
    assert got["carol"].ready == 0
    assert got["carol"].lag == 0.0
    assert got["carol"].dispatched == 1
    assert got["carol"].running == 1
    backend.finish(claimed[1].message.task_id, claimed[1].lease.token)
    assert _by_tenant(backend.tenant_fairness(["carol"]))["carol"].running == 0
    assert all(not f.starving for f in got.values())


def test_the_oldest_head_task_age(backend, clock):
    backend.push(msg("n1", "alice"))
    clock.advance(4)
    backend.push(msg("k1", "alice", Priority.CRITICAL))
    clock.advance(1.5)
    [alice] = backend.tenant_fairness(["alice"])
    assert alice.oldest_ready_age == pytest.approx(5.5)  # the normal head, older than critical
    [claimed] = backend.claim()  # the critical task first
    assert claimed.message.task_id == "k1"
    clock.advance(1)
    assert backend.tenant_fairness(["alice"])[0].oldest_ready_age == pytest.approx(6.5)
    backend.release("k1", claimed.lease.token)  # back at the head, its first ready time kept
    assert backend.tenant_fairness(["alice"])[0].oldest_ready_age == pytest.approx(6.5)
    backend.push(msg("s1", "bob", delay=10))
    assert backend.tenant_fairness(["bob"])[0].oldest_ready_age is None  # scheduled, not ready


def test_pinned_service_beyond_the_lag_bound_raises_the_alarm(backend):
    backend.push_batch([msg(f"a{i}", "alice") for i in range(5)])
    backend.push_batch([msg(f"b{i}", "bob") for i in range(5)])
    for _ in range(3):
        [c] = backend.claim(assigned=["alice"])
        assert c.message.tenant == "alice"
    got = _by_tenant(backend.tenant_fairness(["alice", "bob"]))
    assert got["alice"].lag == 3.0
    assert got["alice"].starving
    assert got["alice"].starving_reason == "lag"
    assert got["bob"].lag == 0.0
    assert not got["bob"].starving


def test_strict_tiers_read_the_virtual_time_of_their_tier(make_backend):
    backend = make_backend(QueueConfig(strict_tiers=True))
    backend.set_tenant_weight("gold", 1.0, tier=2)
    backend.push_batch([msg("g1", "gold"), msg("g2", "gold"), msg("f1", "free")])
    backend.claim()  # gold: tier 2 goes first; tier 0's virtual time does not move
    got = _by_tenant(backend.tenant_fairness(["gold", "free"]))
    assert (got["gold"].tier, got["gold"].lag) == (2, 1.0)
    assert (got["free"].tier, got["free"].lag) == (0, 0.0)


def test_a_page_of_the_tenants_index(backend, clock):
    for k, tenant in enumerate(["t0", "t1", "t2", "t3"]):
        backend.push(msg(f"x{k}", tenant))
        clock.advance(1)
    assert [f.tenant for f in backend.tenant_fairness()] == ["t0", "t1", "t2", "t3"]
    assert [f.tenant for f in backend.tenant_fairness(limit=2, offset=1)] == ["t1", "t2"]
    assert backend.tenant_fairness(limit=0) == []
    assert backend.tenant_fairness(offset=9) == []
    # named tenants come back in the order given, the page arguments aside
    named = backend.tenant_fairness(["t3", "t0"], limit=1)
    assert [f.tenant for f in named] == ["t3", "t0"]


def test_bad_arguments_are_refused_before_any_command(make_backend):
    backend = make_backend()
    backend.push(msg("fine"))
    with no_commands(make_backend, backend):
        for bad in ("alice", ["bad id"], ["a{b}"], [""], [1], {"alice"}):
            with pytest.raises(TaskValidationError):
                backend.tenant_fairness(bad)
        with pytest.raises(TaskValidationError):
            backend.tenant_fairness([f"t{i}" for i in range(1001)])
        for limit, offset in ((1001, 0), (-1, 0), (1, -1), (True, 0)):
            with pytest.raises(TaskValidationError):
                backend.tenant_fairness(limit=limit, offset=offset)


def test_the_engine_reads_them_and_a_window_compares_two_readings(backend):
    queue = FairQueue(backend)
    backend.set_tenant_weight("heavy", 3.0)
    backend.push_batch([msg(f"h{i}", "heavy") for i in range(40)])
    backend.push_batch([msg(f"l{i}", "light") for i in range(40)])
    before = queue.get_tenant_fairness(["heavy", "light"])
    assert [f.tenant for f in queue.get_tenant_fairness("heavy")] == ["heavy"]
    for _ in range(20):
        [c] = backend.claim()
        backend.finish(c.message.task_id, c.lease.token)
    window = fairness_window(before, queue.get_tenant_fairness(["heavy", "light"]), 1.0)
    assert window.dispatched == 20
    assert window.backlogged == 2
    assert window.tenants["heavy"].dispatched == 15
    assert window.tenants["heavy"].share_ratio == pytest.approx(1.0)
    assert window.jain == pytest.approx(1.0)
