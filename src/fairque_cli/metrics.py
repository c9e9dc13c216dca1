"""The demo's arithmetic, as pure functions: percentiles, Jain's index, shares and the verdict.

Nothing here touches a queue, a clock or a thread, so every figure the demo prints can be
checked in a unit test from hand-made numbers.

Terms:

* A tenant is *backlogged* during a phase when it had work waiting (pushed but not started) in
  at least :data:`BACKLOGGED_FRACTION` of the samples taken during that phase.
* Its *service share* is its completed tasks divided by the completed tasks of all backlogged
  tenants; its *weight share* is its weight divided by the weights of all backlogged tenants.
  Weighted fair queuing promises that the two agree, whatever the size of each backlog.
* *Jain's index* of ``x_1..x_n`` is ``(sum x)^2 / (n * sum x^2)``: 1.0 when all are equal,
  ``1/n`` when one gets everything. Applied to ``done_i / weight_i`` of the backlogged tenants it
  measures how evenly service follows the weights.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import attrs

__all__ = [
    "AHEAD_FACTOR",
    "AHEAD_SLACK",
    "BACKLOGGED_FRACTION",
    "JAIN_BAR",
    "SHARE_TOLERANCE",
    "WAIT_FACTOR",
    "WAIT_SLACK_SECONDS",
    "Check",
    "PhaseResult",
    "TenantResult",
    "TenantSpec",
    "ahead_bar",
    "backlogged",
    "evaluate",
    "fifo_wait_estimate",
    "jain_index",
    "percentile",
    "plan_tenants",
    "shares",
    "wait_bar",
    "weighted_jain",
]

#: A tenant counts as backlogged when it had waiting work in at least this share of samples.
BACKLOGGED_FRACTION = 0.9
#: Jain's index over weight-normalised service of the backlogged tenants must reach this.
JAIN_BAR = 0.99
#: Each backlogged tenant's service share must be within this of its weight share.
SHARE_TOLERANCE = 0.02
#: A light tenant's p99 wait with the flood may be at most ``max(WAIT_FACTOR * baseline p99,
#: baseline p99 + WAIT_SLACK_SECONDS)``.
WAIT_FACTOR = 3.0
WAIT_SLACK_SECONDS = 0.1
#: The same bar in scheduling steps: tasks served ahead of a light task (p99) may be at most
#: ``max(AHEAD_FACTOR * baseline, baseline + AHEAD_SLACK)``. FIFO would make it the flood backlog.
AHEAD_FACTOR = 3.0
AHEAD_SLACK = 20

#: Tiers of the demo and their weights (as in the tier layer of the design documents).
TIERS: Mapping[str, float] = {"free": 1.0, "pro": 2.0, "enterprise": 4.0}
_NAMES = (
    "acme",
    "globex",
    "initech",
    "umbrella",
    "hooli",
    "stark",
    "wayne",
    "tyrell",
    "cyberdyne",
    "soylent",
    "wonka",
    "gringotts",
)
_BUSY_TIERS = ("enterprise", "pro")
_LIGHT_TIERS = ("free", "pro", "enterprise")


@attrs.frozen
class TenantSpec:
    """A tenant of the demo: ``role`` is ``flood``, ``busy`` (standing backlog) or ``light``."""

    name: str
    tier: str
    weight: float
    role: str


@attrs.frozen
class TenantResult:
    """What one tenant got during one phase."""

    name: str
    tier: str
    weight: float
    role: str
    pushed: int
    done: int
    waits: tuple[float, ...]
    backlogged_fraction: float
    ahead: tuple[int, ...] = ()  # per task: tasks of anyone started between its push and start

    @property
    def p50(self) -> float | None:
        return percentile(self.waits, 50.0)

    @property
    def p99(self) -> float | None:
        return percentile(self.waits, 99.0)


@attrs.frozen
class PhaseResult:
    """One phase (baseline or flood): its length and every tenant's result."""

    name: str
    seconds: float
    tenants: tuple[TenantResult, ...]

    @property
    def done(self) -> int:
        return sum(t.done for t in self.tenants)

    @property
    def throughput(self) -> float:
        return self.done / self.seconds if self.seconds > 0 else 0.0

    def by_role(self, role: str) -> list[TenantResult]:
        return [t for t in self.tenants if t.role == role]

    def light_waits(self) -> list[float]:
        return [w for t in self.by_role("light") for w in t.waits]

    def light_ahead(self) -> list[int]:
        return [a for t in self.by_role("light") for a in t.ahead]


@attrs.frozen
class Check:
    """One pass/fail bar of the verdict, with the figures that decided it."""

    name: str
    ok: bool
    detail: str


def plan_tenants(count: int) -> list[TenantSpec]:
    """The demo's tenants: one ``flood`` (free tier), then busy ones, then light ones.

    Of the ``count - 1`` others, ``(count - 1) // 2`` are busy (a standing backlog; tiers
    enterprise, pro, ...) and the rest light (a trickle; tiers free, pro, enterprise, ...). With
    the default of six: flood (1), acme (4) and globex (2) are backlogged, initech (1),
    umbrella (2) and hooli (4) are light.
    """
    if count < 3:
        raise ValueError("the demo needs at least 3 tenants (flood, busy, light)")
    specs = [TenantSpec("flood", "free", TIERS["free"], "flood")]
    busy = (count - 1) // 2
    for index in range(1, count):
        base = _NAMES[(index - 1) % len(_NAMES)]
        name = base if index <= len(_NAMES) else f"{base}{(index - 1) // len(_NAMES) + 1}"
        if index <= busy:
            tier = _BUSY_TIERS[(index - 1) % len(_BUSY_TIERS)]
            specs.append(TenantSpec(name, tier, TIERS[tier], "busy"))
        else:
            tier = _LIGHT_TIERS[(index - 1 - busy) % len(_LIGHT_TIERS)]
            specs.append(TenantSpec(name, tier, TIERS[tier], "light"))
    return specs


def percentile(values: Iterable[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100) by linear interpolation; None for no values."""
    data = sorted(values)
    if not data:
        return None
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile must be in [0, 100], got {q}")
    rank = (len(data) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(data) - 1)
    return data[low] + (data[high] - data[low]) * (rank - low)


def jain_index(values: Sequence[float]) -> float:
    """Jain's fairness index ``(sum x)^2 / (n * sum x^2)``; 1.0 for no values or all zero."""
    if not values:
        return 1.0
    if any(v < 0 for v in values):
        raise ValueError("Jain's index is defined for non-negative values")
    square_sum = sum(v * v for v in values)
    if square_sum == 0:
        return 1.0
    return sum(values) ** 2 / (len(values) * square_sum)


def backlogged(
    tenants: Iterable[TenantResult], threshold: float = BACKLOGGED_FRACTION
) -> list[TenantResult]:
    """The tenants that had waiting work in at least ``threshold`` of the samples."""
    return [t for t in tenants if t.backlogged_fraction >= threshold]


def shares(tenants: Sequence[TenantResult]) -> dict[str, tuple[float, float]]:
    """``name -> (service share, weight share)`` among ``tenants`` (pass the backlogged ones)."""
    total_done = sum(t.done for t in tenants)
    total_weight = sum(t.weight for t in tenants)
    out: dict[str, tuple[float, float]] = {}
    for t in tenants:
        service = t.done / total_done if total_done else 0.0
        weight = t.weight / total_weight if total_weight else 0.0
        out[t.name] = (service, weight)
    return out


def weighted_jain(tenants: Sequence[TenantResult]) -> float:
    """Jain's index over ``done / weight`` of ``tenants``."""
    return jain_index([t.done / t.weight for t in tenants])


def wait_bar(baseline_p99: float) -> float:
    """The highest light-tenant p99 wait under the flood that still passes."""
    return max(WAIT_FACTOR * baseline_p99, baseline_p99 + WAIT_SLACK_SECONDS)


def ahead_bar(baseline_p99: float) -> float:
    """The most tasks that may be served ahead of a light task (p99) under the flood."""
    return max(AHEAD_FACTOR * baseline_p99, baseline_p99 + AHEAD_SLACK)


def fifo_wait_estimate(flood_backlog: int, throughput: float) -> float | None:
    """How long a newcomer would wait behind the flood's backlog in one FIFO queue (seconds)."""
    if throughput <= 0:
        return None
    return flood_backlog / throughput


def _ms(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds * 1000:.1f} ms"


def evaluate(baseline: PhaseResult, flood: PhaseResult) -> list[Check]:
    """The verdict: Jain's index, each backlogged tenant's share, light tenants' p99 wait."""
    checks: list[Check] = []
    heavy = backlogged(flood.tenants)
    flood_ok = any(t.role == "flood" for t in heavy)
    checks.append(
        Check(
            "flood tenant backlogged",
            flood_ok and len(heavy) >= 2,
            f"{len(heavy)} backlogged tenants: {', '.join(t.name for t in heavy) or 'none'}",
        )
    )
    jain = weighted_jain(heavy)
    checks.append(
        Check(
            "Jain's index (weight-normalised service)",
            len(heavy) >= 2 and jain >= JAIN_BAR,
            f"{jain:.4f} (bar >= {JAIN_BAR})",
        )
    )
    for name, (service, weight) in shares(heavy).items():
        diff = service - weight
        checks.append(
            Check(
                f"share of {name}",
                abs(diff) <= SHARE_TOLERANCE,
                f"service {service:.1%} vs weight {weight:.1%} ({diff * 100:+.1f} pp, "
                f"bar +/-{SHARE_TOLERANCE * 100:.0f} pp)",
            )
        )
    base_p99 = percentile(baseline.light_waits(), 99.0)
    flood_p99 = percentile(flood.light_waits(), 99.0)
    if base_p99 is None or flood_p99 is None:
        checks.append(Check("light tenants' p99 wait", False, "no light-tenant samples"))
    else:
        bar = wait_bar(base_p99)
        checks.append(
            Check(
                "light tenants' p99 wait",
                flood_p99 <= bar,
                f"{_ms(flood_p99)} with the flood vs {_ms(base_p99)} without (bar <= {_ms(bar)})",
            )
        )
    base_ahead = percentile(baseline.light_ahead(), 99.0)
    flood_ahead = percentile(flood.light_ahead(), 99.0)
    if base_ahead is not None and flood_ahead is not None:
        limit = ahead_bar(base_ahead)
        checks.append(
            Check(
                "tasks served ahead of light tasks",
                flood_ahead <= limit,
                f"p99 {flood_ahead:.0f} with the flood vs {base_ahead:.0f} without "
                f"(bar <= {limit:.0f})",
            )
        )
    return checks
