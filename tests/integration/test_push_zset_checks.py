"""push.lua checks the queue's six sorted sets (tiers, delayed, leases, dlq, tenants, parked)
before its first write, whatever the call writes (ADR 29). ADR 56's shortcut, which skipped the
check for a plain push to tenants that had ready work, was deleted on 2026-12-02 (under 10 %,
docs/performance.md).

Pinned here, on Valkey 9 and Redis 7 (the session servers, a fresh queue per test): a push of
any kind (to tenants with ready work, a new tenant, a delayed or dependent message, limits in
use, a lost tenant's figures) refuses the call whole and typed while one of the sets is
damaged, nothing written; a tenant whose figures were lost is indexed again.
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


@pytest.mark.parametrize("family", ZSETS)
def test_a_push_to_tenants_with_ready_work_refuses_a_damaged_set(
    script_queue: tuple[RedisBackend, Any, str], family: str
) -> None:
    backend, raw, name = script_queue
    assert backend.push_batch([_msg("a"), _msg("b", "bob")]) == [True, True]
    key = _damage(raw, name, family)
    _refused_whole(raw, name, key, lambda: backend.push_batch([_msg("c"), _msg("d", "bob")]))
    _refused_whole(raw, name, key, lambda: backend.push(_msg("e")))


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


def test_a_critical_push_refuses_a_damaged_set(
    script_queue: tuple[RedisBackend, Any, str],
) -> None:
    backend, raw, name = script_queue
    assert backend.push_batch([_msg("a")]) == [True]
    key = _damage(raw, name, "tiers")
    _refused_whole(raw, name, key, lambda: backend.push(_msg("x", priority=Priority.CRITICAL)))
    _refused_whole(
        raw,
        name,
        key,
        lambda: backend.push_batch([_msg("b"), _msg("y", priority=Priority.CRITICAL)]),
    )


def test_a_push_with_limits_in_use_still_checks_the_sets(
    script_queue: tuple[RedisBackend, Any, str],
) -> None:
    backend, raw, name = script_queue
    assert backend.push_batch([_msg("a")]) == [True]
    backend.set_limits({"max_running": 5}, tenant="ann")
    key = _damage(raw, name, "parked")
    _refused_whole(raw, name, key, lambda: backend.push(_msg("b")))


def test_a_lost_figures_first_push_refuses_a_damaged_index(
    script_queue: tuple[RedisBackend, Any, str],
) -> None:
    backend, raw, name = script_queue
    assert backend.push_batch([_msg("a")]) == [True]
    # ann's figures lost (its `pushed` restarts: the push counts as its first) and the
    # tenants index damaged: refused whole before the first write
    raw.delete(f"fq:{{{name}}}:ts:ann")
    key = _damage(raw, name, "tenants")
    _refused_whole(raw, name, key, lambda: backend.push(_msg("b")))


def test_a_lost_figures_first_push_indexes_the_tenant_again(
    script_queue: tuple[RedisBackend, Any, str],
) -> None:
    backend, raw, name = script_queue
    assert backend.push_batch([_msg("a")]) == [True]
    raw.delete(f"fq:{{{name}}}:ts:ann")
    raw.delete(f"fq:{{{name}}}:tenants")
    assert backend.push(_msg("b")) is True
    assert raw.zrange(f"fq:{{{name}}}:tenants", 0, -1) == [b"ann"]
