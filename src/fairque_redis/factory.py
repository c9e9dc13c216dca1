"""The ``fairque.backends`` entry point: a backend from a URL.

``backend_from_url("redis://host:6379/0", queue="emails")`` is what tools that only know a URL
call (``redis://``, ``rediss://``, ``valkey://``, ``valkeys://``). ``asyncio=True`` gives the
:class:`~fairque_redis.backends.backend_async.AsyncRedisBackend`; other options go to ``from_url``.
A
queue config with ``partitions`` above 1 gives the partitioned backend (ADR 34), which checks
the queue's recorded number of partitions on first use. A one-slot backend checks it here, as
``connect`` does: a queue recorded with partitions and holding tasks is refused
(ConfigurationError) rather than opened on its empty one-slot keys, where a worker would find
nothing and a producer's tasks would be out of every partitioned worker's reach.
"""

from __future__ import annotations

from typing import Any

from fairque_core.settings.config import FairQueueConfig, QueueConfig
from fairque_redis.accel.compose import backend_plugs
from fairque_redis.backends.backend import RedisBackend
from fairque_redis.backends.backend_async import AsyncRedisBackend
from fairque_redis.partitioned.backend import PartitionedBackend
from fairque_redis.partitioned.backend_async import AsyncPartitionedBackend
from fairque_redis.partitioned.reads import settle_layout
from fairque_redis.servers.topology import check_not_cluster_node

__all__ = ["backend_from_url"]


def backend_from_url(
    url: str, *, asyncio: bool = False, **opts: Any
) -> RedisBackend | AsyncRedisBackend | PartitionedBackend | AsyncPartitionedBackend:
    """A Redis backend (sync, or async with ``asyncio=True``) for ``url``. ``accel=`` (an
    :class:`~fairque_core.settings.accel.Accelerators`; default: from the environment) turns
    accelerators off."""
    opts["accel"], opts["intake_entries"] = backend_plugs(opts.get("accel"))
    config = opts.get("config")
    queue_config = config.queue if isinstance(config, FairQueueConfig) else config
    if isinstance(queue_config, QueueConfig) and queue_config.partitions > 1:
        if asyncio:
            return AsyncPartitionedBackend.from_url(url, **opts)
        return PartitionedBackend.from_url(url, **opts)
    qc = queue_config if isinstance(queue_config, QueueConfig) else None
    if asyncio:
        # the check on a short-lived sync backend of the same options: this factory is not a
        # coroutine, and the asyncio backend's first call may be made on any loop
        with RedisBackend.from_url(url, **opts) as probe:
            _check_one_slot(probe, qc)
        return AsyncRedisBackend.from_url(url, **opts)
    backend = RedisBackend.from_url(url, **opts)
    try:
        _check_one_slot(backend, qc)
    except BaseException:
        backend.close()
        raise
    return backend


def _check_one_slot(backend: RedisBackend, config: QueueConfig | None) -> None:
    """:func:`settle_layout` for one partition: refuses a queue recorded with partitions that
    holds tasks (one GET when the queue has none recorded). A plain client on a cluster node
    is refused first, by what refuses it (its GET would answer MOVED)."""
    check_not_cluster_node(backend.client)
    settle_layout(backend.client, backend.queue, 1, config=config, scripts=backend.script_mode)
