"""The demo's arithmetic on hand-made numbers (no queue, no clock, no threads)."""

from __future__ import annotations

import math

import pytest

from fairque_cli import metrics
from fairque_cli.metrics import PhaseResult, TenantResult


def tenant(
    name: str,
    weight: float,
    done: int,
    *,
    role: str = "busy",
    backlogged: float = 1.0,
    waits: tuple[float, ...] = (),
    ahead: tuple[int, ...] = (),
) -> TenantResult:
    return TenantResult(
        name=name,
        tier="t",
        weight=weight,
        role=role,
        pushed=done + 10,
        done=done,
        waits=waits,
        backlogged_fraction=backlogged,
        ahead=ahead,
    )


def test_jain_index_bounds() -> None:
    assert metrics.jain_index([5, 5, 5, 5]) == pytest.approx(1.0)
    assert metrics.jain_index([1, 0, 0, 0]) == pytest.approx(0.25)
    assert metrics.jain_index([]) == 1.0
    assert metrics.jain_index([0, 0]) == 1.0
    # (1+2)^2 / (2 * (1+4)) = 0.9
    assert metrics.jain_index([1, 2]) == pytest.approx(0.9)
    with pytest.raises(ValueError, match="non-negative"):
        metrics.jain_index([-1, 1])


def test_percentile_interpolates() -> None:
    assert metrics.percentile([], 50) is None
    assert metrics.percentile([3.0], 99) == 3.0
    assert metrics.percentile([1, 2, 3, 4], 50) == pytest.approx(2.5)
    assert metrics.percentile(range(101), 99) == pytest.approx(99.0)
    assert metrics.percentile([4, 1, 3, 2], 0) == 1
    assert metrics.percentile([4, 1, 3, 2], 100) == 4
    with pytest.raises(ValueError, match="percentile"):
        metrics.percentile([1], 101)


def test_shares_are_among_the_given_tenants() -> None:
    heavy = [tenant("a", 1, 100), tenant("b", 2, 200), tenant("c", 4, 400)]
    got = metrics.shares(heavy)
    for name, weight in (("a", 1), ("b", 2), ("c", 4)):
        service, share = got[name]
        assert service == pytest.approx(weight / 7)
        assert share == pytest.approx(weight / 7)
    assert metrics.weighted_jain(heavy) == pytest.approx(1.0)


def test_backlogged_uses_the_threshold() -> None:
    ts = [tenant("a", 1, 1, backlogged=0.95), tenant("b", 1, 1, backlogged=0.2)]
    assert [t.name for t in metrics.backlogged(ts)] == ["a"]
    assert [t.name for t in metrics.backlogged(ts, 0.1)] == ["a", "b"]


def test_plan_tenants_default_roles_and_weights() -> None:
    plan = metrics.plan_tenants(6)
    assert [(t.name, t.role, t.weight) for t in plan] == [
        ("flood", "flood", 1.0),
        ("acme", "busy", 4.0),
        ("globex", "busy", 2.0),
        ("initech", "light", 1.0),
        ("umbrella", "light", 2.0),
        ("hooli", "light", 4.0),
    ]
    assert [t.role for t in metrics.plan_tenants(3)] == ["flood", "busy", "light"]
    many = metrics.plan_tenants(30)
    assert len({t.name for t in many}) == 30
    with pytest.raises(ValueError, match="at least 3"):
        metrics.plan_tenants(2)


def test_wait_bar_and_fifo_estimate() -> None:
    assert metrics.wait_bar(0.010) == pytest.approx(0.110)  # slack dominates small waits
    assert metrics.wait_bar(0.200) == pytest.approx(0.600)  # the factor dominates large ones
    assert metrics.ahead_bar(5) == 25
    assert metrics.ahead_bar(40) == 120
    assert metrics.fifo_wait_estimate(1000, 500.0) == pytest.approx(2.0)
    assert metrics.fifo_wait_estimate(1000, 0.0) is None


def _phase(name: str, tenants: list[TenantResult]) -> PhaseResult:
    return PhaseResult(name=name, seconds=2.0, tenants=tuple(tenants))


def test_evaluate_passes_a_fair_run() -> None:
    light_waits = tuple(0.002 + i * 0.0001 for i in range(50))
    baseline = _phase(
        "baseline",
        [
            tenant("acme", 4, 800),
            tenant("light", 1, 50, role="light", backlogged=0.05, waits=light_waits, ahead=(8,)),
        ],
    )
    flood = _phase(
        "flood",
        [
            tenant("flood", 1, 200, role="flood"),
            tenant("acme", 4, 802),
            tenant("globex", 2, 399),
            tenant("light", 1, 50, role="light", backlogged=0.05, waits=light_waits, ahead=(11,)),
        ],
    )
    checks = metrics.evaluate(baseline, flood)
    assert all(c.ok for c in checks), checks
    names = [c.name for c in checks]
    assert "share of flood" in names
    assert "share of light" not in names  # light tenants are not part of the shares
    assert "tasks served ahead of light tasks" in names


def test_evaluate_fails_an_unfair_run() -> None:
    baseline = _phase(
        "baseline",
        [tenant("light", 1, 50, role="light", backlogged=0.0, waits=(0.002,) * 50, ahead=(5,))],
    )
    flood = _phase(
        "flood",
        [
            tenant("flood", 1, 900, role="flood"),  # FIFO-like: the flood got almost everything
            tenant("acme", 4, 100),
            tenant("light", 1, 50, role="light", backlogged=0.0, waits=(2.0,) * 50, ahead=(900,)),
        ],
    )
    checks = {c.name: c for c in metrics.evaluate(baseline, flood)}
    assert not checks["Jain's index (weight-normalised service)"].ok
    assert not checks["share of flood"].ok
    assert not checks["light tenants' p99 wait"].ok
    assert not checks["tasks served ahead of light tasks"].ok
    assert math.isclose(
        metrics.weighted_jain(metrics.backlogged(flood.tenants)), 0.528, abs_tol=0.001
    )
