"""ADR 54: finish.lua type-checks the queue-wide keys after reading the record of its one item
and before its first write, as far as what the call may write. A finish of one common task (no
unique key, no lease under limits, no waiter, no XCom values, no dependents) writes only the
record, ``leases``, ``stats`` and the tenant's figures: it checks ``stats`` and ``leases`` (the
latter by the ZREM of its lease, its first write); a finish of several items, or of another
kind of task, checks every queue-wide key, as before. Either way a damaged key it may write
refuses the whole call, typed, before anything is written.

On Valkey 9 and Redis 7 (the session servers, a fresh queue per test).
"""

from __future__ import annotations

from typing import Any

import pytest

from fairque_core import DamagedKeyError, Message, Priority
from fairque_core.domain.models import Claimed
from fairque_redis.backends.backend import RedisBackend

pytestmark = [pytest.mark.redis, pytest.mark.timeout(60)]


@pytest.fixture(autouse=True)
def _no_autoload(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAIRQUE_DISABLE_PLUGIN_AUTOLOAD", "1")


def _claimed(backend: RedisBackend, *, unique: bool) -> list[Claimed]:
    """A common task and, with ``unique``, one holding a unique key, both claimed."""
    messages = [Message(task_id="plain-1", tenant="ann", priority=Priority.NORMAL, body=b"{}")]
    if unique:
        messages.append(
            Message(
                task_id="uniq-1",
                tenant="ann",
                priority=Priority.NORMAL,
                body=b"{}",
                unique_key="k1",
            )
        )
    assert all(backend.push_batch(messages))
    got = backend.claim(worker_id="w", count=len(messages))
    assert sorted(c.message.task_id for c in got) == sorted(m.task_id for m in messages)
    # the common task first: a batch whose first item alone would need the lighter checks
    return sorted(got, key=lambda c: c.message.task_id != "plain-1")


def _items(held: list[Claimed]) -> list[tuple[str, str, None]]:
    return [(c.message.task_id, c.lease.token, None) for c in held]


def _dump(raw: Any, name: str) -> dict[bytes, Any]:
    return {k: raw.dump(k) for k in raw.scan_iter(match=f"fq:{{{name}}}:*")}


@pytest.mark.parametrize("suffix", ["meta", "wake", "sched", "tiers", "dlq"])
def test_a_finish_of_a_task_with_a_unique_key_refuses_on_any_damaged_queue_key(
    script_queue: tuple[RedisBackend, Any, str], suffix: str
) -> None:
    backend, raw, name = script_queue
    held = _claimed(backend, unique=True)
    raw.set(f"fq:{{{name}}}:{suffix}", "junk")
    before = _dump(raw, name)
    with pytest.raises(DamagedKeyError) as err:
        backend.finish_batch(_items(held))  # the common task first, then the unique one
    assert err.value.key == f"fq:{{{name}}}:{suffix}"
    assert _dump(raw, name) == before  # not even the common task's record was written


@pytest.mark.parametrize("suffix", ["leases", "stats"])
def test_a_finish_of_a_common_task_refuses_on_a_damaged_key_it_writes(
    script_queue: tuple[RedisBackend, Any, str], suffix: str
) -> None:
    backend, raw, name = script_queue
    held = _claimed(backend, unique=False)
    raw.delete(f"fq:{{{name}}}:{suffix}")
    raw.set(f"fq:{{{name}}}:{suffix}", "junk")
    before = _dump(raw, name)
    with pytest.raises(DamagedKeyError) as err:
        backend.finish(held[0].message.task_id, held[0].lease.token)
    assert err.value.key == f"fq:{{{name}}}:{suffix}"
    assert _dump(raw, name) == before


@pytest.mark.parametrize("suffix", ["wake", "sched"])
def test_a_finish_of_a_common_task_leaves_the_signal_lists_alone(
    script_queue: tuple[RedisBackend, Any, str], suffix: str
) -> None:
    """It neither writes nor raises them: their damage is the next call's that does."""
    backend, raw, name = script_queue
    held = _claimed(backend, unique=False)
    key = f"fq:{{{name}}}:{suffix}"
    raw.delete(key)
    raw.set(key, "junk")
    assert backend.finish_batch(_items(held)) == [True]
    assert raw.get(key) == b"junk"
    assert raw.hget(f"fq:{{{name}}}:task:plain-1", "st") == b"finished"
    assert raw.zcard(f"fq:{{{name}}}:leases") == 0


def test_an_id_named_twice_in_one_finish_is_finished_once(
    script_queue: tuple[RedisBackend, Any, str],
) -> None:
    backend, raw, name = script_queue
    held = _claimed(backend, unique=False)
    item = _items(held)[0]
    assert backend.finish_batch([item, item]) == [True, True]
    assert raw.hget(f"fq:{{{name}}}:stats", "finished") == b"1"
    assert raw.hget(f"fq:{{{name}}}:ts:ann", "finished") == b"1"
    assert raw.hget(f"fq:{{{name}}}:ts:ann", "leased") == b"0"
    # another token for the finished task: a lost lease, nothing counted
    assert backend.finish_batch([(item[0], "not-the-token", None), item]) == [False, True]
    assert raw.hget(f"fq:{{{name}}}:stats", "finished") == b"1"


def test_an_id_named_first_with_a_lost_token_then_with_its_own_is_finished_and_unleased(
    script_queue: tuple[RedisBackend, Any, str],
) -> None:
    backend, raw, name = script_queue
    assert all(
        backend.push_batch(
            [
                Message(task_id=f"t{i}", tenant="ann", priority=Priority.NORMAL, body=b"{}")
                for i in range(2)
            ]
        )
    )
    held = sorted(backend.claim(worker_id="w", count=2), key=lambda c: c.message.task_id)
    first, second = _items(held)
    items = [first, (second[0], "not-the-token", None), second]
    assert backend.finish_batch(items) == [True, False, True]
    assert raw.hget(f"fq:{{{name}}}:task:t1", "st") == b"finished"
    assert raw.zcard(f"fq:{{{name}}}:leases") == 0
    assert raw.hget(f"fq:{{{name}}}:stats", "finished") == b"2"


def test_a_finish_of_common_tasks_ends_their_leases_only(
    script_queue: tuple[RedisBackend, Any, str],
) -> None:
    """Lost leases next to live ones: only the live ones leave ``leases``."""
    backend, raw, name = script_queue
    assert all(
        backend.push_batch(
            [
                Message(task_id=f"t{i}", tenant="ann", priority=Priority.NORMAL, body=b"{}")
                for i in range(4)
            ]
        )
    )
    held = sorted(backend.claim(worker_id="w", count=4), key=lambda c: c.message.task_id)
    items = _items(held)
    items[1] = (items[1][0], "not-the-token", None)
    items[3] = ("gone", "x", None)
    assert backend.finish_batch(items) == [True, False, True, False]
    leases = {m.decode() for m in raw.zrange(f"fq:{{{name}}}:leases", 0, -1)}
    assert leases == {"t1", "t3"}
    assert raw.hget(f"fq:{{{name}}}:stats", "finished") == b"2"
