"""Issue 16, defects 1 and 7: the server is checked before use, and ACL refusals are typed.

* An evicting ``maxmemory-policy`` is refused at connect (and before a backend's first command)
  with UnsafeServerConfigError naming what to set, unless ``allow_eviction`` accepts it.
* A NOPERM reply is a BackendPermissionError naming the command; ``connect`` checks credentials
  at once; a worker whose user may not BLPOP polls for work instead (logged once).

Each runs on Valkey 9 and Redis 7 (servers of their own where the server config matters).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from fairque_core import (
    BackendPermissionError,
    FairQueueConfig,
    FairQueueError,
    Message,
    Priority,
    QueueConfig,
    RedisConfig,
    RedisConnectionError,
    UnsafeServerConfigError,
)
from fairque_redis import aconnect, connect
from fairque_redis.backends.backend import RedisBackend
from fairque_redis.servers.embedded import (
    EmbeddedValkey,
    RedisServerProcess,
    ServerBinaryNotFoundError,
)

pytestmark = pytest.mark.redis

KINDS = {"valkey": EmbeddedValkey, "redis7": RedisServerProcess}
SESSION = {"valkey": "valkey_server", "redis7": "redis7_server"}


def _msg(task_id: str) -> Message:
    return Message(task_id=task_id, tenant="u", priority=Priority.NORMAL, body=b"{}")


def _server(kind: str, *args: str) -> Any:
    try:
        return KINDS[kind](extra_args=list(args))
    except ServerBinaryNotFoundError as exc:
        pytest.skip(f"{kind} unavailable: {exc}")


@pytest.fixture(params=sorted(KINDS), scope="module")
def evicting(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A server with maxmemory 20mb and allkeys-lru (the issue's setting)."""
    with _server(request.param, "--maxmemory", "20mb", "--maxmemory-policy", "allkeys-lru") as s:
        yield s


def test_evicting_policy_is_refused_at_connect(evicting: Any) -> None:
    with pytest.raises(UnsafeServerConfigError) as info:
        connect(evicting.url, queue="evict")
    err = info.value
    assert (err.setting, err.value, err.required) == (
        "maxmemory-policy",
        "allkeys-lru",
        "noeviction",
    )
    assert "maxmemory-policy noeviction" in str(err)
    assert "allow_eviction" in str(err)
    assert isinstance(err, FairQueueError)


def test_evicting_policy_is_refused_before_the_first_command(evicting: Any) -> None:
    """A backend built without connect (the CLI worker, the entry point) checks lazily."""
    backend = RedisBackend.from_url(evicting.url, queue="evict-lazy")
    try:
        with pytest.raises(UnsafeServerConfigError):
            backend.push(_msg("t1"))
        with pytest.raises(UnsafeServerConfigError):  # refused every time, not only once
            backend.stats()
        assert redis.Redis.from_url(evicting.url).exists("fq:{evict-lazy}:meta") == 0
    finally:
        backend.close()


def test_opting_out_connects_with_a_warning(
    evicting: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with (
        caplog.at_level(logging.WARNING, logger="fairque.redis"),
        connect(evicting.url, queue="evict-ok", allow_eviction=True) as queue,
    ):
        assert queue.get_stats()["pushed"] == 0
    assert any("allkeys-lru" in r.getMessage() for r in caplog.records)
    cfg = RedisConfig(url=evicting.url, allow_eviction=True)
    backend = RedisBackend.from_config(cfg, QueueConfig(name="evict-ok"))
    assert backend.push(_msg("t1")) is True
    backend.close()
    full = FairQueueConfig(redis=cfg, queue=QueueConfig(name="evict-ok"))
    via = RedisBackend.from_url(evicting.url, config=full)
    assert via.get_state("t1") is not None
    via.close()


def test_opt_out_reads_from_yaml(tmp_path: Any) -> None:
    path = tmp_path / "fairque.yaml"
    path.write_text("redis:\n  allow_eviction: true\n")
    assert FairQueueConfig.from_yaml(path, env={}).redis.allow_eviction is True


def test_aconnect_refuses_too(evicting: Any) -> None:
    async def run() -> None:
        with pytest.raises(UnsafeServerConfigError):
            await aconnect(evicting.url, queue="evict-async")
        queue = await aconnect(evicting.url, queue="evict-async", allow_eviction=True)
        await queue.close()

    asyncio.run(run())


# ---------------------------------------------------------------------- ACL


@pytest.fixture(params=sorted(SESSION))
def acl(request: pytest.FixtureRequest) -> Iterator[tuple[Any, Any]]:
    """(session server, make_user(*rules) -> url of a new user with those ACL rules)."""
    server = request.getfixturevalue(SESSION[request.param])
    admin = redis.Redis.from_url(server.url)
    made: list[str] = []

    def make_user(*rules: str) -> str:
        name = f"fq-{uuid.uuid4().hex[:8]}"
        admin.execute_command("ACL", "SETUSER", name, "on", ">pw-acl", "~*", "&*", *rules)
        made.append(name)
        return server.url.replace("redis://", f"redis://{name}:pw-acl@")

    yield server, make_user
    for name in made:
        admin.execute_command("ACL", "DELUSER", name)
    admin.close()


def test_script_command_refused_is_typed(acl: tuple[Any, Any]) -> None:
    _server, make_user = acl
    url = make_user("+@all", "-zadd")
    backend = RedisBackend.from_url(url, queue=f"acl-{uuid.uuid4().hex[:6]}")
    try:
        with pytest.raises(BackendPermissionError) as info:
            backend.push(_msg("t1"))
        assert info.value.operation == "push"
        assert info.value.command in ("zadd", None)  # Redis 7 does not name it inside a script
        assert isinstance(info.value, PermissionError)
    finally:
        backend.close()


def test_connect_checks_credentials_and_ping_at_once(acl: tuple[Any, Any]) -> None:
    _server, make_user = acl
    no_ping = make_user("+@all", "-ping")
    with pytest.raises(BackendPermissionError) as info:
        connect(no_ping, queue="acl-ping")
    assert info.value.command == "ping"
    wrong = make_user("+@all").replace(":pw-acl@", ":wrong@")
    with pytest.raises(RedisConnectionError) as refused:
        connect(wrong, queue="acl-wrong")
    assert "wrong" not in str(refused.value)


def test_info_refused_is_a_warning_not_an_error(
    acl: tuple[Any, Any], caplog: pytest.LogCaptureFixture
) -> None:
    _server, make_user = acl
    url = make_user("+@all", "-info")
    with (
        caplog.at_level(logging.WARNING, logger="fairque.redis"),
        connect(url, queue=f"acl-{uuid.uuid4().hex[:6]}") as queue,
    ):
        assert queue.get_stats()["pushed"] == 0
    assert any("could not read" in r.getMessage() for r in caplog.records)


def test_worker_without_blpop_polls_and_logs_once(
    acl: tuple[Any, Any], caplog: pytest.LogCaptureFixture
) -> None:
    server, make_user = acl
    url = make_user("+@all", "-blpop")
    name = f"acl-{uuid.uuid4().hex[:6]}"
    backend = RedisBackend.from_url(url, queue=name)
    pusher = RedisBackend.from_url(server.url, queue=name)
    try:
        with caplog.at_level(logging.WARNING, logger="fairque.redis"):
            assert backend.wait_for_work(0.2) is False  # nothing to do: waits the time out
            timer = threading.Timer(0.3, lambda: pusher.push(_msg("t1")))
            timer.start()
            started = time.monotonic()
            assert backend.wait_for_work(3.0) is True  # the push's wake signal, by polling
            assert time.monotonic() - started < 1.5
            timer.join()
        warnings = [r for r in caplog.records if "polls for work" in r.getMessage()]
        assert len(warnings) == 1
    finally:
        backend.close()
        pusher.close()
