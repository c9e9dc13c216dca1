"""The hypothesis strategies draw what the queue accepts, and simulate copes with all of it."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairque_core.domain.scoring import MAX_WEIGHT, MIN_WEIGHT
from fairque_core.domain.validation import validate_id
from fairque_testing import Load, fairness_report, make_queue, simulate
from fairque_testing import strategies as fst


@given(fst.tenants(min_size=1, max_size=10, tiers=3))
def test_tenants_are_valid_and_distinct(tenants: list[fst.TenantSpec]) -> None:
    names = [t.name for t in tenants]
    assert len(set(names)) == len(names)
    for spec in tenants:
        assert validate_id(spec.name) == spec.name
        assert MIN_WEIGHT <= spec.weight <= MAX_WEIGHT
        assert 0 <= spec.tier <= 2
    assert fst.weights_of(tenants) == {t.name: t.weight for t in tenants}


@given(fst.weights(min_value=1, max_value=20, integral=True))
def test_integral_weights(weight: float) -> None:
    assert weight == int(weight)
    assert 1 <= weight <= 20


@given(st.data())
def test_loads_only_name_the_given_tenants(data: st.DataObject) -> None:
    names = data.draw(st.lists(fst.tenant_ids(), min_size=1, max_size=5, unique=True))
    load = data.draw(st.one_of(fst.loads(names), fst.task_mixes(names)))
    assert set(load.tenants) <= set(names)
    for arrival in load:
        assert arrival.count >= 1
        assert arrival.round >= 0
        assert arrival.delay >= 0
        assert not arrival.priority.is_critical


@settings(max_examples=30, deadline=None)
@given(
    tenants=fst.tenants(min_size=1, max_size=5),
    data=st.data(),
    workers=st.integers(1, 3),
    batch=st.integers(1, 4),
)
def test_simulate_dispatches_every_task_of_any_load(
    tenants: list[fst.TenantSpec], data: st.DataObject, workers: int, batch: int
) -> None:
    weights = fst.weights_of(tenants)
    names = list(weights)
    load = data.draw(st.one_of(fst.loads(names), fst.task_mixes(names, max_delay=2.0)))
    with make_queue() as queue:
        for name, weight in weights.items():
            queue.set_tenant_weight(name, weight)
        sim = simulate(queue, load, workers=workers, batch=batch)
    assert sim.pushed == load.total
    assert len(sim.dispatches) == load.total
    assert sim.undispatched == {}
    report = fairness_report(sim, weights)
    # the report's books balance: every dispatch owed to someone, nothing left behind
    assert math.fsum(f.owed for f in report.tenants.values()) == pytest.approx(load.total)
    assert report.stranded == {}
    assert report.waiting == []
    assert 0 < report.jain <= 1 + 1e-9


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="tiers"):
        fst.tenants(tiers=0)
    with pytest.raises(ValueError, match="at least one tenant"):
        fst.loads([])
    with pytest.raises(ValueError, match="at least one tenant"):
        fst.task_mixes([])


def test_load_constructors() -> None:
    load = Load.burst("a", 3, every=5, times=3, start=1) + Load.steady("b", rounds=2, per_round=2)
    assert [(a.tenant, a.round, a.count) for a in load] == [
        ("a", 1, 3),
        ("a", 6, 3),
        ("a", 11, 3),
        ("b", 0, 2),
        ("b", 1, 2),
    ]
    assert load.total == 13
    assert load.tenants == ["a", "b"]
    assert load.last_round == 11
    assert len(load) == 5
    back = Load.idle_and_return("c", 1, 2, gap=10, start=4)
    assert [(a.round, a.count) for a in back] == [(4, 1), (14, 2)]
    with pytest.raises(ValueError, match="gap"):
        Load.idle_and_return("c", 1, 1, gap=0)
    with pytest.raises(ValueError, match="every"):
        Load.burst("c", 1, every=0, times=1)
    with pytest.raises(ValueError, match="rounds"):
        Load.steady("c", rounds=0)
    with pytest.raises(ValueError, match="count"):
        Load.flood("c", 0)
    with pytest.raises(ValueError, match="priority"):
        Load.flood("c", 1, priority=9)
    with pytest.raises(ValueError, match="tenant"):
        Load.flood("a b", 1)


def test_the_strategies_are_an_attribute_of_the_package_without_an_import_of_their_own() -> None:
    """``fairque_testing.strategies`` (API.md names it beside the fixtures) after a plain
    ``import fairque_testing``, in a fresh interpreter where nothing imported it before."""
    import subprocess
    import sys

    code = (
        "import fairque_testing, sys\n"
        "assert 'fairque_testing.strategies' not in sys.modules\n"
        "print(fairque_testing.strategies.tenants(min_size=1, max_size=2).example()[0].name)\n"
    )
    command = [sys.executable, "-c", code]
    out = subprocess.run(command, check=False, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    validate_id(out.stdout.strip(), "tenant")
