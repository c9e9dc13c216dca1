"""tenant_fairness knows why a tenant waits (issue 30, ADR 67), the same on every backend.

A tenant with ready work that its own cap, its rate or a pause holds out of its active set
reads ``limited`` with the reason (``cap``, ``rate``, ``paused``; ``queue_paused`` when only
the queue's pause holds it); while its own limits hold it, its lag is 0 and it raises no
alarm. ``cap_hits``, ``throttles`` and ``pauses`` count the holds that began, so a window
leaves out a tenant held at any moment between two readings: Jain's index, shares and the
``unserved`` alarm are over the tenants that could have been served.
"""

from __future__ import annotations

import pytest

from fairque_core.domain.tenant_figures import TenantFairness, fairness_window

from .conftest import PARTITIONED_KINDS
from .helpers import msg


def _fill(backend, tenant_id, n, start=0):
    backend.push_batch([msg(f"{tenant_id}{i}", tenant_id) for i in range(start, start + n)])


def _read(backend, *tenants: str) -> dict[str, TenantFairness]:
    return {f.tenant: f for f in backend.tenant_fairness(list(tenants))}


def test_a_capped_tenant_reads_limited_by_its_cap_until_a_lease_ends(backend):
    backend.set_limits({"max_running": 1}, tenant="a")
    _fill(backend, "a", 3)
    _fill(backend, "b", 3)
    got = _read(backend, "a", "b")
    assert not got["a"].limited
    assert got["a"].limited_reason == ""
    claims = {c.message.tenant: c for c in backend.claim(count=2)}
    got = _read(backend, "a", "b")
    assert (got["a"].limited, got["a"].limited_reason, got["a"].cap_hits) == (True, "cap", 1)
    assert got["a"].held
    assert got["a"].lag == 0.0
    assert not got["a"].starving
    assert not got["b"].limited
    assert got["b"].cap_hits == 0
    lease = claims["a"]
    backend.finish(lease.message.task_id, lease.lease.token)
    got = _read(backend, "a")
    assert not got["a"].limited  # back under its cap, in its active set again
    assert got["a"].cap_hits == 1  # a counter: never lowered


def test_a_capped_tenant_without_ready_work_is_not_limited(backend):
    backend.set_limits({"max_running": 1}, tenant="a")
    _fill(backend, "a", 1)
    backend.claim()
    [a] = backend.tenant_fairness(["a"])
    assert (a.ready, a.limited, a.cap_hits) == (0, False, 1)  # at its cap, nothing waits


def test_a_throttled_tenant_reads_limited_by_its_rate_until_its_next_start(backend, clock):
    backend.set_limits({"rate": 1.0}, tenant="a")  # one start a second, burst 1
    _fill(backend, "a", 3)
    [c] = backend.claim()
    assert c.message.tenant == "a"
    [a] = backend.tenant_fairness(["a"])
    assert (a.limited_reason, a.throttles, a.lag, a.starving) == ("rate", 1, 0.0, False)
    clock.advance(1.01)
    [a] = backend.tenant_fairness(["a"])
    assert not a.limited  # its next start is allowed, parked or not
    assert a.throttles == 1


def test_paused_tenants_and_a_paused_queue(backend):
    _fill(backend, "a", 2)
    _fill(backend, "b", 2)
    backend.pause("a")
    backend.pause("a")  # already paused: one pause
    got = _read(backend, "a", "b")
    assert (got["a"].limited_reason, got["a"].pauses, got["a"].held) == ("paused", 1, True)
    assert not got["b"].limited
    assert got["b"].pauses == 0
    backend.pause()
    got = _read(backend, "a", "b")
    assert got["a"].limited_reason == "paused"  # its own pause first
    assert (got["b"].limited_reason, got["b"].held) == ("queue_paused", False)
    backend.resume()
    backend.resume("a")
    got = _read(backend, "a", "b")
    assert not got["a"].limited
    assert not got["b"].limited
    assert got["a"].pauses == 1


def _claim_and_finish(backend, n):
    for _ in range(n):
        [c] = backend.claim()
        backend.finish(c.message.task_id, c.lease.token)


def test_a_window_compares_only_the_servable_tenants(backend, backend_kind):
    backend.set_limits({"max_running": 1}, tenant="capped")
    for tenant in ("capped", "b", "c"):
        _fill(backend, tenant, 30)
    [held] = backend.claim(assigned=["capped"])  # it holds its one slot throughout
    before = backend.tenant_fairness(["capped", "b", "c"])
    _claim_and_finish(backend, 20)
    window = fairness_window(before, backend.tenant_fairness(["capped", "b", "c"]), 1.0)
    capped = window.tenants["capped"]
    assert (capped.limited, capped.limited_reason, capped.backlogged) == (True, "cap", False)
    assert capped.share is None
    assert capped.fair_share is None
    assert not capped.starving
    assert (window.backlogged, window.limited) == (2, 1)
    assert window.tenants["b"].fair_share == pytest.approx(0.5)
    assert held.message.tenant == "capped"
    if backend_kind in PARTITIONED_KINDS:  # turns across partitions are approximate (ADR 34)
        assert window.jain is not None
        assert window.jain >= 0.95
    else:
        assert window.tenants["b"].dispatched == window.tenants["c"].dispatched == 10
        assert window.jain == pytest.approx(1.0)  # counted as owed a third, it read 0.67


def test_a_hold_that_began_and_ended_between_readings_still_counts(backend):
    backend.set_limits({"max_running": 1}, tenant="a")
    _fill(backend, "a", 5)
    _fill(backend, "b", 5)
    _fill(backend, "c", 5)
    before = backend.tenant_fairness(["a", "b", "c"])
    assert not any(f.limited for f in before)
    backend.pause("c")
    [first] = backend.claim(assigned=["a"])  # capped by it
    [second] = backend.claim(assigned=["b"])
    backend.finish(first.message.task_id, first.lease.token)
    backend.finish(second.message.task_id, second.lease.token)
    backend.resume("c")
    after = backend.tenant_fairness(["a", "b", "c"])
    assert not any(f.limited for f in after)  # neither reading saw a hold
    window = fairness_window(before, after, 1.0)
    assert window.tenants["a"].limited_reason == "cap"  # its cap_hits rose
    assert window.tenants["c"].limited_reason == "paused"  # its pauses rose
    assert not window.tenants["c"].starving  # held: not "unserved"
    assert window.tenants["b"].backlogged
    assert not window.tenants["b"].limited
    assert (window.backlogged, window.limited) == (1, 2)


def test_an_unlimited_unfair_window_still_reads_unfair(backend):
    # pinned claims serve one tenant only: nobody is limited, so the window must say so
    for tenant in ("a", "b", "c", "d"):
        _fill(backend, tenant, 20)
    before = backend.tenant_fairness(["a", "b", "c", "d"])
    for _ in range(12):
        [c] = backend.claim(assigned=["a"])
        backend.finish(c.message.task_id, c.lease.token)
    window = fairness_window(before, backend.tenant_fairness(["a", "b", "c", "d"]), 1.0)
    assert window.limited == 0
    assert window.backlogged == 4
    assert window.jain == pytest.approx(0.25)  # one tenant got everything: 1/n
    assert {t for t, w in window.tenants.items() if w.starving} == {"a", "b", "c", "d"}
