"""``connect`` / ``aconnect``: a ready FairQueue on Redis/Valkey in one call.

The URL comes from the argument, else ``$FAIRQUE_REDIS_URL``, else ``config.redis.url``. With
none of them the queue uses the shared local server of :mod:`fairque_redis.servers.dev_server` (one
durable Valkey per user, started on first use and left running), so separate processes share
their queues. The URL ``embedded://`` instead starts a throwaway Valkey owned by the returned
queue: ``queue.close()`` stops it (and removes its data), and so does interpreter exit.

Keyword options beyond the named ones are :class:`~fairque_core.settings.config.QueueConfig` fields
(``lease_seconds=10``, ``aging_horizon_seconds=60`` ...); an unknown one is a
ConfigurationError. Tenant weights and tiers of the queue config are applied before the queue
is returned. ``partitions=P`` (a QueueConfig field) above 1 spreads the queue over P hash-tag
partitions (:mod:`fairque_redis.partitioned.backend`, ADR 34); the number is recorded with the
queue,
and opening a non-empty queue with another number is a ConfigurationError.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import attrs

from fairque_core import AsyncFairQueue, FairQueue
from fairque_core.domain.errors import ConfigurationError
from fairque_core.settings.accel import Accelerators
from fairque_core.settings.config import FairQueueConfig, QueueConfig, RedisConfig
from fairque_redis.accel.compose import backend_plugs
from fairque_redis.servers.embedded import EmbeddedValkey
from fairque_redis.servers.topology import acheck_not_cluster_node, check_not_cluster_node

__all__ = ["EMBEDDED_URL", "URL_ENV", "aconnect", "connect", "resolve_config"]

#: The environment variable ``connect`` reads when no URL is given.
URL_ENV = "FAIRQUE_REDIS_URL"
#: The URL that asks for a throwaway in-process server instead of the shared one.
EMBEDDED_URL = "embedded://"


class _OwningFairQueue(FairQueue):
    """A FairQueue that stops the embedded server it runs on when it is closed."""

    _server: EmbeddedValkey | None = None

    @property
    def server(self) -> EmbeddedValkey | None:
        """The embedded server this queue started (None when it connected to a URL)."""
        return self._server

    def close(self) -> None:
        try:
            super().close()
        finally:
            server, self._server = self._server, None
            if server is not None:
                server.stop()


class _OwningAsyncFairQueue(AsyncFairQueue):
    """The asyncio twin of :class:`_OwningFairQueue`."""

    _server: EmbeddedValkey | None = None

    @property
    def server(self) -> EmbeddedValkey | None:
        return self._server

    async def close(self) -> None:
        try:
            await super().close()
        finally:
            server, self._server = self._server, None
            if server is not None:
                server.stop()


def resolve_config(
    config: FairQueueConfig | QueueConfig | None,
    queue: str | None,
    cluster: bool,
    queue_opts: dict[str, Any],
) -> FairQueueConfig:
    """The full config ``connect`` uses: ``config`` with the queue name and options applied."""
    if config is None:
        full = FairQueueConfig()
    elif isinstance(config, QueueConfig):
        full = FairQueueConfig(queue=config)
    elif isinstance(config, FairQueueConfig):
        full = config
    else:
        raise ConfigurationError(
            f"config must be a FairQueueConfig or a QueueConfig, not {type(config).__name__}",
            path="config",
            value=config,
        )
    known = {field.name for field in attrs.fields(QueueConfig)}
    unknown = sorted(set(queue_opts) - known)
    if unknown:
        raise ConfigurationError(
            f"unknown queue option(s): {', '.join(unknown)} (QueueConfig fields are accepted)",
            path="queue",
            value=unknown,
        )
    changes: dict[str, Any] = dict(queue_opts)
    if queue is not None:
        changes["name"] = queue
    queue_config = attrs.evolve(full.queue, **changes) if changes else full.queue
    redis_config = attrs.evolve(full.redis, cluster=True) if cluster else full.redis
    return attrs.evolve(full, queue=queue_config, redis=redis_config)


def _pick_url(url: str | None, config: FairQueueConfig) -> str | None:
    if url:
        return url
    from_env = os.environ.get(URL_ENV, "").strip()
    if from_env:
        return from_env
    return config.redis.url or None


def _start_embedded(target: str | None) -> EmbeddedValkey | None:
    """A throwaway server for ``embedded://``; None for any other URL."""
    if target != EMBEDDED_URL:
        return None
    server = EmbeddedValkey()
    server.start()
    return server


def _shared_url(target: str | None) -> str | None:
    """``target``, or the URL of the shared local server when no URL was given."""
    if target is not None:
        return target
    from fairque_redis.servers import dev_server

    return dev_server.ensure_running()[0].url


def _allowing(
    redis_config: RedisConfig, allow_eviction: bool, durability: str | None, partitions: int
) -> RedisConfig:
    """``allow_eviction=True`` of connect accepts an evicting server (see server_checks);
    ``durability`` replaces the config's (ADR 33; not with partitions yet)."""
    if allow_eviction:
        redis_config = attrs.evolve(redis_config, allow_eviction=True)
    if durability is not None:
        redis_config = attrs.evolve(redis_config, durability=durability)
    if redis_config.durability != "default" and partitions > 1:
        raise ConfigurationError(
            "durability='replicated' does not support a partitioned queue yet",
            path="redis.durability",
            value=redis_config.durability,
        )
    return redis_config


def connect(
    url: str | None = None,
    *,
    queue: str | None = None,
    plugins: Sequence[object] | None = None,
    cluster: bool = False,
    config: FairQueueConfig | QueueConfig | None = None,
    allow_eviction: bool = False,
    durability: str | None = None,
    accel: Accelerators | None = None,
    **queue_opts: Any,
) -> FairQueue:
    """A :class:`FairQueue` on ``url`` (or ``$FAIRQUE_REDIS_URL``, or the shared local server).

    ``queue`` names the queue (default: the config's name, ``"default"``); ``plugins`` are
    added to the default plugins; ``cluster=True`` uses a Redis Cluster client. The server is
    checked at once (credentials, and a ``maxmemory-policy`` other than ``noeviction`` is an
    UnsafeServerConfigError unless ``allow_eviction=True``), and so is the queue's recorded
    number of partitions (``partitions=P``; ConfigurationError when it differs on a non-empty
    queue). ``durability="replicated"`` makes every write wait for a replica to confirm it
    (NotReplicatedError when none does within ``replication_timeout_ms``; ADR 33).
    ``accel`` turns accelerators off (default: ``$FAIRQUE_ACCEL_OFF``, read once, here; ADR 65).
    """
    from fairque_redis.backends.backend import RedisBackend
    from fairque_redis.partitioned.backend import PartitionedBackend, settle_layout

    full = resolve_config(config, queue, cluster, queue_opts)
    plugged, entries = backend_plugs(accel)
    target = _shared_url(_pick_url(url, full))
    server = _start_embedded(target)
    try:
        redis_config = attrs.evolve(full.redis, url=server.url if server else str(target))
        redis_config = _allowing(redis_config, allow_eviction, durability, full.queue.partitions)
        backend: RedisBackend | PartitionedBackend
        if full.queue.partitions > 1:
            backend = PartitionedBackend.from_config(
                redis_config, full.queue, accel=plugged, intake_entries=entries
            )
        else:
            backend = RedisBackend.from_config(
                redis_config, full.queue, accel=plugged, intake_entries=entries
            )
        try:
            backend.check_server()  # credentials and maxmemory-policy, at once
            if not redis_config.cluster:
                check_not_cluster_node(backend.client)
            if full.queue.partitions == 1:  # refuses a queue recorded with partitions
                settle_layout(
                    backend.client,
                    full.queue.name,
                    1,
                    config=full.queue,
                    scripts=backend.script_mode,
                )
        except BaseException:
            backend.close()
            raise
        result = _OwningFairQueue(
            backend, plugins=tuple(plugins or ()), config=full.queue, accel=plugged
        )
        result._server = server
    except BaseException:
        if server is not None:
            server.stop()
        raise
    try:
        result.apply_tenant_config()
    except BaseException:
        result.close()
        raise
    return result


async def aconnect(
    url: str | None = None,
    *,
    queue: str | None = None,
    plugins: Sequence[object] | None = None,
    cluster: bool = False,
    config: FairQueueConfig | QueueConfig | None = None,
    allow_eviction: bool = False,
    durability: str | None = None,
    accel: Accelerators | None = None,
    **queue_opts: Any,
) -> AsyncFairQueue:
    """The asyncio twin of :func:`connect`: an :class:`AsyncFairQueue`."""
    from fairque_redis.backends.backend_async import AsyncRedisBackend
    from fairque_redis.partitioned.backend_async import AsyncPartitionedBackend, settle_layout

    full = resolve_config(config, queue, cluster, queue_opts)
    plugged, entries = backend_plugs(accel)
    target = _shared_url(_pick_url(url, full))
    server = _start_embedded(target)
    try:
        redis_config = attrs.evolve(full.redis, url=server.url if server else str(target))
        redis_config = _allowing(redis_config, allow_eviction, durability, full.queue.partitions)
        backend: AsyncRedisBackend | AsyncPartitionedBackend
        if full.queue.partitions > 1:
            backend = AsyncPartitionedBackend.from_config(
                redis_config, full.queue, accel=plugged, intake_entries=entries
            )
        else:
            backend = AsyncRedisBackend.from_config(
                redis_config, full.queue, accel=plugged, intake_entries=entries
            )
        try:
            await backend.check_server()  # credentials and maxmemory-policy, at once
            if not redis_config.cluster:
                await acheck_not_cluster_node(backend.client)
            if full.queue.partitions == 1:  # refuses a queue recorded with partitions
                await settle_layout(
                    backend.client,
                    full.queue.name,
                    1,
                    config=full.queue,
                    scripts=backend.script_mode,
                )
        except BaseException:
            await backend.close()
            raise
        result = _OwningAsyncFairQueue(
            backend, plugins=tuple(plugins or ()), config=full.queue, accel=plugged
        )
        result._server = server
    except BaseException:
        if server is not None:
            server.stop()
        raise
    try:
        await result.apply_tenant_config()
    except BaseException:
        await result.close()
        raise
    return result
