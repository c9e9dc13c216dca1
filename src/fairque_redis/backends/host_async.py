"""What the asyncio backend's mixins use of their host (:class:`AsyncBackendHost`), as a
Protocol: a mixin module types ``self`` with it and never imports the backend module.

``AsyncRedisBackend`` (``backend_async.py``) is the one host; the type checker confirms it
matches where the backend is defined.
"""

# host.py (BackendHost) is generated from this file  # unasync: remove
# by tools/gen_sync.py: edit here, then run it.  # unasync: remove

from __future__ import annotations

from typing import Protocol, TypeVar

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from fairque_redis.keys import KeySpace
from fairque_redis.scripting.calls import Call, ScriptCalls
from fairque_redis.scripting.objects_async import AsyncScript

__all__ = ["AsyncBackendHost"]

T = TypeVar("T")


class AsyncBackendHost(Protocol):
    """The members of ``AsyncRedisBackend`` its mixins read and call."""

    _keys: KeySpace
    _client: Redis | RedisCluster
    _planner: ScriptCalls
    _scripts: dict[str, AsyncScript]

    @property
    def _checked(self) -> bool: ...

    _polling: bool
    _pipelines_claims: bool

    async def _run(self, call: Call[T]) -> T: ...
