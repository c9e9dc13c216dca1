"""The ``fairque.backends`` entry point: a backend from a URL.

``backend_from_url("redis://host:6379/0", queue="emails")`` is what tools that only know a URL
call (``redis://``, ``rediss://``, ``valkey://``, ``valkeys://``). ``asyncio=True`` gives the
:class:`~fairque_redis.async_backend.AsyncRedisBackend`; other options go to ``from_url``.
"""

from __future__ import annotations

from typing import Any

from fairque_redis.async_backend import AsyncRedisBackend
from fairque_redis.backend import RedisBackend

__all__ = ["backend_from_url"]


def backend_from_url(
    url: str, *, asyncio: bool = False, **opts: Any
) -> RedisBackend | AsyncRedisBackend:
    """A Redis backend (sync, or async with ``asyncio=True``) for ``url``."""
    if asyncio:
        return AsyncRedisBackend.from_url(url, **opts)
    return RedisBackend.from_url(url, **opts)
