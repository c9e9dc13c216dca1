"""Limits by key (ADR 79) on every backend: caps and rates per tenant and across tenants,
parked tasks that do not block their tenant's other work, their way back (finish, fail,
release, cancel, lease expiry, a start with room, the rate's hold ending, a change of the
limits), what is reported, and bad input."""

from __future__ import annotations

import pytest

from fairque_core import TaskState, TaskValidationError
from fairque_core.domain.key_limits import KeyLimits

from .conftest import PARTITIONED_KINDS
from .helpers import msg


def _ids(claims):
    return [c.message.task_id for c in claims]


def _push(backend, tenant, n, key="export", start=0):
    backend.push_batch(
        [msg(f"{tenant}{key[0]}{i}", tenant, limit_key=key) for i in range(start, start + n)]
    )


def _by_id(claims):
    return {c.message.task_id: c for c in claims}


# ---------------------------------------------------------------- caps
def test_per_tenant_cap_parks_the_rest_and_serves_other_work(backend):
    backend.set_key_limits("export", max_running=1)
    _push(backend, "a", 3)
    _push(backend, "b", 2)
    backend.push_batch([msg("a-other", "a"), msg("b-other", "b")])
    claims = backend.claim(count=10)
    # one export per tenant; the held key blocks neither tenant's other task
    assert sorted(_ids(claims)) == ["a-other", "ae0", "b-other", "be0"]
    assert claims[0].message.limit_key == "export"
    status = backend.key_limit_status("export")
    assert status.limits == KeyLimits(max_running=1)
    assert dict(status.running) == {"a": 1, "b": 1}
    assert dict(status.parked) == {"a": 2, "b": 1}
    assert backend.claim(count=10) == []  # parked tasks wait: nothing to claim, no loop
    assert backend.get_state("ae1") is TaskState.QUEUED
    assert backend.stats()["ready"] == 0


def test_finish_puts_one_parked_task_back_in_order(backend):
    backend.set_key_limits("export", max_running=1)
    _push(backend, "a", 3)
    [c0] = backend.claim(count=5)
    backend.finish(c0.message.task_id, c0.lease.token)
    [c1] = backend.claim(count=5)
    assert c1.message.task_id == "ae1"
    backend.fail("ae1", c1.lease.token, retry_delay=None)
    assert _ids(backend.claim(count=5)) == ["ae2"]


def test_global_cap_across_tenants(backend, backend_kind):
    if backend_kind in PARTITIONED_KINDS:
        # one count across partitions is not atomic: refused typed (ADR 79)
        with pytest.raises(TaskValidationError):
            backend.set_key_limits("pay", max_running=2, per_tenant=False)
        return
    backend.set_key_limits("pay", max_running=2, per_tenant=False)
    for tenant in ("a", "b", "c"):
        _push(backend, tenant, 2, key="pay")
    claims = backend.claim(count=10)
    assert len(claims) == 2
    status = backend.key_limit_status("pay")
    assert dict(status.running) == {"": 2}
    assert dict(status.parked) == {"": 4}
    first = claims[0]
    backend.finish(first.message.task_id, first.lease.token)
    assert len(backend.claim(count=10)) == 1
    assert backend.key_limit_status("pay").parked == {"": 3}


def test_release_cancel_and_expiry_free_the_scope(backend, clock):
    backend.set_key_limits("export", max_running=1)
    _push(backend, "a", 3)
    [c] = backend.claim(count=5)
    backend.release(c.message.task_id, c.lease.token)
    # the released task and the parked one are both back: the released one at the head
    [c] = backend.claim(count=5)
    assert c.message.task_id == "ae0"
    assert backend.cancel("ae0")
    [c] = backend.claim(count=5)
    assert c.message.task_id == "ae1"
    clock.advance(31)  # past the default lease
    assert backend.requeue_expired() == 1
    [c] = backend.claim(count=5)
    assert c.message.task_id in ("ae1", "ae2")
    assert backend.key_limit_status("export").running == {"a": 1}


def test_cancel_of_a_parked_task(backend):
    backend.set_key_limits("export", max_running=1)
    _push(backend, "a", 3)
    [c] = backend.claim(count=5)
    assert backend.cancel("ae1")
    assert backend.get_state("ae1") is TaskState.CANCELED
    assert backend.key_limit_status("export").parked == {"a": 1}
    backend.finish(c.message.task_id, c.lease.token)
    assert _ids(backend.claim(count=5)) == ["ae2"]  # the canceled one is skipped
    assert backend.key_limit_status("export").parked == {}


def test_tasks_without_the_key_and_other_keys_are_untouched(backend):
    backend.set_key_limits("export", max_running=1)
    _push(backend, "a", 2, key="import")
    backend.push_batch([msg("plain", "a")])
    assert sorted(_ids(backend.claim(count=5))) == ["ai0", "ai1", "plain"]


# ---------------------------------------------------------------- rates
def test_global_rate_spaces_starts_and_the_hold_brings_them_back(backend, clock, backend_kind):
    if backend_kind in PARTITIONED_KINDS:
        with pytest.raises(TaskValidationError):
            backend.set_key_limits("pay", rate=2, per_tenant=False)
        return
    backend.set_key_limits("pay", rate=2, per_tenant=False)
    for tenant in ("a", "b"):
        _push(backend, tenant, 2, key="pay")
    assert len(backend.claim(count=10)) == 1
    assert backend.claim(count=10) == []
    clock.advance(0.5)
    assert len(backend.claim(count=10)) == 1
    clock.advance(0.5)
    assert len(backend.claim(count=10)) == 1
    clock.advance(0.5)
    assert len(backend.claim(count=10)) == 1
    assert backend.key_limit_status("pay").parked == {}


def test_burst_then_rate_per_tenant(backend, clock):
    backend.set_key_limits("export", rate=1, burst=3)
    _push(backend, "a", 5)
    _push(backend, "b", 1)
    claims = backend.claim(count=10)
    assert sorted(_ids(claims)) == ["ae0", "ae1", "ae2", "be0"]
    clock.advance(1.0)
    assert _ids(backend.claim(count=10)) == ["ae3"]
    clock.advance(1.0)
    assert _ids(backend.claim(count=10)) == ["ae4"]


def test_parked_tenant_is_not_charged(backend):
    """A tenant whose exports are parked keeps its fair share of the other work: a parked
    task's turn is given back when the claim ends (as an expired task's, ADR 77)."""
    backend.set_key_limits("export", max_running=1)
    _push(backend, "a", 4)
    backend.push_batch([msg(f"a{i}", "a") for i in range(4)])
    backend.push_batch([msg(f"b{i}", "b") for i in range(8)])
    tenants = [backend.claim()[0].message.tenant for _ in range(8)]
    assert tenants.count("a") == 4  # one export and three others: the parks cost no turn
    assert tenants.count("b") == 4


# ---------------------------------------------------------------- changes
def test_raising_or_clearing_the_limits_puts_parked_tasks_back(backend):
    backend.set_key_limits("export", max_running=1)
    _push(backend, "a", 4)
    assert len(backend.claim(count=10)) == 1
    backend.set_key_limits("export", max_running=2)
    assert len(backend.claim(count=10)) == 1
    backend.set_key_limits("export")  # every number None: cleared
    assert len(backend.claim(count=10)) == 2
    status = backend.key_limit_status("export")
    assert status.limits is None
    assert status.parked == {}
    assert status.running == {"a": 2}  # (leases made without limits are not counted)


def test_list_key_limits(backend, backend_kind):
    assert backend.list_key_limits() == {}
    backend.set_key_limits("export", max_running=1)
    glob = backend_kind not in PARTITIONED_KINDS
    backend.set_key_limits("pay", rate=2.5, burst=3, per_tenant=not glob)
    assert backend.list_key_limits() == {
        "export": KeyLimits(max_running=1),
        "pay": KeyLimits(rate=2.5, burst=3, per_tenant=not glob),
    }
    backend.set_key_limits("export")
    assert list(backend.list_key_limits()) == ["pay"]


def test_bad_input_is_refused_typed(backend):
    with pytest.raises(TaskValidationError):
        backend.set_key_limits("bad key", max_running=1)
    with pytest.raises(TaskValidationError):
        backend.set_key_limits("k", max_running=0)
    with pytest.raises(TaskValidationError):
        backend.set_key_limits("k", max_running=-1)
    with pytest.raises(TaskValidationError):
        backend.set_key_limits("k", rate=-2.0)
    with pytest.raises(TaskValidationError):
        backend.set_key_limits("k", rate=1, burst=0)
    with pytest.raises(TaskValidationError):
        backend.set_key_limits("k", max_running=1, per_tenant="yes")
    with pytest.raises(TaskValidationError):
        backend.key_limit_status("a|b")
    assert backend.key_limit_status("k").limits is None
    for bad in ("a b", 'q"uote', "x|y"):  # a message's key is an id too
        with pytest.raises(TaskValidationError):
            backend.push(msg("t1", limit_key=bad))
        with pytest.raises(TaskValidationError):
            backend.push_batch([msg("t2"), msg("t3", limit_key=bad)])
    assert backend.get_state("t2") is None


def test_purges_take_parked_tasks_too(backend, backend_kind):
    global_key = backend_kind not in PARTITIONED_KINDS  # (per tenant only there)
    backend.set_key_limits("export", max_running=1)
    backend.set_key_limits("pay", max_running=1, per_tenant=not global_key)
    _push(backend, "a", 3)
    _push(backend, "b", 2)
    _push(backend, "a", 2, key="pay")
    _push(backend, "b", 2, key="pay", start=5)
    running = _ids(backend.claim(count=20))
    parked_pay = {
        tenant: 2 - sum(t.startswith(tenant + "p") for t in running) for tenant in ("a", "b")
    }
    assert len(running) == (3 if global_key else 4)
    assert backend.purge_tenant("a") == 2 + parked_pay["a"]
    assert backend.get_state("ae2") is TaskState.CANCELED
    assert backend.key_limit_status("export").parked == {"b": 1}
    assert backend.purge_all() == 1 + parked_pay["b"]
    assert backend.key_limit_status("pay").parked == {}
    assert backend.key_limit_status("export").parked == {}
