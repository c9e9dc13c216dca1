"""Fixtures of the contract suite: one ``backend`` per adapter, on one fake clock.

``backend`` is parametrized over the reference model and the Redis adapter on three servers,
and over their async twins (``*-async``): the async model and ``AsyncRedisBackend`` on Valkey
and on the cluster, each seen through :class:`SyncOverAsync` (its own event loop on a thread),
so the same test bodies check both faces.
Every Redis-backed test gets its own queue name (so its own hash tag and keys); the session
servers come from ``tests/conftest.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import attrs
import pytest

from fairque_core import QueueBackend, QueueConfig
from fairque_core.memory.async_model import AsyncInMemoryBackend
from fairque_core.memory.model import InMemoryBackend

from ._async_facade import SyncOverAsync
from .helpers import CountingTokens, FakeClock, new_queue_name

SERVER_FIXTURES = {
    "valkey": "valkey_server",
    "redis7": "redis7_server",
    "cluster": "valkey_cluster",
    "valkey-async": "valkey_server",
    "cluster-async": "valkey_cluster",
    "valkey-ref": "valkey_server",
    "valkey-p3": "valkey_server",
    "cluster-p3": "valkey_cluster",
}

BACKEND_PARAMS = [
    "memory",
    pytest.param("valkey", marks=pytest.mark.redis),
    pytest.param("redis7", marks=pytest.mark.redis),
    pytest.param("cluster", marks=[pytest.mark.redis, pytest.mark.cluster]),
    "memory-async",
    pytest.param("valkey-async", marks=pytest.mark.redis),
    pytest.param("cluster-async", marks=[pytest.mark.redis, pytest.mark.cluster]),
    pytest.param("valkey-p3", marks=pytest.mark.redis),
    # every accelerator off (ADR 65: the plain claim include, EVALSHA, the reference intake
    # encoder), on the claim's modules only (REFERENCE_MODULES) to keep the default run short
    pytest.param("valkey-ref", marks=pytest.mark.redis),
    # the partitioned queue on the cluster runs with the long scenarios (-m slow): the default
    # run keeps it on one Valkey (valkey-p3) and tests/integration/test_partitioned_queue.py
    # runs P=3 over the cluster's three masters, to keep `uv run pytest` near six minutes
    pytest.param("cluster-p3", marks=[pytest.mark.redis, pytest.mark.cluster, pytest.mark.slow]),
]

#: The params backed by the reference model (no server, no keys, no command counters).
MODEL_KINDS = frozenset({"memory", "memory-async"})
#: The params of a queue split in 3 partitions (ADR 34): its keys live under 3 hash tags, so
#: the one-prefix probe does not apply, and fairness across tenants of different partitions is
#: approximate (tests of exact cross-tenant order are marked for the one-slot kinds only).
PARTITIONED_KINDS = frozenset({"valkey-p3", "cluster-p3"})

#: The param with every accelerator off, and the modules it runs (the others deselect it):
#: the claim, fairness, limits, priority, finish-and-claim and intake contracts, where the
#: accelerated and the reference paths differ.
REFERENCE_KIND = "valkey-ref"
REFERENCE_MODULES = frozenset(
    {
        "test_fairness",
        "test_limits",
        "test_priority",
        "test_finish_and_claim",
        "test_intake",
        "test_pause",
        "test_leases",
    }
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the reference param (REFERENCE_KIND) outside REFERENCE_MODULES."""
    keep: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        callspec = getattr(item, "callspec", None)
        kind = callspec.params.get("backend_kind") if callspec is not None else None
        module = getattr(getattr(item, "module", None), "__name__", "").rsplit(".", 1)[-1]
        if kind == REFERENCE_KIND and module not in REFERENCE_MODULES:
            dropped.append(item)
        else:
            keep.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


_CROSS_TENANT_ORDER = "exact claim order across tenants of different partitions (ADR 34)"
_PER_PARTITION_LIMIT = "a queue-wide limit holds per partition (ADR 34)"
#: Contract tests a partitioned queue does not promise, with the reason (ADR 34 lists them).
ONE_SLOT_ONLY: dict[str, str] = {
    **dict.fromkeys(
        (
            "test_idle_time_earns_no_credit",
            "test_count_makes_the_same_choices_as_single_claims",
            "test_assigned_tenants_are_served_fairly_among_themselves",
            "test_pinned_claims_do_not_move_the_virtual_time",
            "test_pinned_service_does_not_penalise_tenants_not_picked",
            "test_weight_change_rescales_the_remaining_lag",
            "test_weight_change_keeps_the_debt_in_turns",
            "test_expired_unstarted_claim_refunds_its_turn",
            "test_newcomer_wait_does_not_depend_on_its_name",
            "test_capped_tenant_leaves_the_active_set_until_a_lease_ends",
            "test_rate_with_burst_parks_the_tenant_until_its_next_start",
            "test_a_paused_tenant_is_skipped_within_one_claim",
            "test_counters_after_a_scenario",
            "test_gauges_equal_tenant_sizes_and_counters_add_up",
            "test_real_structures_match_the_gauges",
        ),
        _CROSS_TENANT_ORDER,
    ),
    "test_queue_wide_max_running": _PER_PARTITION_LIMIT,
    "test_queue_wide_rate": _PER_PARTITION_LIMIT,
    **dict.fromkeys(
        (
            "test_a_duplicate_push_adds_nothing",
            "test_a_batch_naming_another_tenants_live_id_stores_nothing",
            "test_an_intake_entry_of_another_tenants_live_id_is_set_aside",
        ),
        "a task id is unique per partition (ADR 34)",
    ),
    "test_the_script_checks_offset_and_limit_itself": "reads the one-slot backend's planner",
}

# Commands that a probe (or a cluster client's topology refresh) sends, never the backend
# under test on its own behalf.
_PROBE_COMMANDS = ("cmdstat_info", "cmdstat_cluster")
#: Buckets a probe's ``SCAN MATCH`` walks per call (fewer round trips on a server full of other
#: tests' keys), and keys per DEL when a queue's keys are deleted.
_SCAN_COUNT = 10_000
_DELETE_CHUNK = 500


def _glob_escape(text: str) -> str:
    """``text`` as a literal in a Redis glob pattern (``SCAN MATCH``, ``KEYS``)."""
    return "".join("\\" + ch if ch in "*?[]\\" else ch for ch in text)


def _require_redis_backend() -> Any:
    try:
        from fairque_redis.backends.backend import RedisBackend
    except ImportError as exc:
        pytest.skip(
            f"fairque_redis.backends.backend is not importable yet ({exc}); "
            "Redis params wait for it"
        )
    return RedisBackend


def _require_async_redis_backend() -> Any:
    try:
        from fairque_redis.backends.backend_async import AsyncRedisBackend
    except ImportError as exc:
        pytest.skip(f"fairque_redis.backends.backend_async is not importable ({exc})")
    return AsyncRedisBackend


class RedisProbe:
    """A raw client beside the backend, to read the server's real structures and counters."""

    def __init__(
        self, client: Any, queue: str, *, cluster: bool, partitioned: bool = False
    ) -> None:
        self.client = client
        self.queue = queue
        self.cluster = cluster
        self.partitioned = partitioned
        # a partitioned queue's keys: fq:{<queue>}:partitions and fq:{<queue>:<n>...}:...
        self.prefix = f"fq:{{{queue}" if partitioned else f"fq:{{{queue}}}:"

    def _nodes(self) -> list[Any]:
        return list(self.client.get_nodes()) if self.cluster else [None]

    def command_count(self) -> int:
        """Commands the server(s) ran, without the INFO/CLUSTER/SCAN calls of probes."""
        total = 0
        for node in self._nodes():
            if node is None:
                info = self.client.info("commandstats")
            else:
                info = self.client.info("commandstats", target_nodes=node)
            for name, stat in info.items():
                if name.startswith(_PROBE_COMMANDS):
                    continue
                total += int(stat["calls"])
        return total

    def command_calls(self, *names: str) -> int:
        """Calls of the named commands (``evalsha``, ``eval`` ...), summed over the nodes."""
        wanted = {f"cmdstat_{n}" for n in names}
        total = 0
        for node in self._nodes():
            if node is None:
                info = self.client.info("commandstats")
            else:
                info = self.client.info("commandstats", target_nodes=node)
            total += sum(int(stat["calls"]) for name, stat in info.items() if name in wanted)
        return total

    def client_commands(self, action: Callable[[], object]) -> list[str]:
        """The commands a client sent to the queue's node while ``action`` ran (MONITOR).

        Commands run inside scripts are left out, so a batch done by one script call shows
        as exactly one EVALSHA (``INFO commandstats`` counts the script's inner calls too).
        """
        import redis

        if self.cluster:
            node = self.client.get_node_from_key("{" + self.queue + "}")
            conn = redis.Redis(host=node.host, port=node.port)
        else:
            conn = redis.Redis(connection_pool=self.client.connection_pool)
        marker = "fq-probe-marker-" + self.queue
        events: list[tuple[str, str]] = []
        marker_source = ""
        try:
            with conn.monitor() as monitor:
                action()
                conn.echo(marker)  # through another connection: left out by its address
                for event in monitor.listen():
                    source = f"{event.get('client_address')}:{event.get('client_port')}"
                    command = str(event["command"])
                    if marker in command:
                        marker_source = source
                        break
                    if event.get("client_type") == "lua":
                        continue
                    events.append((source, command))
        finally:
            if self.cluster:
                conn.close()
        return [command for source, command in events if source != marker_source]

    def all_keys(self) -> set[str]:
        """Every key on the server(s), as text."""
        keys: set[str] = set()
        for node in self._nodes():
            if node is None:
                it = self.client.scan_iter(count=1000)
            else:
                it = self.client.scan_iter(count=1000, target_nodes=node)
            keys.update(k.decode() if isinstance(k, bytes) else k for k in it)
        return keys

    def queue_keys(self) -> set[str]:
        """Every key whose name starts with the queue's prefix, as text.

        The same set as filtering :meth:`all_keys` by the prefix, but the server does the
        filtering (``SCAN MATCH``): the session servers keep the keys other tests left (the
        chaos and CLI tests run first), and reading them all back at every teardown cost more
        than most contract tests themselves (ADR 48). On the cluster only the node that owns
        the queue's hash tag is scanned: a key named ``fq:{<queue>}:...`` hashes to that slot
        whatever follows the tag (a partitioned queue's keys carry P tags: every node).
        """
        pattern = _glob_escape(self.prefix) + "*"
        if self.cluster and not self.partitioned:
            nodes = [self.client.get_node_from_key("{" + self.queue + "}")]
        else:
            nodes = self._nodes()
        keys: set[str] = set()
        for node in nodes:
            if node is None:
                it = self.client.scan_iter(match=pattern, count=_SCAN_COUNT)
            else:
                it = self.client.scan_iter(match=pattern, count=_SCAN_COUNT, target_nodes=node)
            keys.update(k.decode() if isinstance(k, bytes) else k for k in it)
        return keys

    def keyslot(self, name: str) -> int:
        return int(self.client.cluster_keyslot(name))

    def script_flush(self) -> None:
        for node in self._nodes():
            if node is None:
                self.client.script_flush()
            else:
                self.client.execute_command("SCRIPT", "FLUSH", target_nodes=node)

    def delete_queue_keys(self) -> None:
        """Delete every key of the queue: one DEL per slot (a redis-py cluster client splits a
        many-key DEL by slot itself), not one round trip per key."""
        keys = sorted(self.queue_keys())
        for start in range(0, len(keys), _DELETE_CHUNK):
            self.client.delete(*keys[start : start + _DELETE_CHUNK])


@pytest.fixture(scope="session")
def _raw_clients() -> Iterator[dict[str, Any]]:
    clients: dict[str, Any] = {}
    yield clients
    for client in clients.values():
        client.close()


def _raw_client(cache: dict[str, Any], url: str, *, cluster: bool) -> Any:
    client = cache.get(url)
    if client is None:
        if cluster:
            from redis.cluster import RedisCluster

            client = RedisCluster.from_url(url)
        else:
            import redis

            client = redis.Redis.from_url(url)
        cache[url] = client
    return client


@pytest.fixture(params=BACKEND_PARAMS)
def backend_kind(request: pytest.FixtureRequest) -> str:
    kind = str(request.param)
    if kind in PARTITIONED_KINDS:
        reason = ONE_SLOT_ONLY.get(getattr(request.node, "originalname", ""))
        if reason is not None:
            pytest.skip(f"not promised by a partitioned queue: {reason}")
    return kind


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def server_url(backend_kind: str, request: pytest.FixtureRequest) -> str | None:
    """The URL of the session server for a Redis param (None for the model)."""
    if backend_kind in MODEL_KINDS:
        return None
    _require_redis_backend()
    server = request.getfixturevalue(SERVER_FIXTURES[backend_kind])
    return str(server.url)


@pytest.fixture
def make_backend(
    backend_kind: str,
    clock: FakeClock,
    server_url: str | None,
    _raw_clients: dict[str, Any],
) -> Iterator[Callable[..., QueueBackend]]:
    """A factory: ``make_backend(config=QueueConfig(...), token_source=...)``, on ``clock``.

    Every call makes a new queue (a new name) on the same server; all are closed and their
    keys deleted at teardown.
    """
    made: list[tuple[QueueBackend, RedisProbe | None]] = []

    def factory(
        config: QueueConfig | None = None, *, token_source: Callable[[], str] | None = None
    ) -> QueueBackend:
        queue = new_queue_name()
        cfg = attrs.evolve(config or QueueConfig(), name=queue)
        tokens = token_source if token_source is not None else CountingTokens()
        backend: QueueBackend
        probe: RedisProbe | None = None
        if backend_kind == "memory":
            backend = InMemoryBackend(clock, queue=queue, config=cfg, token_source=tokens)
        elif backend_kind == "memory-async":
            backend = SyncOverAsync(
                lambda: AsyncInMemoryBackend(clock, queue=queue, config=cfg, token_source=tokens)
            )
        else:
            assert server_url is not None
            url = server_url
            cluster = backend_kind in ("cluster", "cluster-async", "cluster-p3")
            options: dict[str, Any] = {
                "queue": queue,
                "cluster": cluster,
                "config": cfg,
                "clock": clock,
                "token_source": tokens,
            }
            if backend_kind in PARTITIONED_KINDS:
                from fairque_redis.partitioned.backend import PartitionedBackend

                backend = PartitionedBackend.from_url(url, partitions=3, **options)
            elif backend_kind.endswith("-async"):
                async_backend = _require_async_redis_backend()
                # Built on the facade's loop, so the async client's connections belong to it.
                backend = SyncOverAsync(lambda: async_backend.from_url(url, **options))
            elif backend_kind == REFERENCE_KIND:
                from fairque_core.settings.accel import Accelerators

                options["accel"] = Accelerators.none()
                backend = _require_redis_backend().from_url(url, **options)
            else:
                backend = _require_redis_backend().from_url(url, **options)
            probe = RedisProbe(
                _raw_client(_raw_clients, server_url, cluster=cluster),
                queue,
                cluster=cluster,
                partitioned=backend_kind in PARTITIONED_KINDS,
            )
        made.append((backend, probe))
        return backend

    factory.made = made  # type: ignore[attr-defined]
    yield factory
    for backend, probe in made:
        backend.close()
        if probe is not None:
            probe.delete_queue_keys()


@pytest.fixture
def backend(make_backend: Callable[..., QueueBackend]) -> QueueBackend:
    """A backend with the default QueueConfig on a fresh queue."""
    return make_backend()


@pytest.fixture
def probe(
    backend_kind: str,
    backend: QueueBackend,
    make_backend: Callable[..., QueueBackend],
) -> RedisProbe:
    """The raw-client probe of ``backend``'s queue (Redis params only)."""
    if backend_kind in MODEL_KINDS:
        pytest.skip("needs a real server: the in-memory model has no keys or command counters")
    if backend_kind in PARTITIONED_KINDS:
        pytest.skip("a partitioned queue's keys live under P hash tags: the probe reads one")
    for made, made_probe in make_backend.made:  # type: ignore[attr-defined]
        if made is backend:
            assert made_probe is not None
            return made_probe
    raise AssertionError("backend was not made by make_backend")


def probe_of(make_backend: Callable[..., QueueBackend], backend: QueueBackend) -> RedisProbe | None:
    """The probe of any backend ``make_backend`` made (None for the model; a partitioned
    queue's skips the test: its keys live under P hash tags)."""
    for made, made_probe in make_backend.made:  # type: ignore[attr-defined]
        if made is backend:
            if made_probe is not None and made_probe.partitioned:
                pytest.skip(
                    "a partitioned queue's keys live under P hash tags: the probe reads one"
                )
            return made_probe
    raise AssertionError("backend was not made by make_backend")
