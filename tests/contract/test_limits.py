"""Flow control (ADR 28) on every backend: concurrency caps, rate limits, queue caps, the
tier and queue-wide limits, what is reported, and bad input."""

from __future__ import annotations

import math

import pytest

from fairque_core import QueueConfig, TaskState, TaskValidationError, TenantQueueFullError
from fairque_core.domain.limits import Limits

from .helpers import msg


def _ids(claims):
    return [c.message.task_id for c in claims]


def _fill(backend, tenant_id, n, start=0):
    backend.push_batch([msg(f"{tenant_id}{i}", tenant_id) for i in range(start, start + n)])


# ---------------------------------------------------------------- concurrency caps
def test_capped_tenant_leaves_the_active_set_until_a_lease_ends(backend):
    backend.set_limits({"max_running": 2}, tenant="a")
    _fill(backend, "a", 5)
    _fill(backend, "b", 3)
    claims = backend.claim(count=10)
    assert _ids(claims) == ["a0", "b0", "a1", "b1", "b2"]
    assert backend.stats()["active_tenants"] == 0
    status = backend.limit_status("a")
    assert (status.running, status.queued, status.capped, status.cap_hits) == (2, 3, True, 1)
    assert backend.claim(count=5) == []
    by_id = {c.message.task_id: c for c in claims}
    backend.finish("a0", by_id["a0"].lease.token)
    assert _ids(backend.claim(count=5)) == ["a2"]  # one back under the cap: one more start
    backend.fail("a1", by_id["a1"].lease.token, retry_delay=None)
    assert _ids(backend.claim(count=5)) == ["a3"]


def test_release_and_expiry_bring_a_capped_tenant_back(backend, clock):
    backend.set_limits({"max_running": 1}, tenant="a")
    _fill(backend, "a", 3)
    [c] = backend.claim(count=3)
    assert backend.claim() == []
    backend.release(c.message.task_id, c.lease.token)
    [c] = backend.claim(count=3)
    assert c.message.task_id == "a0"  # released: back at the head
    clock.advance(31)  # past the default 30 s lease
    assert backend.requeue_expired() == 1
    assert _ids(backend.claim(count=3)) == ["a0"]


def test_a_push_does_not_let_a_capped_tenant_in(backend):
    backend.set_limits({"max_running": 1}, tenant="a")
    _fill(backend, "a", 1)
    [c] = backend.claim()
    _fill(backend, "a", 2, start=1)
    assert backend.claim(count=2) == []
    backend.finish(c.message.task_id, c.lease.token)
    assert _ids(backend.claim(count=2)) == ["a1"]


def test_lowering_and_clearing_a_cap_apply_at_once(backend):
    _fill(backend, "a", 4)
    claims = backend.claim(count=2)
    backend.set_limits({"max_running": 2}, tenant="a")
    assert backend.limit_status("a").capped
    assert backend.claim() == []
    backend.set_limits({"max_running": None}, tenant="a")
    assert not backend.limit_status("a").capped
    assert _ids(backend.claim(count=5)) == ["a2", "a3"]
    assert len(claims) == 2


def test_tier_default_and_own_override(backend):
    backend.set_tenant_weight("gold", 1, tier=2)
    backend.set_tenant_weight("free", 1, tier=1)
    backend.set_limits({"max_running": 1}, tier=1)
    backend.set_limits({"max_running": 3}, tier=2)
    backend.set_limits({"max_running": 2}, tenant="gold")
    for tenant_id in ("gold", "free"):
        _fill(backend, tenant_id, 4)
    claimed = _ids(backend.claim(count=10))
    assert sum(1 for t in claimed if t.startswith("gold")) == 2
    assert sum(1 for t in claimed if t.startswith("free")) == 1
    assert backend.limit_status("free").effective == Limits(max_running=1)
    assert backend.limit_status("gold").own == Limits(max_running=2)


def test_queue_wide_max_running(backend):
    backend.set_limits({"max_running": 3})
    for tenant_id in "abc":
        _fill(backend, tenant_id, 2)
    claims = backend.claim(count=10)
    assert len(claims) == 3
    assert backend.claim() == []
    backend.finish(claims[0].message.task_id, claims[0].lease.token)
    assert len(backend.claim(count=10)) == 1


# ---------------------------------------------------------------- rate limits
def test_rate_with_burst_parks_the_tenant_until_its_next_start(backend, clock):
    backend.set_limits({"rate": 10, "burst": 3}, tenant="a")
    _fill(backend, "a", 10)
    _fill(backend, "b", 2)
    assert _ids(backend.claim(count=10)) == ["a0", "b0", "a1", "b1", "a2"]
    status = backend.limit_status("a")
    assert status.tokens == 0
    assert status.next_start_at == pytest.approx(clock() + 0.1, abs=0.002)
    assert status.throttles == 1
    assert backend.claim() == []
    clock.advance(0.1)
    assert _ids(backend.claim(count=10)) == ["a3"]  # one interval: one start
    clock.advance(0.25)
    assert _ids(backend.claim(count=10)) == ["a4", "a5"]  # 2.5 intervals: two
    clock.advance(10)
    assert _ids(backend.claim(count=10)) == ["a6", "a7", "a8"]  # a full burst, no more


def test_throttled_tenant_wakes_idle_workers_at_its_time(backend, clock):
    backend.set_limits({"rate": 2}, tenant="a")
    _fill(backend, "a", 2)
    assert len(backend.claim(count=2)) == 1
    clock.advance(0.5)
    assert backend.wait_for_work(0.01)  # the parked tenant is due: a worker looks again
    assert _ids(backend.claim(count=2)) == ["a1"]


def test_a_throttled_tenant_without_work_is_parked_by_its_next_push(backend, clock):
    backend.set_limits({"rate": 1}, tenant="a")
    _fill(backend, "a", 1)
    assert len(backend.claim()) == 1
    _fill(backend, "a", 1, start=1)
    assert backend.claim() == []
    clock.advance(1)
    assert _ids(backend.claim()) == ["a1"]


def test_clearing_a_rate_unparks_at_once(backend):
    backend.set_limits({"rate": 1}, tenant="a")
    _fill(backend, "a", 3)
    assert len(backend.claim(count=3)) == 1
    backend.set_limits(dict.fromkeys(("rate", "burst", "max_running", "max_queued")), tenant="a")
    assert _ids(backend.claim(count=3)) == ["a1", "a2"]


def test_queue_wide_rate(backend, clock):
    backend.set_limits({"rate": 5, "burst": 2})
    for tenant_id in "abc":
        _fill(backend, tenant_id, 3)
    assert len(backend.claim(count=10)) == 2
    assert backend.claim() == []
    clock.advance(0.2)
    assert len(backend.claim(count=10)) == 1


# ---------------------------------------------------------------- queue caps
def test_max_queued_refuses_the_push_over_the_cap_and_stores_nothing(backend):
    backend.set_limits({"max_queued": 3}, tenant="a")
    _fill(backend, "a", 3)
    with pytest.raises(TenantQueueFullError) as err:
        backend.push(msg("a3", "a"))
    assert (err.value.tenant, err.value.cap) == ("a", 3)
    assert backend.get_state("a3") is None
    assert backend.stats()["pushed"] == 3
    assert backend.tenant_stats("a")["refusals"] == 1
    assert backend.push(msg("a0", "a")) is False  # a duplicate adds nothing: not refused
    [c] = backend.claim()
    backend.finish(c.message.task_id, c.lease.token)
    assert backend.push(msg("a3", "a")) is True


def test_a_batch_over_the_cap_is_refused_whole(backend):
    backend.set_limits({"max_queued": 2}, tenant="a")
    with pytest.raises(TenantQueueFullError):
        backend.push_batch([msg("b0", "b"), msg("a0", "a"), msg("a1", "a"), msg("a2", "a")])
    assert backend.get_state("b0") is None
    assert backend.get_state("a0") is None
    assert backend.push_batch([msg("a0", "a"), msg("a1", "a"), msg("b0", "b")]) == [True] * 3


def test_scheduled_work_counts_as_queued(backend):
    backend.set_limits({"max_queued": 1}, tenant="a")
    backend.push(msg("later", "a", delay=60))
    with pytest.raises(TenantQueueFullError):
        backend.push(msg("now", "a"))
    assert backend.get_state("later") is TaskState.SCHEDULED


# ---------------------------------------------------------------- reports and input
def test_limit_counters_in_stats(backend):
    stats = backend.stats()
    assert {stats[k] for k in ("cap_hits", "throttles", "refusals")} == {0}
    status = backend.limit_status("nobody")
    assert status.own == status.effective == Limits()
    assert (status.running, status.queued, status.capped, status.tokens) == (0, 0, False, None)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_running", 0),
        ("max_running", -1),
        ("max_running", 1.5),
        ("max_running", True),
        ("max_running", 10**9),
        ("rate", 0),
        ("rate", -2.0),
        ("rate", math.nan),
        ("rate", math.inf),
        ("rate", 1e12),
        ("rate", 10**400),  # an int beyond the float range: typed, no OverflowError
        ("rate", 1e-12),  # below MIN_RATE: too slow for the backends' arithmetic
        ("burst", 0),
        ("max_queued", -5),
        ("max_queued", "10"),
        ("speed", 3),
    ],
)
def test_bad_limits_are_refused_naming_the_field(backend, field, value):
    with pytest.raises(TaskValidationError) as err:
        backend.set_limits({field: value}, tenant="a")
    assert err.value.field == field
    assert backend.limit_status("a").own == Limits()


def test_unknown_tenant_allowed_invalid_id_refused(backend):
    backend.set_limits({"max_queued": 1}, tenant="not-yet-seen")
    assert backend.limit_status("not-yet-seen").own == Limits(max_queued=1)
    with pytest.raises(TaskValidationError) as err:
        backend.set_limits({"max_queued": 1}, tenant="bad id{x}")
    assert err.value.field == "tenant"


def test_every_field_round_trips(make_backend):
    backend = make_backend(QueueConfig(lease_seconds=5))
    backend.set_limits({"max_running": 1, "rate": 100.0, "burst": 5, "max_queued": 10}, tenant="t")
    assert backend.limit_status("t").own == Limits(1, 100.0, 5, 10)


@pytest.mark.parametrize("weight", [10**400, 0, -1.0, math.nan, math.inf])
def test_bad_weights_are_refused_typed(backend, weight):
    backend.set_tenant_weight("a", 2.0)
    with pytest.raises(TaskValidationError) as err:
        backend.set_tenant_weight("a", weight)
    assert err.value.field == "weight"
