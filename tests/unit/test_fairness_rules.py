"""The pure fair-scheduling rules (fairque_core.domain.fairness), without any backend."""

from __future__ import annotations

from collections import Counter

from fairque_core.domain.fairness import DEFAULT_STRIDE, FairState, charge
from fairque_core.domain.scoring import stride_for


def _serve_backlogged(state: FairState, rounds: int) -> Counter[str]:
    served: Counter[str] = Counter()
    for _ in range(rounds):
        user_id = state.pick([None])
        assert user_id is not None
        state.serve(user_id, still_ready=True)
        served[user_id] += 1
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
    assert state.active == {0: {"b": 5 * DEFAULT_STRIDE, "a": 9 * DEFAULT_STRIDE}}


def test_serve_moves_the_virtual_time_and_charges_one_stride() -> None:
    state = FairState()
    state.set_weight("a", stride_for(4.0), 0)
    state.activate("a")
    state.serve("a", still_ready=True)
    assert charge(state.tenant("a")) == stride_for(4.0)
    assert state.tenant("a").pass_ == stride_for(4.0)
    assert state.active == {0: {"a": stride_for(4.0)}}
    state.serve("a", still_ready=False)
    assert state.vtime == stride_for(4.0)
    assert state.active == {}


def test_pick_lowest_pass_then_tenant_id() -> None:
    state = FairState()
    assert state.pick([None]) is None
    for user_id in ("c", "b", "a"):
        state.activate(user_id)
    assert state.pick([None]) == "a"
    state.serve("a", still_ready=True)
    assert state.pick([None]) == "b"


def test_weights_share_claims_in_proportion() -> None:
    state = FairState()
    for user_id, weight in (("one", 1.0), ("two", 2.0), ("four", 4.0)):
        state.set_weight(user_id, stride_for(weight), 0)
        state.activate(user_id)
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


def test_set_weight_moves_an_active_tenant_keeping_its_pass() -> None:
    state = FairState(strict_tiers=True)
    state.activate("a")
    state.serve("a", still_ready=True)
    state.set_weight("a", stride_for(2.0), 7)
    assert state.active == {7: {"a": DEFAULT_STRIDE}}
    assert state.tenant("a").stride == stride_for(2.0)
    state.set_weight("idle", stride_for(0.5), 2)  # not active: stays out of the sets
    assert not state.is_active("idle")
    assert state.active_count() == 1
