"""Stats: counters per queue and tenant, gauges equal to the real cardinalities."""

from __future__ import annotations

from fairque_core import FailureType, Priority, QueueConfig
from fairque_core.domain.scoring import STAT_COUNTERS

from .conftest import MODEL_KINDS
from .helpers import msg

GAUGES = ("ready", "scheduled", "leased", "dlq", "active_tenants")
TENANTS = ("a", "b", "c", "idle")


def _scenario(make_backend, clock):
    backend = make_backend(QueueConfig(lease_seconds=5, max_recoveries=0))
    backend.set_tenant_weight("a", 2)
    backend.push_batch([msg(f"a{i}", "a") for i in range(6)])
    backend.push_batch([msg(f"b{i}", "b", Priority.CRITICAL) for i in range(3)])
    backend.push(msg("c-later", "c", delay=50))
    backend.push(msg("c-first", "c", delay=1))
    backend.push(msg("c-child", "c", depends_on=["c-first"]))
    backend.push(msg("a0", "a"))  # duplicate
    claims = {c.message.task_id: c for c in backend.claim(count=6)}
    assert sorted(claims) == ["a0", "a1", "a2", "a3", "b0", "b1"]
    backend.finish("a0", claims["a0"].lease.token, b"r")
    backend.fail("a1", claims["a1"].lease.token, retry_delay=30)
    backend.fail("a2", claims["a2"].lease.token, retry_delay=None, reason="x")
    backend.release("b0", claims["b0"].lease.token)
    backend.cancel("a4")
    clock.advance(5)
    # Leased now: a3, b1 (expire, max_recoveries=0 -> DLQ expired).
    assert backend.requeue_expired() == 2
    backend.push(msg("a-fresh", "a"))
    [c] = backend.claim(assigned=["a"])
    assert c.message.task_id == "a5"
    [c] = backend.claim(assigned=["c"])  # due since the clock moved
    assert c.message.task_id == "c-first"
    backend.finish("c-first", c.lease.token, b"r")  # releases c-child
    return backend


EXPECTED_COUNTERS = {
    "pushed": 13,
    "duplicates": 1,
    "claimed": 8,
    "finished": 2,
    "retried": 1,
    "dead": 3,
    "recovered": 0,
    "released": 1,
    "canceled": 1,
    "dlq_requeued": 0,
    "result_bytes": 2,  # the two results, b"r"
    "repaired": 0,
    "stale": 0,  # none expired before it started (ADR 77)
}


def test_stats_have_every_key(backend):
    stats = backend.stats()
    assert set(stats) >= set(STAT_COUNTERS) | set(GAUGES)
    assert all(v == 0 for v in stats.values())
    tenant = backend.tenant_stats("nobody")
    assert set(tenant) >= {*STAT_COUNTERS, "ready", "scheduled", "leased"}
    assert all(v == 0 for v in tenant.values())


def test_counters_after_a_scenario(make_backend, clock):
    backend = _scenario(make_backend, clock)
    stats = backend.stats()
    assert {k: stats[k] for k in STAT_COUNTERS} == EXPECTED_COUNTERS
    # ready: b0 (released), b2, c-child, a-fresh ; scheduled: a1 retry, c-later
    # leased: a5 ; dlq: a2 failed, a3 and b1 expired ; active: b, c, a
    assert {k: stats[k] for k in GAUGES} == {
        "ready": 4,
        "scheduled": 2,
        "leased": 1,
        "dlq": 3,
        "active_tenants": 3,
    }
    types = sorted((e.entry_id, e.failure_type) for e in backend.list_dlq())
    assert types == [
        ("a2", FailureType.FAILED),
        ("a3", FailureType.EXPIRED),
        ("b1", FailureType.EXPIRED),
    ]


def test_gauges_equal_tenant_sizes_and_counters_add_up(make_backend, clock):
    backend = _scenario(make_backend, clock)
    stats = backend.stats()
    sizes = backend.queue_sizes(list(TENANTS))
    assert sizes["a"].as_dict() == {
        "critical": 0,
        "normal": 1,
        "scheduled": 1,
        "leased": 1,
        "total": 3,
    }
    assert sizes["b"].as_dict() == {
        "critical": 2,
        "normal": 0,
        "scheduled": 0,
        "leased": 0,
        "total": 2,
    }
    assert sizes["c"].as_dict() == {
        "critical": 0,
        "normal": 1,
        "scheduled": 1,
        "leased": 0,
        "total": 2,
    }
    assert sizes["idle"].total == 0
    assert stats["ready"] == sum(s.critical + s.normal for s in sizes.values())
    assert stats["scheduled"] == sum(s.scheduled for s in sizes.values())
    assert stats["leased"] == sum(s.leased for s in sizes.values())
    assert stats["active_tenants"] == sum(1 for s in sizes.values() if s.critical + s.normal)
    per_tenant = {u: backend.tenant_stats(u) for u in TENANTS}
    for name in STAT_COUNTERS:
        assert stats[name] == sum(t[name] for t in per_tenant.values()), name
    for u in TENANTS:
        s = sizes[u]
        t = per_tenant[u]
        assert (t["ready"], t["scheduled"], t["leased"]) == (
            s.critical + s.normal,
            s.scheduled,
            s.leased,
        )
    assert per_tenant["a"]["claimed"] == 5
    assert per_tenant["b"]["released"] == 1
    assert per_tenant["c"]["pushed"] == 3


def test_gauges_follow_the_clock_only_through_claims(backend, clock):
    backend.push(msg("later", delay=1))
    clock.advance(2)
    assert backend.stats()["scheduled"] == 1
    assert backend.claim() != []
    stats = backend.stats()
    assert (stats["scheduled"], stats["leased"], stats["claimed"]) == (0, 1, 1)


def test_real_structures_match_the_gauges(make_backend, clock, backend_kind):
    if backend_kind in MODEL_KINDS:
        import pytest

        pytest.skip("the model has no server structures to read")
    from ._structures import read_structures

    backend = _scenario(make_backend, clock)
    from .conftest import probe_of

    real = read_structures(probe_of(make_backend, backend), tenants=TENANTS)
    stats = backend.stats()
    sizes = backend.queue_sizes(list(TENANTS))
    assert real["leased"] == stats["leased"]
    assert real["scheduled"] == stats["scheduled"]
    assert real["dlq"] == stats["dlq"]
    assert real["active_tenants"] == stats["active_tenants"]
    for u in TENANTS:
        assert real["critical"][u] == sizes[u].critical, u
        assert real["normal"][u] == sizes[u].normal, u
