"""Writes under ``durability="replicated"`` (ADR 33) run as Redis Functions (ADR 41): the
script goes as ``FCALL`` on the held connection that then sends the ``WAIT`` (and
``WAITAOF``), with the same load and fallback as any call: a missing library is loaded once and
the write sent again, an ACL without ``+fcall`` falls back to ``EVALSHA``, and
``scripts="eval"`` never sends ``FCALL``. Counted by the primary (``INFO commandstats``), on a
Valkey 9 pair (WAIT then WAITAOF) and a Redis 7.0 pair (WAIT only), each primary with one
replica that confirms."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from fairque_core import Message, Priority
from fairque_redis.backends.backend import RedisBackend
from fairque_redis.backends.backend_async import AsyncRedisBackend
from fairque_redis.durability.modes import Durability
from fairque_redis.scripting.function_library import LIBRARY
from fairque_redis.servers.embedded import (
    EmbeddedValkey,
    RedisServerProcess,
    ServerBinaryNotFoundError,
)

pytestmark = pytest.mark.redis

_COUNTED = ("fcall", "evalsha", "function|load", "script|load", "wait", "waitaof")
REPLICATED = Durability("replicated", timeout_ms=2000)


def _calls(raw: Any) -> dict[str, int]:
    stats = raw.info("commandstats")
    return {n: int(stats.get(f"cmdstat_{n}", {}).get("calls", 0)) for n in _COUNTED}


def _delta(raw: Any, before: dict[str, int]) -> dict[str, int]:
    after = _calls(raw)
    return {n: after[n] - before[n] for n in _COUNTED}


def _msg(task_id: str, tenant: str = "u") -> Message:
    return Message(task_id=task_id, tenant=tenant, priority=Priority.NORMAL, body=b"{}")


def _queue() -> str:
    return f"rf-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module", params=["valkey", "redis7"])
def pair(request: pytest.FixtureRequest) -> Iterator[tuple[Any, Any, str]]:
    """A primary and a replica that confirms (AOF with ``appendfsync always``), in sync."""
    kind = str(request.param)
    make = EmbeddedValkey if kind == "valkey" else RedisServerProcess
    try:
        primary = make(extra_args=["--repl-diskless-sync-delay", "0"])
    except ServerBinaryNotFoundError as exc:
        pytest.skip(f"{kind} unavailable: {exc}")
    with primary:
        replica = make(
            appendonly=True,
            extra_args=["--appendfsync", "always", "--replicaof", "127.0.0.1", str(primary.port)],
        )
        with replica:
            raw = redis.Redis.from_url(replica.url)
            deadline = time.monotonic() + 15
            while raw.info("replication").get("master_link_status") != "up":
                assert time.monotonic() < deadline, "the replica never synced"
                time.sleep(0.02)
            raw.close()
            yield primary, replica, kind


@pytest.fixture
def raw(pair: tuple[Any, Any, str]) -> Iterator[Any]:
    client = redis.Redis.from_url(pair[0].url)
    yield client
    client.close()


def _writes(backend: RedisBackend) -> int:
    """Waited writes of several scripts; returns how many were sent."""
    assert backend.push(_msg("a")) is True
    assert backend.push_batch([_msg("b"), _msg("c")]) == [True, True]
    claimed = {c.message.task_id: c for c in backend.claim(worker_id="w", count=3)}  # no wait
    backend.finish("a", claimed["a"].lease.token, b"ok")
    assert backend.finish_batch([("b", claimed["b"].lease.token, b"ok")]) == [True]
    backend.release("c", claimed["c"].lease.token)
    assert backend.cancel("c") is True
    backend.set_tenant_weight("u", 2.0)
    return 7


def test_replicated_writes_go_by_fcall_and_wait_on_the_same_connection(
    pair: tuple[Any, Any, str], raw: Any
) -> None:
    primary, replica, kind = pair
    queue = _queue()
    before = _calls(raw)
    with (
        RedisBackend.from_url(primary.url, queue=queue, durability=REPLICATED) as backend,
        RedisBackend.from_url(replica.url, queue=queue) as on_replica,
    ):
        writes = _writes(backend)
        assert on_replica.get_result("a") == b"ok"  # there when the finish returned
        assert str(on_replica.get_state("c")) == "canceled"
        assert on_replica.stats() == backend.stats()
    sent = _delta(raw, before)
    assert sent["evalsha"] == 0, sent
    assert sent["script|load"] == 0, sent
    assert sent["fcall"] >= writes + 1, sent  # the waited writes and the claim
    assert sent["wait"] >= writes + 1, sent  # each write's WAIT (and the probe)
    if kind == "valkey":
        assert sent["waitaof"] >= writes + 1, sent  # WAITAOF after each answered WAIT


def test_replicated_writes_with_scripts_eval_send_no_fcall(
    pair: tuple[Any, Any, str], raw: Any
) -> None:
    primary = pair[0]
    before = _calls(raw)
    with RedisBackend.from_url(
        primary.url + "?scripts=eval", queue=_queue(), durability=REPLICATED
    ) as backend:
        writes = _writes(backend)
    sent = _delta(raw, before)
    assert sent["fcall"] == 0, sent
    assert sent["function|load"] == 0, sent
    assert sent["evalsha"] >= writes + 1, sent


def test_a_missing_library_is_loaded_once_and_the_write_sent_again(
    pair: tuple[Any, Any, str], raw: Any
) -> None:
    primary, replica = pair[0], pair[1]
    queue = _queue()
    with (
        RedisBackend.from_url(primary.url, queue=queue, durability=REPLICATED) as backend,
        RedisBackend.from_url(replica.url, queue=queue) as on_replica,
    ):
        assert backend.push(_msg("a")) is True
        raw.function_flush()
        before = _calls(raw)
        assert backend.push(_msg("b")) is True  # Function not found -> load -> FCALL again
        assert backend.push(_msg("b")) is False  # applied once, not twice
        sent = _delta(raw, before)
        assert on_replica.get_state("b") is not None
        assert on_replica.stats()["pushed"] == 2
    assert sent["function|load"] == 1, sent
    assert sent["fcall"] == 3, sent  # the refused one, the retry, the duplicate
    assert sent["evalsha"] == 0, sent
    assert raw.function_list(library=LIBRARY.name)  # the library is back


def test_an_acl_without_fcall_falls_back_to_evalsha_for_replicated_writes(
    pair: tuple[Any, Any, str], raw: Any, caplog: Any
) -> None:
    primary, replica = pair[0], pair[1]
    user = f"rf-{uuid.uuid4().hex[:6]}"
    raw.execute_command("ACL", "SETUSER", user, "on", ">pw", "~*", "&*", "+@all", "-fcall")
    queue = _queue()
    url = f"redis://{user}:pw@127.0.0.1:{primary.port}/0"
    try:
        before = _calls(raw)
        with (
            caplog.at_level(logging.WARNING, logger="fairque.redis"),
            RedisBackend.from_url(url, queue=queue, durability=REPLICATED) as backend,
            RedisBackend.from_url(replica.url, queue=queue) as on_replica,
        ):
            writes = _writes(backend)
            assert on_replica.get_result("a") == b"ok"
        sent = _delta(raw, before)
        assert sent["evalsha"] >= writes, sent  # every write ran, by EVALSHA
        assert sent["fcall"] == 0, sent  # the refused one is not counted
        refusals = [r for r in caplog.records if "refuses Redis Functions" in r.getMessage()]
        assert len(refusals) == 1
    finally:
        raw.execute_command("ACL", "DELUSER", user)


def test_the_asyncio_backend_sends_replicated_writes_by_fcall(
    pair: tuple[Any, Any, str], raw: Any
) -> None:
    primary = pair[0]

    async def scenario() -> None:
        backend = AsyncRedisBackend.from_url(primary.url, queue=_queue(), durability=REPLICATED)
        try:
            assert await backend.push(_msg("a")) is True
            raw.function_flush()
            assert await backend.push_batch([_msg("b"), _msg("c")]) == [True, True]
            assert await backend.cancel("c") is True
        finally:
            await backend.close()

    before = _calls(raw)
    asyncio.run(scenario())
    sent = _delta(raw, before)
    assert sent["evalsha"] == 0, sent
    assert sent["function|load"] == 1, sent
    assert sent["fcall"] >= 4, sent


def test_with_scripts_eval_a_flushed_script_is_loaded_once_and_the_write_sent_again(
    pair: tuple[Any, Any, str], raw: Any
) -> None:
    primary, replica = pair[0], pair[1]
    queue = _queue()
    with (
        RedisBackend.from_url(
            primary.url + "?scripts=eval", queue=queue, durability=REPLICATED
        ) as backend,
        RedisBackend.from_url(replica.url, queue=queue) as on_replica,
    ):
        assert backend.push(_msg("a")) is True
        raw.script_flush()
        before = _calls(raw)
        assert backend.push(_msg("b")) is True  # NOSCRIPT -> SCRIPT LOAD -> EVALSHA again
        sent = _delta(raw, before)
        assert on_replica.stats()["pushed"] == 2
    assert sent["script|load"] == 1, sent
    assert sent["evalsha"] == 2, sent  # the refused one and the retry
    assert sent["fcall"] == 0, sent
