"""Fairness across tenants: virtual time, weights, strict tiers, assigned/steal selection."""

from __future__ import annotations

from collections import Counter

import pytest

from fairque_core import Priority, QueueConfig, TaskValidationError

from .helpers import claim_users, msg


def _fill(backend, user, n, priority=Priority.NORMAL, start=0):
    backend.push_batch([msg(f"{user}-{i}", user, priority) for i in range(start, start + n)])


def test_equal_weights_alternate_ties_by_tenant_id(backend):
    # Pushed in reverse id order, one tenant's whole backlog after the other's.
    for user in ["carol", "bob", "alice"]:
        _fill(backend, user, 4)
    assert claim_users(backend, 9) == ["alice", "bob", "carol"] * 3


def test_flooding_tenant_does_not_starve_others(backend):
    _fill(backend, "flood", 200)
    _fill(backend, "light", 2)
    assert claim_users(backend, 4) == ["flood", "light", "flood", "light"]
    assert claim_users(backend, 3) == ["flood"] * 3


def test_weights_one_to_three(backend):
    backend.set_tenant_weight("small", 1)
    backend.set_tenant_weight("big", 3)
    _fill(backend, "small", 60)
    _fill(backend, "big", 60)
    served = Counter(claim_users(backend, 80))
    assert served["small"] + served["big"] == 80
    assert abs(served["small"] - 20) <= 1
    assert abs(served["big"] - 60) <= 1


def test_weight_from_set_tenant_weight_applies_while_active(backend):
    _fill(backend, "a", 40)
    _fill(backend, "b", 40)
    assert claim_users(backend, 2) == ["a", "b"]
    backend.set_tenant_weight("b", 4)
    served = Counter(claim_users(backend, 50))
    assert abs(served["b"] - 40) <= 2
    assert abs(served["a"] - 10) <= 2


def test_idle_time_earns_no_credit(backend):
    _fill(backend, "a", 20)
    assert claim_users(backend, 5) == ["a"] * 5
    _fill(backend, "b", 5)
    # b starts at the queue's virtual time, not at 0: it is served next, then they alternate.
    assert claim_users(backend, 6) == ["b", "a", "b", "a", "b", "a"]


def test_returning_tenant_keeps_its_pass(backend):
    _fill(backend, "a", 10)
    _fill(backend, "b", 1)
    assert claim_users(backend, 2) == ["a", "b"]  # b idle now, its pass is ahead of vtime
    _fill(backend, "b", 3, start=1)
    # b's stored pass equals a's, so the tenant id breaks the tie; then they alternate.
    assert claim_users(backend, 4) == ["a", "b", "a", "b"]


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
    assert claim_users(backend, 6, **kw) == ["mine", "mine", "other", "other", "other"]
    assert backend.claim(**kw) == []
    assert backend.queue_sizes(["stranger"])["stranger"].normal == 3


def test_steal_only_when_assigned_idle(backend):
    _fill(backend, "other", 5)
    kw = {"assigned": ["mine"], "steal": ["other"]}
    assert claim_users(backend, 1, **kw) == ["other"]
    _fill(backend, "mine", 2)
    assert claim_users(backend, 3, **kw) == ["mine", "mine", "other"]


def test_assigned_only_never_serves_others(backend):
    _fill(backend, "other", 3)
    assert backend.claim(assigned=["mine"]) == []
    assert backend.claim(assigned=["mine"], steal=[]) == []
    assert backend.claim(steal=["nobody"]) == []
    assert backend.queue_sizes(["other"])["other"].normal == 3


def test_steal_only_list(backend):
    _fill(backend, "a", 2)
    _fill(backend, "b", 2)
    assert claim_users(backend, 3, steal=["b"]) == ["b", "b"]


def test_assigned_tenants_are_served_fairly_among_themselves(backend):
    for user in ["a", "b", "c"]:
        _fill(backend, user, 5)
    assert claim_users(backend, 6, assigned=["c", "a"]) == ["a", "c"] * 3
    # The same pass accounting: b, never served, is next for an all-tenants worker.
    assert claim_users(backend, 1) == ["b"]


def test_unknown_tenants_in_lists_are_ignored(backend):
    _fill(backend, "a", 1)
    assert claim_users(backend, 2, assigned=["ghost", "a"], steal=["phantom"]) == ["a"]


def test_strict_tiers_serve_the_higher_tier_first(make_backend):
    backend = make_backend(QueueConfig(strict_tiers=True))
    backend.set_tenant_weight("free", 1, tier=0)
    backend.set_tenant_weight("pro", 1, tier=1)
    backend.set_tenant_weight("ent", 1, tier=2)
    _fill(backend, "free", 3)
    _fill(backend, "pro", 3)
    _fill(backend, "ent", 2)
    assert claim_users(backend, 8) == ["ent"] * 2 + ["pro"] * 3 + ["free"] * 3


def test_strict_tiers_weights_order_inside_a_tier(make_backend):
    backend = make_backend(QueueConfig(strict_tiers=True))
    backend.set_tenant_weight("gold1", 1, tier=1)
    backend.set_tenant_weight("gold3", 3, tier=1)
    _fill(backend, "free", 5)
    _fill(backend, "gold1", 20)
    _fill(backend, "gold3", 20)
    served = Counter(claim_users(backend, 24))
    assert served["free"] == 0
    assert abs(served["gold3"] - 18) <= 1
    assert abs(served["gold1"] - 6) <= 1


def test_strict_tiers_with_assigned_lists(make_backend):
    backend = make_backend(QueueConfig(strict_tiers=True))
    backend.set_tenant_weight("vip", 1, tier=5)
    _fill(backend, "vip", 2)
    _fill(backend, "plain", 2)
    assert claim_users(backend, 2, assigned=["plain", "vip"]) == ["vip", "vip"]
    assert claim_users(backend, 1, assigned=["plain"], steal=["vip"]) == ["plain"]


def test_tiers_only_carry_weights_when_not_strict(backend):
    backend.set_tenant_weight("free", 1, tier=0)
    backend.set_tenant_weight("ent", 1, tier=9)
    _fill(backend, "free", 3)
    _fill(backend, "ent", 3)
    assert claim_users(backend, 4) == ["ent", "free", "ent", "free"]


@pytest.mark.parametrize("weight", [0, -1, float("nan"), float("inf"), 0.0001, 2e6, "2", True])
def test_bad_weights_rejected(backend, weight):
    with pytest.raises(TaskValidationError):
        backend.set_tenant_weight("a", weight)


@pytest.mark.parametrize("tier", [-1, 1001, 1.5, True])
def test_bad_tiers_rejected(backend, tier):
    with pytest.raises(TaskValidationError):
        backend.set_tenant_weight("a", 1, tier=tier)
