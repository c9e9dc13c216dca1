"""ADR 56: push.lua checks the queue's six sorted sets (tiers, delayed, leases, dlq, tenants,
parked) only when the call may write one of them. A plain call without limits whose every
tenant already had ready work in the queue it pushes to activates no one, schedules nothing,
parks no one and indexes no new tenant: it skips the check (one ZINTERCARD of six keys).

Pinned here, on Valkey 9 and Redis 7 (the session servers, a fresh queue per test):
- such a push is stored while a sorted set it does not write is damaged;
- every push that would write one (a new tenant, an empty queue, a delayed or dependent
  message, limits in use) still refuses the call whole and typed, nothing written;
- the one write of a sorted set such a push can still make (fq_close's `tenants` entry, when
  a tenant's figures were lost) does not raise after the push's writes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from fairque_core import DamagedKeyError, Message, Priority
from fairque_redis.backends.backend import RedisBackend

pytestmark = [pytest.mark.redis, pytest.mark.timeout(60)]

ZSETS = ["tiers", "delayed", "leases", "dlq", "tenants", "parked"]


@pytest.fixture(autouse=True)
def _no_autoload(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAIRQUE_DISABLE_PLUGIN_AUTOLOAD", "1")


def _msg(
    task_id: str,
    tenant: str = "ann",
    priority: Priority = Priority.NORMAL,
    delay: float = 0.0,
    depends_on: tuple[str, ...] = (),
) -> Message:
    return Message(
        task_id=task_id,
        tenant=tenant,
        priority=priority,
        body=b"{}",
        delay=delay,
        depends_on=depends_on,
    )


def _damage(raw: Any, name: str, family: str) -> str:
    key = f"fq:{{{name}}}:{family}"
    raw.delete(key)
    raw.set(key, "junk")
    return key


def _snapshot(raw: Any, name: str) -> dict[bytes, bytes]:
    return {k: raw.dump(k) for k in raw.scan_iter(match=f"fq:{{{name}}}:*")}


def _refused_whole(raw: Any, name: str, key: str, push: Callable[[], object]) -> None:
    """``push`` raises DamagedKeyError naming ``key`` and writes nothing of the queue."""
    before = _snapshot(raw, name)
    with pytest.raises(DamagedKeyError) as err:
        push()
    assert err.value.key == key
    assert _snapshot(raw, name) == before


@pytest.mark.parametrize("family", ["delayed", "leases", "dlq", "parked"])
def test_a_push_to_tenants_with_ready_work_skips_the_sets_it_does_not_write(
    script_queue: tuple[RedisBackend, Any, str], family: str
) -> None:
    backend, raw, name = script_queue
    assert backend.push_batch([_msg("a"), _msg("b", "bob")]) == [True, True]
    _damage(raw, name, family)
    assert backend.push_batch([_msg("c"), _msg("d", "bob")]) == [True, True]
    assert backend.push(_msg("e")) is True
    assert raw.zcard(f"fq:{{{name}}}:n:ann") == 3
    assert raw.zcard(f"fq:{{{name}}}:n:bob") == 2
    assert raw.hget(f"fq:{{{name}}}:task:e", "st") == b"queued"
    stats = raw.hgetall(f"fq:{{{name}}}:stats")
    assert stats[b"pushed"] == b"5"
    assert raw.hget(f"fq:{{{name}}}:meta", "ready") == b"5"


@pytest.mark.parametrize(
    ("family", "message"),
    [
        ("tiers", _msg("x", "carl")),  # a new tenant: activated
        ("tenants", _msg("x", "carl")),  # a new tenant: indexed
        ("delayed", _msg("x", delay=60.0)),  # scheduled
        ("delayed", _msg("x", depends_on=("a",))),  # dependent: the schedule path
    ],
)
def test_a_push_that_may_write_a_set_still_refuses_it_damaged(
    script_queue: tuple[RedisBackend, Any, str], family: str, message: Message
) -> None:
    backend, raw, name = script_queue
    assert backend.push_batch([_msg("a")]) == [True]
    key = _damage(raw, name, family)
    # one message that writes no set and the one that may: the call is refused whole
    _refused_whole(raw, name, key, lambda: backend.push_batch([_msg("b"), message]))


def test_a_critical_push_checks_when_its_own_list_was_empty(
    script_queue: tuple[RedisBackend, Any, str],
) -> None:
    backend, raw, name = script_queue
    # ann is active (a normal task), but the call reads only the queue it pushes to: her
    # critical list, empty. Whether she needs activating is learnt only later (fq_activate),
    # so the call checks the sets, and refuses
    assert backend.push_batch([_msg("a")]) == [True]
    key = _damage(raw, name, "tiers")
    _refused_whole(raw, name, key, lambda: backend.push(_msg("x", priority=Priority.CRITICAL)))
    # in a call where her normal queue was read first (it held work), it does not
    assert backend.push_batch([_msg("b"), _msg("y", priority=Priority.CRITICAL)]) == [True, True]
    assert raw.lrange(f"fq:{{{name}}}:c:ann", 0, -1) == [b"y"]


def test_a_push_with_limits_in_use_still_checks_the_sets(
    script_queue: tuple[RedisBackend, Any, str],
) -> None:
    backend, raw, name = script_queue
    assert backend.push_batch([_msg("a")]) == [True]
    backend.set_limits({"max_running": 5}, tenant="ann")
    key = _damage(raw, name, "parked")
    _refused_whole(raw, name, key, lambda: backend.push(_msg("b")))


def test_a_lost_figures_first_push_does_not_raise_on_a_damaged_index(
    script_queue: tuple[RedisBackend, Any, str],
) -> None:
    backend, raw, name = script_queue
    assert backend.push_batch([_msg("a")]) == [True]
    # ann's figures lost (its `pushed` restarts: the push counts as its first) and the
    # tenants index damaged: the push, which checks no set, is stored; the index entry is
    # left for `fairque doctor`, nothing raised after the writes
    raw.delete(f"fq:{{{name}}}:ts:ann")
    _damage(raw, name, "tenants")
    assert backend.push(_msg("b")) is True
    assert raw.hget(f"fq:{{{name}}}:task:b", "st") == b"queued"
    assert raw.zcard(f"fq:{{{name}}}:n:ann") == 2
    assert raw.hget(f"fq:{{{name}}}:ts:ann", "pushed") == b"1"
    assert raw.type(f"fq:{{{name}}}:tenants") == b"string"


def test_a_lost_figures_first_push_indexes_the_tenant_again(
    script_queue: tuple[RedisBackend, Any, str],
) -> None:
    backend, raw, name = script_queue
    assert backend.push_batch([_msg("a")]) == [True]
    raw.delete(f"fq:{{{name}}}:ts:ann")
    raw.delete(f"fq:{{{name}}}:tenants")
    assert backend.push(_msg("b")) is True
    assert raw.zrange(f"fq:{{{name}}}:tenants", 0, -1) == [b"ann"]
