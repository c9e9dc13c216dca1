"""Fairness tests of our own set-up: our tenants' weights and our worker layout.

Copy this file into your tests/, put your weights, tiers and workers in WEIGHTS, TIERS and
WORKERS, and call your task handler from handle().
The fixtures come from fairque's pytest plugin, which pytest loads when your project asks for
it (``addopts = "-p fairque_testing.plugin"`` in its pytest configuration): ``fairque_queue`` is
a fresh queue on an embedded Valkey, or on your own server
with ``pytest --fairque-url redis://host:6379/0`` (queues get fresh names and only their own
keys are deleted afterwards).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from fairque_core import FairQueue, Task, WorkerConfig
from fairque_testing import (
    Load,
    assert_fair,
    assert_outcomes_fair,
    fairness_report,
    make_queue,
    outcome_report,
    simulate,
)
from fairque_testing import strategies as fst

# Our tiers, as in fairque.yaml (queue.tenant_weights / queue.tiers).
WEIGHTS = {"free-1": 1.0, "free-2": 1.0, "pro": 4.0, "enterprise": 10.0}
TIERS = {"free-1": "free", "free-2": "free", "pro": "pro", "enterprise": "enterprise"}

# Our workers: three that serve every tenant, each claiming up to 4 tasks at a time.
WORKERS = [WorkerConfig(id=f"general-{n}") for n in range(1, 4)]
BATCH = 4


def set_weights(queue: FairQueue, weights: dict[str, float]) -> None:
    for tenant, weight in weights.items():
        queue.set_tenant_weight(tenant, weight)


def handle(task: Task) -> None:
    """Our task handler (here a stand-in: put yours, or a fake of its dependencies)."""


def test_every_tier_gets_its_weighted_share(fairque_queue: FairQueue) -> None:
    set_weights(fairque_queue, WEIGHTS)
    fairque_queue.set_tenant_limits("pro", rate=500, burst=2)  # pro's rate limit, as deployed
    # Every tenant floods at once; a small customer shows up while the flood is on, and
    # free-2 comes and goes in short bursts.
    load = sum((Load.flood(tenant, 500) for tenant in WEIGHTS if tenant != "free-2"), Load())
    load += Load.burst("free-2", 3, every=10, times=20)
    load += Load.late("newcomer", 3, at=100)

    sim = simulate(fairque_queue, load, workers=WORKERS, batch=BATCH)
    report = fairness_report(sim, WEIGHTS)

    print(report)  # the per-tenant table, shown when the test fails
    # Shares within 5 % of the weights, and a newcomer served within one round of tenants.
    assert_fair(report, tolerance=0.05, max_newcomer_wait=len(WEIGHTS) + 1)


def test_every_tier_completes_its_work(fairque_queue: FairQueue) -> None:
    set_weights(fairque_queue, WEIGHTS)
    load = sum((Load.flood(tenant, 50) for tenant in WEIGHTS), Load())

    # Our handler runs every claimed task; a failure is retried by the queue's policy.
    sim = simulate(fairque_queue, load, workers=WORKERS, batch=BATCH, handler=handle)
    outcomes = outcome_report(sim, tiers=TIERS)

    print(outcomes)  # completed, dead and retried work per tier and per tenant
    # No tier and no tenant completes a smaller part of its work than the queue as a whole.
    assert_outcomes_fair(outcomes, tolerance=0.05)


@settings(max_examples=20, deadline=None)
@given(
    tenants=fst.tenants(min_size=2, max_size=6, weight=fst.weights(min_value=1, max_value=10)),
    size=st.integers(100, 300),
)
def test_any_weights_under_a_flood(tenants: list[fst.TenantSpec], size: int) -> None:
    weights = fst.weights_of(tenants)
    # One queue per example, on the in-memory reference model (make_queue(url) for a server).
    with make_queue() as queue:
        set_weights(queue, weights)
        load = sum((Load.flood(name, size) for name in weights), Load())
        sim = simulate(queue, load, workers=WORKERS, batch=BATCH)
    assert_fair(fairness_report(sim, weights), tolerance=0.05)
