"""fairque Redis/Valkey adapter: the Lua-backed queue backends, key layout and embedded server.

``connect``/``aconnect`` give a ready FairQueue / AsyncFairQueue in one call (an embedded Valkey
when no URL is configured).
"""

from fairque_redis._connect import aconnect, connect
from fairque_redis.backends.backend import RedisBackend
from fairque_redis.backends.backend_async import AsyncRedisBackend
from fairque_redis.factory import backend_from_url
from fairque_redis.keys import KeySpace, partition_for
from fairque_redis.servers.cluster import EmbeddedCluster
from fairque_redis.servers.embedded import EmbeddedValkey, LocalServerNotInstalledError

__all__ = [
    "AsyncRedisBackend",
    "EmbeddedCluster",
    "EmbeddedValkey",
    "KeySpace",
    "LocalServerNotInstalledError",
    "RedisBackend",
    "aconnect",
    "backend_from_url",
    "connect",
    "partition_for",
]
