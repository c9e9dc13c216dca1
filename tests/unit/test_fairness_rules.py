"""The pure fair-scheduling rules (fairque_core.domain.fairness), without any backend."""

from __future__ import annotations

from collections import Counter

from fairque_core.domain.fairness import DEFAULT_STRIDE, FairState, charge
from fairque_core.domain.scoring import stride_for


def _serve_backlogged(state: FairState, rounds: int) -> Counter[str]:
    served: Counter[str] = Counter()
    for _ in range(rounds):
        tenant_id = state.pick([None])
        assert tenant_id is not None
        state.serve(tenant_id, still_ready=True)
        served[tenant_id] += 1
    return served


def test_activation_starts_at_the_virtual_time_and_keeps_a_debt() -> None:
    state = FairState()
    state.activate("a")
    assert state.tenant("a").pass_ == 0
    state.serve("a", still_ready=False)  # a had one task: vtime 0, pass 1 stride
    assert not state.has_active()
    assert state.vtime == 0
    assert state.tenant("a").pass_ == DEFAULT_STRIDE
    state.vtime = 5 * DEFAULT_STRIDE
    state.activate("b")
    assert state.tenant("b").pass_ == 5 * DEFAULT_STRIDE  # idle time earns no credit
    state.tenant("a").pass_ = 9 * DEFAULT_STRIDE
    state.activate("a")
    assert state.tenant("a").pass_ == 9 * DEFAULT_STRIDE  # going idle wipes no debt
    state.activate("a")  # already active: no change
    # (pass, activation number): a's first activation was 1, b's 2, a's second 3
    assert state.active == {0: {"b": (5 * DEFAULT_STRIDE, 2), "a": (9 * DEFAULT_STRIDE, 3)}}


def test_serve_moves_the_virtual_time_and_charges_one_stride() -> None:
    state = FairState()
    state.set_weight("a", stride_for(4.0), 0)
    state.activate("a")
    state.serve("a", still_ready=True)
    assert charge(state.tenant("a")) == stride_for(4.0)
    assert state.tenant("a").pass_ == stride_for(4.0)
    assert state.active == {0: {"a": (stride_for(4.0), 1)}}
    state.serve("a", still_ready=False)
    assert state.vtime == stride_for(4.0)  # the served tenant's pass: the lowest of its tier
    assert state.active == {}


def test_pick_lowest_pass_then_activation_order() -> None:
    state = FairState()
    assert state.pick([None]) is None
    for tenant_id in ("c", "b", "a"):
        state.activate(tenant_id)
    assert state.pick([None]) == "c"
    state.serve("c", still_ready=True)
    assert state.pick([None]) == "b"


def test_weights_share_claims_in_proportion() -> None:
    state = FairState()
    for tenant_id, weight in (("one", 1.0), ("two", 2.0), ("four", 4.0)):
        state.set_weight(tenant_id, stride_for(weight), 0)
        state.activate(tenant_id)
    served = _serve_backlogged(state, 700)
    assert served == Counter({"four": 400, "two": 200, "one": 100})


def test_strict_tiers_serve_the_highest_tier_first() -> None:
    state = FairState(strict_tiers=True)
    state.set_weight("free", DEFAULT_STRIDE, 0)
    state.set_weight("gold", DEFAULT_STRIDE, 5)
    state.activate("free")
    state.activate("gold")
    assert set(state.active) == {0, 5}
    assert _serve_backlogged(state, 10) == Counter({"gold": 10})
    state.deactivate("gold")
    assert state.pick([None]) == "free"
    assert state.active_count() == 1


def test_tiers_only_carry_weights_without_strict_mode() -> None:
    state = FairState()
    state.set_weight("gold", DEFAULT_STRIDE, 5)
    state.activate("free")
    state.activate("gold")
    assert set(state.active) == {0}
    assert _serve_backlogged(state, 10) == Counter({"free": 5, "gold": 5})


def test_groups_assigned_first_then_steal() -> None:
    state = FairState(strict_tiers=True)
    state.activate("x")
    state.activate("y")
    state.set_weight("z", DEFAULT_STRIDE, 3)
    state.activate("z")
    assert state.pick([["nobody", "y"], ["x"]]) == "y"
    assert state.pick([["nobody"], ["x", "y"]]) == "x"
    assert state.pick([["x", "z"], []]) == "z"  # higher tier wins inside a group
    assert state.pick([["nobody"], ["ghost"]]) is None


def test_set_weight_moves_an_active_tenant_rescaling_its_lag() -> None:
    state = FairState(strict_tiers=True)
    state.activate("a")
    state.serve("a", still_ready=True)  # one turn (1e6) ahead of tier 0's virtual time (0)
    state.set_weight("a", stride_for(2.0), 7)
    # one turn of the new stride, counted from tier 7's virtual time (0: never served)
    assert state.active == {7: {"a": (stride_for(2.0), 1)}}
    assert state.tenant("a").stride == stride_for(2.0)
    state.set_weight("idle", stride_for(0.5), 2)  # not active: stays out of the sets
    assert not state.is_active("idle")
    assert state.active_count() == 1


def test_pinned_serve_moves_the_virtual_time_to_the_lowest_pass_only() -> None:
    state = FairState()
    for tenant_id in ("a", "b"):
        state.activate(tenant_id)
    for _ in range(5):
        state.serve("a", still_ready=True, pinned=True)
    assert state.vtime == 0  # b (pass 0) is still the lowest
    assert state.tenant("a").pass_ == 5 * DEFAULT_STRIDE
    state.activate("new")
    assert state.tenant("new").pass_ == 0


def test_strict_tiers_have_a_virtual_time_each() -> None:
    state = FairState(strict_tiers=True)
    state.set_weight("hi", DEFAULT_STRIDE, 1)
    state.activate("hi")
    state.activate("lo")
    _serve_backlogged(state, 5)
    assert state.virtual_time(1) == 4 * DEFAULT_STRIDE
    assert state.virtual_time(0) == 0
    state.activate("lo2")
    assert state.tenant("lo2").pass_ == 0


def test_refund_gives_one_stride_back_never_below_the_virtual_time() -> None:
    state = FairState()
    state.activate("a")
    state.activate("b")
    state.serve("a", still_ready=True)
    state.refund("a")
    assert state.active[0]["a"] == (0, 1)
    state.refund("a")
    assert state.tenant("a").pass_ == 0  # the virtual time is the floor


def test_rescale_lag_in_turns() -> None:
    from fairque_core.domain.fairness import rescale_lag

    assert rescale_lag(stride_for(0.001), stride_for(0.001), stride_for(1000)) == 1000
    assert rescale_lag(3 * DEFAULT_STRIDE, DEFAULT_STRIDE, stride_for(0.5)) == 6 * DEFAULT_STRIDE
    assert rescale_lag(0, DEFAULT_STRIDE, 7) == 0
