"""``fairque doctor`` against pause and flow control: a tenant with ready work that a pause, its
cap or its rate holds out of its active set is not a broken invariant, and ``--repair`` leaves
it out (putting it back would silently lift the pause or the limit). The reverse still holds: a
paused or capped tenant in an active set is found and removed, and so is damage elsewhere.

On Valkey 9 and Redis 7 (the session servers, a fresh queue per test).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from fairque_core import FairQueue, Task
from fairque_redis import connect
from fairque_redis.doctor.examine import check
from fairque_redis.doctor.repair import repair

pytestmark = [pytest.mark.redis, pytest.mark.timeout(60)]


@pytest.fixture(autouse=True)
def _no_autoload(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAIRQUE_DISABLE_PLUGIN_AUTOLOAD", "1")


@pytest.fixture
def held(valkey_and_redis7_url: str) -> Iterator[tuple[FairQueue, Any, str]]:
    """bob capped (max_running 1, one task running), carol parked (one start per 1000 s, one
    started), alice paused, each with ready work; dave free with ready work."""
    name = f"hold-{uuid.uuid4().hex[:8]}"
    queue = connect(valkey_and_redis7_url, queue=name)
    raw = redis.Redis.from_url(valkey_and_redis7_url)
    try:
        queue.set_tenant_limits("bob", max_running=1)
        queue.set_tenant_limits("carol", rate=0.001)
        for tenant_id in ("bob", "carol"):
            queue.push_batch([Task.create(tenant_id, payload={"i": i}) for i in range(3)])
        started = [queue.claim(), queue.claim()]
        assert sorted(t.tenant for t in started if t is not None) == ["bob", "carol"]
        queue.pause("alice")
        queue.push_batch([Task.create("alice", payload={"i": i}) for i in range(2)])
        queue.push_batch([Task.create("dave", payload={"i": i}) for i in range(2)])
        assert queue.get_tenant_limits("bob").capped
        assert queue.get_tenant_limits("carol").next_start_at is not None
        assert raw.zscore(f"fq:{{{name}}}:parked", "carol") is not None
        yield queue, raw, name
    finally:
        queue.close()
        raw.close()


def _active(raw: Any, name: str) -> set[str]:
    return {m.decode().rpartition("|")[2] for m in raw.zrange(f"fq:{{{name}}}:active:0", 0, -1)}


def test_held_tenants_are_sound_and_repair_changes_nothing(
    held: tuple[FairQueue, Any, str],
) -> None:
    queue, raw, name = held
    assert _active(raw, name) == {"dave"}
    assert check(raw, name) == []
    assert repair(raw, name) == []
    assert _active(raw, name) == {"dave"}
    assert queue.is_paused("alice")
    assert queue.get_tenant_limits("bob").capped
    # still held: only dave is served
    served = [queue.claim() for _ in range(4)]
    assert [t.tenant for t in served if t is not None] == ["dave", "dave"]


def test_a_paused_or_capped_tenant_in_an_active_set_is_found_and_removed(
    held: tuple[FairQueue, Any, str],
) -> None:
    queue, raw, name = held
    key = f"fq:{{{name}}}:active:0"
    raw.zadd(key, {f"{900:016d}|alice": 0, f"{901:016d}|bob": 0})
    found = check(raw, name)
    assert any("alice is paused but is in active" in line for line in found), found
    assert any("bob is capped but is in active" in line for line in found), found
    done = repair(raw, name)
    assert any("alice" in line and "(paused)" in line for line in done), done
    assert any("bob" in line and "(capped)" in line for line in done), done
    assert check(raw, name) == []
    assert _active(raw, name) == {"dave"}
    assert queue.is_paused("alice")


def test_other_damage_is_still_found_among_held_tenants(
    held: tuple[FairQueue, Any, str],
) -> None:
    _queue, raw, name = held
    raw.delete(f"fq:{{{name}}}:active:0")  # dave (free, ready work) lost its member
    assert any("dave has 2 ready tasks but is in active:[]" in x for x in check(raw, name))
    assert any("activated tenant dave" in line for line in repair(raw, name))
    assert check(raw, name) == []
    assert _active(raw, name) == {"dave"}


def test_a_cap_with_no_lease_left_is_lifted(held: tuple[FairQueue, Any, str]) -> None:
    queue, raw, name = held
    # bob's only lease lost half-way: nothing would ever end it and let bob in again
    (bob_task,) = [
        m.decode()
        for m in raw.zrange(f"fq:{{{name}}}:leases", 0, -1)
        if raw.hget(f"fq:{{{name}}}:task:{m.decode()}", "u") == b"bob"
    ]
    raw.zrem(f"fq:{{{name}}}:leases", bob_task)
    found = check(raw, name)
    assert found == [f"task {bob_task} is started but is in [], not ['leases']"], found
    done = repair(raw, name)
    assert f"task {bob_task} was started without a lease: back to ready" in done, done
    assert any("lifted tenant bob's cap" in line for line in done), done
    assert check(raw, name) == []
    assert _active(raw, name) == {"bob", "dave"}
    assert not queue.get_tenant_limits("bob").capped


def test_a_capped_tenant_without_a_lease_is_found(held: tuple[FairQueue, Any, str]) -> None:
    queue, raw, name = held
    # dave marked capped by hand (and out of its set), with no lease whose end would free it
    raw.hset(f"fq:{{{name}}}:tenant:dave", "capd", "1")
    raw.delete(f"fq:{{{name}}}:active:0")
    raw.zrem(f"fq:{{{name}}}:tiers", "0")
    assert check(raw, name) == ["tenant dave is capped but holds no lease: nothing will let it in"]
    assert any("lifted tenant dave's cap" in line for line in repair(raw, name))
    assert check(raw, name) == []
    assert _active(raw, name) == {"dave"}
    assert queue.get_tenant_limits("bob").capped


def test_tasks_parked_by_a_limit_key_are_sound_and_repair_leaves_them(
    valkey_and_redis7_url: str,
) -> None:
    """Limits by key (ADR 79): a parked task is queued but in its scope's set, not in its
    tenant's queue, and the rate-held scope's member is in ``parked``; neither is damage."""
    name = f"keyhold-{uuid.uuid4().hex[:8]}"
    raw = redis.Redis.from_url(valkey_and_redis7_url)
    with connect(valkey_and_redis7_url, queue=name) as queue:
        queue.set_key_limits("export", max_running=1)
        queue.set_key_limits("pay", rate=0.001, per_tenant=False)
        queue.push_batch([Task.create("erin", limit_key="export") for _ in range(3)])
        queue.push_batch([Task.create("frank", limit_key="pay") for _ in range(2)])
        queue.push_batch([Task.create("erin") for _ in range(2)])
        assert len(queue.claim_batch(10)) == 4  # one export, one payment, erin's other two
        assert queue.get_key_limits("export").parked == {"erin": 2}
        assert raw.zscore(f"fq:{{{name}}}:parked", "|k|pay|") is not None
        assert check(raw, name) == []
        assert repair(raw, name) == []
        raw.hdel(f"fq:{{{name}}}:task:" + _parked_id(raw, name), "kp")  # damage: lost its mark
        assert any("is queued but is in ['kp:export|erin']" in x for x in check(raw, name))
        queue.purge_all()
    raw.close()


def _parked_id(raw: Any, name: str) -> str:
    [member] = raw.zrange(f"fq:{{{name}}}:kp:export|erin", 0, 0)
    return str(member.decode())
