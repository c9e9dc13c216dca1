"""The adapter edge: connection failures, ambiguous writes, OOM, URLs and secrets."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import pytest

from fairque_core import (
    BackendOutOfMemoryError,
    ConfigurationError,
    Message,
    OutcomeUnknownError,
    Priority,
    RedisConnectionError,
)
from fairque_core.settings.config import FairQueueConfig, QueueConfig, RedisConfig
from fairque_redis.backends.backend import RedisBackend
from fairque_redis.backends.client_options import client_options, normalize_url
from fairque_redis.factory import backend_from_url
from fairque_redis.servers.embedded import EmbeddedValkey

SECRET = "fq-SECRET-6d1f0c2e"


def _msg(task_id: str, body: bytes = b"{}") -> Message:
    return Message(task_id=task_id, tenant="u", priority=Priority.NORMAL, body=body)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_refused_connection_is_a_plain_connection_error() -> None:
    backend = RedisBackend.from_url(
        f"redis://:{SECRET}@127.0.0.1:{_closed_port()}/0", queue="q", socket_connect_timeout=1
    )
    with pytest.raises(RedisConnectionError) as info:
        backend.push(_msg("t1"))
    assert not isinstance(info.value, OutcomeUnknownError)
    assert SECRET not in str(info.value)
    assert SECRET not in repr(backend)
    backend.close()


def test_write_cut_off_after_sending_is_outcome_unknown(valkey_server: Any) -> None:
    import redis

    admin = redis.Redis.from_url(valkey_server.url)
    backend = RedisBackend.from_url(valkey_server.url, queue="edge-pause", socket_timeout=0.3)
    try:
        assert backend.push(_msg("warm")) is True
        admin.client_pause(1500, all=False)  # WRITE pause: the push script waits
        started = time.monotonic()
        with pytest.raises(OutcomeUnknownError):
            backend.push(_msg("t1"))
        assert time.monotonic() - started < 1.2  # no silent retry on a second connection
        admin.client_unpause()
        time.sleep(0.1)
        # the push ran once when the pause lifted (or not at all): retrying by id is safe
        assert backend.push(_msg("t1")) is False or backend.get_state("t1") is not None
        assert backend.stats()["pushed"] == 2
    finally:
        admin.client_unpause()
        backend.close()
        for key in admin.scan_iter(match="fq:\\{edge-pause\\}:*"):
            admin.delete(key)
        admin.close()


def test_out_of_memory_is_typed_and_leaves_no_partial_task() -> None:
    with EmbeddedValkey(extra_args=["--maxmemory", "3mb", "--maxmemory-policy", "noeviction"]) as s:
        backend = RedisBackend.from_url(s.url, queue="oom")
        body = b"x" * 20_000
        pushed = 0

        def flood() -> None:
            nonlocal pushed
            for i in range(2000):
                backend.push(_msg(f"t{i}", body))
                pushed += 1

        with pytest.raises(BackendOutOfMemoryError):
            flood()
        assert backend.stats()["pushed"] == pushed
        assert backend.stats()["ready"] == pushed
        assert backend.get_state(f"t{pushed}") is None
        # reads and claims keep working; finishing frees memory for more pushes
        [claimed] = backend.claim()
        backend.finish(claimed.message.task_id, claimed.lease.token)
        backend.close()


def test_urls_and_options() -> None:
    assert normalize_url("valkey://h:1/0") == "redis://h:1/0"
    assert normalize_url("valkeys://h:1/0") == "rediss://h:1/0"
    assert normalize_url("rediss://h:1") == "rediss://h:1"
    with pytest.raises(ConfigurationError) as info:
        normalize_url(f"http://user:{SECRET}@h")
    assert SECRET not in str(info.value)
    opts = client_options("rediss://h:1", {}, cluster=False)
    assert opts["ssl_cert_reqs"] == "required"
    assert opts["retry"].get_retries() == 0
    assert opts["retry_on_timeout"] is False
    with pytest.raises(ConfigurationError):
        client_options("redis://h", {"decode_responses": True}, cluster=False)


def test_from_config_uses_password_and_never_shows_it(valkey_server: Any) -> None:
    import redis

    admin = redis.Redis.from_url(valkey_server.url)
    admin.execute_command("ACL", "SETUSER", "fq-user", "on", f">{SECRET}", "~fq:*", "+@all")
    try:
        cfg = RedisConfig(url=valkey_server.url, username="fq-user", password=SECRET)
        backend = RedisBackend.from_config(cfg, QueueConfig(name="acl"))
        assert backend.push(_msg("t1")) is True
        assert SECRET not in repr(backend)
        backend.close()
        full = FairQueueConfig(redis=cfg, queue=QueueConfig(name="acl"))
        via_url = RedisBackend.from_url(valkey_server.url, config=full)
        assert via_url.get_state("t1") is not None
        via_url.close()
        wrong = RedisConfig(url=valkey_server.url, username="fq-user", password=SECRET + "x")
        bad = RedisBackend.from_config(wrong, QueueConfig(name="acl"))
        with pytest.raises(RedisConnectionError) as info:
            bad.push(_msg("t2"))
        assert not isinstance(info.value, OutcomeUnknownError)
        assert SECRET not in str(info.value)
        bad.close()
    finally:
        admin.execute_command("ACL", "DELUSER", "fq-user")
        for key in admin.scan_iter(match="fq:\\{acl\\}:*"):
            admin.delete(key)
        admin.close()


def test_factory_builds_both_faces(valkey_server: Any) -> None:
    from fairque_redis.backends.backend_async import AsyncRedisBackend

    sync = backend_from_url(valkey_server.url, queue="fac")
    assert isinstance(sync, RedisBackend)
    sync.close()
    face = backend_from_url(valkey_server.url.replace("redis://", "valkey://"), asyncio=True)
    assert isinstance(face, AsyncRedisBackend)


def test_concurrent_claims_never_share_a_task(valkey_server: Any) -> None:
    import redis

    backend = RedisBackend.from_url(valkey_server.url, queue="race")
    backend.push_batch([_msg(f"t{i}") for i in range(300)])
    seen: list[str] = []
    lock = threading.Lock()

    def worker() -> None:
        own = RedisBackend.from_url(valkey_server.url, queue="race")
        while got := own.claim(count=3):
            with lock:
                seen.extend(c.message.task_id for c in got)
        own.close()

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(seen) == sorted(f"t{i}" for i in range(300))
    backend.close()
    admin = redis.Redis.from_url(valkey_server.url)
    for key in admin.scan_iter(match="fq:\\{race\\}:*"):
        admin.delete(key)
    admin.close()


def test_async_face_mirrors_the_sync_face() -> None:
    import inspect

    from fairque_redis.backends.backend_async import AsyncRedisBackend

    def public(cls: type) -> dict[str, inspect.Signature]:
        return {
            name: inspect.signature(member)
            for name, member in vars(cls).items()
            if not name.startswith("_") and callable(member)
        }

    sync, face = public(RedisBackend), public(AsyncRedisBackend)
    assert sync.keys() == face.keys()
    for name, sig in sync.items():
        assert list(sig.parameters) == list(face[name].parameters), name
        if name not in ("from_url", "from_config"):
            assert inspect.iscoroutinefunction(getattr(AsyncRedisBackend, name)), name


def test_decoding_clients_are_refused() -> None:
    import redis

    with pytest.raises(ConfigurationError):
        RedisBackend(redis.Redis(decode_responses=True), queue="q")


def test_default_lease_tokens_are_drawn_per_batch_and_unique() -> None:
    """The default token source is read once per claim batch; tokens stay 128-bit, unique."""
    from fairque_core.ports import random_token
    from fairque_redis.keys import KeySpace
    from fairque_redis.scripting.calls import ScriptCalls as Planner

    planner = Planner(KeySpace("tokens"), QueueConfig(), None, random_token)
    drawn = [planner._draw_tokens(50) for _ in range(20)]
    flat = [token for batch in drawn for token in batch]
    assert all(len(batch) == 50 for batch in drawn)
    assert len(set(flat)) == len(flat) == 1000
    assert all(len(t) == 32 and int(t, 16) >= 0 for t in flat)
    planner._give_back(drawn[0][:3])  # unused tokens of a short claim are used first next time
    assert planner._draw_tokens(5)[:3] == drawn[0][:3]

    counting = iter(range(10_000))
    custom = Planner(KeySpace("tokens"), QueueConfig(), None, lambda: f"t{next(counting)}")
    assert custom._draw_tokens(3) == ["t0", "t1", "t2"]  # a given source is called per token


@pytest.mark.parametrize(
    "fields",
    [
        [b"t1", b"alice", b"3", b"0", b"[not json", b"{}"],
        [b"t1", b"alice", b"99", b"0", b'["application/json",3,0.0,0.0,[],{},""]', b"{}"],
        [b"t1", b"alice", b"3", None, b'["application/json",3,0.0,0.0,[],{},""]', b"{}"],
        [b"t1", b"alice", b"3", b"0", b"[" * 100_000 + b"]" * 100_000, b"{}"],
    ],
)
def test_unreadable_records_are_typed_and_salvaged(fields: list[bytes | None]) -> None:
    from fairque_core import TaskSerializationError
    from fairque_redis.scripting.calls import read_message, salvage_message

    with pytest.raises(TaskSerializationError, match="t1 has an unreadable record") as info:
        read_message(fields)
    salvaged = salvage_message(fields, str(info.value))
    assert salvaged.task_id == "t1"
    assert salvaged.tenant == "alice"
    assert salvaged.body == b"{}"
    assert "unreadable" in salvaged.headers["x-fairque-unreadable"]


@pytest.mark.parametrize("writes", [True, False])
def test_a_cluster_client_that_gave_up_on_redirects_is_typed(writes: bool) -> None:
    """redis-py's ClusterError ("TTL exhausted") after following MOVED/ASK/TRYAGAIN or a
    reconnect 16 times (a slot moving, a failover: R12): a write may have run in one of the
    attempts, so it is OutcomeUnknownError (push again, idempotent by id); a read is a plain
    RedisConnectionError (retry it). Never a bare BackendError."""
    import redis.exceptions as rexc

    from fairque_redis.backends.errors import translate_errors

    with pytest.raises(RedisConnectionError) as info, translate_errors("push", writes=writes):
        raise rexc.ClusterError("TTL exhausted.")
    assert isinstance(info.value, OutcomeUnknownError) is writes
    assert "TTL exhausted" in str(info.value)
