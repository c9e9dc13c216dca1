"""R5, ambiguous replies: the proxy swallows ~1.5 % of push and claim replies (after the server
ran the script) while 1,500 tasks are pushed one by one and worked off by a worker process, both
through the proxy. A claim that carried the worker's acknowledgements (``finish_claim``, ADR 40)
is a claim here too: its finish was applied, the worker sends it again (a repeat, ADR 19).

Two clients (ADR 11):

- ``fairque``: the client ``RedisBackend.from_url`` builds, redis-py retries OFF (fairque's
  default). Every swallowed call raises ``OutcomeUnknownError``: the producer retries the push
  with the same id (push is idempotent), the worker backs off, and the orphaned lease of a
  swallowed claim comes back through the reaper;
- ``redis-default``: a ``redis.Redis(host=..., port=...)`` handed in, with redis-py's own default
  retries (10). The client re-sends the script on a new connection, so the caller sees a plain
  success (no typed error) while the script ran twice: a second push is a deduplicated no-op,
  a second claim leases other tasks and the first claim's orphans wait for the reaper.

In both: no acknowledged push is lost, no id is stored twice, every orphan is redelivered after
its lease expired and within lease + reaper interval + 1 s, executions are never duplicated
outside the orphans, the counters add up exactly and the structures are consistent.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from fairque_core import FairQueue, QueueConfig, Task
from fairque_redis.backends.backend import RedisBackend

from .faultproxy import FaultProxy, Swallowed
from .history import History, check, push_until_acknowledged, read_history
from .invariants import check as check_invariants
from .procs import WorkerProcs, wait_until

pytestmark = [pytest.mark.chaos, pytest.mark.redis, pytest.mark.timeout(120)]

TASKS = 1500
RATE = 0.015
LEASE = 1.0
REAPER = 0.5
BOUND = LEASE + REAPER + 1.0
CLAIM_FIELDS = 7  # per claimed task in claim.lua's reply: id, user, prio, rc, meta, body, rec


def script_ids(backend: Any, *names: str) -> set[bytes]:
    """What names these scripts' calls in a command's second word: the EVALSHA sha and, where
    the backend runs them as Redis Functions (ADR 41), the FCALL function name."""
    ids: set[bytes] = set()
    for name in names:
        script = backend._scripts[name]
        ids.add(script.sha.encode())
        if script.function is not None:
            ids.add(script.function.encode())
    return ids


def is_call(command: list[bytes], ids: set[bytes]) -> bool:
    return command[0].upper() in (b"EVALSHA", b"FCALL") and command[1] in ids


def orphans_of(claim: Swallowed) -> list[str]:
    """The task ids a swallowed claim reply carried (claim.lua: {now, n, 7 fields per task};
    finish_claim.lua: {finish flags, that claim reply})."""
    reply = claim.reply
    if len(reply) == 2 and isinstance(reply[0], list):  # finish_claim
        reply = reply[1]
    count = int(reply[1])
    return [reply[2 + CLAIM_FIELDS * k].decode() for k in range(count)]


def producer_backend(client: str, url: str, port: int, config: QueueConfig) -> RedisBackend:
    if client == "fairque":
        return RedisBackend.from_url(url, queue=config.name, config=config)
    return RedisBackend(redis.Redis(host="127.0.0.1", port=port), queue=config.name, config=config)


@pytest.fixture
def proxy(valkey_server: Any) -> Iterator[FaultProxy]:
    with FaultProxy(valkey_server.url) as running:
        yield running


@pytest.mark.parametrize("client", ["fairque", "redis-default"])
def test_r5_swallowed_push_and_claim_replies(
    valkey_server: Any,
    proxy: FaultProxy,
    raw: Any,
    queue_name: str,
    tmp_path: Path,
    seed: int,
    client: str,
) -> None:
    config = QueueConfig(name=queue_name, lease_seconds=LEASE)
    backend = producer_backend(client, proxy.url, proxy.port, config)
    queue = FairQueue(backend)
    push_ids = script_ids(backend, "push", "push_plain")  # the plain push too (ADR 80)
    claim_ids = script_ids(backend, "claim", "finish_claim")
    rng = random.Random(seed)

    def ambiguous(command: list[bytes]) -> bool:
        return is_call(command, push_ids | claim_ids) and rng.random() < RATE

    history_path = tmp_path / "history.jsonl"
    workers = WorkerProcs(proxy.url, queue_name, history_path)
    producer = History(history_path)
    try:
        proxy.swallow_reply_if(ambiguous)
        worker = workers.start(client=client, lease=LEASE, reaper=REAPER, concurrency=4)
        started = time.monotonic()
        ids = [f"r5-{k}" for k in range(TASKS)]
        for k, task_id in enumerate(ids):
            task = Task.create(f"u{k % 7}", task_id=task_id)
            push_until_acknowledged(lambda t=task: queue.push(t), task_id, producer, pause=0)
        pushed_in = time.monotonic() - started
        wait_until(
            lambda: int(raw.hget(f"fq:{{{queue_name}}}:stats", "finished") or 0) >= TASKS,
            BOUND + 20,
            "every task finished",
            step=0.05,
        )
        drained_in = time.monotonic() - started
        proxy.stop_swallowing()
        assert worker.poll() is None, workers.errors(worker)
        health = workers.stop(worker)

        swallowed = proxy.swallowed
        every_push = [s for s in swallowed if s.command[1] in push_ids]
        # the swallowed pushes that ran: not the plain push's referrals (-1: nothing written, the
        # client then sends push.lua the same arguments; ADR 80), whose retry stores the task
        # or counts the duplicate as the first try would have
        pushes = [s for s in every_push if s.reply != -1]
        claims = [s for s in swallowed if s.command[1] in claim_ids]
        # (id, when) of every lease a swallowed claim left behind; an id can be orphaned twice
        orphans = sorted((s.at, task_id) for s in claims for task_id in orphans_of(s))
        assert len(pushes) >= 5, "too few swallowed pushes to prove anything"
        assert len(orphans) >= 3, "too few orphaned claims to prove anything"

        records = read_history(history_path)
        states = {i: str(queue.get_state(i)) for i in ids}
        verdict = check(records, states)
        stats = queue.get_stats()
        # an orphan is redelivered by the next claim of its id: an execution, or another
        # swallowed claim
        claimed_at: dict[str, list[float]] = {}
        for rec in records:
            if rec["ev"] == "exec:start":
                claimed_at.setdefault(rec["id"], []).append(rec["t"])
        for at, task_id in orphans:
            claimed_at.setdefault(task_id, []).append(at)
        redelivery: dict[tuple[str, float], float] = {}
        for at, task_id in orphans:
            later = [t for t in claimed_at[task_id] if t > at]
            assert later, f"orphan {task_id} (claimed at {at}) was never claimed again"
            redelivery[(task_id, at)] = min(later) - at
        print(
            f"R5[{client}] seed={seed} tasks={TASKS} pushed_in={pushed_in:.2f}s "
            f"drained_in={drained_in:.2f}s swallowed_pushes={len(pushes)} "
            f"swallowed_claims={len(claims)} orphans={len(orphans)} "
            f"redelivery_min={min(redelivery.values()):.3f}s "
            f"redelivery_max={max(redelivery.values()):.3f}s {verdict.summary()} "
            f"worker={ {k: health[k] for k in ('processed', 'claimed', 'backend_errors')} }"
        )

        # nothing lost, nothing stored twice, nothing invented
        assert verdict.lost == set()
        assert verdict.unexpected == set()
        assert verdict.ok_pushes == set(ids)
        assert set(states.values()) == {"finished"}
        assert stats["pushed"] == TASKS
        assert stats["duplicates"] == len(pushes)  # each swallowed push ran exactly once more
        assert stats["finished"] == TASKS  # one FINISHED transition per id
        # every orphan came back through the reaper, after its lease and within the bound
        late = {k: round(d, 3) for k, d in redelivery.items() if not LEASE - 0.1 <= d <= BOUND}
        assert not late, f"orphans redelivered outside [{LEASE - 0.1}, {BOUND}] s: {late}"
        assert stats["recovered"] == len(orphans)
        assert stats["claimed"] == TASKS + len(orphans)
        assert set(verdict.dup_exec) <= {task_id for _, task_id in orphans}
        assert health["lease_lost"] == 0

        errors = [r for r in records if r["ev"] == "error"]
        unknown_pushes = [r for r in records if r["ev"] == "push:unknown"]
        if client == "fairque":
            # retries off: every swallowed call raised a typed error, none passed silently
            assert len(unknown_pushes) == len(every_push)  # a swallowed referral too
            assert verdict.failed_pushes == 0
            # a claim is the loop's own (alone or with its acks, ADR 40) or, for an idle
            # worker, its listener's (ADR 38)
            assert {e["op"] for e in errors} <= {"claim", "claim_when_ready", "finish_and_claim"}
            assert [e["error"] for e in errors] == ["OutcomeUnknownError"] * len(claims)
            assert health["backend_errors"] == len(claims)
        else:
            # redis-py's retries hide every swallowed reply: no error reaches fairque
            assert unknown_pushes == []
            assert errors == []
        assert check_invariants(raw, queue_name) == []
        assert proxy.errors == []
    finally:
        producer.close()
        workers.cleanup()
        queue.close()
        backend.client.close()  # a client handed in is not closed by the backend


FINISH_TASKS = 300
FINISH_RATE = 0.1


def test_r5_swallowed_finish_replies(
    valkey_server: Any, proxy: FaultProxy, raw: Any, queue_name: str, tmp_path: Path, seed: int
) -> None:
    """A finish whose reply is lost was applied: the worker gets ``OutcomeUnknownError``,
    keeps the acknowledgement and sends it again, and the second finish is recognised as a
    repeat of the first (same lease token): success, nothing changes. No task runs twice, each
    finishes once, and the worker books every one as ``processed``. Most acknowledgements ride
    on a claim (``finish_claim``, ADR 40): that claim's tasks are orphaned with the reply and
    come back through the reaper (never run before, so still no task runs twice)."""
    config = QueueConfig(name=queue_name, lease_seconds=LEASE)
    queue = FairQueue(RedisBackend.from_url(valkey_server.url, queue=queue_name, config=config))
    finish_ids = script_ids(queue.backend, "finish", "finish_claim")
    both_ids = script_ids(queue.backend, "finish_claim")
    rng = random.Random(seed)
    proxy.swallow_reply_if(lambda cmd: is_call(cmd, finish_ids) and rng.random() < FINISH_RATE)
    history_path = tmp_path / "history.jsonl"
    workers = WorkerProcs(proxy.url, queue_name, history_path)
    try:
        worker = workers.start(lease=LEASE, reaper=REAPER, concurrency=4, sleep=0.005)
        ids = [f"f-{k}" for k in range(FINISH_TASKS)]
        queue.push_batch([Task.create(f"u{k % 3}", task_id=i) for k, i in enumerate(ids)])
        wait_until(
            lambda: queue.get_stats()["finished"] >= FINISH_TASKS, 30, "the drain", step=0.05
        )
        time.sleep(LEASE + REAPER)  # a wrongly reaped lease would be claimed again by now
        health = workers.stop(worker)
        swallowed = proxy.swallowed
        flags = [s.reply[0] if s.command[1] in both_ids else s.reply for s in swallowed]
        applied = sum(1 for each in flags for flag in each if flag == 1)
        orphans = [i for s in swallowed if s.command[1] in both_ids for i in orphans_of(s)]
        records = read_history(history_path)
        verdict = check(records, {i: str(queue.get_state(i)) for i in ids})
        errors = [(r["op"], r["error"]) for r in records if r["ev"] == "error"]
        stats = queue.get_stats()
        print(
            f"R5[finish] seed={seed} tasks={FINISH_TASKS} swallowed_finishes={len(swallowed)} "
            f"items_applied_in_them={applied} orphans={len(orphans)} "
            f"executions={sum(verdict.executed.values())} "
            f"worker={ {k: health[k] for k in ('processed', 'lease_lost', 'backend_errors')} }"
        )
        assert len(swallowed) >= 3, "too few swallowed finishes to prove anything"
        assert len(errors) == len(swallowed)
        assert set(errors) <= {
            ("finish_batch", "OutcomeUnknownError"),
            ("finish_and_claim", "OutcomeUnknownError"),
        }
        assert verdict.executed == dict.fromkeys(ids, 1)  # nothing ran twice
        assert stats["finished"] == FINISH_TASKS
        assert (stats["claimed"], stats["recovered"]) == (
            FINISH_TASKS + len(orphans),
            len(orphans),
        )
        assert applied >= 1, "no swallowed finish was applied: the repeat went untested"
        assert (health["processed"], health["lease_lost"]) == (FINISH_TASKS, 0)
        assert check_invariants(raw, queue_name) == []
        assert proxy.errors == []
    finally:
        workers.cleanup()
        queue.close()
