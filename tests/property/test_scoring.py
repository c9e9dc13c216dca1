"""Properties of the static score: FIFO, priority order and the exact starvation bound.

``static_score(p, ready_ms, horizon_ms) = ready_ms - p * horizon_ms // 5``; the lowest score is
served first. Everything is integer arithmetic, so the bounds below are stated exactly as the
code computes them, floor division included.
"""

from __future__ import annotations

from hypothesis import assume, given
from hypothesis import strategies as st

from fairque_core import Priority
from fairque_core.domain.scoring import (
    SEQ_WIDTH,
    priority_offset_ms,
    seq_member,
    static_score,
    stride_for,
    to_ms,
)

SCORED = [p for p in Priority if not p.is_critical]
priorities = st.sampled_from(SCORED)
# Server times in ms around "now" (2020s epoch ms fit easily), and negative ones for generality.
times = st.integers(min_value=-(10**13), max_value=10**13)
# Any horizon from 1 ms to ~30 days; the default is 300 000 ms.
horizons = st.integers(min_value=1, max_value=30 * 24 * 3600 * 1000)
# Horizons of at least 5 ms give every priority a distinct offset.
real_horizons = st.integers(min_value=5, max_value=30 * 24 * 3600 * 1000)


@given(priorities, times, times, horizons)
def test_fifo_within_one_priority(p: Priority, t1: int, t2: int, horizon: int) -> None:
    assume(t1 != t2)
    first, second = sorted((t1, t2))
    assert static_score(p, first, horizon) < static_score(p, second, horizon)


@given(priorities, priorities, times, real_horizons)
def test_higher_priority_first_at_equal_ready_time(
    lo: Priority, hi: Priority, t: int, horizon: int
) -> None:
    assume(lo < hi)
    assert static_score(hi, t, horizon) < static_score(lo, t, horizon)


@given(priorities, priorities, times, horizons)
def test_equal_ready_time_never_inverts_priority(
    lo: Priority, hi: Priority, t: int, horizon: int
) -> None:
    """Even with a tiny horizon (offsets may tie), a lower priority is never strictly first."""
    assume(lo <= hi)
    assert static_score(hi, t, horizon) <= static_score(lo, t, horizon)


@given(priorities, priorities, times, st.integers(min_value=0, max_value=10**10), horizons)
def test_starvation_bound_is_exact(
    p_a: Priority, p_b: Priority, t1: int, gap: int, horizon: int
) -> None:
    """Task b (ready at t2 >= t1) overtakes task a (ready at t1) exactly when
    ``t2 - t1 < p_b*H//5 - p_a*H//5``; hence only if p_b > p_a and ``t2 - t1`` is below
    ``(w_hi - w_lo) * H`` (plus < 1 ms lost to the floor divisions)."""
    t2 = t1 + gap
    overtakes = static_score(p_b, t2, horizon) < static_score(p_a, t1, horizon)
    bound = priority_offset_ms(p_b, horizon) - priority_offset_ms(p_a, horizon)
    assert bound == p_b.value * horizon // 5 - p_a.value * horizon // 5
    assert overtakes == (gap < bound)
    if overtakes:
        assert p_b > p_a
        # (w_hi - w_lo) * H in exact rationals: (p_b - p_a) * H / 5; the floors can add < 1 ms.
        assert 5 * gap < (p_b.value - p_a.value) * horizon + 5


@given(priorities, times, times, horizons)
def test_nothing_starves(p_a: Priority, t1: int, t2: int, horizon: int) -> None:
    """Once later work is more than the largest offset difference behind a, a goes first."""
    widest = priority_offset_ms(Priority.VERY_HIGH, horizon) - priority_offset_ms(
        Priority.VERY_LOW, horizon
    )
    assume(t2 - t1 >= widest)
    for p_b in SCORED:
        assert static_score(p_a, t1, horizon) <= static_score(p_b, t2, horizon)


@given(st.floats(min_value=0.001, max_value=86_400.0, allow_nan=False), priorities)
def test_offset_matches_the_weight_in_seconds(horizon_s: float, p: Priority) -> None:
    horizon = to_ms(horizon_s)
    offset = priority_offset_ms(p, horizon)
    assert offset == p.value * horizon // 5
    assert offset <= p.weight * horizon + 1e-6 * horizon  # floor never rounds up
    assert offset > p.weight * horizon - 1 - 1e-6 * horizon


def test_critical_is_not_scored() -> None:
    import pytest

    with pytest.raises(ValueError, match="Critical"):
        static_score(Priority.CRITICAL, 0, 300_000)


@given(
    st.integers(min_value=0, max_value=10**SEQ_WIDTH - 1),
    st.integers(min_value=0, max_value=10**SEQ_WIDTH - 1),
    st.from_regex(r"[A-Za-z0-9_.:@/+=#-]{1,40}", fullmatch=True),
    st.from_regex(r"[A-Za-z0-9_.:@/+=#-]{1,40}", fullmatch=True),
)
def test_seq_member_orders_by_sequence_not_id(s1: int, s2: int, id1: str, id2: str) -> None:
    """Equal scores break ties by push sequence: byte order of members == sequence order."""
    assume(s1 != s2)
    assert (seq_member(s1, id1) < seq_member(s2, id2)) == (s1 < s2)
    assert seq_member(s1, id1).endswith(id1)
    assert len(seq_member(s1, id1)) == SEQ_WIDTH + len(id1)


@given(
    st.floats(min_value=0.001, max_value=1_000_000.0, allow_nan=False),
    st.floats(min_value=0.001, max_value=1_000_000.0, allow_nan=False),
)
def test_stride_is_inverse_to_weight(w1: float, w2: float) -> None:
    s1, s2 = stride_for(w1), stride_for(w2)
    assert s1 >= 1
    assert s2 >= 1
    if w1 <= w2:
        assert s1 >= s2
    assert abs(s1 - 1_000_000 / w1) <= 0.5 or s1 == 1
