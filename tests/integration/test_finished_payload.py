"""Issue 16, defect 4: a finished task keeps its result, not its payload.

After a queue filled a small server to ``maxmemory`` and was drained to empty, pushes must
succeed again at once (before, every finished task kept its whole body for
``result_ttl_seconds``, so pushes were refused for up to an hour). Valkey 9 and Redis 7.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from fairque_core import (
    BackendOutOfMemoryError,
    FairQueue,
    InMemoryBackend,
    Message,
    Priority,
    QueueConfig,
    Task,
    TaskSerializationError,
    TaskState,
)
from fairque_redis.backends.backend import RedisBackend
from fairque_redis.servers.embedded import (
    EmbeddedValkey,
    RedisServerProcess,
    ServerBinaryNotFoundError,
)

pytestmark = pytest.mark.redis

KINDS = {"valkey": EmbeddedValkey, "redis7": RedisServerProcess}
BODY = b"x" * 20_000


@pytest.fixture(params=sorted(KINDS))
def small_server(request: pytest.FixtureRequest) -> Iterator[Any]:
    args = ["--maxmemory", "20mb", "--maxmemory-policy", "noeviction"]
    try:
        server = KINDS[request.param](extra_args=args)
    except ServerBinaryNotFoundError as exc:
        pytest.skip(f"{request.param} unavailable: {exc}")
    with server:
        yield server


def _msg(task_id: str) -> Message:
    return Message(task_id=task_id, tenant="u", priority=Priority.NORMAL, body=BODY)


def _fill(backend: RedisBackend, prefix: str) -> int:
    """Push until the server refuses with BackendOutOfMemoryError; how many fitted."""
    for i in range(5000):
        try:
            backend.push(_msg(f"{prefix}{i}"))
        except BackendOutOfMemoryError:
            return i
    raise AssertionError("the server never filled up")


def test_pushes_succeed_again_after_an_out_of_memory_drain(small_server: Any) -> None:
    backend = RedisBackend.from_url(small_server.url, queue="oom-drain")
    try:
        pushed = _fill(backend, "t")
        assert pushed > 100
        finished = 0
        while True:
            claimed = backend.claim(count=50)
            if not claimed:
                break
            items = [(c.message.task_id, c.lease.token, b'"ok"') for c in claimed]
            finished += sum(backend.finish_batch(items))
        assert finished == pushed
        stats = backend.stats()
        assert (stats["ready"], stats["leased"], stats["finished"]) == (0, 0, pushed)
        assert stats["result_bytes"] == 4 * pushed
        # the finished records keep state, result and a 256-byte preview of the 20 kB
        # payload (ADR 70): nearly as many pushes fit again
        again = _fill(backend, "again")
        print(f"pushed {pushed} until full, {again} again after the drain")
        assert again >= 0.85 * pushed  # 0 before (the bodies stayed for the result TTL)
        assert backend.get_state("t0") is TaskState.FINISHED
        assert backend.get_result("t0") == b'"ok"'
        assert backend.get_message("t0") is None  # the payload is gone
    finally:
        backend.close()


@pytest.fixture(params=["memory", "valkey"])
def queue(request: pytest.FixtureRequest) -> Iterator[FairQueue]:
    config = QueueConfig(name="finished-cap", max_payload_bytes=1000)
    if request.param == "memory":
        made = FairQueue(InMemoryBackend(config=config))
    else:
        url = request.getfixturevalue("valkey_server").url
        made = FairQueue(RedisBackend.from_url(url, config=config))
    with made:
        yield made


def test_results_are_capped_and_the_payload_is_gone(queue: FairQueue) -> None:
    queue.push(Task.create("alice", task_id="big", payload={"data": "p" * 500}))
    queue.push(Task.create("alice", task_id="ok", payload={"data": "p" * 500}))
    big = queue.claim()
    assert big is not None
    with pytest.raises(TaskSerializationError, match="over the limit of 1000 bytes"):
        queue.finish(big, "r" * 2000)
    assert queue.get_state("big") is TaskState.STARTED  # nothing changed
    queue.finish(big, "r" * 900)
    assert queue.get_result("big") == "r" * 900
    got = queue.get_task("big")  # finished: a short payload stays with the record (ADR 70)
    assert got is not None
    assert (got.state, got.payload, got.result) == (
        TaskState.FINISHED,
        {"data": "p" * 500},
        "r" * 900,
    )
    assert queue.get_stats()["result_bytes"] == 902
    assert queue.get_task("ok") is not None  # not finished: still there
