"""Issue 16, defects 2 and 3: a key damaged behind the client's back stops neither the queue nor
leaves tasks stranded, and ``fairque doctor --repair`` puts the queue back in line.

* One tenant's ready zset, critical list or tenant hash deleted, or replaced by a string: the
  claim skips (and deactivates, or rebuilds) that tenant, counts it in ``stats()["repaired"]``,
  logs it, and serves every other tenant; before the fix every claim failed.
* A queue-wide key of the wrong type (``SET fq:{q}:leases junk``): every call is refused with a
  DamagedKeyError naming the key, before writing anything (before the fix the claim raised
  WRONGTYPE after marking the task started, which then had no lease and was never reaped);
  a push onto a tenant queue of the wrong type stores nothing.
* ``repair`` (the doctor) then fixes the queue: the invariant checker finds nothing and every
  task that was ready runs once.

On Valkey 9 and Redis 7 (the session servers, a fresh queue per test) and, for the claim, on
the three-master cluster.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from fairque_core import DamagedKeyError, FairQueue, Task
from fairque_redis import connect
from fairque_redis.doctor.examine import check
from fairque_redis.doctor.repair import repair

pytestmark = [pytest.mark.redis, pytest.mark.timeout(60)]

TENANTS = ("alice", "bob", "carol")
PER_TENANT = 4  # one critical, three normal


@pytest.fixture(autouse=True)
def _no_autoload(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAIRQUE_DISABLE_PLUGIN_AUTOLOAD", "1")


@pytest.fixture
def setup(valkey_and_redis7_url: str) -> Iterator[tuple[FairQueue, Any, str]]:
    name = f"dmg-{uuid.uuid4().hex[:8]}"
    queue = connect(valkey_and_redis7_url, queue=name)
    raw = redis.Redis.from_url(valkey_and_redis7_url)
    for tenant in TENANTS:
        for i in range(PER_TENANT):
            queue.push(Task.create(tenant, 6 if i == 0 else 3, {"i": i}, task_id=f"{tenant}-{i}"))
    try:
        yield queue, raw, name
    finally:
        queue.close()
        raw.close()


def _damage(raw: Any, queue: str, suffix: str, how: str) -> None:
    key = f"fq:{{{queue}}}:{suffix}"
    raw.delete(key)
    if how == "string":
        raw.set(key, "junk")


def _drain(queue: FairQueue) -> list[str]:
    served: list[str] = []
    for _ in range(50):
        task = queue.claim()
        if task is None:
            break
        queue.finish(task)
        served.append(task.task_id)
    return served


# the structures of tenant bob; "both" deletes its two queues
BOB = {
    "normal": ["n:bob"],
    "critical": ["c:bob"],
    "both": ["n:bob", "c:bob"],
    "tenant": ["tenant:bob"],
}


@pytest.mark.parametrize("how", ["deleted", "string"])
@pytest.mark.parametrize("what", sorted(BOB))
def test_one_damaged_tenant_never_stops_the_others(
    setup: tuple[FairQueue, Any, str], what: str, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    queue, raw, name = setup
    queue.finish(queue.claim())  # bob is active and holds a pass
    for suffix in BOB[what]:
        _damage(raw, name, suffix, how)
    with caplog.at_level(logging.WARNING, logger="fairque.redis"):
        served = _drain(queue)
    others = {t for t in served if not t.startswith("bob-")}
    # every task of alice and carol is served (one of them was claimed above)
    assert len(others) >= 2 * PER_TENANT - 1
    repaired = queue.get_stats()["repaired"]
    if what == "tenant" and how == "deleted":
        # rebuilt from its active-set member: bob keeps being served
        assert {f"bob-{i}" for i in range(PER_TENANT)} - {"bob-0"} <= set(served) | {"bob-0"}
        assert repaired == 1
    elif what in ("normal", "critical") and how == "deleted":
        # what is left of bob is served; his queue's tasks are lost to the queue until repair
        assert repaired in (0, 1)
    else:
        assert repaired >= 1
        assert "claim repaired damaged queue structures" in caplog.text
    # the doctor repairs the rest: then every queued task runs once and the queue is sound
    repair(raw, name)
    assert check(raw, name) == []
    served += _drain(queue)
    assert len(served) == len(set(served))
    stats = queue.get_stats()
    assert stats["ready"] == 0
    assert stats["leased"] == 0
    assert check(raw, name) == []


@pytest.mark.parametrize("suffix", ["leases", "meta", "stats", "tiers", "delayed", "wake"])
def test_a_damaged_queue_key_refuses_every_call_typed_and_writes_nothing(
    setup: tuple[FairQueue, Any, str], suffix: str
) -> None:
    queue, raw, name = setup
    _damage(raw, name, suffix, "string")
    before = {k: raw.dump(k) for k in raw.scan_iter(match=f"fq:{{{name}}}:*")}
    with pytest.raises(DamagedKeyError) as err:
        queue.claim()
    assert err.value.key == f"fq:{{{name}}}:{suffix}"
    assert err.value.found == "string"
    with pytest.raises(DamagedKeyError):
        queue.push(Task.create("dave", 3, {}, task_id="new-1"))
    after = {k: raw.dump(k) for k in raw.scan_iter(match=f"fq:{{{name}}}:*")}
    assert after == before  # nothing written: no task left started without a lease
    # the doctor deletes the junk and rebuilds the rest; then the queue drains
    actions = repair(raw, name)
    assert any(f"deleted fq:{{{name}}}:{suffix}" in a for a in actions)
    assert check(raw, name) == []
    served = _drain(queue)
    assert len(served) == len(set(served)) == len(TENANTS) * PER_TENANT


def test_a_read_of_a_damaged_key_is_typed_too(setup: tuple[FairQueue, Any, str]) -> None:
    """Read-only scripts check no types up front (ADR 29): the failing read itself is the
    typed DamagedKeyError, never a bare LuaScriptError."""
    queue, raw, name = setup
    _damage(raw, name, "stats", "string")
    with pytest.raises(DamagedKeyError) as err:
        queue.get_stats()
    assert "stats script" in err.value.key
    assert "doctor --repair" in str(err.value)


@pytest.mark.parametrize("suffix", ["n:dave", "c:dave", "tenant:dave", "task:dave-1"])
def test_a_push_onto_a_damaged_key_stores_nothing(
    setup: tuple[FairQueue, Any, str], suffix: str
) -> None:
    queue, raw, name = setup
    _damage(raw, name, suffix, "string")
    prio = 6 if suffix.startswith("c:") else 3
    before = {k: raw.dump(k) for k in raw.scan_iter(match=f"fq:{{{name}}}:*")}
    with pytest.raises(DamagedKeyError) as err:
        queue.push_batch(
            [
                Task.create("erin", 3, {}, task_id="erin-1"),
                Task.create("dave", prio, {}, task_id="dave-1"),
            ]
        )
    assert err.value.key == f"fq:{{{name}}}:{suffix}"
    after = {k: raw.dump(k) for k in raw.scan_iter(match=f"fq:{{{name}}}:*")}
    assert after == before


def test_a_started_task_without_a_lease_is_sent_back_by_the_doctor(
    setup: tuple[FairQueue, Any, str],
) -> None:
    """What a half-failed claim left behind before the fix: started, no lease entry."""
    queue, raw, name = setup
    task = queue.claim()
    assert task is not None
    raw.zrem(f"fq:{{{name}}}:leases", task.task_id)
    assert queue.requeue_expired() == 0  # the reaper cannot see it
    assert any("is started but is in []" in line for line in check(raw, name))
    actions = repair(raw, name)
    assert any("started without a lease" in a for a in actions)
    assert check(raw, name) == []
    served = _drain(queue)
    assert task.task_id in served
    assert len(served) == len(TENANTS) * PER_TENANT


def test_cluster_claim_skips_a_damaged_tenant(valkey_cluster: Any) -> None:
    name = f"dmg-{uuid.uuid4().hex[:8]}"
    queue = connect(valkey_cluster.url, queue=name, cluster=True)
    try:
        for tenant in TENANTS:
            for i in range(PER_TENANT):
                queue.push(Task.create(tenant, 3, {}, task_id=f"{tenant}-{i}"))
        queue.finish(queue.claim())
        raw = redis.cluster.RedisCluster.from_url(valkey_cluster.url)
        raw.delete(f"fq:{{{name}}}:n:bob")
        raw.set(f"fq:{{{name}}}:n:carol", "junk")
        served = _drain(queue)
        assert {t for t in served if t.startswith("alice-")} >= {f"alice-{i}" for i in (1, 2, 3)}
        assert queue.get_stats()["repaired"] >= 1
        repair(raw, name)
        assert check(raw, name) == []
        raw.close()
    finally:
        queue.close()
