"""push.lua counts its messages in ``stats`` (pushed and duplicates) as the store makes them: an
id named twice is stored once, a live id is a duplicate, an expired one is stored anew. A
damaged ``stats`` refuses the call whole, typed, nothing written (checked before the first
write). ADR 54's "count first" shortcut was deleted on 2026-12-02 (docs/performance.md); these
are the behaviours it kept.

On Valkey 9 and Redis 7 (the session servers, a fresh queue per test).
"""

from __future__ import annotations

from typing import Any

import pytest

from fairque_core import DamagedKeyError, Message, Priority
from fairque_redis.backends.backend import RedisBackend

pytestmark = [pytest.mark.redis, pytest.mark.timeout(60)]


@pytest.fixture(autouse=True)
def _no_autoload(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAIRQUE_DISABLE_PLUGIN_AUTOLOAD", "1")


def _msg(task_id: str, tenant: str = "ann", unique_key: str = "") -> Message:
    return Message(
        task_id=task_id,
        tenant=tenant,
        priority=Priority.NORMAL,
        body=b"{}",
        unique_key=unique_key,
    )


def _stats(raw: Any, name: str) -> dict[str, int]:
    got = raw.hgetall(f"fq:{{{name}}}:stats")
    return {k.decode(): int(v) for k, v in got.items()}


def test_pushed_and_duplicates_are_counted_as_stored(
    script_queue: tuple[RedisBackend, Any, str],
) -> None:
    backend, raw, name = script_queue
    assert backend.push_batch([_msg("a")]) == [True]
    # a live id, an id twice, a new one: 2 stored, 2 duplicates
    assert backend.push_batch([_msg("a"), _msg("b"), _msg("b"), _msg("c", "bob")]) == [
        False,
        True,
        False,
        True,
    ]
    stats = _stats(raw, name)
    assert stats["pushed"] == 3
    assert stats["duplicates"] == 2
    assert raw.hget(f"fq:{{{name}}}:ts:ann", "pushed") == b"2"
    assert raw.hget(f"fq:{{{name}}}:ts:ann", "duplicates") == b"2"
    # duplicates only: counted, nothing stored
    assert backend.push_batch([_msg("a"), _msg("c", "bob")]) == [False, False]
    stats = _stats(raw, name)
    assert stats["pushed"] == 3
    assert stats["duplicates"] == 4


def test_an_expired_record_is_stored_anew_and_counted_pushed(
    script_queue: tuple[RedisBackend, Any, str],
) -> None:
    backend, raw, name = script_queue
    assert backend.push_batch([_msg("a")]) == [True]
    raw.hset(f"fq:{{{name}}}:task:a", mapping={"st": "finished", "exp": "1"})
    assert backend.push_batch([_msg("a")]) == [True]
    assert _stats(raw, name)["pushed"] == 2
    assert _stats(raw, name).get("duplicates", 0) == 0


@pytest.mark.parametrize("unique", [False, True])
def test_a_push_onto_a_damaged_stats_hash_writes_nothing(
    script_queue: tuple[RedisBackend, Any, str], unique: bool
) -> None:
    backend, raw, name = script_queue
    assert backend.push_batch([_msg("a")]) == [True]
    raw.delete(f"fq:{{{name}}}:stats")
    raw.set(f"fq:{{{name}}}:stats", "junk")
    before = {k: raw.dump(k) for k in raw.scan_iter(match=f"fq:{{{name}}}:*")}
    with pytest.raises(DamagedKeyError) as err:
        backend.push_batch([_msg("b", unique_key="k" if unique else ""), _msg("a")])
    assert err.value.key == f"fq:{{{name}}}:stats"
    after = {k: raw.dump(k) for k in raw.scan_iter(match=f"fq:{{{name}}}:*")}
    assert after == before
