"""The ``fairque.backends`` entry point: a backend from a URL.

``backend_from_url("redis://host:6379/0", queue="emails")`` is what tools that only know a URL
call (``redis://``, ``rediss://``, ``valkey://``, ``valkeys://``). ``asyncio=True`` gives the
:class:`~fairque_redis.async_backend.AsyncRedisBackend`; other options go to ``from_url``. A
queue config with ``partitions`` above 1 gives the partitioned backend (ADR 34).
"""

from __future__ import annotations

from typing import Any

from fairque_core.app.config import FairQueueConfig, QueueConfig
from fairque_redis.async_backend import AsyncRedisBackend
from fairque_redis.backend import RedisBackend
from fairque_redis.partitioned import PartitionedBackend
from fairque_redis.partitioned_async import AsyncPartitionedBackend

__all__ = ["backend_from_url"]


def backend_from_url(
    url: str, *, asyncio: bool = False, **opts: Any
) -> RedisBackend | AsyncRedisBackend | PartitionedBackend | AsyncPartitionedBackend:
    """A Redis backend (sync, or async with ``asyncio=True``) for ``url``."""
    config = opts.get("config")
    queue_config = config.queue if isinstance(config, FairQueueConfig) else config
    if isinstance(queue_config, QueueConfig) and queue_config.partitions > 1:
        if asyncio:
            return AsyncPartitionedBackend.from_url(url, **opts)
        return PartitionedBackend.from_url(url, **opts)
    if asyncio:
        return AsyncRedisBackend.from_url(url, **opts)
    return RedisBackend.from_url(url, **opts)
