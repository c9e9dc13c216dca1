"""What both replica waiters share (``durability="replicated"``, ADR 33; the design is in
:mod:`fairque_redis.durability.modes`): the settings, the detection of ``WAITAOF``, the reply
reading, and where a waiter takes its connection on each kind of client.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from typing import Any, TypeVar

import attrs
from redis import Redis
from redis import exceptions as rexc
from redis.asyncio import Redis as AsyncRedis
from redis.asyncio.cluster import ClusterNode as AsyncClusterNode
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster

from fairque_core.domain.errors import (
    ConfigurationError,
    NotReplicatedError,
    RedisConnectionError,
)
from fairque_core.settings.config import DURABILITY_MODES, FairQueueConfig, RedisConfig
from fairque_redis.backends.errors import translate_errors
from fairque_redis.scripting.calls import Call

__all__ = ["NO_WAIT_SCRIPTS", "Durability", "async_pool_of", "pool_of"]

T = TypeVar("T")

log = logging.getLogger("fairque.redis")

#: Write scripts that never wait for a replica: the work loop's bookkeeping, redone by itself
#: (a lost claim or heartbeat is a redelivery; a lost requeue is redone by the next reaper).
NO_WAIT_SCRIPTS = frozenset({"claim", "heartbeat", "requeue_expired"})

_Command = tuple[Any, ...]


@attrs.frozen
class Durability:
    """What a backend waits for after a write (RedisConfig ``durability``,
    ``replication_timeout_ms``, ``replica_fsync``)."""

    mode: str = "default"
    timeout_ms: int = 500
    replica_fsync: bool = True

    def __attrs_post_init__(self) -> None:
        # the same rules as RedisConfig's fields, for a Durability built by hand
        RedisConfig(
            durability=self.mode,
            replication_timeout_ms=self.timeout_ms,
            replica_fsync=self.replica_fsync,
        )

    @classmethod
    def of(cls, value: Durability | RedisConfig | FairQueueConfig | str | None) -> Durability:
        """A Durability from a mode name, a RedisConfig (or a whole config), or None."""
        if isinstance(value, Durability):
            return value
        if isinstance(value, FairQueueConfig):
            value = value.redis
        if isinstance(value, RedisConfig):
            return cls(value.durability, value.replication_timeout_ms, value.replica_fsync)
        if value is None:
            return cls()
        if value not in DURABILITY_MODES:
            raise ConfigurationError(
                f"durability must be one of {', '.join(map(repr, DURABILITY_MODES))}",
                path="redis.durability",
                value=value,
            )
        return cls(value)

    @property
    def replicated(self) -> bool:
        return self.mode == "replicated"


class _WaiterBase:
    """What both waiters share: the settings, the detection result and the reply reading."""

    def __init__(self, durability: Durability, queue: str) -> None:
        self._durability = durability
        self._queue = queue
        # "WAITAOF" or "WAIT" once detected; None before the first replicated write
        self._command: str | None = None
        self._logged = False

    @staticmethod
    def waits_after(script: str) -> bool:
        """Whether a call of ``script`` (a write) waits for a replica."""
        return script not in NO_WAIT_SCRIPTS

    @property
    def command(self) -> str | None:
        """The wait this backend uses (``WAITAOF`` or ``WAIT``), None before it is known."""
        return self._command

    def _probes(self) -> list[_Command]:
        if self._command is not None:
            return []
        if not self._durability.replica_fsync:
            return [("WAIT", 0, 0)]
        return [("WAIT", 0, 0), ("WAITAOF", 0, 0, 0)]

    def _detected(self, replies: list[Any]) -> None:
        """Take the probe replies: WAIT must work; WAITAOF is used when the server has it."""
        if not replies:
            return
        wait, *waitaof = replies
        if isinstance(wait, Exception):
            raise wait  # translated by the caller (BackendPermissionError for a NOPERM)
        reason = str(waitaof[0]) if waitaof and isinstance(waitaof[0], Exception) else ""
        self._command = "WAITAOF" if waitaof and not reason else "WAIT"
        self._log(reason)

    def _log(self, reason: str) -> None:
        if self._logged:
            return
        self._logged = True
        timeout = self._durability.timeout_ms
        if self._command == "WAITAOF":
            log.info(
                "queue %s: durability=replicated waits after each write for a replica to "
                "write it to its append-only file (WAIT 1, then WAITAOF 0 1; %d ms in all)",
                self._queue,
                timeout,
            )
        elif reason:
            log.info(
                "queue %s: durability=replicated waits after each write for a replica to "
                "receive it (WAIT 1 %d): the server refused WAITAOF (%s)",
                self._queue,
                timeout,
                reason[:120],
            )
        else:
            log.info(
                "queue %s: durability=replicated waits after each write for a replica to "
                "receive it (WAIT 1 %d; replica_fsync is off)",
                self._queue,
                timeout,
            )

    def _script_commands(self, command: _Command) -> list[_Command]:
        """The script's call (FCALL or EVALSHA, from the script object) and its WAIT."""
        return [command, ("WAIT", 1, self._durability.timeout_ms)]

    def _rest_ms(self, started: float) -> int:
        spent = (time.monotonic() - started) * 1000
        return max(1, math.floor(self._durability.timeout_ms - spent))

    def _outcome(self, call: Call[T], reply: Any, waited: Any, fsynced: Any) -> T:
        """The call's result, or NotReplicatedError when the wait fell short."""
        if isinstance(reply, Exception):
            with translate_errors(call.script, writes=True):
                raise reply
        result = call.parse(reply)
        if int(waited) < 1:
            raise NotReplicatedError(
                call.script, command="WAIT", timeout_ms=self._durability.timeout_ms, result=result
            )
        if fsynced is not None and int(fsynced[1]) < 1:
            raise NotReplicatedError(
                call.script,
                command="WAITAOF",
                timeout_ms=self._durability.timeout_ms,
                received=True,
                result=result,
            )
        return result


def _moved(reply: Any, moves: int) -> bool:
    """Whether the script was refused because the queue's slot moved (it did not run), the
    first time: the caller refreshes the cluster's slot table and sends it again. A second
    refusal is an error the caller may retry (RedisConnectionError, nothing was written)."""
    if not isinstance(reply, (rexc.MovedError, rexc.AskError)):
        return False
    if moves:
        raise RedisConnectionError(f"the queue's slot is moving ({reply}); nothing was written")
    return True


def pool_of(client: Redis | RedisCluster, keys: Sequence[Any]) -> Any:
    """Where a waiter takes its one connection: the pool of the node that owns ``keys[0]``'s
    slot on a cluster, else the client's pool (``get_connection()`` and ``release(conn)``)."""
    if isinstance(client, RedisCluster):
        node = client.get_node_from_key(keys[0])  # type: ignore[no-untyped-call]
        return client.get_redis_connection(node).connection_pool
    return client.connection_pool


def async_pool_of(client: AsyncRedis | AsyncRedisCluster, keys: Sequence[Any]) -> Any:
    """:func:`pool_of` for ``redis.asyncio`` clients, whose ``get_connection`` and ``release``
    are awaited; a cluster node's connections are taken and given back through
    :class:`_NodePool`."""
    if isinstance(client, AsyncRedisCluster):
        node = client.get_node_from_key(keys[0])
        if node is None:
            raise rexc.SlotNotCoveredError(f"no node serves the slot of {keys[0]!r}")
        return _NodePool(node)
    return client.connection_pool


class _NodePool:
    """A ``redis.asyncio`` cluster node's connections with the awaited methods of a pool."""

    def __init__(self, node: AsyncClusterNode) -> None:
        self._node = node

    async def get_connection(self) -> Any:
        return self._node.acquire_connection()

    async def release(self, conn: Any) -> None:
        self._node.release(conn)
