"""fairque Redis/Valkey adapter: the Lua-backed queue backends, key layout and embedded server.

``connect``/``aconnect`` (a ready FairQueue in one call) live in :mod:`fairque_redis.connect`.
"""

from fairque_redis.async_backend import AsyncRedisBackend
from fairque_redis.backend import RedisBackend
from fairque_redis.embedded import EmbeddedCluster, EmbeddedValkey
from fairque_redis.factory import backend_from_url
from fairque_redis.keys import KeySpace, partition_for

__all__ = [
    "AsyncRedisBackend",
    "EmbeddedCluster",
    "EmbeddedValkey",
    "KeySpace",
    "RedisBackend",
    "backend_from_url",
    "partition_for",
]
