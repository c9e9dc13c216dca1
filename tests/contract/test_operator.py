"""Operator steps on every backend: purge a tenant or the whole queue, read weights and tiers,
the queue registry and the workers' heartbeat records."""

from __future__ import annotations

import pytest

from fairque_core import Priority, TaskState, TaskValidationError
from fairque_core.domain.enums import FailureType

from .helpers import msg, snapshot


def _push_mix(backend, tenant, n=3):
    """A critical, normal and scheduled task per ``user`` (plus ``n`` more normal ones)."""
    backend.push(msg(f"{tenant}-crit", tenant, Priority.CRITICAL))
    backend.push(msg(f"{tenant}-later", tenant, delay=60))
    for k in range(n):
        backend.push(msg(f"{tenant}-{k}", tenant))
    return [f"{tenant}-crit", f"{tenant}-later", *(f"{tenant}-{k}" for k in range(n))]


def _adds_up(stats):
    """Every pushed task is somewhere: waiting, running, or at an end (no deferred tasks,
    no DLQ requeues in these tests)."""
    ends = stats["finished"] + stats["dead"] + stats["canceled"]
    live = stats["ready"] + stats["scheduled"] + stats["leased"]
    return stats["pushed"] == ends + live


def test_purge_tenant_cancels_its_waiting_tasks_and_nothing_else(backend, clock):
    alice = _push_mix(backend, "alice")
    bob = _push_mix(backend, "bob")
    before_bob = snapshot(backend, bob, ["bob"])
    assert backend.purge_tenant("alice") == len(alice)
    for task_id in alice:
        assert backend.get_state(task_id) is TaskState.CANCELED
    sizes = backend.queue_sizes(["alice"])["alice"]
    assert (sizes.critical, sizes.normal, sizes.scheduled, sizes.leased) == (0, 0, 0, 0)
    alice_stats = backend.tenant_stats("alice")
    assert alice_stats["canceled"] == len(alice)
    assert alice_stats["ready"] == alice_stats["scheduled"] == 0
    after_bob = snapshot(backend, bob, ["bob"])
    assert after_bob["tenant_stats"] == before_bob["tenant_stats"]
    assert after_bob["states"] == before_bob["states"]
    stats = backend.stats()
    assert stats["canceled"] == len(alice)
    assert (stats["ready"], stats["scheduled"]) == (len(bob) - 1, 1)
    assert _adds_up(stats)
    # only bob is claimed from now on, and the scheduled one still comes due
    claimed = []
    while got := backend.claim():
        claimed.append(got[0].message.task_id)
    assert sorted(claimed) == sorted(t for t in bob if t != "bob-later")
    clock.advance(61)
    assert [c.message.task_id for c in backend.claim()] == ["bob-later"]
    assert backend.claim() == []


def test_purge_leaves_leased_tasks_to_finish(backend):
    backend.push_batch([msg("run", "alice"), msg("wait", "alice")])
    [claimed] = backend.claim()
    assert claimed.message.task_id == "run"
    assert backend.purge_tenant("alice") == 1
    assert backend.get_state("run") is TaskState.STARTED
    assert backend.get_state("wait") is TaskState.CANCELED
    backend.finish("run", claimed.lease.token, None)
    assert backend.get_state("run") is TaskState.FINISHED
    stats = backend.stats()
    assert (stats["finished"], stats["canceled"], stats["leased"]) == (1, 1, 0)
    assert _adds_up(stats)


def test_purge_cancels_dependents_of_purged_tasks(backend):
    backend.push(msg("parent", "alice"))
    backend.push(msg("child", "alice", depends_on=["parent"]))
    assert backend.purge_tenant("alice") == 1  # the parent; the deferred child goes with it
    assert backend.get_state("child") is TaskState.CANCELED
    assert backend.stats()["canceled"] == 2


def test_purge_all_empties_every_tenant_and_keeps_counters(backend, clock):
    ids = _push_mix(backend, "alice") + _push_mix(backend, "bob", n=1)
    backend.push(msg("carol-1", "carol"))
    [running] = backend.claim()
    purged = backend.purge_all()
    assert purged == len(ids) + 1 - 1
    stats = backend.stats()
    assert (stats["ready"], stats["scheduled"], stats["leased"]) == (0, 0, 1)
    assert stats["active_tenants"] == 0
    assert stats["canceled"] == purged
    assert _adds_up(stats)
    assert backend.claim() == []
    clock.advance(120)
    assert backend.claim() == []
    assert backend.get_state(running.message.task_id) is TaskState.STARTED
    # the queue works as before afterwards
    backend.push(msg("fresh", "alice"))
    assert [c.message.task_id for c in backend.claim()] == ["fresh"]


def test_purge_of_nothing(backend):
    assert backend.purge_tenant("nobody") == 0
    assert backend.purge_all() == 0
    assert backend.stats()["canceled"] == 0


def test_purge_keeps_the_dlq(backend):
    backend.push(msg("bad", "alice"))
    [c] = backend.claim()
    backend.fail("bad", c.lease.token, retry_delay=None, failure_type=FailureType.FAILED)
    assert backend.purge_tenant("alice") == 0
    assert [e.entry_id for e in backend.list_dlq()] == ["bad"]


def test_purge_tenant_checks_the_id(backend):
    with pytest.raises(TaskValidationError):
        backend.purge_tenant("")


def test_tenant_weights_read_back(backend):
    backend.set_tenant_weight("alice", 4.0, tier=2)
    backend.set_tenant_weight("bob", 0.5)
    got = backend.tenant_weights(["alice", "bob", "nobody"])
    assert got["alice"] == (pytest.approx(4.0, rel=1e-5), 2)
    assert got["bob"] == (pytest.approx(0.5, rel=1e-5), 0)
    assert got["nobody"] == (1.0, 0)
    assert backend.tenant_weights([]) == {}


def test_the_queue_is_registered_after_a_write(backend):
    backend.push(msg("a", "alice"))
    assert backend.queue in backend.list_queues()


def test_workers_records(backend):
    assert backend.list_workers() == {}
    backend.register_worker("w1", '{"pid": 1}')
    backend.register_worker("w2", '{"pid": 2}')
    backend.register_worker("w1", '{"pid": 3}')
    assert backend.list_workers() == {"w1": '{"pid": 3}', "w2": '{"pid": 2}'}
    assert backend.remove_workers(["w1", "gone"]) == 1
    assert backend.list_workers() == {"w2": '{"pid": 2}'}
    assert backend.remove_workers([]) == 0
