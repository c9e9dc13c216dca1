"""A claim on an idle queue returns before it opens the queue (ADR 59): no active tenant, an
empty intake, no delayed task and no parked tenant due. It reads those four keys and the time,
and writes nothing. Whatever becomes claimable is still claimed. A damaged key among those it
reads sends it down the full claim, which refuses typed as before. On Valkey 9 and Redis 7."""

from __future__ import annotations

import time
from typing import Any

import pytest

from fairque_core import Message, Priority
from fairque_core.domain.errors import DamagedKeyError

pytestmark = [pytest.mark.redis]

#: what the idle claim may run inside its script: TIME, ZCARD tiers, LLEN intake, ZRANGE of the
#: heads of delayed and parked
IDLE_COMMANDS = {"time", "zcard", "llen", "zrange"}
SCRIPT_CALLS = {"fcall", "evalsha", "fcall_ro"}


def _message(task_id: str, tenant: str = "a", delay: float = 0.0) -> Message:
    return Message(
        task_id=task_id, tenant=tenant, priority=Priority.NORMAL, body=b"{}", delay=delay
    )


def _claim(backend: Any, count: int = 10) -> list[Any]:
    return list(backend.claim(worker_id="w", count=count))


def _finish(backend: Any, claimed: list[Any]) -> None:
    assert all(backend.finish_batch([(c.message.task_id, c.lease.token, None) for c in claimed]))


def _make_idle(backend: Any) -> None:
    """A queue that has served a task (its keys exist) and has nothing left."""
    backend.push_batch([_message("warm")])
    _finish(backend, _claim(backend))
    assert _claim(backend) == []


def _dump(raw: Any, name: str) -> dict[bytes, bytes]:
    return {key: raw.dump(key) for key in raw.scan_iter(match=f"fq:{{{name}}}:*")}


def test_an_idle_claim_reads_four_keys_and_writes_nothing(
    script_queue: tuple[Any, Any, str],
) -> None:
    backend, raw, name = script_queue
    _make_idle(backend)
    before = _dump(raw, name)
    raw.config_resetstat()
    for _ in range(20):
        assert _claim(backend) == []
    stats = {key.removeprefix("cmdstat_"): value for key, value in raw.info("commandstats").items()}
    scripts = sum(int(stats[k]["calls"]) for k in SCRIPT_CALLS if k in stats)
    assert scripts == 20
    inner = set(stats) - SCRIPT_CALLS - {"config|resetstat", "config", "info"}
    assert inner <= IDLE_COMMANDS, inner
    # five commands a claim at most (no check of the other keys, no counter written)
    assert sum(int(stats[k]["calls"]) for k in inner) <= 5 * 20
    assert _dump(raw, name) == before


def test_work_that_becomes_due_is_still_claimed(script_queue: tuple[Any, Any, str]) -> None:
    backend, _raw, _name = script_queue
    _make_idle(backend)
    # a delayed task: not yet due, then due
    backend.push_batch([_message("later", delay=0.3)])
    assert _claim(backend) == []
    time.sleep(0.35)
    claimed = _claim(backend)
    assert [c.message.task_id for c in claimed] == ["later"]
    _finish(backend, claimed)
    # an entry of the intake (ADR 47)
    backend.push_intake([_message("via-intake")])
    claimed = _claim(backend)
    assert [c.message.task_id for c in claimed] == ["via-intake"]
    _finish(backend, claimed)
    assert _claim(backend) == []


def test_a_parked_tenant_is_claimed_once_it_is_due(script_queue: tuple[Any, Any, str]) -> None:
    backend, _raw, _name = script_queue
    _make_idle(backend)
    backend.set_limits({"rate": 4.0, "burst": 1}, tenant="slow")  # a start per 250 ms
    backend.push_batch([_message("s1", "slow"), _message("s2", "slow")])
    first = _claim(backend)
    assert [c.message.task_id for c in first] == ["s1"]
    assert _claim(backend) == []  # throttled: parked until its next start
    deadline = time.monotonic() + 3.0
    second: list[Any] = []
    while not second and time.monotonic() < deadline:
        time.sleep(0.05)
        second = _claim(backend)
    assert [c.message.task_id for c in second] == ["s2"]
    _finish(backend, first + second)


@pytest.mark.parametrize("suffix", ["tiers", "delayed"])
def test_a_damaged_key_it_reads_is_refused_typed(
    script_queue: tuple[Any, Any, str], suffix: str
) -> None:
    backend, raw, name = script_queue
    _make_idle(backend)
    key = f"fq:{{{name}}}:{suffix}"
    raw.delete(key)
    raw.set(key, "junk")
    with pytest.raises(DamagedKeyError) as err:
        _claim(backend)
    assert err.value.key == key


def test_a_damaged_key_it_does_not_read_waits_for_a_call_that_writes(
    script_queue: tuple[Any, Any, str],
) -> None:
    """ADR 54's rule, which ADR 59 follows: a call checks what it may write. The idle claim
    writes nothing, so a damaged meta is found by the next call that would write it."""
    backend, raw, name = script_queue
    _make_idle(backend)
    key = f"fq:{{{name}}}:meta"
    raw.delete(key)
    raw.set(key, "junk")
    assert _claim(backend) == []
    with pytest.raises(DamagedKeyError):
        backend.push_batch([_message("new")])
    assert raw.get(key) == b"junk"
