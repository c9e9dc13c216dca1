"""Pause and resume (``pause``/``resume``/``is_paused`` of the port) on every backend.

A paused tenant is skipped by claims from the next pick on (within one claim call), its pushes
are still accepted, and on resume it is served again like a newcomer: no credit saved up
while it was held out. A paused queue leases nothing; pushes are accepted and due tasks still
move; resume restores it.
"""

from __future__ import annotations

import pytest

from fairque_core import TaskValidationError

from .helpers import claim_tenants, msg


def _fill(backend, tenant_id, n, start=0):
    backend.push_batch([msg(f"{tenant_id}{i}", tenant_id) for i in range(start, start + n)])


def _tenants(claims):
    return [c.message.tenant for c in claims]


def test_a_paused_tenant_is_skipped_within_one_claim(backend):
    for tenant_id in ("a", "b", "c"):
        _fill(backend, tenant_id, 3)
    assert _tenants(backend.claim(count=3)) == ["a", "b", "c"]
    backend.pause("a")
    assert backend.is_paused("a")
    assert not backend.is_paused("b")
    assert not backend.is_paused()
    assert _tenants(backend.claim(count=10)) == ["b", "c", "b", "c"]
    assert backend.stats()["active_tenants"] == 0
    assert backend.queue_sizes(["a"])["a"].critical + backend.queue_sizes(["a"])["a"].normal == 2


def test_pushes_to_a_paused_tenant_are_accepted_and_wait(backend):
    backend.pause("a")  # before it ever pushed
    assert backend.push(msg("a0", "a"))
    _fill(backend, "a", 2, start=1)
    assert backend.claim(count=5) == []
    assert backend.tenant_stats("a")["ready"] == 3
    backend.resume("a")
    assert not backend.is_paused("a")
    assert [c.message.task_id for c in backend.claim(count=5)] == ["a0", "a1", "a2"]


def test_resume_brings_no_saved_credit(backend):
    _fill(backend, "a", 10)
    _fill(backend, "b", 10)
    # one turn each (in either order: a partitioned queue breaks ties between partitions
    # from a random rotation, ADR 34)
    assert sorted(claim_tenants(backend, 2)) == ["a", "b"]
    backend.pause("a")
    assert claim_tenants(backend, 5) == ["b"] * 5
    backend.resume("a")
    # a newcomer at the virtual time: turns alternate, a does not catch up on b's five
    got = claim_tenants(backend, 6)
    assert sorted(got) == ["a", "a", "a", "b", "b", "b"]
    assert got[:2] in (["a", "b"], ["b", "a"])


def test_pinned_claims_skip_a_paused_tenant(backend):
    _fill(backend, "a", 2)
    _fill(backend, "b", 2)
    backend.pause("a")
    assert backend.claim(assigned=["a"]) == []
    assert _tenants(backend.claim(assigned=["a"], steal=["b"], count=2)) == ["b", "b"]


def test_lease_ends_and_due_tasks_do_not_let_a_paused_tenant_in(backend, clock):
    _fill(backend, "a", 2)
    [c] = backend.claim()
    backend.push(msg("later", "a", delay=5))
    backend.pause("a")
    backend.finish(c.message.task_id, c.lease.token)  # its lease ends while paused
    clock.advance(6)
    assert backend.claim(count=3) == []
    assert backend.tenant_stats("a")["ready"] == 2  # a1 and the due task
    backend.resume("a")
    assert sorted(c.message.task_id for c in backend.claim(count=3)) == ["a1", "later"]


def test_resume_keeps_a_capped_tenant_out_until_its_lease_ends(backend):
    backend.set_limits({"max_running": 1}, tenant="a")
    _fill(backend, "a", 3)
    [c] = backend.claim()
    backend.pause("a")
    backend.resume("a")
    assert backend.claim() == []  # still capped
    backend.finish(c.message.task_id, c.lease.token)
    assert _tenants(backend.claim(count=3)) == ["a"]


def test_pause_and_resume_are_idempotent(backend):
    _fill(backend, "a", 2)
    backend.resume("a")  # never paused
    backend.pause("a")
    backend.pause("a")
    assert backend.claim() == []
    backend.resume("a")
    backend.resume("a")
    assert _tenants(backend.claim(count=3)) == ["a", "a"]


def test_a_paused_queue_leases_nothing_and_accepts_pushes(backend, clock):
    _fill(backend, "a", 2)
    backend.push(msg("b0", "b", delay=5))
    assert backend.stats()["paused"] == 0
    backend.pause()
    assert backend.is_paused()
    assert backend.stats()["paused"] == 1
    assert not backend.is_paused("a")
    assert backend.claim(count=5) == []
    assert backend.claim(assigned=["a"]) == []
    assert backend.push(msg("c0", "c"))
    clock.advance(6)
    assert backend.claim(count=5) == []
    sizes = backend.queue_sizes(["b"])["b"]
    assert (sizes.normal, sizes.scheduled) == (1, 0)  # due tasks still move
    while backend.wait_for_work(0):
        pass
    backend.resume()
    assert not backend.is_paused()
    assert backend.stats()["paused"] == 0
    assert backend.wait_for_work(0) is True  # resume wakes idle workers
    assert sorted(_tenants(backend.claim(count=10))) == ["a", "a", "b", "c"]


def test_queue_and_tenant_pause_are_separate(backend):
    _fill(backend, "a", 1)
    _fill(backend, "b", 1)
    backend.pause("a")
    backend.pause()
    backend.resume()
    assert backend.is_paused("a")
    assert _tenants(backend.claim(count=5)) == ["b"]


def test_limit_status_says_paused(backend):
    # the tenant's own flag, read with its limits (the dashboard's one call per tenant)
    _fill(backend, "a", 1)
    assert not backend.limit_status("a").paused
    backend.pause("a")
    backend.pause()
    assert backend.limit_status("a").paused
    assert not backend.limit_status("b").paused  # the queue's pause is not a tenant's
    backend.resume("a")
    assert not backend.limit_status("a").paused
    backend.pause("never-pushed")
    assert backend.limit_status("never-pushed").paused


@pytest.mark.parametrize("bad", ["", "a b", "x" * 300, 5])
def test_bad_tenant_ids_are_refused(backend, bad):
    for call in (backend.pause, backend.resume, backend.is_paused):
        with pytest.raises(TaskValidationError):
            call(bad)
