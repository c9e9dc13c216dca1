"""The window's rule for limited tenants (ADR 67), on readings built by hand: who is held
between two readings, and who is compared (with strict tiers too)."""

from __future__ import annotations

import pytest

from fairque_core.domain.scoring import STRIDE_SCALE
from fairque_core.domain.tenant_figures import (
    TenantFairness,
    fairness_window,
    held_between,
    tenant_fairness,
)


def reading(
    tenant: str, dispatched: int, *, ready: int = 10, tier: int = 0, **holds: object
) -> TenantFairness:
    return tenant_fairness(
        tenant,
        stride=STRIDE_SCALE,
        tier=tier,
        ready=ready,
        running=0,
        dispatched=dispatched,
        pass_ahead=-3 * STRIDE_SCALE,  # behind the virtual time: what a held tenant reads
        oldest_ready_ms=5,
        **holds,  # type: ignore[arg-type]
    )


def test_the_reason_at_a_reading_follows_the_precedence() -> None:
    assert reading("t", 0).limited_reason == ""
    assert reading("t", 0).lag == -3.0  # not held: its lag as stored
    assert reading("t", 0, throttled=True).limited_reason == "rate"
    assert reading("t", 0, capped=True, throttled=True).limited_reason == "cap"
    both = reading("t", 0, paused=True, capped=True, queue_paused=True)
    assert both.limited_reason == "paused"
    queue = reading("t", 0, queue_paused=True, capped=True)
    assert (queue.limited_reason, queue.held, queue.lag) == ("cap", True, 0.0)
    only_queue = reading("t", 0, queue_paused=True)
    assert (only_queue.limited_reason, only_queue.held) == ("queue_paused", False)
    assert only_queue.lag == -3.0  # every tenant held alike: its place is kept
    idle = reading("t", 0, ready=0, capped=True)
    assert not idle.limited  # nothing of it waits


@pytest.mark.parametrize(
    ("before", "after", "why"),
    [
        ({}, {}, ""),
        ({"capped": True}, {}, "cap"),
        ({}, {"throttled": True}, "rate"),
        ({}, {"cap_hits": 3}, "cap"),
        ({}, {"throttles": 1}, "rate"),
        ({}, {"pauses": 1}, "paused"),
        ({"queue_paused": True}, {"queue_paused": True}, ""),  # alike for all: not held
    ],
)
def test_held_between(before: dict[str, object], after: dict[str, object], why: str) -> None:
    assert held_between(reading("t", 0, **before), reading("t", 5, **after)) == why


def test_a_held_top_tier_tenant_lets_the_lower_tier_be_compared() -> None:
    before = [reading("gold", 0, tier=2), reading("free1", 0), reading("free2", 0)]
    after = [
        reading("gold", 1, tier=2, capped=True, cap_hits=1),
        reading("free1", 20),
        reading("free2", 20),
    ]
    window = fairness_window(before, after, 1.0, strict_tiers=True)
    assert window.tenants["gold"].limited_reason == "cap"
    assert (window.backlogged, window.limited) == (2, 1)
    assert window.jain == pytest.approx(1.0)
    unheld = [reading("gold", 1, tier=2), reading("free1", 20), reading("free2", 20)]
    window = fairness_window(before, unheld, 1.0, strict_tiers=True)
    assert window.backlogged == 1  # gold alone: the lower tier waits by design
    assert not window.tenants["free1"].backlogged
