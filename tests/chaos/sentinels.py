"""A primary, two replicas and three sentinels, all real Valkey processes on loopback, for
the Sentinel tests (issue 34). ``valkey-server CONF --sentinel`` is a sentinel; each writes
its own config file (sentinels rewrite theirs) in a directory of its own.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

from fairque_redis.servers.embedded import EmbeddedValkey, find_valkey_binary

__all__ = ["SERVICE", "SentinelRig"]

SERVICE = "fq-primary"
DOWN_AFTER_MS = 1000  # a primary is down after 1 s without a reply
FAILOVER_TIMEOUT_MS = 10_000


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class _Sentinel:
    def __init__(self, binary: Path, primary_port: int) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="fairque-sentinel-"))
        self.port = _free_port()
        conf = self.dir / "sentinel.conf"
        conf.write_text(
            f"port {self.port}\nbind 127.0.0.1\ndir {self.dir}\n"
            f"sentinel monitor {SERVICE} 127.0.0.1 {primary_port} 2\n"
            f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}\n"
            f"sentinel failover-timeout {SERVICE} {FAILOVER_TIMEOUT_MS}\n"
            f"sentinel parallel-syncs {SERVICE} 2\n"
        )
        self.log = (self.dir / "sentinel.log").open("wb")
        self.proc = subprocess.Popen(
            [str(binary), str(conf), "--sentinel", "--daemonize", "no", "--logfile", ""],
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            cwd=self.dir,
        )
        self.client = redis.Redis(port=self.port, socket_timeout=2.0, decode_responses=True)

    def answers(self) -> bool:
        try:
            return bool(self.client.ping())
        except redis.RedisError:
            return False

    def close(self) -> None:
        self.client.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class SentinelRig:
    """A primary with two replicas (``appendonly yes``, ``appendfsync always``: ``WAITAOF``
    counts them) watched by three sentinels with quorum 2."""

    def __init__(self, *, durable_primary: bool = False) -> None:
        """``durable_primary``: the primary has an AOF too (``appendfsync always``), so a
        ``kill -9`` and restart of it loses nothing (without one it restarts empty and its
        replicas copy the empty data set)."""
        binary = find_valkey_binary()
        self.servers: list[EmbeddedValkey] = []
        self.sentinels: list[_Sentinel] = []
        try:
            extra = ["--appendfsync", "always"] if durable_primary else []
            primary = EmbeddedValkey(
                appendonly=durable_primary, extra_args=[*extra, "--repl-diskless-sync-delay", "0"]
            )
            primary.start()
            self.servers.append(primary)
            for _ in range(2):
                replica = EmbeddedValkey(
                    appendonly=True,
                    extra_args=[
                        "--appendfsync",
                        "always",
                        "--repl-diskless-sync-delay",
                        "0",
                        "--replicaof",
                        "127.0.0.1",
                        str(primary.port),
                    ],
                )
                replica.start()
                self.servers.append(replica)
            self.sentinels = [_Sentinel(binary, primary.port) for _ in range(3)]
            self._wait(self._settled, 30.0, "the sentinels to see both replicas and each other")
        except BaseException:
            self.close()
            raise

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)
        return f"redis+sentinel://{hosts}/{SERVICE}/0"

    def primary_port(self) -> int | None:
        """The port the sentinels name as the primary now (None if none answers)."""
        for sentinel in self.sentinels:
            with contextlib.suppress(redis.RedisError):
                _, port = sentinel.client.execute_command(
                    "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE
                )
                return int(port)
        return None

    def server_on(self, port: int) -> EmbeddedValkey:
        return next(s for s in self.servers if s.port == port)

    def _settled(self) -> bool:
        if not all(s.answers() for s in self.sentinels):
            return False
        for sentinel in self.sentinels:
            try:
                replicas: Any = sentinel.client.execute_command("SENTINEL", "REPLICAS", SERVICE)
                others: Any = sentinel.client.execute_command("SENTINEL", "SENTINELS", SERVICE)
            except redis.RedisError:
                return False
            if len(replicas) < 2 or len(others) < 2:
                return False
        return True

    def _wait(self, cond: Any, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not cond():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout} s waiting for {what}")
            time.sleep(0.05)

    def kill_primary(self) -> int:
        """``kill -9`` of the current primary; returns its port."""
        port = self.primary_port()
        assert port is not None
        self.server_on(port).kill()
        return port

    def wait_for_new_primary(self, old: int, timeout: float = 30.0) -> int:
        self._wait(lambda: self.primary_port() not in (None, old), timeout, "a new primary")
        port = self.primary_port()
        assert port is not None
        return port

    def close(self) -> None:
        for sentinel in self.sentinels:
            sentinel.close()
        for server in self.servers:
            server.stop()
