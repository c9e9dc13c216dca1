"""What push.lua promises about its arguments, the tenant hash and the meta hash.

* A priority is accepted only as the client spells it ('1'-'6'), delays, windows and
  dependency counts as integers; any other spelling is refused (FQ_E_BAD_ARG priority /
  priority or delay / unique_window), nothing stored.
* The tenant hash is type-checked before the first write: a push of a tenant whose hash was
  damaged is refused typed, nothing written (whether or not the tenant already has ready work;
  ADR 39's shortcut that skipped the check was deleted on 2026-12-02, docs/performance.md).
* The meta hash: a push writes vtime, seq, ready and act back, so an absent field is written.

On Valkey 9 and Redis 7 (the session servers, a fresh queue per test).
"""

from __future__ import annotations

from typing import Any

import pytest

from fairque_core import DamagedKeyError, Message, Priority, TaskValidationError
from fairque_redis.backends.backend import RedisBackend
from fairque_redis.scripting.calls import Call

pytestmark = [pytest.mark.redis, pytest.mark.timeout(60)]

# ARGV offsets of the first message (after the 7-value header and the count)
PRIORITY, DELAY, WINDOW, DEPS = 10, 11, 15, 16


def msg(task_id: str, tenant: str = "alice", delay: float = 0.0) -> Message:
    return Message(
        task_id=task_id, tenant=tenant, priority=Priority.NORMAL, body=b"{}", delay=delay
    )


def snapshot(raw: Any, name: str) -> dict[bytes, Any]:
    return {k: raw.dump(k) for k in raw.scan_iter(match=f"fq:{{{name}}}:*")}


def push_raw(backend: RedisBackend, message: Message, **at: str) -> Any:
    """push.lua with the first message's ARGV values at the given offsets replaced."""
    call = backend._planner.push([message])
    args = list(call.args)
    offsets = {"priority": PRIORITY, "delay": DELAY, "window": WINDOW, "deps": DEPS}
    for field, value in at.items():
        args[offsets[field]] = value
    return backend._run(Call("push", args, call.parse))


@pytest.mark.parametrize(
    ("spelling", "field"),
    [
        ("0", "priority"),
        ("7", "priority"),
        ("2.5", "priority"),
        ("x", "priority"),
        ("", "priority"),
        ("3.0", "priority or delay"),
        ("03", "priority or delay"),
        ("3e0", "priority or delay"),
        (" 3", "priority or delay"),
    ],
)
def test_a_priority_spelled_otherwise_is_refused_as_before(
    script_queue: tuple[RedisBackend, Any, str], spelling: str, field: str
) -> None:
    backend, raw, name = script_queue
    backend.push(msg("warm"))
    before = snapshot(raw, name)
    with pytest.raises(TaskValidationError) as err:
        push_raw(backend, msg("t1"), priority=spelling)
    assert err.value.field == field
    assert snapshot(raw, name) == before


@pytest.mark.parametrize(
    ("at", "field"),
    [
        ({"delay": "1.5"}, "priority or delay"),
        ({"delay": "x"}, "priority or delay"),
        ({"window": "-1"}, "unique_window"),
        ({"window": "0.5"}, "unique_window"),
        ({"window": "x"}, "unique_window"),
    ],
)
def test_other_numbers_spelled_otherwise_are_refused_as_before(
    script_queue: tuple[RedisBackend, Any, str], at: dict[str, str], field: str
) -> None:
    backend, raw, name = script_queue
    backend.push(msg("warm"))
    before = snapshot(raw, name)
    with pytest.raises(TaskValidationError) as err:
        push_raw(backend, msg("t1"), **at)
    assert err.value.field == field
    assert snapshot(raw, name) == before


def test_every_priority_as_the_client_spells_it_is_stored(
    script_queue: tuple[RedisBackend, Any, str],
) -> None:
    backend, raw, name = script_queue
    for p in Priority:
        m = Message(task_id=f"t{int(p)}", tenant="alice", priority=p, body=b"{}")
        assert backend.push(m) is True
        assert raw.hget(f"fq:{{{name}}}:task:t{int(p)}", "p") == str(int(p)).encode()
    # a delay of 0 ms spelled "0" and a window "0" are the plain case: ready now
    assert push_raw(backend, msg("t9"), delay="0", window="0", deps="0") == [True]
    assert raw.hget(f"fq:{{{name}}}:task:t9", "st") == b"queued"
    assert backend.stats()["ready"] == len(Priority) + 1


def _damage_tenant_hash(raw: Any, name: str, tenant_id: str) -> bytes:
    key = f"fq:{{{name}}}:tenant:{tenant_id}"
    raw.delete(key)
    raw.set(key, "junk")
    return key.encode()


@pytest.mark.parametrize("case", ["no ready work", "ready work", "delayed", "limits on"])
def test_a_push_that_may_write_the_damaged_tenant_hash_is_refused_typed(
    script_queue: tuple[RedisBackend, Any, str], case: str
) -> None:
    backend, raw, name = script_queue
    backend.push(msg("b1", tenant="bob"))
    if case == "limits on":
        backend.set_limits({"max_queued": 100}, tenant="carol")
    if case != "no ready work":
        backend.push(msg("a1"))  # alice has ready work
    key = _damage_tenant_hash(raw, name, "alice")
    before = snapshot(raw, name)
    with pytest.raises(DamagedKeyError) as err:
        backend.push(msg("a2", delay=5.0 if case == "delayed" else 0.0))
    assert err.value.key == key.decode()
    assert snapshot(raw, name) == before


@pytest.mark.parametrize("field", ["vtime", "act"])
def test_meta_fields_the_push_did_not_change_are_kept_and_written_when_absent(
    script_queue: tuple[RedisBackend, Any, str], field: str
) -> None:
    backend, raw, name = script_queue
    meta = f"fq:{{{name}}}:meta"
    backend.push(msg("a1"))
    stored = raw.hgetall(meta)
    backend.push(msg("a2"))  # alice is active: vtime and act unchanged, still there
    after = raw.hgetall(meta)
    assert after[b"vtime"] == stored[b"vtime"]
    assert after[b"act"] == stored[b"act"]
    assert int(after[b"seq"]) == int(stored[b"seq"]) + 1
    assert int(after[b"ready"]) == 2
    # absent (a queue written by an older version, or damaged): read as 0 and written, as the
    # push always wrote all four
    raw.hdel(meta, field)
    backend.push(msg("a3"))
    assert raw.hget(meta, field) == b"0"
