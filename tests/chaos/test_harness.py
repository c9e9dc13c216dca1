"""The harness itself: the invariant checker passes on a consistent queue in every state and
fails on each kind of hand-made corruption; the history checker counts lost, duplicated and
unexpected tasks; the RESP parser pairs what the proxy needs."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from fairque_core import FairQueue, Priority, QueueConfig, Task, TaskState
from fairque_redis.backends.backend import RedisBackend
from fairque_redis.keys import KeySpace

from .faultproxy import RespError, RespParser, RespPush
from .history import History, check, push_until_acknowledged, read_history
from .invariants import check as check_invariants

pytestmark = [pytest.mark.chaos, pytest.mark.redis, pytest.mark.timeout(60)]


@pytest.fixture
def every_state(valkey_server: Any, queue_name: str) -> Iterator[tuple[FairQueue, dict[str, str]]]:
    """A queue holding a task in every state; returns the queue and id -> state."""
    config = QueueConfig(name=queue_name, lease_seconds=60)
    queue = FairQueue(RedisBackend.from_url(valkey_server.url, queue=queue_name, config=config))
    later = time.time() + 3600
    queue.push_batch(
        [
            Task.create("alice", Priority.NORMAL, task_id="queued"),
            Task.create("alice", Priority.CRITICAL, task_id="critical"),
            Task.create("bob", Priority.HIGH, task_id="started"),
            Task.create("carol", Priority.LOW, task_id="scheduled", execute_after=later),
            Task.create("dave", task_id="failed", max_retries=0),
            Task.create("erin", task_id="finished"),
            Task.create("frank", task_id="canceled"),
        ]
    )
    queue.push(Task.create("alice", task_id="deferred", depends_on=["queued"]))
    for tenant in ("bob", "dave", "erin"):
        task = queue.claim([tenant])
        assert task is not None
        if tenant == "dave":
            assert queue.fail(task, RuntimeError("boom")) is TaskState.FAILED
        elif tenant == "erin":
            queue.finish(task, {"ok": True})
    assert queue.cancel("canceled")
    states = {
        "queued": "queued",
        "critical": "queued",
        "started": "started",
        "scheduled": "scheduled",
        "failed": "failed",
        "finished": "finished",
        "canceled": "canceled",
        "deferred": "deferred",
    }
    try:
        yield queue, states
    finally:
        queue.close()


def test_a_consistent_queue_in_every_state_passes(
    every_state: tuple[FairQueue, dict[str, str]], raw: Any
) -> None:
    queue, states = every_state
    assert {i: str(queue.get_state(i)) for i in states} == states
    assert check_invariants(raw, queue.name) == []


Corruption = Callable[[Any, KeySpace], None]


def _drop_from_normal(raw: Any, keys: KeySpace) -> None:
    member = raw.zrange(keys.normal("alice"), 0, 0)[0]
    raw.zrem(keys.normal("alice"), member)


CORRUPTIONS: dict[str, tuple[Corruption, str]] = {
    "queued task missing from its zset": (_drop_from_normal, "is queued but is in []"),
    "one id in two structures": (
        lambda raw, k: raw.zadd(k.leases, {"critical": 1}),
        "task critical is in 2 structures",
    ),
    "state without its structure": (
        lambda raw, k: raw.hset(k.task("started"), "st", "finished"),
        "task started is finished but is in ['leases']",
    ),
    "tenant gauge off by one": (
        lambda raw, k: raw.hincrby(k.tenant_stats("carol"), "scheduled", 1),
        "tenant carol: ts scheduled = 2, real 1",
    ),
    "queue gauge off by one": (
        lambda raw, k: raw.hincrby(k.meta, "ready", 1),
        "meta ready = 3, real 2",
    ),
    "id without a task hash": (
        lambda raw, k: raw.zadd(k.delayed, {"ghost": 1}),
        "task ghost is in ['delayed'] but has no live task hash",
    ),
    "deferred task without waits": (
        lambda raw, k: raw.delete(k.waits("deferred")),
        "task deferred is deferred with no waits:deferred",
    ),
    "queue counter off": (
        lambda raw, k: raw.hincrby(k.stats, "finished", 1),
        "stats finished = 2, tenants sum 1",
    ),
    "key outside the prefix": (
        lambda raw, k: raw.set(f"stray:{k.queue}:x", 1),
        "names the queue but lies outside",
    ),
    "unknown family": (
        lambda raw, k: raw.set(k.prefix + "bogus:x", 1),
        "is not a family keys.py defines",
    ),
    "tenant left active": (
        lambda raw, k: raw.zadd(k.active(0), {"erin": 0}),
        "tenant erin has no ready task but is in active",
    ),
}


@pytest.mark.parametrize("name", sorted(CORRUPTIONS))
def test_each_corruption_is_reported(
    every_state: tuple[FairQueue, dict[str, str]], raw: Any, name: str
) -> None:
    queue, _ = every_state
    corrupt, expected = CORRUPTIONS[name]
    keys = KeySpace(queue.name)
    assert check_invariants(raw, queue.name) == []
    corrupt(raw, keys)
    try:
        violations = check_invariants(raw, queue.name)
        assert any(expected in v for v in violations), violations
    finally:
        raw.delete(f"stray:{queue.name}:x")


def test_history_checker_counts_lost_duplicates_and_unexpected(tmp_path: Path) -> None:
    with History(tmp_path / "a.jsonl") as producer, History(tmp_path / "b.jsonl") as handler:
        for task_id in ("t1", "t2", "t3", "t4"):
            producer.record("push:invoke", task_id, attempt=1)
            producer.record("push:ok", task_id, attempt=1)
        producer.record("push:invoke", "t5", attempt=1)
        producer.record("push:unknown", "t5", attempt=1)
        for task_id in ("t1", "t2", "t2", "t5", "zz"):
            handler.record("exec:start", task_id)
            handler.record("exec:end", task_id)
    records = read_history(tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "none")
    verdict = check(records, {"t1": "finished", "t2": "finished", "t3": "failed", "t5": "x"})
    assert verdict.lost == {"t4"}
    assert verdict.dup_exec == {"t2": 1}
    assert verdict.unexpected == {"zz"}
    assert verdict.recovered == {"t5"}
    assert verdict.unknown_pushes == 1
    assert "lost=1" in verdict.summary()


def test_push_until_acknowledged_retries_only_typed_connection_errors(tmp_path: Path) -> None:
    from fairque_core.domain.errors import OutcomeUnknownError, RedisConnectionError

    outcomes: list[BaseException | None] = [
        OutcomeUnknownError("maybe"),
        RedisConnectionError("refused"),
        None,
    ]

    def push() -> None:
        outcome = outcomes.pop(0)
        if outcome is not None:
            raise outcome

    with History(tmp_path / "h.jsonl") as history:
        assert push_until_acknowledged(push, "t1", history, pause=0) == 3

        def broken() -> None:
            raise KeyError("not a connection problem")

        with pytest.raises(KeyError):
            push_until_acknowledged(broken, "t2", history, pause=0)
    events = [(r["ev"], r["id"]) for r in read_history(tmp_path / "h.jsonl")]
    assert events == [
        ("push:invoke", "t1"),
        ("push:unknown", "t1"),
        ("push:invoke", "t1"),
        ("push:fail", "t1"),
        ("push:invoke", "t1"),
        ("push:ok", "t1"),
        ("push:invoke", "t2"),
        ("push:fail", "t2"),
    ]


def test_resp_parser_splits_pipelined_values_across_chunks() -> None:
    replies = RespParser()
    data = b"+OK\r\n:42\r\n$5\r\nhello\r\n*2\r\n$1\r\na\r\n-ERR no\r\n$-1\r\n%1\r\n+k\r\n:1\r\n"
    out: list[Any] = []
    for k in range(0, len(data), 3):  # three bytes at a time
        out.extend(value for value, _raw in replies.feed(data[k : k + 3]))
    assert out == [b"OK", 42, b"hello", [b"a", RespError(b"ERR no")], None, [b"k", 1]]
    assert isinstance(out[3][1], RespError)
    assert replies.pending == 0
    [(push, _)] = replies.feed(b">2\r\n+pubsub\r\n:1\r\n")  # RESP3 out-of-band push
    assert isinstance(push, RespPush)
    assert push == [b"pubsub", 1]
    requests = RespParser(requests=True)
    raw = b"*2\r\n$4\r\nECHO\r\n$2\r\nhi\r\nPING\r\n*1\r\n$4\r\nQU"
    parsed = requests.feed(raw)
    assert [value for value, _ in parsed] == [[b"ECHO", b"hi"], [b"PING"]]
    assert b"".join(chunk for _, chunk in parsed) == raw[: len(raw) - requests.pending]
