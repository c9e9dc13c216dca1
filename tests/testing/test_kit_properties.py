"""The kit's own promise, as a property: on any load the queue serves correctly (the reference
model), with rate limits and caps on some tenants, every task is claimed and no newcomer waits
more dispatches than there are tenants (ADR 4's bound, as docs/testing-fairness.md applies it)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fairque_testing import fairness_report, make_queue, simulate
from fairque_testing import strategies as fst

LIMITS = st.one_of(
    st.none(),
    st.builds(dict, rate=st.sampled_from([20.0, 50.0, 200.0]), burst=st.integers(1, 3)),
    st.builds(dict, max_running=st.integers(1, 2)),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    tenants=fst.tenants(min_size=2, max_size=6, weight=fst.weights(min_value=0.5, max_value=10)),
    workers=st.integers(1, 3),
    batch=st.integers(1, 4),
    data=st.data(),
)
def test_no_work_is_stranded_and_newcomers_are_served_within_a_round(
    tenants: list[fst.TenantSpec], workers: int, batch: int, data: st.DataObject
) -> None:
    weights = fst.weights_of(tenants)
    load = data.draw(fst.loads(list(weights)), label="load")
    with make_queue() as queue:
        for tenant, weight in weights.items():
            queue.set_tenant_weight(tenant, weight)
            limits = data.draw(LIMITS, label=f"limits of {tenant}")
            if limits:
                queue.set_tenant_limits(tenant, **limits)
        sim = simulate(queue, load, workers=workers, batch=batch)
    assert sim.undispatched == {}
    report = fairness_report(sim, weights)
    assert report.max_newcomer_wait <= len(weights), str(report)
    assert sum(f.owed for f in report.tenants.values()) == pytest.approx(report.dispatches)
