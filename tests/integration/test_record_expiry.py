"""On server time, a closed record's keys all carry a real expiry (nothing leaks).

The contract suite runs on an injected clock, where only the logical expiry (``exp``) applies;
this file runs the Redis backend on the server's clock and reads the keys' PTTL directly. Every
key that names a finished or canceled task (``task:<id>``, ``waits:<id>``, ``children:<id>``,
and the ``done:<id>`` token result waiters block on, left only for a task a waiter armed)
must expire within the result TTL, whichever path closed it: a plain finish, a finished parent
with children, a deferred child that ran after its parent, a deferred child canceled by hand,
and the children canceled because their parent died.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import redis

from fairque_core import Message, Priority, QueueConfig
from fairque_redis import RedisBackend

pytestmark = [pytest.mark.redis, pytest.mark.timeout(30)]

TTL_MS = 60_000


def message(task_id: str, *depends_on: str) -> Message:
    return Message(
        task_id=task_id,
        tenant="alice",
        priority=Priority.NORMAL,
        body=b"{}",
        created_at=1_700_000_000.0,
        delay=0.0,
        depends_on=tuple(depends_on),
    )


def keys_of(client: redis.Redis, prefix: str, task_id: str) -> dict[str, int]:
    """PTTL of every key of the queue whose name ends in ``:<task_id>``."""
    found = {}
    for key in client.scan_iter(match=f"{prefix}*:{task_id}", count=1000):
        name = key.decode()
        found[name[len(prefix) :]] = int(client.pttl(key))
    return found


def watch(backend: RedisBackend, *task_ids: str) -> None:
    """Arm each task's end notification, as a result waiter does before it blocks."""
    for task_id in task_ids:
        assert backend.wait_done(task_id, 0.0) is False  # alive: armed, not ended


def run(backend: RedisBackend, task_id: str) -> None:
    [claimed] = backend.claim(count=1)
    assert claimed.message.task_id == task_id
    backend.finish(task_id, claimed.lease.token, b"done")


@pytest.fixture
def setup(valkey_server: Any) -> tuple[RedisBackend, redis.Redis, str]:
    queue = f"exp-{uuid.uuid4().hex[:8]}"
    backend = RedisBackend.from_url(
        valkey_server.url, queue=queue, config=QueueConfig(result_ttl_seconds=TTL_MS / 1000)
    )
    client = redis.Redis.from_url(valkey_server.url)
    return backend, client, f"fq:{{{queue}}}:"


def assert_all_expire(client: redis.Redis, prefix: str, task_id: str, kinds: set[str]) -> None:
    ttls = keys_of(client, prefix, task_id)
    assert {name.split(":")[0] for name in ttls} == kinds, ttls
    for name, ttl in ttls.items():
        assert 0 < ttl <= TTL_MS, f"{name} has PTTL {ttl}"


def test_finished_task_without_dependents(setup: tuple[RedisBackend, redis.Redis, str]) -> None:
    backend, client, prefix = setup
    backend.push(message("a"))
    watch(backend, "a")
    run(backend, "a")
    assert_all_expire(client, prefix, "a", {"task", "done"})


def test_no_token_for_a_task_nobody_waited_for(
    setup: tuple[RedisBackend, redis.Redis, str],
) -> None:
    backend, client, prefix = setup
    backend.push(message("a"))
    run(backend, "a")
    assert_all_expire(client, prefix, "a", {"task"})
    # a waiter that comes after the end does not block: the record says it ended
    assert backend.wait_done("a", 5.0) is True
    assert client.exists(f"{prefix}done:a") == 0
    assert backend.wait_done("never-pushed", 0.0) is False


def test_finished_parent_and_its_deferred_child(
    setup: tuple[RedisBackend, redis.Redis, str],
) -> None:
    backend, client, prefix = setup
    backend.push(message("p"))
    backend.push(message("c", "p"))
    watch(backend, "p", "c")
    assert client.exists(f"{prefix}waits:c") == 1
    run(backend, "p")
    assert_all_expire(client, prefix, "p", {"task", "children", "done"})
    # the child's waits set emptied when its parent finished: Redis removed it
    assert client.exists(f"{prefix}waits:c") == 0
    run(backend, "c")
    assert_all_expire(client, prefix, "c", {"task", "done"})


def test_deferred_child_canceled_by_hand(setup: tuple[RedisBackend, redis.Redis, str]) -> None:
    backend, client, prefix = setup
    backend.push(message("p"))
    backend.push(message("c", "p"))
    watch(backend, "c")
    assert backend.cancel("c") is True
    assert_all_expire(client, prefix, "c", {"task", "waits", "done"})


def test_children_of_a_dead_parent(setup: tuple[RedisBackend, redis.Redis, str]) -> None:
    backend, client, prefix = setup
    backend.push(message("p"))
    backend.push(message("c1", "p"))
    backend.push(message("c2", "c1"))
    watch(backend, "c1", "c2")
    [claimed] = backend.claim(count=1)
    backend.fail("p", claimed.lease.token, retry_delay=None)
    for child in ("c1", "c2"):
        kinds = {"task", "waits", "done"} | ({"children"} if child == "c1" else set())
        assert_all_expire(client, prefix, child, kinds)
    # the dead parent stays in the DLQ without an expiry, until purged
    assert client.pttl(f"{prefix}task:p") == -1
