"""Partitioned fairness within ADR 34's bound: the two-level pick under churn, on the model
(``_partition_model``) and the real
:class:`~fairque_redis.partitioned.picker.PartitionPicker` side by side.

Every claim the model makes, the real picker is asked for its order too and must give the same;
every tenant's deficit (fluid share minus tasks served) over each span of fixed active sets
must stay within :func:`_partition_model.bound`.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

from fairque_redis.partitioned.picker import PartitionLoad, PartitionPicker, TierLoad

from ._partition_model import ModelPicker, TwoLevel

EPS = 1e-9


class Twin:
    """The model's level-1 picker and the real one, fed the same summaries: every order the
    model uses is checked against the real picker's."""

    def __init__(self, partitions: int, seed: int) -> None:
        self.real = PartitionPicker(
            partitions, refresh_claims=10**9, refresh_seconds=10**9, rng=random.Random(seed)
        )
        self.model = ModelPicker(partitions, rotation=self.real.rotation)
        self.picks = 0

    def refresh(self, weights: Sequence[float]) -> None:
        self.model.refresh(weights)
        self.real.update(
            [
                PartitionLoad(0, 0, False, -1, -1, (TierLoad(0, 1, w),) if w > 0.0 else ())
                for w in weights
            ]
        )

    def order(self) -> list[int]:
        order = self.model.order()
        assert self.real.order() == order
        self.picks += 1
        return order

    def served(self, p: int, asked: int, got: int) -> None:
        self.model.served(p, asked, got)
        self.real.served(p, asked, got)


def _weight(rng: random.Random, low: float = 0.01, high: float = 100.0) -> float:
    """Log-uniform in [low, high], rounded to 2 significant digits (as people set weights)."""
    w = math.exp(rng.uniform(math.log(low), math.log(high)))
    return float(f"{w:.2g}")


def churn(
    partitions: int,
    *,
    workers: int,
    batch: int,
    seed: int,
    epochs: int,
    claims: int,
    pool: int | None = None,
    strict: bool = True,
) -> tuple[int, list[float], TwoLevel]:
    """Random churn: each epoch tenants join, leave and change weight (weights 0.01-100), then
    ``claims`` claim calls rotate over the workers. Returns the tenant-epochs checked, each
    one's worst deficit as a ratio of its bound, and the model (``max_worst`` and
    ``max_bound``: the largest deficit and bound seen, in tasks). ``strict``: assert each
    tenant-epoch within its bound (else only count)."""
    rng = random.Random(seed)
    twins = [Twin(partitions, seed * 31 + w) for w in range(workers)]
    model = TwoLevel(partitions, twins)
    names = [f"t{i}" for i in range(pool or 3 * partitions)]
    homes = {name: rng.randrange(partitions) for name in names}
    checked, ratios = 0, []
    for _ in range(epochs):
        active = set(model.active())
        for name in names:
            roll = rng.random()
            if name not in active and roll < 0.3:
                model.add(name, homes[name], _weight(rng), None)
            elif name in active and roll < 0.2:
                model.remove(name)
            elif name in active and roll < 0.35:
                model.set_weight(name, _weight(rng))
        if not model.active():
            name = rng.choice(names)
            model.add(name, homes[name], _weight(rng), None)
        model.start_span()
        bounds = {t: model.bound_of(t, batch) for t in model.active()}
        for i in range(claims):
            model.claim(i % workers, batch)
        for tenant, limit in bounds.items():
            checked += 1
            ratios.append(model.worst[tenant] / limit if limit > 0.0 else 0.0)
            model.max_worst = max(model.max_worst, model.worst[tenant])
            model.max_bound = max(model.max_bound, limit)
            if strict:
                assert model.worst[tenant] <= limit + EPS, (tenant, model.worst[tenant], limit)
    assert all(t.picks > 0 for t in twins)
    return checked, ratios, model


@settings(max_examples=30, deadline=None)
@given(
    partitions=st.integers(2, 16),
    workers=st.integers(1, 3),
    batch=st.integers(1, 4),
    seed=st.integers(0, 2**32 - 1),
)
def test_every_deficit_stays_within_the_bound_under_churn(
    partitions: int, workers: int, batch: int, seed: int
) -> None:
    checked, ratios, _ = churn(
        partitions, workers=workers, batch=batch, seed=seed, epochs=8, claims=60
    )
    note(f"{checked} tenant-epochs, worst {max(ratios):.3f} of the bound")


def test_churn_at_four_partitions_has_no_tenant_epoch_over_the_bound() -> None:
    """The issue's churn (P=4, weights 0.01-100), one worker taking one task per claim: every
    tenant-epoch within the bound (it was 81 of 5,760 over, worst 13.7x, before the rescale)."""
    checked = over = 0
    worst = 0.0
    for seed in range(8):
        n, ratios, _ = churn(4, workers=1, batch=1, seed=seed, epochs=100, claims=40, pool=12)
        checked += n
        over += sum(1 for r in ratios if r > 1.0 + EPS)
        worst = max(worst, *ratios)
    print(f"P=4 churn: {checked} tenant-epochs, {over} over the bound, worst {worst:.3f}x")
    assert checked >= 4000
    assert over == 0


def newcomer(seed: int, partitions: int = 4, watch: int = 600) -> tuple[float, float, int, int]:
    """A weight-100 tenant becomes active in a partition whose only tenant has weight 0.01
    (and was served a little while before), the other partitions holding 1-4 tenants of
    weights 0.5-2. Returns its bound, worst deficit, wait for its first task, and its tasks of
    the next ``watch``."""
    rng = random.Random(seed)
    twin = Twin(partitions, seed)
    model = TwoLevel(partitions, [twin])
    idle = rng.randrange(partitions)
    model.add("tiny", idle, 0.01, None)
    for p in range(partitions):
        if p != idle:
            for j in range(rng.randint(1, 4)):
                model.add(f"p{p}t{j}", p, _weight(rng, 0.5, 2.0), None)
    for _ in range(rng.randint(50, 400)):
        model.claim(0, 1)
    model.add("big", idle, 100.0, None)
    model.start_span()
    limit = model.bound_of("big", 1)
    wait = None
    for i in range(watch):
        if "big" in model.claim(0, 1) and wait is None:
            wait = i
    return limit, model.worst["big"], watch if wait is None else wait, model.got["big"]


def test_a_weight_100_newcomer_in_an_idle_partition_is_served_within_the_bound() -> None:
    rows = [newcomer(seed) for seed in range(10)]
    for seed, (limit, worst, wait, got) in enumerate(rows):
        print(
            f"seed {seed}: bound {limit:.2f}, worst deficit {worst:.2f}, "
            f"first task after {wait} dispatches, {got} of the next 600"
        )
        assert worst <= limit + EPS
    print(f"worst over seeds: {max(r[1] for r in rows):.2f} (bound {max(r[0] for r in rows):.2f})")


@pytest.mark.slow
@pytest.mark.parametrize("partitions", [2, 4, 8, 16])
def test_long_churn(partitions: int) -> None:
    for seed in range(20):
        for workers, batch in ((1, 1), (2, 4), (3, 2)):
            churn(partitions, workers=workers, batch=batch, seed=seed, epochs=60, claims=120)


def test_dry_partitions_give_the_same_picks_on_model_and_picker() -> None:
    """Finite backlogs: tenants run dry between refreshes (short replies), the real picker and
    the model still agree on every order."""
    rng = random.Random(5)
    for partitions in (2, 5, 16):
        twins = [Twin(partitions, k) for k in range(2)]
        model = TwoLevel(partitions, twins, refresh_claims=8)
        for step in range(400):
            if step % 10 == 0:
                for _ in range(rng.randint(0, 3)):
                    name = f"t{rng.randrange(4 * partitions)}"
                    home = model.home.get(name, rng.randrange(partitions))
                    model.add(name, home, _weight(rng), rng.randint(1, 6))
            model.claim(step % 2, rng.randint(1, 3))
        assert all(t.picks > 0 for t in twins)
