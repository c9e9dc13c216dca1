"""``rediss://`` end to end: Debian's redis-server with TLS, certificates from a throwaway CA.

The embedded Valkey is built without TLS, so this runs on ``redis-server`` (7.x, built with
TLS on Debian). The CA and the server certificate come from ``trustme``; nothing is written
outside a temporary directory.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fairque_core import (
    FairQueue,
    FairQueueConfig,
    QueueConfig,
    RedisConfig,
    RedisConnectionError,
    Task,
    TaskState,
)
from fairque_redis.servers.embedded import RedisServerProcess, ServerBinaryNotFoundError


def missing_server(reason: str) -> None:
    """Skip on a developer machine; fail in CI, where redis-server is installed (as conftest)."""
    if os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
        pytest.fail(f"{reason} (CI is set, so this is a failure, not a skip)", pytrace=False)
    pytest.skip(reason)


pytestmark = [pytest.mark.redis, pytest.mark.timeout(60)]


class TlsRedisServer(RedisServerProcess):
    """redis-server with a TLS port beside its plain one (readiness is checked on the plain)."""

    def __init__(self, certs: Path) -> None:
        super().__init__()
        self.certs = certs

    def _extra_port_count(self) -> int:
        return 1

    def _server_args(self) -> list[str]:
        return [
            *super()._server_args(),
            "--tls-port",
            str(self.tls_port),
            "--tls-cert-file",
            str(self.certs / "server.pem"),
            "--tls-key-file",
            str(self.certs / "server.key"),
            "--tls-ca-cert-file",
            str(self.certs / "ca.pem"),
            "--tls-auth-clients",
            "no",
        ]

    @property
    def tls_port(self) -> int:
        return self._extra_ports[0]

    @property
    def tls_url(self) -> str:
        return f"rediss://{self.host}:{self.tls_port}"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    trustme = pytest.importorskip("trustme")
    where = tmp_path_factory.mktemp("tls")
    ca = trustme.CA()
    server_cert = ca.issue_cert("127.0.0.1", "localhost")
    ca.cert_pem.write_to_path(str(where / "ca.pem"))
    server_cert.private_key_pem.write_to_path(str(where / "server.key"))
    server_cert.cert_chain_pems[0].write_to_path(str(where / "server.pem"))
    other = trustme.CA()  # a CA the server's certificate does not chain to
    other.cert_pem.write_to_path(str(where / "other-ca.pem"))
    return where


@pytest.fixture(scope="module")
def tls_server(certs: Path) -> Iterator[TlsRedisServer]:
    try:
        server = TlsRedisServer(certs)
    except ServerBinaryNotFoundError as exc:
        missing_server(f"Redis 7 unavailable: {exc}")
    try:
        server.start()
    except RedisConnectionError as exc:  # a redis-server built without TLS refuses --tls-port
        missing_server(f"redis-server could not start with TLS: {exc}")
    try:
        yield server
    finally:
        server.stop()


def _config(server: TlsRedisServer, ca: Path, **redis: Any) -> FairQueueConfig:
    return FairQueueConfig(
        redis=RedisConfig(url=server.tls_url, ssl_ca_certs=str(ca), socket_timeout=5.0, **redis),
        queue=QueueConfig(name=f"tls{uuid.uuid4().hex[:10]}"),
    )


def _round_trip(queue: FairQueue) -> None:
    task_id = queue.push(Task.create("alice", payload={"n": 1}))
    [task] = queue.claim_batch(1)
    assert task.task_id == task_id
    queue.finish(task, {"ok": True})
    assert queue.get_state(task_id) is TaskState.FINISHED
    assert queue.get_result(task_id) == {"ok": True}


def test_push_claim_finish_over_tls_from_config(tls_server: TlsRedisServer, certs: Path) -> None:
    with FairQueue.from_config(_config(tls_server, certs / "ca.pem")) as queue:
        _round_trip(queue)


def test_connect_with_a_rediss_url_and_options(tls_server: TlsRedisServer, certs: Path) -> None:
    from fairque_redis import connect

    config = _config(tls_server, certs / "ca.pem")
    with connect(tls_server.tls_url, config=config) as queue:
        _round_trip(queue)
        # plain commands (LPOP of the wake signal the push raised) go over TLS too
        assert queue.wait_for_work(0) is True
        assert queue.wait_for_work(0) is False


def test_async_backend_over_tls(tls_server: TlsRedisServer, certs: Path) -> None:
    from fairque_core import AsyncFairQueue

    async def scenario() -> TaskState | None:
        async with await AsyncFairQueue.from_config(_config(tls_server, certs / "ca.pem")) as q:
            task_id = await q.push(Task.create("bob"))
            [task] = await q.claim_batch(1)
            await q.finish(task, None)
            return await q.get_state(task_id)

    assert asyncio.run(scenario()) is TaskState.FINISHED


def test_an_untrusted_certificate_is_refused(tls_server: TlsRedisServer, certs: Path) -> None:
    """Verification is on by default: a server whose certificate does not chain to the given
    CA is a typed connection error, and nothing is sent. ``from_config`` meets it at once: its
    backend checks the queue's layout when it is made (ADR 34), as ``connect`` does."""
    with pytest.raises(RedisConnectionError, match=r"(?i)certificate|ssl"):
        FairQueue.from_config(_config(tls_server, certs / "other-ca.pem"))


def test_plain_redis_url_cannot_reach_the_tls_port(tls_server: TlsRedisServer) -> None:
    from fairque_redis import connect

    plain = f"redis://{tls_server.host}:{tls_server.tls_port}"
    config = FairQueueConfig(
        redis=RedisConfig(url=plain, socket_timeout=2.0), queue=QueueConfig(name="plain")
    )
    with pytest.raises(RedisConnectionError):  # connect checks the server at once (issue 16)
        connect(config=config)
