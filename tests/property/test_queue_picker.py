"""The stride picker between a worker's queues (ADR 69): shares follow the weights within a
bounded lag, idle time earns no credit, and strict order serves a later queue only when every
earlier one came back short."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairque_core.domain.queue_picker import QueuePicker

weights_st = st.lists(
    st.sampled_from([0.01, 0.5, 1, 1.5, 2, 3, 7, 10, 100]), min_size=1, max_size=6
)
claims_st = st.lists(st.integers(min_value=1, max_value=40), min_size=1, max_size=60)
#: cheap examples (no I/O): at least 100, more under the ci and nightly profiles
EXAMPLES = max(100, settings.default.max_examples)


def serve_all(picker: QueuePicker, count: int) -> list[int]:
    """One claim of ``count`` with every queue backlogged."""
    asked = picker.plan(count)
    picker.book(asked, asked)
    return asked


@settings(max_examples=EXAMPLES, deadline=None)
@given(weights_st, claims_st)
def test_backlogged_shares_follow_the_weights_within_the_lag_bound(
    weights: list[float], claims: list[int]
) -> None:
    """After every claim, each queue's count is within ``[-n w_i / W, 1]`` of its exact share
    (the module's bound), measured in the picker's own integer strides' weights."""
    picker = QueuePicker(weights)
    n = len(weights)
    # the picker works on integer strides: the weights it honours are 1 / stride
    exact = [1 / s for s in picker.strides]
    total_weight = sum(exact)
    total = 0
    for count in claims:
        asked = serve_all(picker, count)
        assert sum(asked) == count
        total += count
        for i, served in enumerate(picker.claimed):
            lag = served - total * exact[i] / total_weight
            assert -n * exact[i] / total_weight - 1e-9 <= lag <= 1 + 1e-9, (i, lag, weights)


@settings(max_examples=EXAMPLES, deadline=None)
@given(weights_st, claims_st, st.data())
def test_a_queue_back_from_idle_has_no_credit(
    weights: list[float], claims: list[int], data: st.DataObject
) -> None:
    """Queue 0 idles (every claim finds it empty) for a while, then is backlogged again:
    counted from its return its lag stays within ``[-n w_0 / W, 1 + n w_0 / W]`` (the module's
    join bound): the time it spent empty earned it nothing, and cost it nothing."""
    if len(weights) < 2:
        weights = [*weights, 1]
    picker = QueuePicker(weights)
    idle_claims = data.draw(st.integers(min_value=1, max_value=len(claims)))
    for count in claims[:idle_claims]:
        asked = picker.plan(count)
        got = [0 if i == 0 else a for i, a in enumerate(asked)]
        picker.book(asked, got)
        assert picker.idle[0] or asked[0] == 0
        rest = picker.plan(count - sum(got), [i != 0 for i in range(len(weights))])
        picker.book(rest, rest)
    start = list(picker.claimed)
    exact = [1 / s for s in picker.strides]
    total_weight = sum(exact)
    total = 0
    for count in claims[idle_claims:] + claims:
        serve_all(picker, count)
        total += count
        served = picker.claimed[0] - start[0]
        lag = served - total * exact[0] / total_weight
        # counted from its return: the others may lead it by up to one of their strides
        slack = len(weights) * exact[0] / total_weight
        assert -slack - 1e-9 <= lag <= 1 + slack + 1e-9, (lag, weights)


def test_three_to_one_over_4000_tasks_is_exact_to_one_task() -> None:
    picker = QueuePicker([3, 1])
    for _ in range(500):
        serve_all(picker, 8)
    assert picker.claimed == [3000, 1000]
    # one place at a time: deterministic, ties to the queue named first
    fresh = QueuePicker([3, 1])
    order = []
    for _ in range(12):
        asked = fresh.plan(1)
        fresh.book(asked, asked)
        order.append(asked.index(1))
    assert order == [0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0]


def test_strict_serves_a_later_queue_only_after_the_earlier_came_back_short() -> None:
    picker = QueuePicker([1, 5, 1], "strict")
    assert picker.plan(10) == [10, 0, 0]
    picker.book([10, 0, 0], [4, 0, 0])
    assert picker.plan(6, [False, True, True]) == [0, 6, 0]
    assert picker.plan(6, [False, False, True]) == [0, 0, 6]
    assert picker.plan(6, [False, False, False]) == [0, 0, 0]


def test_weights_are_checked() -> None:
    with pytest.raises(ValueError, match="queue weight"):
        QueuePicker([1, 0])
    with pytest.raises(ValueError, match="queue order"):
        QueuePicker([1], "random")
    with pytest.raises(ValueError, match="at least one queue"):
        QueuePicker([])
