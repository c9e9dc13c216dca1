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
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from typing import Any, TypeVar, overload

import attrs
from redis import Redis
from redis import exceptions as rexc
from redis.asyncio import Redis as AsyncRedis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster

from fairque_core.app.config import DURABILITY_MODES, FairQueueConfig, RedisConfig
from fairque_core.domain.errors import (
    ConfigurationError,
    NotReplicatedError,
    RedisConnectionError,
)
from fairque_redis._errors import translate_errors
from fairque_redis._script_calls import Call
from fairque_redis._script_loading import ATTEMPTS

__all__ = ["NO_WAIT_SCRIPTS", "AsyncReplicaWaiter", "Durability", "ReplicaWaiter", "replica_waiter"]

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

    def _script_commands(self, sha: str, keys: Sequence[Any], args: Sequence[Any]) -> list[Any]:
        return [("EVALSHA", sha, len(keys), *keys, *args), ("WAIT", 1, self._durability.timeout_ms)]

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


class ReplicaWaiter(_WaiterBase):
    """The waiter of a synchronous backend (``redis.Redis`` or ``redis.cluster.RedisCluster``)."""

    def __init__(self, client: Redis | RedisCluster, durability: Durability, queue: str) -> None:
        super().__init__(durability, queue)
        self._client = client

    def run(self, call: Call[T], script: Any, keys: Sequence[Any]) -> T:
        """Run ``call``'s script and wait for a replica, on one connection; see the module."""
        with translate_errors(call.script, writes=True):
            for moves in range(2):
                pool = self._pool(keys)
                conn = pool.get_connection()
                try:
                    reply, waited, fsynced = self._exchange(conn, script, keys, call.args)
                except BaseException:
                    conn.disconnect()
                    raise
                finally:
                    pool.release(conn)
                if not _moved(reply, moves):
                    break
                assert isinstance(self._client, RedisCluster)
                self._client.nodes_manager.initialize()
        return self._outcome(call, reply, waited, fsynced)

    def _pool(self, keys: Sequence[Any]) -> Any:
        client = self._client
        if isinstance(client, RedisCluster):
            node = client.get_node_from_key(keys[0])  # type: ignore[no-untyped-call]
            return client.get_redis_connection(node).connection_pool
        return client.connection_pool

    def _exchange(
        self, conn: Any, script: Any, keys: Sequence[Any], args: Sequence[Any]
    ) -> tuple[Any, Any, Any]:
        probes = self._probes()
        if probes:
            self._detected(self._send(conn, probes))
        for attempt in range(1, ATTEMPTS + 1):
            started = time.monotonic()
            reply, waited = self._send(conn, self._script_commands(script.sha, keys, args))
            if not isinstance(reply, rexc.NoScriptError) or attempt == ATTEMPTS:
                break
            [loaded] = self._send(conn, [("SCRIPT", "LOAD", script.script)])
            if isinstance(loaded, Exception):
                raise loaded
        if isinstance(waited, Exception):
            raise waited
        fsynced = None
        if self._command == "WAITAOF" and not isinstance(reply, Exception) and int(waited) >= 1:
            [fsynced] = self._send(conn, [("WAITAOF", 0, 1, self._rest_ms(started))])
            if isinstance(fsynced, Exception):
                raise fsynced
        return reply, waited, fsynced

    @staticmethod
    def _send(conn: Any, commands: list[_Command]) -> list[Any]:
        conn.send_packed_command(conn.pack_commands(commands))
        replies: list[Any] = []
        for _ in commands:
            try:
                replies.append(conn.read_response())
            except rexc.ResponseError as exc:
                replies.append(exc)
        return replies


class AsyncReplicaWaiter(_WaiterBase):
    """The waiter of an asyncio backend (``redis.asyncio.Redis`` or its ``RedisCluster``)."""

    def __init__(
        self, client: AsyncRedis | AsyncRedisCluster, durability: Durability, queue: str
    ) -> None:
        super().__init__(durability, queue)
        self._client = client

    async def run(self, call: Call[T], script: Any, keys: Sequence[Any]) -> T:
        """Run ``call``'s script and wait for a replica, on one connection; see the module."""
        with translate_errors(call.script, writes=True):
            for moves in range(2):
                reply, waited, fsynced = await self._run_once(call, script, keys)
                if not _moved(reply, moves):
                    break
                assert isinstance(self._client, AsyncRedisCluster)
                await self._client.nodes_manager.initialize()
        return self._outcome(call, reply, waited, fsynced)

    async def _run_once(self, call: Call[T], script: Any, keys: Sequence[Any]) -> tuple[Any, ...]:
        client = self._client
        if isinstance(client, AsyncRedisCluster):
            node = client.get_node_from_key(keys[0])
            if node is None:
                raise rexc.SlotNotCoveredError(f"no node serves the slot of {keys[0]!r}")
            conn = node.acquire_connection()
            try:
                return await self._exchange(conn, script, keys, call.args)
            except BaseException:
                await conn.disconnect()
                raise
            finally:
                node.release(conn)
        pool = client.connection_pool
        conn = await pool.get_connection()  # type: ignore[no-untyped-call]
        try:
            return await self._exchange(conn, script, keys, call.args)
        except BaseException:
            await conn.disconnect()
            raise
        finally:
            await pool.release(conn)

    async def _exchange(
        self, conn: Any, script: Any, keys: Sequence[Any], args: Sequence[Any]
    ) -> tuple[Any, Any, Any]:
        probes = self._probes()
        if probes:
            self._detected(await self._send(conn, probes))
        for attempt in range(1, ATTEMPTS + 1):
            started = time.monotonic()
            reply, waited = await self._send(conn, self._script_commands(script.sha, keys, args))
            if not isinstance(reply, rexc.NoScriptError) or attempt == ATTEMPTS:
                break
            [loaded] = await self._send(conn, [("SCRIPT", "LOAD", script.script)])
            if isinstance(loaded, Exception):
                raise loaded
        if isinstance(waited, Exception):
            raise waited
        fsynced = None
        if self._command == "WAITAOF" and not isinstance(reply, Exception) and int(waited) >= 1:
            [fsynced] = await self._send(conn, [("WAITAOF", 0, 1, self._rest_ms(started))])
            if isinstance(fsynced, Exception):
                raise fsynced
        return reply, waited, fsynced

    @staticmethod
    async def _send(conn: Any, commands: list[_Command]) -> list[Any]:
        await conn.send_packed_command(conn.pack_commands(commands))
        replies: list[Any] = []
        for _ in commands:
            try:
                replies.append(await conn.read_response())
            except rexc.ResponseError as exc:
                replies.append(exc)
        return replies
