"""Is the server behind a plain client a cluster node? Asked once, when a queue is opened.

A plain (non-cluster) client on a cluster node works until the first key lives on another
node, then fails with a ``MOVED`` reply deep inside a Lua call. ``INFO cluster`` says
``cluster_enabled:1`` on a cluster node, so opening the queue fails at once instead, with a
message that says what to pass. An unreachable server, or one whose ACL forbids ``INFO``, is
left alone here: the first real call reports it as before.
"""

from __future__ import annotations

from typing import Any

from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster

from fairque_core.domain.errors import ConfigurationError

__all__ = ["CLUSTER_HINT", "acheck_not_cluster_node", "check_not_cluster_node"]

CLUSTER_HINT = (
    "the server is a Redis/Valkey Cluster node: pass cluster=True to connect() "
    "(--cluster on the command line, redis.cluster: true in the config)"
)


def _enabled(info: Any) -> bool:
    try:
        return int(info.get("cluster_enabled", 0)) == 1
    except (AttributeError, TypeError, ValueError):
        return False


def _refuse() -> ConfigurationError:
    return ConfigurationError(CLUSTER_HINT, path="redis.cluster", value=False)


def check_not_cluster_node(client: Any) -> None:
    """Raise ConfigurationError when ``client`` is a plain client on a cluster node."""
    if client is None or isinstance(client, RedisCluster) or not hasattr(client, "info"):
        return
    try:
        info = client.info("cluster")
    except Exception:  # unreachable, ACL, old server: the first real call says
        return
    if _enabled(info):
        raise _refuse()


async def acheck_not_cluster_node(client: Any) -> None:
    """The asyncio twin of :func:`check_not_cluster_node`."""
    if client is None or isinstance(client, AsyncRedisCluster) or not hasattr(client, "info"):
        return
    try:
        info = await client.info("cluster")
    except Exception:  # as above
        return
    if _enabled(info):
        raise _refuse()
