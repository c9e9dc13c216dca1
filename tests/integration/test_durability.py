"""``durability`` (ADR 33): its settings are checked, the default mode never waits, and the
replicated mode waits on the right connection and node and raises NotReplicatedError typed.

On servers without a replica (the session's Valkey and Redis 7, the 3-master cluster) every
wait runs out, which is what these tests use: the replicated mode must raise after the write
was applied. The failover itself (a real replica, a partition, a promotion) is R8 in
tests/chaos/test_r8_failover.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster

from fairque_core import (
    BackendPermissionError,
    ConfigurationError,
    FairQueueConfig,
    LeaseLostError,
    Message,
    NotReplicatedError,
    OutcomeUnknownError,
    Priority,
    QueueConfig,
    RedisConfig,
    Task,
)
from fairque_redis import connect
from fairque_redis.backends.backend import RedisBackend
from fairque_redis.backends.backend_async import AsyncRedisBackend
from fairque_redis.durability.modes import Durability
from fairque_redis.keys import KeySpace

SESSION = {"valkey": "valkey_server", "redis7": "redis7_server"}
SHORT_MS = 50  # the wait on a server that has no replica: every one runs out


def _msg(task_id: str, tenant: str = "u") -> Message:
    return Message(task_id=task_id, tenant=tenant, priority=Priority.NORMAL, body=b"{}")


def _queue() -> str:
    return f"dur-{uuid.uuid4().hex[:8]}"


def _waits(client: Any) -> tuple[int, int]:
    """Calls of WAIT and WAITAOF the server has run (INFO commandstats)."""
    stats = client.info("commandstats")
    return (
        int(stats.get("cmdstat_wait", {}).get("calls", 0)),
        int(stats.get("cmdstat_waitaof", {}).get("calls", 0)),
    )


# ---------------------------------------------------------------------- settings


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("durability", "replica"),
        ("durability", "REPLICATED"),
        ("durability", None),
        ("replication_timeout_ms", 0),
        ("replication_timeout_ms", -5),
        ("replication_timeout_ms", 60_001),
        ("replication_timeout_ms", 1.5),
        ("replication_timeout_ms", True),
        ("replica_fsync", "yes"),
    ],
)
def test_bad_settings_are_configuration_errors(field: str, value: object) -> None:
    with pytest.raises(ConfigurationError) as caught:
        RedisConfig(**{field: value})  # type: ignore[arg-type]
    assert caught.value.path == f"redis.{field}"


def test_settings_from_a_file_and_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    config = FairQueueConfig.from_dict(
        {"redis": {"durability": "replicated", "replication_timeout_ms": 200}}
    )
    assert Durability.of(config) == Durability("replicated", 200, True)
    monkeypatch.setenv("FAIRQUE_REDIS__DURABILITY", "replicated")
    monkeypatch.setenv("FAIRQUE_REDIS__REPLICA_FSYNC", "false")
    assert Durability.of(FairQueueConfig.from_dict({})) == Durability("replicated", 500, False)
    monkeypatch.setenv("FAIRQUE_REDIS__DURABILITY", "sync")
    with pytest.raises(ConfigurationError):
        FairQueueConfig.from_dict({})
    assert Durability.of(None) == Durability()
    with pytest.raises(ConfigurationError):
        Durability.of("always")
    with pytest.raises(ConfigurationError):
        Durability("replicated", timeout_ms=0)


@pytest.mark.redis
def test_the_wait_must_fit_in_the_socket_timeout(valkey_server: Any) -> None:
    """A WAIT longer than the socket timeout would end as a broken connection."""
    with pytest.raises(ConfigurationError, match="socket timeout") as caught:
        RedisBackend.from_url(
            valkey_server.url,
            socket_timeout=1.0,
            durability=Durability("replicated", timeout_ms=1000),
        )
    assert caught.value.path == "redis.replication_timeout_ms"
    config = FairQueueConfig(
        redis=RedisConfig(
            url=valkey_server.url, durability="replicated", replication_timeout_ms=900
        )
    )
    RedisBackend.from_config(config.redis).close()  # 0.9 s under the default 5 s: fine


@pytest.mark.redis
def test_connect_takes_durability(valkey_server: Any) -> None:
    with pytest.raises(ConfigurationError):
        connect(valkey_server.url, queue=_queue(), durability="eventually")
    with pytest.raises(ConfigurationError, match="partitioned"):
        connect(valkey_server.url, queue=_queue(), durability="replicated", partitions=2)
    config = FairQueueConfig(redis=RedisConfig(replication_timeout_ms=SHORT_MS))
    queue = connect(valkey_server.url, queue=_queue(), config=config, durability="replicated")
    try:
        with pytest.raises(NotReplicatedError):
            queue.push(Task.create("u"))
    finally:
        queue.close()


# ---------------------------------------------------------------------- default: no wait


@pytest.mark.redis
@pytest.mark.parametrize("kind", sorted(SESSION))
def test_default_mode_sends_no_wait(kind: str, request: pytest.FixtureRequest) -> None:
    """Every kind of write in the default mode: WAIT and WAITAOF counts stay unchanged. The
    same calls in the replicated mode move the count (so the reading can fail)."""
    server = request.getfixturevalue(SESSION[kind])
    raw = redis.Redis.from_url(server.url)
    queue = _queue()

    def writes(backend: RedisBackend, prefix: str) -> None:
        for n in range(3):
            with contextlib.suppress(NotReplicatedError):
                backend.push(_msg(f"{prefix}{n}"))
        for claimed in backend.claim(worker_id="w", count=2):
            with contextlib.suppress(NotReplicatedError):
                backend.finish(claimed.message.task_id, claimed.lease.token, b"ok")
        with contextlib.suppress(NotReplicatedError):
            backend.cancel(f"{prefix}2")

    before = _waits(raw)
    with RedisBackend.from_url(server.url, queue=queue) as backend:
        writes(backend, "d")
        assert backend.stats()["finished"] == 2
    assert _waits(raw) == before

    replicated = Durability("replicated", timeout_ms=SHORT_MS)
    with RedisBackend.from_url(server.url, queue=queue, durability=replicated) as backend:
        writes(backend, "r")
    after = _waits(raw)
    assert after[0] - before[0] >= 6  # 3 pushes, 2 finishes, 1 cancel (+ the probe)
    raw.close()


# ---------------------------------------------------------------------- replicated, no replica


@pytest.mark.redis
@pytest.mark.parametrize("kind", sorted(SESSION))
def test_not_replicated_after_the_write_was_applied(
    kind: str, request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> None:
    """No replica: push, finish and cancel raise NotReplicatedError (an OutcomeUnknownError)
    carrying what the call did on the primary, where it was applied; a claim does not wait.
    The wait in use is logged once: WAITAOF on Valkey 9, WAIT on Redis 7.0 (no WAITAOF)."""
    server = request.getfixturevalue(SESSION[kind])
    queue = _queue()
    replicated = Durability("replicated", timeout_ms=SHORT_MS)
    caplog.set_level(logging.INFO, logger="fairque.redis")
    with RedisBackend.from_url(server.url, queue=queue, durability=replicated) as backend:
        started = time.monotonic()
        with pytest.raises(NotReplicatedError) as caught:
            backend.push(_msg("a"))
        took = time.monotonic() - started
        assert isinstance(caught.value, OutcomeUnknownError)
        assert caught.value.operation == "push"
        assert caught.value.command == "WAIT"
        assert caught.value.received is False
        assert caught.value.result == [True]  # created on the primary
        assert "applied on the primary" in str(caught.value)
        assert took >= SHORT_MS / 1000
        assert str(backend.get_state("a")) == "queued"

        with pytest.raises(NotReplicatedError) as again:
            backend.push(_msg("a"))  # the retry of a push: a duplicate, and still unconfirmed
        assert again.value.result == [False]

        [claimed] = backend.claim(worker_id="w", count=1)  # no wait, no error
        with pytest.raises(NotReplicatedError):
            backend.finish("a", claimed.lease.token, b"done")
        assert str(backend.get_state("a")) == "finished"
        assert backend.get_result("a") == b"done"

        with pytest.raises(NotReplicatedError):
            backend.push_batch([_msg("b"), _msg("c")])
        with pytest.raises(NotReplicatedError) as canceled:
            backend.cancel("b")
        assert canceled.value.result is True
        assert str(backend.get_state("b")) == "canceled"
    lines = [r.getMessage() for r in caplog.records if "durability=replicated" in r.getMessage()]
    assert len(lines) == 1, lines  # detected and logged once per backend
    expected = "WAITAOF 0 1" if kind == "valkey" else "refused WAITAOF"
    assert expected in lines[0]


@pytest.mark.redis
def test_async_backend_waits_too(valkey_server: Any) -> None:
    async def main() -> None:
        backend = AsyncRedisBackend.from_url(
            valkey_server.url,
            queue=_queue(),
            durability=Durability("replicated", timeout_ms=SHORT_MS),
        )
        try:
            with pytest.raises(NotReplicatedError) as caught:
                await backend.push(_msg("a"))
            assert caught.value.result == [True]
            assert str(await backend.get_state("a")) == "queued"
            assert await backend.claim(worker_id="w", count=1)
        finally:
            await backend.close()

    asyncio.run(main())


@pytest.mark.redis
def test_a_refused_wait_fails_before_the_write(valkey_server: Any) -> None:
    """An ACL without WAIT: the detection before the first write raises it typed, so nothing
    is stored that the caller was not told about."""
    raw = redis.Redis.from_url(valkey_server.url)
    user = f"r8-{uuid.uuid4().hex[:6]}"
    raw.execute_command("ACL", "SETUSER", user, "on", ">pw", "~*", "&*", "+@all", "-wait")
    queue = _queue()
    try:
        backend = RedisBackend.from_url(
            valkey_server.url,
            queue=queue,
            username=user,
            password="pw",
            durability=Durability("replicated", timeout_ms=SHORT_MS),
        )
        with backend, pytest.raises(BackendPermissionError):
            backend.push(_msg("a"))
        assert not raw.exists(KeySpace(queue).task("a"))
        with RedisBackend.from_url(valkey_server.url, queue=queue) as plain:
            assert plain.get_state("a") is None
    finally:
        raw.execute_command("ACL", "DELUSER", user)
        raw.close()


@pytest.mark.redis
def test_a_flushed_script_is_loaded_and_the_write_sent_again(valkey_server: Any) -> None:
    """EVALSHA (``scripts=eval``; a flushed library under FCALL is test_replicated_fcall.py)."""
    raw = redis.Redis.from_url(valkey_server.url)
    replicated = Durability("replicated", timeout_ms=SHORT_MS)
    url = valkey_server.url + "?scripts=eval"
    with RedisBackend.from_url(url, queue=_queue(), durability=replicated) as b:
        with pytest.raises(NotReplicatedError):
            b.push(_msg("a"))
        raw.script_flush()
        with pytest.raises(NotReplicatedError) as caught:
            b.push(_msg("b"))
        assert caught.value.result == [True]
        assert str(b.get_state("b")) == "queued"
    raw.close()


@pytest.mark.redis
@pytest.mark.cluster
def test_cluster_waits_on_the_node_of_the_queue(valkey_cluster: Any) -> None:
    """On a cluster redis-py would send WAIT to every primary; the backend sends it to the
    node that owns the queue's slot, on the connection that ran the script."""
    queue = _queue()
    probe = RedisCluster.from_url(valkey_cluster.url)
    owner = probe.get_node_from_key(f"fq:{{{queue}}}:x")
    nodes = {node.name: redis.Redis(host=node.host, port=node.port) for node in probe.get_nodes()}
    before = {name: _waits(client) for name, client in nodes.items()}
    config = QueueConfig(name=queue)
    with RedisBackend.from_url(
        valkey_cluster.url,
        cluster=True,
        config=config,
        durability=Durability("replicated", timeout_ms=SHORT_MS),
    ) as backend:
        for n in range(3):
            with pytest.raises(NotReplicatedError) as caught:
                backend.push(_msg(f"t{n}", tenant=f"u{n}"))
            assert caught.value.result == [True]
        assert backend.stats()["pushed"] == 3
    grew = {name for name, client in nodes.items() if _waits(client) != before[name]}
    assert grew == {owner.name}
    assert _waits(nodes[owner.name])[0] - before[owner.name][0] >= 3
    for client in nodes.values():
        client.close()
    probe.close()


# ---------------------------------------------------------------------- replicated, healthy replica


@pytest.fixture(scope="module")
def valkey_pair() -> Any:
    """A Valkey primary and a replica with ``appendonly yes`` + ``appendfsync always`` (the
    replica WAITAOF counts), linked and in sync."""
    from fairque_redis.servers.embedded import EmbeddedValkey, ServerBinaryNotFoundError

    try:
        primary = EmbeddedValkey(extra_args=["--repl-diskless-sync-delay", "0"])
    except ServerBinaryNotFoundError as exc:
        pytest.skip(f"valkey unavailable: {exc}")
    with primary:
        replica = EmbeddedValkey(
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
            yield primary, replica


@pytest.mark.redis
def test_every_write_through_the_wait_acts_as_without_it(valkey_pair: Any) -> None:
    """With a replica that confirms, every waited call returns what it returns without the
    wait (the replies come over the held connection, not redis-py's command path), typed errors
    stay typed, and the replica has the writes when the call returns."""
    primary, replica = valkey_pair
    queue = _queue()
    raw_primary = redis.Redis.from_url(primary.url)
    before = _waits(raw_primary)
    replicated = Durability("replicated", timeout_ms=2000)
    with (
        RedisBackend.from_url(primary.url, queue=queue, durability=replicated) as backend,
        RedisBackend.from_url(replica.url, queue=queue) as on_replica,
    ):
        assert backend.push(_msg("a")) is True
        assert on_replica.get_state("a") is not None  # there when the push returned
        assert backend.push(_msg("a")) is False  # a duplicate
        assert backend.push_batch([_msg("b"), _msg("c"), _msg("d")]) == [True, True, True]
        assert [c for c, _ in backend.push_batch_detailed([_msg("e"), _msg("a")])] == [True, False]
        claimed = {c.message.task_id: c for c in backend.claim(worker_id="w", count=4)}
        assert set(claimed) == {"a", "b", "c", "d"}
        assert backend.heartbeat("a", claimed["a"].lease.token) > 0
        with pytest.raises(LeaseLostError):
            backend.finish("a", "not-the-token", b"x")
        backend.finish("a", claimed["a"].lease.token, b"ok")
        assert backend.finish_batch([("b", claimed["b"].lease.token, b"ok"), ("b", "x", None)]) == [
            True,
            False,
        ]
        backend.release("c", claimed["c"].lease.token)
        assert str(backend.fail("d", claimed["d"].lease.token, retry_delay=None)) == "failed"
        [entry] = backend.list_dlq()
        assert backend.requeue_dlq([entry.entry_id]) == 1
        assert backend.cancel("e") is True
        assert backend.cancel("e") is False
        backend.set_tenant_weight("u", 2.0)
        backend.pause("u")
        backend.resume("u")
        backend.set_limits({"max_queued": 100}, tenant="u")
        stats = backend.stats()
        assert on_replica.get_result("a") == b"ok"
        assert str(on_replica.get_state("e")) == "canceled"
        assert on_replica.stats() == stats  # the replica had every write when it returned
        assert backend.purge_tenant("u") >= 2
    after = _waits(raw_primary)
    assert after[0] - before[0] >= 15
    assert after[1] - before[1] >= 15  # WAITAOF after each WAIT that was answered
    raw_primary.close()


@pytest.mark.redis
def test_wait_only_is_checked_before_the_write_too(valkey_server: Any) -> None:
    """``replica_fsync=False`` skips WAITAOF but still probes WAIT before the first write."""
    raw = redis.Redis.from_url(valkey_server.url)
    user = f"r8-{uuid.uuid4().hex[:6]}"
    raw.execute_command("ACL", "SETUSER", user, "on", ">pw", "~*", "&*", "+@all", "-wait")
    queue = _queue()
    before = _waits(raw)
    try:
        durability = Durability("replicated", timeout_ms=SHORT_MS, replica_fsync=False)
        with (
            RedisBackend.from_url(
                valkey_server.url, queue=queue, username=user, password="pw", durability=durability
            ) as backend,
            pytest.raises(BackendPermissionError),
        ):
            backend.push(_msg("a"))
        assert not raw.exists(KeySpace(queue).task("a"))
        with RedisBackend.from_url(valkey_server.url, queue=queue, durability=durability) as ok:
            with pytest.raises(NotReplicatedError) as caught:
                ok.push(_msg("b"))
            assert caught.value.command == "WAIT"
        assert raw.exists(KeySpace(queue).task("b"))  # applied (and the lookup above can fail)
        assert _waits(raw)[1] == before[1]  # no WAITAOF at all
    finally:
        raw.execute_command("ACL", "DELUSER", user)
        raw.close()
