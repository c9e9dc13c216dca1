"""The real-server harness: embedded Valkey, Debian redis-server, the three-master cluster."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import redis
from redis.cluster import RedisCluster

from conftest import server_command_count
from fairque_core.domain.errors import RedisConnectionError
from fairque_redis.servers.cluster import CLUSTER_SLOT_RANGES, EmbeddedCluster
from fairque_redis.servers.embedded import (
    EmbeddedValkey,
    RedisServerProcess,
    ServerBinaryNotFoundError,
    ServerProcess,
    ServerStartError,
    find_valkey_binary,
)

pytestmark = pytest.mark.redis


def _gone(pid: int) -> bool:
    """True when no process (not even a zombie) has this pid."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _valkey() -> EmbeddedValkey:
    try:
        return EmbeddedValkey()
    except ServerBinaryNotFoundError as exc:
        pytest.skip(str(exc))


def test_embedded_server_answers_ping_and_stop_kills_it() -> None:
    server = _valkey().start()
    try:
        assert server.url == f"redis://127.0.0.1:{server.port}"
        with redis.Redis.from_url(server.url) as client:
            assert client.ping() is True
            assert client.info("server")["tcp_port"] == server.port
            assert client.config_get("appendonly") == {"appendonly": "no"}
        pid, workdir = server.pid, server.dir
        assert workdir.is_dir()
    finally:
        server.stop()
    assert _gone(pid)
    assert not workdir.exists()
    assert not server.running
    server.stop()  # idempotent


def test_two_servers_get_different_ports(valkey_server: EmbeddedValkey) -> None:
    with _valkey() as other:
        assert other.port != valkey_server.port
        assert other.pid != valkey_server.pid
        with redis.Redis.from_url(other.url) as a, redis.Redis.from_url(valkey_server.url) as b:
            a.set("where", "other")
            assert b.get("where") is None


def test_context_manager_cleans_up_even_on_error() -> None:
    seen: list[tuple[int, Path]] = []

    def run_failing_block() -> None:
        with _valkey() as server:
            seen.append((server.pid, server.dir))
            raise RuntimeError("test error inside the block")

    with pytest.raises(RuntimeError, match="test error"):
        run_failing_block()
    [(pid, workdir)] = seen
    assert _gone(pid)
    assert not workdir.exists()


def test_dropped_server_is_stopped_by_del() -> None:
    server = _valkey().start()
    pid, workdir = server.pid, server.dir
    del server
    assert _gone(pid)
    assert not workdir.exists()


def test_kill_then_start_recovers_from_the_append_only_file() -> None:
    try:
        server = EmbeddedValkey(appendonly=True, extra_args=["--appendfsync", "always"])
    except ServerBinaryNotFoundError as exc:
        pytest.skip(str(exc))
    with server:
        port = server.port
        with redis.Redis.from_url(server.url) as client:
            client.rpush("acked", *range(100))
        old_pid = server.pid
        server.kill()
        assert _gone(old_pid)
        assert not server.running
        server.start()
        assert server.port == port
        with redis.Redis.from_url(server.url) as client:
            assert client.llen("acked") == 100


def test_extra_args_reach_the_server() -> None:
    try:
        server = EmbeddedValkey(extra_args=["--maxmemory", "12mb"])
    except ServerBinaryNotFoundError as exc:
        pytest.skip(str(exc))
    with server, redis.Redis.from_url(server.url) as client:
        assert client.config_get("maxmemory") == {"maxmemory": str(12 * 1024 * 1024)}


def test_bad_option_fails_fast_with_the_server_log() -> None:
    try:
        server = EmbeddedValkey(extra_args=["--no-such-option", "1"], startup_timeout=5.0)
    except ServerBinaryNotFoundError as exc:
        pytest.skip(str(exc))
    started = time.monotonic()
    with pytest.raises(ServerStartError) as info:
        server.start()
    assert time.monotonic() - started < 5.0
    assert isinstance(info.value, RedisConnectionError)
    assert "no-such-option" in str(info.value)
    assert not server.running


def test_missing_binary_is_a_connection_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("FQ_VALKEY_BIN", str(tmp_path / "no-valkey-here"))
    with pytest.raises(ServerBinaryNotFoundError, match="no-valkey-here") as info:
        find_valkey_binary()
    assert isinstance(info.value, RedisConnectionError)
    with pytest.raises(ServerBinaryNotFoundError):
        ServerProcess(tmp_path / "nothing")


def test_override_binary_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        real = find_valkey_binary()
    except ServerBinaryNotFoundError as exc:
        pytest.skip(str(exc))
    monkeypatch.setenv("FQ_VALKEY_BIN", str(real))
    assert find_valkey_binary() == real


def test_taken_port_makes_the_server_choose_another(
    valkey_server: EmbeddedValkey, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The port race: the probed port is taken before the server binds it, so it retries."""
    import fairque_redis.servers.embedded as embedded

    real_free_port = embedded._free_port
    ports = iter([valkey_server.port])
    monkeypatch.setattr(embedded, "_free_port", lambda: next(ports, None) or real_free_port())
    with _valkey() as server:
        assert server.port != valkey_server.port
        with redis.Redis.from_url(server.url) as client:
            assert client.ping()


def test_server_command_count_sees_commands_and_only_them(valkey_server: EmbeddedValkey) -> None:
    with redis.Redis.from_url(valkey_server.url) as client:
        before = server_command_count(client)
        assert server_command_count(client) == before  # reading sends nothing it counts
        client.set("counted", 1)
        client.get("counted")
        assert server_command_count(client) == before + 2


def test_debian_redis_server_is_version_7(redis7_server: RedisServerProcess) -> None:
    with redis.Redis.from_url(redis7_server.url) as client:
        assert client.ping()
        version = str(client.info("server")["redis_version"])
    assert version.startswith("7."), version


@pytest.mark.cluster
def test_cluster_is_ok_and_serves_every_slot_range(valkey_cluster: EmbeddedCluster) -> None:
    for url in valkey_cluster.urls:
        with redis.Redis.from_url(url, decode_responses=True) as node:
            info = node.cluster("INFO")
            assert info["cluster_state"] == "ok"
            assert int(info["cluster_slots_ok"]) == 16384
    with RedisCluster(startup_nodes=valkey_cluster.startup_nodes) as client:
        assert len(client.get_primaries()) == 3
        written: dict[int, str] = {}
        for low, high in CLUSTER_SLOT_RANGES:
            key = next(f"k{i}" for i in range(100_000) if low <= client.keyslot(f"k{i}") <= high)
            written[low] = key
            client.set(key, f"in {low}-{high}")
        for low, high in CLUSTER_SLOT_RANGES:
            assert client.get(written[low]) == f"in {low}-{high}".encode()
        ports = {client.get_node_from_key(k).port for k in written.values()}
        assert ports == set(valkey_cluster.ports)


@pytest.mark.cluster
def test_same_hash_tag_lands_in_one_slot(valkey_cluster: EmbeddedCluster) -> None:
    keys = ["fq:{q}:queue", "fq:{q}:lease", "fq:{q}:t:1", "{q}"]
    with RedisCluster.from_url(valkey_cluster.url) as client:
        slots = {client.cluster_keyslot(k) for k in keys}
        assert len(slots) == 1
        # One slot means one node: a multi-key command over them is allowed.
        client.mset(dict.fromkeys(keys, "x"))
        assert client.exists(*keys) == len(keys)
        client.delete(*keys)


@pytest.mark.cluster
def test_cluster_stop_ends_every_node() -> None:
    try:
        cluster = EmbeddedCluster()
    except ServerBinaryNotFoundError as exc:
        pytest.skip(str(exc))
    with cluster:
        pids = [node.pid for node in cluster.nodes]
        dirs = [node.dir for node in cluster.nodes]
        assert all((d / "nodes.conf").exists() for d in dirs)
    assert all(_gone(pid) for pid in pids)
    assert not any(d.exists() for d in dirs)
