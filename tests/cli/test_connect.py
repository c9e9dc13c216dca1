"""``fairque_redis.connect`` / ``aconnect``: URL resolution, queue options, the owned server."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from fairque_core import ConfigurationError, FairQueueConfig, Priority, QueueConfig, Task
from fairque_redis._connect import aconnect, connect, resolve_config

pytestmark = pytest.mark.redis


def test_resolve_config_applies_name_and_options() -> None:
    full = resolve_config(None, "jobs", False, {"lease_seconds": 7.5})
    assert full.queue.name == "jobs"
    assert full.queue.lease_seconds == 7.5
    base = QueueConfig(name="from-config", lease_seconds=3.0)
    assert resolve_config(base, None, True, {}).queue.name == "from-config"
    assert resolve_config(base, None, True, {}).redis.cluster is True
    with pytest.raises(ConfigurationError, match="unknown queue option"):
        resolve_config(None, None, False, {"lease_secs": 1})
    with pytest.raises(ConfigurationError, match="lease_seconds"):
        resolve_config(None, None, False, {"lease_seconds": -1})


def test_connect_to_a_url_from_the_environment(
    valkey_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAIRQUE_REDIS_URL", valkey_server.url)
    name = f"conn-{uuid.uuid4().hex[:8]}"
    config = FairQueueConfig.from_dict({"queue": {"tenant_weights": {"big": 3.0}}}, env={})
    with connect(queue=name, config=config, lease_seconds=12) as queue:
        assert queue.name == name
        assert queue.config.lease_seconds == 12
        assert getattr(queue, "server", None) is None  # nothing embedded was started
        queue.push(Task.create("big", Priority.HIGH, {"x": 1}))
        task = queue.claim()
        assert task is not None
        assert task.lease is not None
        queue.finish(task)
        assert queue.get_stats()["finished"] == 1


def test_connect_without_url_uses_the_shared_local_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two connect() calls with no URL (two processes, in real life) share one durable
    server, which outlives the queues."""
    from fairque_redis.servers import dev_server

    monkeypatch.delenv("FAIRQUE_REDIS_URL", raising=False)
    with connect(queue="shared") as first:
        assert getattr(first, "server", None) is None  # not owned: it keeps running
        first.push(Task.create("alice", Priority.NORMAL, {}))
    state = dev_server.status()
    assert state is not None
    with connect(queue="shared") as second:
        assert second.get_stats()["ready"] == 1


def test_connect_embedded_url_owns_a_throwaway_server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FAIRQUE_REDIS_URL", raising=False)
    queue = connect("embedded://", queue="owned")
    server = getattr(queue, "server", None)
    assert server is not None
    assert server.running
    queue.push(Task.create("alice", Priority.NORMAL, {}))
    assert queue.get_stats()["pushed"] == 1
    queue.close()
    assert not server.running
    queue.close()  # idempotent


def test_aconnect(valkey_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FAIRQUE_REDIS_URL", raising=False)
    name = f"aconn-{uuid.uuid4().hex[:8]}"

    async def scenario() -> None:
        queue = await aconnect(valkey_server.url, queue=name, lease_seconds=5)
        async with queue:
            await queue.push(Task.create("bob", Priority.NORMAL, {"n": 1}))
            task = await queue.claim()
            assert task is not None
            await queue.finish(task)
            assert (await queue.get_stats())["finished"] == 1

    asyncio.run(scenario())


def test_aconnect_embedded_is_stopped_on_close(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FAIRQUE_REDIS_URL", raising=False)

    async def scenario() -> Any:
        queue = await aconnect("embedded://")
        server = getattr(queue, "server", None)
        assert server is not None
        await queue.push(Task.create("carol", Priority.NORMAL, {}))
        await queue.close()
        return server

    assert not asyncio.run(scenario()).running


def test_a_plain_client_on_a_cluster_node_fails_at_connect(valkey_cluster: Any) -> None:
    node = valkey_cluster.nodes[0].url
    with pytest.raises(ConfigurationError, match=r"cluster=True"):
        connect(node, queue="c")
    with connect(node, queue="c", cluster=True) as queue:
        queue.push(Task.create("alice"))
        assert queue.get_stats()["ready"] == 1


@pytest.mark.parametrize(
    ("suffix", "needle"),
    [
        ("?socket_timeout=abc", "Invalid value for 'socket_timeout'"),
        ("/3?db=x", "Invalid value for 'db'"),
        ("/99999", "no database of the number the URL names"),
        ("?socket_timout=5", "unknown option"),  # a misspelt option: a bare TypeError before
        ("?socket_timeout=2&client_name=x&health_check_interval=1&nope=1", "nope"),
    ],
)
def test_a_url_the_server_or_redis_py_cannot_take_is_a_configuration_error(
    valkey_server: Any, suffix: str, needle: str
) -> None:
    """redis-py's reading of the URL (it raised a bare ValueError) and the server's refusal
    of its database number (a LuaScriptError of the first script): ConfigurationError naming
    ``redis.url``, from ``connect`` and from the CLI in one line."""
    from fairque_cli.main import main

    url = valkey_server.url.rstrip("/") + suffix
    with (
        pytest.raises(ConfigurationError, match=needle) as info,
        connect(url, queue=f"url-{uuid.uuid4().hex[:8]}") as queue,
    ):
        queue.get_stats()
    assert info.value.path == "redis.url"
    assert main(["--url", url, "stats"]) == 1


def test_a_config_files_bad_port_is_a_configuration_error(tmp_path: Any) -> None:
    config = tmp_path / "fairque.yaml"
    config.write_text("redis:\n  url: redis://127.0.0.1:99999\n", encoding="utf-8")
    with pytest.raises(ConfigurationError, match="Port out of range"):
        connect(config=FairQueueConfig.from_yaml(config, env={}))
