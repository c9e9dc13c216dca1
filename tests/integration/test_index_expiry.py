"""On server time the browse indexes (ADR 70) expire with the records they list: once every
finished and canceled record of a queue has expired (a real PEXPIRE of the result TTL), no
index key is left, and a failed task's entry stays as long as its DLQ entry."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
import redis

from fairque_core import Task, TaskState
from fairque_redis import connect

pytestmark = pytest.mark.redis


def _keys(raw: Any, pattern: str) -> set[str]:
    return {k.decode() for k in raw.scan_iter(match=pattern, count=1000)}


def test_indexes_expire_with_their_records(valkey_server: Any) -> None:
    name = f"exp-{uuid.uuid4().hex[:8]}"
    raw = redis.Redis.from_url(str(valkey_server.url))
    prefix = f"fq:{{{name}}}:"
    with connect(str(valkey_server.url), queue=name, result_ttl_seconds=1) as queue:
        queue.push_batch([Task.create(f"u{k % 3}", payload={}, task_id=f"f{k}") for k in range(6)])
        queue.push(Task.create("u0", payload={}, task_id="c0", execute_after=1e10))
        queue.push(Task.create("u1", payload={}, task_id="d0", max_retries=0))
        queue.cancel("c0")
        for task in queue.claim_batch(7, worker_id="w"):
            if task.task_id == "d0":
                queue.fail(task, RuntimeError("dead"))
            else:
                queue.finish(task, None)
        assert len(queue.list_tasks().items) == 8
        assert _keys(raw, prefix + "ix:*") == {
            prefix + f"ix:{s}{t}"
            for s, ts in (
                ("finished", ("u0", "u1", "u2")),
                ("canceled", ("u0",)),
                ("failed", ("u1",)),
            )
            for t in ("", *(":" + u for u in ts))
        }
        deadline = time.monotonic() + 20
        closed = {prefix + f"task:f{k}" for k in range(6)} | {prefix + "task:c0"}
        while _keys(raw, prefix + "task:*") & closed:  # the records' real expiry
            assert time.monotonic() < deadline
            time.sleep(0.05)
        while _keys(raw, prefix + "ix:*") != {prefix + "ix:failed", prefix + "ix:failed:u1"}:
            assert time.monotonic() < deadline, _keys(raw, prefix + "ix:*")
            time.sleep(0.05)
        [only] = queue.list_tasks().items
        assert (only.task_id, only.state) == ("d0", TaskState.FAILED)
    raw.close()
