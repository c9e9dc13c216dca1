"""AsyncRedisScheduleStore: cron schedules and the scheduler lock of a queue on Redis/Valkey.

Three keys under the queue's hash tag (:class:`~fairque_redis.keys.KeySpace`), so a cluster
keeps them in the queue's slot: ``schedules`` (hash name -> definition), ``schedule_fired``
(hash name -> last fired tick, epoch ms) and ``scheduler_lock`` (the holder's token with a PX
expiry). Taking the lock is ``SET NX PX``; renewing, releasing and recording a fired tick
compare the token inside a script (``scheduler_lock.lua``, ``schedule_mark.lua``), so a
scheduler whose lease ran out can neither extend nor free a lock another one took since.
"""

# schedules.py (RedisScheduleStore) is generated from this file  # unasync: remove
# by tools/gen_sync.py: edit here, then run it.  # unasync: remove

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from fairque_core.ports.schedules import AsyncScheduleStore, ScheduleRecord
from fairque_redis.backends.errors import translate_errors
from fairque_redis.keys import KeySpace
from fairque_redis.scripting.scripts import SOURCES

if TYPE_CHECKING:
    from redis.commands.core import AsyncScript

__all__ = ["AsyncRedisScheduleStore"]


def _ms(seconds: float) -> int:
    return max(1, math.ceil(seconds * 1000))


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class AsyncRedisScheduleStore:
    """The schedule store of one queue, on the backend's client (``backend.schedules``)."""

    def __init__(
        self,
        client: Redis | RedisCluster,
        keys: KeySpace,
        scripts: Mapping[str, AsyncScript] | None = None,
    ) -> None:
        self._client = client
        self._keys = keys
        if scripts is None:
            scripts = {
                name: client.register_script(SOURCES[name])
                for name in ("scheduler_lock", "schedule_mark")
            }
        self._lock_script = scripts["scheduler_lock"]
        self._mark_script = scripts["schedule_mark"]

    async def save(self, name: str, definition: bytes) -> None:
        with translate_errors("schedule_save", writes=True):
            await self._client.hset(self._keys.schedules, name, definition)

    async def delete(self, name: str) -> bool:
        async with self._client.pipeline(transaction=True) as pipe:
            pipe.hdel(self._keys.schedules, name)
            pipe.hdel(self._keys.schedule_fired, name)
            with translate_errors("schedule_delete", writes=True):
                removed, _ = await pipe.execute()
        return bool(removed)

    async def get(self, name: str) -> ScheduleRecord | None:
        async with self._client.pipeline(transaction=True) as pipe:
            pipe.hget(self._keys.schedules, name)
            pipe.hget(self._keys.schedule_fired, name)
            with translate_errors("schedule_get", writes=False):
                definition, fired = await pipe.execute()
        if definition is None:
            return None
        return ScheduleRecord(name, bytes(definition), _seconds(fired))

    async def list(self) -> list[ScheduleRecord]:
        async with self._client.pipeline(transaction=True) as pipe:
            pipe.hgetall(self._keys.schedules)
            pipe.hgetall(self._keys.schedule_fired)
            with translate_errors("schedule_list", writes=False):
                definitions, fired = await pipe.execute()
        last = {_text(k): v for k, v in fired.items()}
        records = [
            ScheduleRecord(_text(name), bytes(body), _seconds(last.get(_text(name))))
            for name, body in definitions.items()
        ]
        return sorted(records, key=lambda r: r.name)

    async def mark_fired(self, name: str, tick: float, token: str) -> bool:
        keys = [self._keys.scheduler_lock, self._keys.schedules, self._keys.schedule_fired]
        with translate_errors("schedule_mark", writes=True):
            done = await self._mark_script(keys=keys, args=[token, name, round(tick * 1000)])
        return bool(done)

    async def acquire_lock(self, token: str, ttl: float) -> bool:
        with translate_errors("scheduler_lock", writes=True):
            taken = await self._client.set(self._keys.scheduler_lock, token, nx=True, px=_ms(ttl))
        return bool(taken)

    async def renew_lock(self, token: str, ttl: float) -> bool:
        return await self._lock(token, "renew", ttl)

    async def release_lock(self, token: str) -> bool:
        return await self._lock(token, "release", 0.0)

    async def _lock(self, token: str, action: str, ttl: float) -> bool:
        with translate_errors("scheduler_lock", writes=True):
            done = await self._lock_script(
                keys=[self._keys.scheduler_lock], args=[token, action, _ms(ttl)]
            )
        return bool(done)

    async def lock_holder(self) -> str | None:
        with translate_errors("scheduler_lock", writes=False):
            holder = await self._client.get(self._keys.scheduler_lock)
        return None if holder is None else _text(holder)


def _seconds(ms: Any) -> float | None:
    return None if ms is None else int(ms) / 1000.0


_: type[AsyncScheduleStore] = AsyncRedisScheduleStore
