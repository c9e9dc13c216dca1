"""``durability="replicated"`` (ADR 33): a write returns only once a replica confirms it.

After a write script, on the connection that ran it, the backend sends ``WAIT 1 <t>`` and, on a
server that has it (Redis/Valkey >= 7.2, and unless ``replica_fsync`` is off), then
``WAITAOF 0 1 <rest of t>``. Both count the replicas that acknowledged the *connection's* last
write, so they must follow the script on the same connection: redis-py's pooled commands could
take another one (whose last write is older, and the answer would be a false yes), and on a
cluster redis-py sends ``WAIT`` to every primary. So the backend takes one connection of the
node that owns the queue's slot, sends the script and the ``WAIT`` together, reads both replies,
and sends the ``WAITAOF`` only when the ``WAIT`` was answered.

Why ``WAIT`` before ``WAITAOF``: a replica reports its fsynced offset when the primary asks
(``REPLCONF GETACK``, sent when a wait begins) or once a second. When the write and the
primary's question reach the replica together, the replica answers before its fsync and
``WAITAOF`` alone waits for the next report, about a second (measured: 3 % of single writes and
every pipelined one, with ``appendfsync always`` on the replica). A ``WAITAOF`` sent after the
``WAIT`` asks again once the replica has the write.

Where the server has no ``WAITAOF`` (``ERR unknown command``, Redis 7.0/7.1) or an ACL refuses
it, the backend waits with ``WAIT`` only, and says so once in the log. The detection runs once
per backend, before its first replicated write, with ``WAITAOF 0 0 0`` and ``WAIT 0 0`` (both
answer at once); a refused ``WAIT`` fails there, before anything is written.

A reply that misses the timeout raises :class:`NotReplicatedError` *after* the write was applied
on the primary. The work loop's own bookkeeping (claim, heartbeat, requeue_expired) does not
wait: losing one of those in a failover leads to a redelivery, which at-least-once allows, and
raising after a claim would strand its leases until the reaper takes them back.

The waiter is written once, in ``_replica_waiter_async.py`` (``AsyncReplicaWaiter``);
``_replica_waiter.py`` (``ReplicaWaiter``) is generated from it by ``tools/gen_sync.py``
(ADR 21). What both share (the settings, the detection, the reply reading, where each kind of
client gives the connection) is in ``_replica_wait.py``; this module picks the waiter.
"""

from __future__ import annotations

from typing import Any, overload

from redis import Redis
from redis.asyncio import Redis as AsyncRedis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster

from fairque_core.domain.errors import ConfigurationError
from fairque_redis.durability.replica_wait import NO_WAIT_SCRIPTS, Durability
from fairque_redis.durability.waiter import ReplicaWaiter
from fairque_redis.durability.waiter_async import AsyncReplicaWaiter

__all__ = ["NO_WAIT_SCRIPTS", "AsyncReplicaWaiter", "Durability", "ReplicaWaiter", "replica_waiter"]


@overload
def replica_waiter(
    client: AsyncRedis | AsyncRedisCluster, durability: Durability, queue: str
) -> AsyncReplicaWaiter | None: ...
@overload
def replica_waiter(
    client: Redis | RedisCluster, durability: Durability, queue: str
) -> ReplicaWaiter | None: ...
def replica_waiter(
    client: Any, durability: Durability, queue: str
) -> ReplicaWaiter | AsyncReplicaWaiter | None:
    """The waiter a backend on ``client`` uses, or None when ``durability`` waits for nothing.
    ConfigurationError when the wait could outlast the client's socket timeout."""
    if not durability.replicated:
        return None
    _check_socket_timeout(client, durability.timeout_ms)
    if isinstance(client, (AsyncRedis, AsyncRedisCluster)):
        return AsyncReplicaWaiter(client, durability, queue)
    return ReplicaWaiter(client, durability, queue)


def _check_socket_timeout(client: Any, timeout_ms: int) -> None:
    try:
        socket_timeout = client.get_connection_kwargs().get("socket_timeout")
    except AttributeError:
        socket_timeout = None
    if isinstance(socket_timeout, (int, float)) and timeout_ms >= socket_timeout * 1000:
        raise ConfigurationError(
            f"replication_timeout_ms ({timeout_ms}) must be shorter than the socket timeout "
            f"({socket_timeout:g} s): the wait for the replica is one blocking read",
            path="redis.replication_timeout_ms",
            value=timeout_ms,
        )
