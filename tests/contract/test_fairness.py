"""Fairness across tenants: virtual time, weights, strict tiers, assigned/steal selection."""

from __future__ import annotations

from collections import Counter

import pytest

from fairque_core import Priority, QueueConfig, TaskValidationError

from .helpers import claim_tenants, msg


def _fill(backend, tenant, n, priority=Priority.NORMAL, start=0):
    backend.push_batch([msg(f"{tenant}-{i}", tenant, priority) for i in range(start, start + n)])


def test_equal_weights_alternate_ties_by_activation_order(backend):
    # Pushed in reverse id order, one tenant's whole backlog after the other's: equal passes go
    # to the tenant that became active first, never to the tenant id (issue 11, defect 5).
    for tenant in ["carol", "bob", "alice"]:
        _fill(backend, tenant, 4)
    assert claim_tenants(backend, 9) == ["carol", "bob", "alice"] * 3


def test_flooding_tenant_does_not_starve_others(backend):
    _fill(backend, "flood", 200)
    _fill(backend, "light", 2)
    assert claim_tenants(backend, 4) == ["flood", "light", "flood", "light"]
    assert claim_tenants(backend, 3) == ["flood"] * 3


def test_weights_one_to_three(backend):
    backend.set_tenant_weight("small", 1)
    backend.set_tenant_weight("big", 3)
    _fill(backend, "small", 60)
    _fill(backend, "big", 60)
    served = Counter(claim_tenants(backend, 80))
    assert served["small"] + served["big"] == 80
    assert abs(served["small"] - 20) <= 1
    assert abs(served["big"] - 60) <= 1


def test_weight_from_set_tenant_weight_applies_while_active(backend):
    _fill(backend, "a", 40)
    _fill(backend, "b", 40)
    assert claim_tenants(backend, 2) == ["a", "b"]
    backend.set_tenant_weight("b", 4)
    served = Counter(claim_tenants(backend, 50))
    assert abs(served["b"] - 40) <= 2
    assert abs(served["a"] - 10) <= 2


def test_idle_time_earns_no_credit(backend):
    _fill(backend, "a", 20)
    assert claim_tenants(backend, 5) == ["a"] * 5
    _fill(backend, "b", 5)
    # b starts at the queue's virtual time, not at 0: it is served next, then they alternate.
    assert claim_tenants(backend, 6) == ["b", "a", "b", "a", "b", "a"]


def test_returning_tenant_keeps_its_pass(backend):
    _fill(backend, "a", 10)
    _fill(backend, "b", 1)
    assert claim_tenants(backend, 2) == ["a", "b"]  # b idle now, its pass is ahead of vtime
    _fill(backend, "b", 3, start=1)
    # b's stored pass equals a's; a became active first, so it wins the tie; then they alternate.
    assert claim_tenants(backend, 4) == ["a", "b", "a", "b"]


def test_count_makes_the_same_choices_as_single_claims(make_backend):
    single = make_backend()
    multi = make_backend()
    for b in (single, multi):
        b.set_tenant_weight("w2", 2)
        _fill(b, "w1", 10)
        _fill(b, "w2", 10)
        _fill(b, "x", 3, priority=Priority.CRITICAL)
    one_by_one = [c.message.task_id for _ in range(12) for c in single.claim()]
    batched = [c.message.task_id for c in multi.claim(count=5)]
    batched += [c.message.task_id for c in multi.claim(count=7)]
    assert batched == one_by_one
    assert len(batched) == 12


def test_claim_count_stops_when_nothing_is_ready(backend):
    _fill(backend, "a", 2)
    got = backend.claim(count=10)
    assert sorted(c.message.task_id for c in got) == ["a-0", "a-1"]
    assert backend.claim(count=10) == []


def test_assigned_tenants_first_then_steal(backend):
    _fill(backend, "mine", 2)
    _fill(backend, "other", 3)
    _fill(backend, "stranger", 3)
    kw = {"assigned": ["mine"], "steal": ["other"]}
    assert claim_tenants(backend, 6, **kw) == ["mine", "mine", "other", "other", "other"]
    assert backend.claim(**kw) == []
    assert backend.queue_sizes(["stranger"])["stranger"].normal == 3


def test_steal_only_when_assigned_idle(backend):
    _fill(backend, "other", 5)
    kw = {"assigned": ["mine"], "steal": ["other"]}
    assert claim_tenants(backend, 1, **kw) == ["other"]
    _fill(backend, "mine", 2)
    assert claim_tenants(backend, 3, **kw) == ["mine", "mine", "other"]


def test_assigned_only_never_serves_others(backend):
    _fill(backend, "other", 3)
    assert backend.claim(assigned=["mine"]) == []
    assert backend.claim(assigned=["mine"], steal=[]) == []
    assert backend.claim(steal=["nobody"]) == []
    assert backend.queue_sizes(["other"])["other"].normal == 3


def test_steal_only_list(backend):
    _fill(backend, "a", 2)
    _fill(backend, "b", 2)
    assert claim_tenants(backend, 3, steal=["b"]) == ["b", "b"]


def test_assigned_tenants_are_served_fairly_among_themselves(backend):
    for tenant in ["a", "b", "c"]:
        _fill(backend, tenant, 5)
    assert claim_tenants(backend, 6, assigned=["c", "a"]) == ["a", "c"] * 3
    # The same pass accounting: b, never served, is next for an all-tenants worker.
    assert claim_tenants(backend, 1) == ["b"]


def test_unknown_tenants_in_lists_are_ignored(backend):
    _fill(backend, "a", 1)
    assert claim_tenants(backend, 2, assigned=["ghost", "a"], steal=["phantom"]) == ["a"]


def test_strict_tiers_serve_the_higher_tier_first(make_backend):
    backend = make_backend(QueueConfig(strict_tiers=True))
    backend.set_tenant_weight("free", 1, tier=0)
    backend.set_tenant_weight("pro", 1, tier=1)
    backend.set_tenant_weight("ent", 1, tier=2)
    _fill(backend, "free", 3)
    _fill(backend, "pro", 3)
    _fill(backend, "ent", 2)
    assert claim_tenants(backend, 8) == ["ent"] * 2 + ["pro"] * 3 + ["free"] * 3


def test_strict_tiers_weights_order_inside_a_tier(make_backend):
    backend = make_backend(QueueConfig(strict_tiers=True))
    backend.set_tenant_weight("gold1", 1, tier=1)
    backend.set_tenant_weight("gold3", 3, tier=1)
    _fill(backend, "free", 5)
    _fill(backend, "gold1", 20)
    _fill(backend, "gold3", 20)
    served = Counter(claim_tenants(backend, 24))
    assert served["free"] == 0
    assert abs(served["gold3"] - 18) <= 1
    assert abs(served["gold1"] - 6) <= 1


def test_strict_tiers_with_assigned_lists(make_backend):
    backend = make_backend(QueueConfig(strict_tiers=True))
    backend.set_tenant_weight("vip", 1, tier=5)
    _fill(backend, "vip", 2)
    _fill(backend, "plain", 2)
    assert claim_tenants(backend, 2, assigned=["plain", "vip"]) == ["vip", "vip"]
    assert claim_tenants(backend, 1, assigned=["plain"], steal=["vip"]) == ["plain"]


def test_tiers_only_carry_weights_when_not_strict(backend):
    backend.set_tenant_weight("free", 1, tier=0)
    backend.set_tenant_weight("ent", 1, tier=9)
    _fill(backend, "free", 3)
    _fill(backend, "ent", 3)
    assert claim_tenants(backend, 4) == ["free", "ent", "free", "ent"]


@pytest.mark.parametrize("weight", [0, -1, float("nan"), float("inf"), 0.0001, 2e6, "2", True])
def test_bad_weights_rejected(backend, weight):
    with pytest.raises(TaskValidationError):
        backend.set_tenant_weight("a", weight)


@pytest.mark.parametrize("tier", [-1, 1001, 1.5, True])
def test_bad_tiers_rejected(backend, tier):
    with pytest.raises(TaskValidationError):
        backend.set_tenant_weight("a", 1, tier=tier)


# ---------------------------------------------------------------------------------------------
# Issue 11: one regression test per defect (each failed before the fix on every backend).


def test_pinned_claims_do_not_move_the_virtual_time(backend):
    # Defect 1: 10 backlogged tenants, 1,000 claims pinned to t0, then one task of a newcomer.
    # Before: the virtual time jumped to t0's pass and the newcomer waited ~9,000 dispatches.
    _fill(backend, "t0", 1010)
    for n in range(1, 10):
        _fill(backend, f"t{n}", 20)
    for _ in range(10):
        assert len(backend.claim(count=100, assigned=["t0"])) == 100
    _fill(backend, "newcomer", 1)
    # t1..t9 are at the virtual time too and became active first: the newcomer is 10th.
    assert "newcomer" in claim_tenants(backend, 10)


def test_pinned_service_does_not_penalise_tenants_not_picked(backend):
    # Defect 1: a tenant that returns after pinned claims served someone else starts at the
    # lowest pass of the others, not at the pinned tenant's pass.
    _fill(backend, "a", 50)
    _fill(backend, "b", 50)
    _fill(backend, "c", 1)
    assert claim_tenants(backend, 3) == ["a", "b", "c"]  # c idle, its pass one stride ahead
    claim_tenants(backend, 20, assigned=["a"])
    _fill(backend, "c", 1, start=1)
    assert claim_tenants(backend, 2) == ["b", "c"]


def test_strict_tiers_keep_a_virtual_time_per_tier(make_backend):
    # Defect 2: a tier-0 tenant that becomes active while tier 1 is served joins tier 0 at
    # tier 0's virtual time (before: at tier 1's, behind ~2 x 40 tier-0 dispatches).
    backend = make_backend(QueueConfig(strict_tiers=True))
    backend.set_tenant_weight("hi", 1, tier=1)
    _fill(backend, "lo1", 100)
    _fill(backend, "lo2", 100)
    _fill(backend, "hi", 40)
    assert claim_tenants(backend, 30) == ["hi"] * 30
    _fill(backend, "new0", 1)
    assert claim_tenants(backend, 10) == ["hi"] * 10
    assert claim_tenants(backend, 3) == ["lo1", "lo2", "new0"]


def test_weight_change_rescales_the_remaining_lag(backend):
    # Defect 3: raising a tenant from 0.001 to 1000 right after its claim. Its debt (one turn
    # of stride 1e9) becomes one turn of the new stride (1,000): it runs again at once, not
    # after ~1,000 dispatches of b.
    backend.set_tenant_weight("a", 0.001)
    _fill(backend, "a", 20)
    _fill(backend, "b", 20)
    assert claim_tenants(backend, 1) == ["a"]
    backend.set_tenant_weight("a", 1000)
    assert claim_tenants(backend, 4) == ["b", "a", "a", "a"]


def test_weight_change_keeps_the_debt_in_turns(backend):
    # Defect 3 the other way: lowering a weight stretches the same number of turns.
    _fill(backend, "a", 20)
    _fill(backend, "b", 20)
    assert claim_tenants(backend, 1) == ["a"]  # a is one turn (1e6) ahead
    backend.set_tenant_weight("a", 0.5)  # one turn of stride 2e6
    assert claim_tenants(backend, 3) == ["b", "b", "a"]


def test_release_refunds_the_turn(backend):
    # Defect 4: 50 releases by a pinned worker cost the tenant nothing (before: its pass ran
    # 50 strides ahead and it waited ~100 dispatches).
    for tenant in ["a", "b", "c"]:
        _fill(backend, tenant, 10)
    for _ in range(50):
        (got,) = backend.claim(assigned=["a"])
        backend.release(got.message.task_id, got.lease.token)
    assert claim_tenants(backend, 3) == ["a", "b", "c"]


def test_expired_unstarted_claim_refunds_its_turn(make_backend, clock):
    # Defect 4: a lease that expires without one heartbeat never started: refunded. One that
    # was heartbeated started: the tenant keeps paying for it.
    backend = make_backend(QueueConfig(lease_seconds=5.0))
    for tenant in ["a", "b"]:
        _fill(backend, tenant, 10)
    backend.claim(assigned=["a"])  # never heartbeated
    (beat,) = backend.claim(assigned=["b"])
    clock.advance(1)
    backend.heartbeat(beat.message.task_id, beat.lease.token)
    clock.advance(10)
    assert backend.requeue_expired(10) == 2
    # a got its turn back (pass 0), b still paid for its started claim (pass one stride)
    assert claim_tenants(backend, 3) == ["a", "a", "b"]


def test_newcomer_wait_does_not_depend_on_its_name(make_backend):
    # Defect 5: the same history with a newcomer named to sort first or last.
    waits = []
    for name in ["0first", "zzzlast"]:
        backend = make_backend()
        for tenant in ["m1", "m2", "m3", "m4"]:
            _fill(backend, tenant, 10)
        claim_tenants(backend, 2)
        _fill(backend, name, 1)
        waits.append(claim_tenants(backend, 5).index(name))
    assert waits[0] == waits[1] == 2


def test_active_members_written_before_activation_order_are_migrated(backend, probe):
    # Data of an older version: bare tenant ids in active:0, no activation numbers. The first
    # script that reads such a tenant rewrites its member; claims carry on in pass order.
    _fill(backend, "old1", 3)
    _fill(backend, "old2", 3)
    client, prefix = probe.client, probe.prefix
    for tenant in ["old1", "old2"]:
        client.hdel(prefix + f"tenant:{tenant}", "act")
    client.delete(prefix + "active:0")
    client.hset(prefix + "tenant:old1", "pass", 1_000_000)
    client.zadd(prefix + "active:0", {"old2": 0, "old1": 1_000_000})
    assert claim_tenants(backend, 1) == ["old2"]  # rewritten: 0000000000000003|old2
    # (until old1 is read, its bare member sorts after the new ones at an equal pass)
    assert claim_tenants(backend, 2) == ["old2", "old1"]  # old1 rewritten when served
    members = {m.decode() for m in client.zrange(prefix + "active:0", 0, -1)}
    assert members == {"0000000000000003|old2", "0000000000000004|old1"}
    assert claim_tenants(backend, 3) == ["old2", "old1", "old1"]
    assert backend.stats()["active_tenants"] == 0
