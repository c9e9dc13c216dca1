"""Server helpers of the crash scenarios: the multi-part AOF and restarts on the same port.

Valkey 9 and Redis 7 keep the append-only file as a directory (``appendonlydir/``) with a
manifest naming a base file (RDB preamble) and incremental files; commands are appended to the
last incremental file, and ``aof-load-truncated yes`` lets the server load a last incremental
file whose tail was cut (an incomplete MULTI/EXEC at the cut is dropped whole).
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any, NoReturn

import pytest

from fairque_redis.servers.embedded import (
    EmbeddedValkey,
    RedisServerProcess,
    ServerBinaryNotFoundError,
    ServerProcess,
)

__all__ = [
    "AOF_ALWAYS",
    "KINDS",
    "aof_dir",
    "durable_server",
    "incr_file",
    "missing_server",
    "restore_aof",
    "save_aof",
    "wait_loaded",
]

KINDS: dict[str, type[ServerProcess]] = {"valkey": EmbeddedValkey, "redis7": RedisServerProcess}
#: AOF on, fsync before every reply, load a torn last file
AOF_ALWAYS = ("--appendfsync", "always", "--aof-load-truncated", "yes")


def durable_server(kind: str, *extra: str) -> ServerProcess:
    """A not yet started server of ``kind`` with ``appendonly yes`` + ``appendfsync always``."""
    try:
        return KINDS[kind](appendonly=True, extra_args=[*AOF_ALWAYS, *extra])  # type: ignore[call-arg]
    except ServerBinaryNotFoundError as exc:
        missing_server(f"{kind} unavailable: {exc}")


def missing_server(reason: str) -> NoReturn:
    """Skip on a developer machine, fail in CI (as the suite's conftest does)."""
    if os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
        pytest.fail(f"{reason} (CI is set, so this is a failure, not a skip)", pytrace=False)
    pytest.skip(reason)


def aof_dir(server: ServerProcess) -> Path:
    return server.dir / "appendonlydir"


def incr_file(server: ServerProcess) -> Path:
    """The incremental AOF file commands are appended to now (the manifest's last ``type i``)."""
    folder = aof_dir(server)
    manifests = list(folder.glob("*.manifest"))
    assert len(manifests) == 1, manifests
    last = ""
    for line in manifests[0].read_text().splitlines():
        fields = line.split()
        info = dict(zip(fields[::2], fields[1::2], strict=False))
        if info.get("type") == "i":
            last = info["file"]
    assert last, f"no incremental file in {manifests[0].read_text()!r}"
    return folder / last


def save_aof(server: ServerProcess, to: Path) -> None:
    """Copy the (stopped) server's AOF directory to ``to``."""
    shutil.copytree(aof_dir(server), to)


def restore_aof(server: ServerProcess, saved: Path, *, cut_at: int | None = None) -> None:
    """Put the saved AOF directory back under the stopped server, its last incremental file
    truncated to ``cut_at`` bytes (``None``: whole)."""
    shutil.rmtree(aof_dir(server), ignore_errors=True)
    shutil.copytree(saved, aof_dir(server))
    if cut_at is not None:
        with incr_file(server).open("r+b") as file:
            file.truncate(cut_at)


def wait_loaded(client: Any, timeout: float = 10.0) -> None:
    """Wait until the server answers commands (it may still be loading the AOF)."""
    import redis

    deadline = time.monotonic() + timeout
    while True:
        try:
            client.ping()
            return
        except (redis.BusyLoadingError, redis.ConnectionError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)
