"""fairque Redis/Valkey adapter: the Lua-backed queue backends, key layout and embedded server.

``connect``/``aconnect`` give a ready FairQueue / AsyncFairQueue in one call (an embedded Valkey
when no URL is configured).
"""

from fairque_redis._connect import aconnect, connect
from fairque_redis.async_backend import AsyncRedisBackend
from fairque_redis.backend import RedisBackend
from fairque_redis.cluster import EmbeddedCluster
from fairque_redis.embedded import EmbeddedValkey
from fairque_redis.factory import backend_from_url
from fairque_redis.keys import KeySpace, partition_for

__all__ = [
    "AsyncRedisBackend",
    "EmbeddedCluster",
    "EmbeddedValkey",
    "KeySpace",
    "RedisBackend",
    "aconnect",
    "backend_from_url",
    "connect",
    "partition_for",
]
