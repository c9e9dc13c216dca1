"""Key layout: every key of a queue carries its hash tag; scripts survive SCRIPT FLUSH."""

from __future__ import annotations

import pytest

from fairque_core import FailureType, Priority, QueueConfig, TaskState

from .conftest import MODEL_KINDS, probe_of
from .helpers import msg


@pytest.fixture
def redis_only(backend_kind):
    if backend_kind in MODEL_KINDS:
        pytest.skip("key layout and script cache exist only on a real server")
    return backend_kind


def _workload(backend, clock):
    """Touch every structure: tenants, weights, critical, scored, delayed, leases, DLQ, deps."""
    backend.set_tenant_weight("gold", 3, tier=1)
    backend.push_batch(
        [
            msg("n1", "gold"),
            msg("c1", "silver", Priority.CRITICAL),
            msg("d1", "silver", delay=30),
            msg("child", "gold", depends_on=["n1"]),
            msg("orphan", "silver", depends_on=["c1"]),
            msg("b1", "bronze", delay=30),
            msg("x1", "gold", Priority.HIGH),
        ]
    )
    backend.push(msg("n1", "gold"))
    claims = {c.message.task_id: c for c in backend.claim(count=3, worker_id="w")}
    backend.heartbeat("n1", claims["n1"].lease.token)
    backend.finish("n1", claims["n1"].lease.token, b"result")
    backend.fail("c1", claims["c1"].lease.token, retry_delay=None, reason="boom")
    backend.fail(
        "x1", claims["x1"].lease.token, retry_delay=None, failure_type=FailureType.POISONED
    )
    backend.requeue_dlq(["x1"])
    clock.advance(40)
    got = backend.claim(count=5, assigned=["silver"], steal=["bronze"])
    clock.advance(100)
    assert backend.requeue_expired() == len(got)
    backend.cancel("d1")
    backend.push(msg("after", "gold", delay=5))
    backend.purge_dlq(["c1"])
    backend.stats()
    backend.tenant_stats("gold")
    backend.queue_sizes(["gold", "silver", "bronze"])
    backend.list_dlq()
    assert backend.list_tenants() == (["bronze", "gold", "silver"], 3)


def test_every_key_carries_the_queue_hash_tag(make_backend, clock, redis_only):
    from fairque_redis.keys import QUEUES_KEY

    backend = make_backend(QueueConfig(lease_seconds=10))
    probe = probe_of(make_backend, backend)
    before = probe.all_keys()
    _workload(backend, clock)
    new = probe.all_keys() - before
    assert len(new) >= 5, new
    assert probe.prefix + "tenants" in new  # the tenants index, like every other key
    # the one key outside a queue's prefix: the server's registry of queue names (a set of
    # its own, touched by single-key commands only; keys.QUEUES_KEY)
    strays = sorted(k for k in new if not k.startswith(probe.prefix) and k != QUEUES_KEY)
    assert strays == []
    mentioning = sorted(k for k in probe.all_keys() if backend.queue in k)
    assert all(k.startswith(probe.prefix) for k in mentioning)
    if redis_only == "cluster":
        slot = probe.keyslot("{" + backend.queue + "}")
        off_slot = sorted(k for k in new if probe.keyslot(k) != slot and k != QUEUES_KEY)
        assert off_slot == []


def test_two_queues_never_share_keys(make_backend, clock, redis_only):
    one = make_backend()
    two = make_backend()
    _workload(one, clock)
    probe_two = probe_of(make_backend, two)
    assert probe_two.queue_keys() == set()
    one_keys = probe_of(make_backend, one).queue_keys()
    assert one_keys
    two.push(msg("n1", "gold"))
    assert two.get_state("n1") is TaskState.QUEUED
    assert probe_two.queue_keys().isdisjoint(one_keys)
    assert one.get_state("n1") is TaskState.FINISHED


def test_scripts_reloaded_after_script_flush(make_backend, clock, redis_only):
    backend = make_backend(QueueConfig(lease_seconds=10))
    probe = probe_of(make_backend, backend)
    backend.push(msg("t1"))
    probe.script_flush()
    assert backend.push(msg("t2")) is True
    probe.script_flush()
    assert backend.push_batch([msg("t3")]) == [True]
    probe.script_flush()
    [c] = backend.claim()
    probe.script_flush()
    backend.heartbeat(c.message.task_id, c.lease.token)
    probe.script_flush()
    backend.finish(c.message.task_id, c.lease.token, b"r")
    probe.script_flush()
    assert backend.get_state("t1") is TaskState.FINISHED
    probe.script_flush()
    stats = backend.stats()
    assert (stats["pushed"], stats["finished"], stats["ready"]) == (3, 1, 2)
    probe.script_flush()
    clock.advance(1)
    assert backend.requeue_expired() == 0
    probe.script_flush()
    assert backend.cancel("t2") is True
