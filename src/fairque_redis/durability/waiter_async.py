"""The replica waiter of a backend (``durability="replicated"``, ADR 33): a write script and its
``WAIT`` (then ``WAITAOF``) on one connection; the design is in
:mod:`fairque_redis.durability.modes`.
"""

# waiter.py (ReplicaWaiter) is generated from this file  # unasync: remove
# by tools/gen_sync.py: edit here, then run it.  # unasync: remove

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, TypeVar

from redis import exceptions as rexc
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from fairque_redis.backends.errors import translate_errors
from fairque_redis.durability.replica_wait import (
    Durability,
    _Command,
    _moved,
    _WaiterBase,
    async_pool_of,
)
from fairque_redis.scripting.calls import Call
from fairque_redis.scripting.loading import ATTEMPTS

__all__ = ["AsyncReplicaWaiter"]

T = TypeVar("T")


class AsyncReplicaWaiter(_WaiterBase):
    """The waiter of a backend on a ``redis.asyncio`` client (``Redis`` or ``RedisCluster``)."""

    def __init__(self, client: Redis | RedisCluster, durability: Durability, queue: str) -> None:
        super().__init__(durability, queue)
        self._client = client

    async def run(self, call: Call[T], script: Any, keys: Sequence[Any]) -> T:
        """Run ``call``'s script and wait for a replica, on one connection; see
        :mod:`fairque_redis.durability.modes`."""
        with translate_errors(call.script, writes=True):
            for moves in range(2):
                pool = async_pool_of(self._client, keys)
                conn = await pool.get_connection()
                try:
                    reply, waited, fsynced = await self._exchange(conn, script, keys, call.args)
                except BaseException:
                    await conn.disconnect()
                    raise
                finally:
                    await pool.release(conn)
                if not _moved(reply, moves):
                    break
                assert isinstance(self._client, RedisCluster)
                await self._client.nodes_manager.initialize()
        return self._outcome(call, reply, waited, fsynced)

    async def _exchange(
        self, conn: Any, script: Any, keys: Sequence[Any], args: Sequence[Any]
    ) -> tuple[Any, Any, Any]:
        probes = self._probes()
        if probes:
            self._detected(await self._send(conn, probes))
        # FCALL, or EVALSHA where functions are off (ADR 41); a reply that says the call did
        # not run (NOSCRIPT, a missing library, functions refused) is dealt with by the script
        # object (a load, or functions off) and the call sent again, ATTEMPTS times in all.
        # No script: ``args`` is a plain command (the intake's RPUSH, ADR 47), sent once
        command = tuple(args) if script is None else script.command(keys, args)
        for attempt in range(1, ATTEMPTS + 1):
            seen = None if script is None else script.generation
            started = time.monotonic()
            reply, waited = await self._send(conn, self._script_commands(command))
            if script is None or attempt == ATTEMPTS:
                break
            command = await script.recover(reply, seen, keys, args)
            if command is None:
                break
        if isinstance(reply, (rexc.MovedError, rexc.AskError)):
            # the script did not run here (a failover or a reshard moved the slot; the WAIT
            # then fails too, e.g. on a demoted master): the caller refreshes the slot table
            return reply, 0, None
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
