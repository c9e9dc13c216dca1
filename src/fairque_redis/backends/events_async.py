"""The asyncio backend's reads of the queue's event log (ADR 71): ``read_events`` (an XREAD,
blocking with ``BLOCK`` when asked to wait) and ``events_end``. The scripts write the log
(``lua/_include/events.lua``), ``set_progress`` among them (a running task's progress, kept on
its record and told as a ``progress`` event); and the calls of the limits by key (ADR 79).

A mixin of :class:`~fairque_redis.backends.backend_async.AsyncRedisBackend`, kept apart to keep
modules short; it reaches its host through
:class:`~fairque_redis.backends.host_async.AsyncBackendHost`.
"""

# events.py (EventsMixin) is generated from this file  # unasync: remove
# by tools/gen_sync.py: edit here, then run it.  # unasync: remove

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fairque_core.domain.events import (
    QueueEvent,
    check_event_count,
    event_from_fields,
    parse_stream_id,
)
from fairque_core.domain.key_limits import KeyLimits, KeyLimitStatus
from fairque_core.domain.validation import check_wait_timeout
from fairque_redis.backends import client_options as co
from fairque_redis.backends.errors import translate_errors
from fairque_redis.scripting.calls.base import to_text

if TYPE_CHECKING:  # the host's members, for the type checker only
    from fairque_redis.backends.host_async import AsyncBackendHost as _Host
else:
    _Host = object

__all__ = ["AsyncEventsMixin", "stream_entries"]


def stream_entries(reply: Any) -> list[QueueEvent]:
    """The events of an XREAD reply for one stream (RESP2 list or RESP3 map; None: none)."""
    if not reply:
        return []
    streams = list(reply.values()) if isinstance(reply, dict) else [s[1] for s in reply]
    out: list[QueueEvent] = []
    for stream in streams:
        # RESP3 may nest the entries one level deeper: [[entries]]
        nested = stream and isinstance(stream[0], list) and len(stream) == 1
        for entry_id, fields in stream[0] if nested else stream:
            out.append(event_from_fields(to_text(entry_id), fields or {}))
    return out


class AsyncEventsMixin(_Host):
    """read_events, events_end and set_progress, and the limits by key (see the port)."""

    async def set_key_limits(
        self,
        key: str,
        *,
        max_running: int | None = None,
        rate: float | None = None,
        burst: int | None = None,
        per_tenant: bool = True,
    ) -> None:
        """Set or clear ``key``'s limits (``set_key_limits.lua``, ADR 79)."""
        call = self._planner.set_key_limits(key, max_running, rate, burst, per_tenant)
        await self._run(call)

    async def key_limit_status(self, key: str) -> KeyLimitStatus:
        """``key``'s limits and its scopes' counts (``key_limits_get.lua``)."""
        return await self._run(self._planner.key_limit_status(key))

    async def list_key_limits(self) -> dict[str, KeyLimits]:
        """Every key's limits (``key_limits_get.lua`` for all)."""
        return await self._run(self._planner.list_key_limits())

    async def set_progress(self, tenant: str, task_id: str, token: str, body: bytes) -> bool:
        """The running task's progress kept on its record, and a ``progress`` event, in
        one script call (``progress.lua``); False when the lease is not live."""
        return await self._run(self._planner.set_progress(task_id, token, body))

    async def read_events(
        self, after: str, *, count: int = 100, timeout: float = 0.0
    ) -> list[QueueEvent]:
        """An XREAD of the log after ``after``; with ``timeout`` > 0 a blocking one (kept
        under the client's socket timeout: the caller reads again when it returns empty)."""
        parse_stream_id(after)
        count = check_event_count(count)
        seconds = co.blocking_seconds(check_wait_timeout(timeout), self._client)
        block = int(seconds * 1000) if seconds >= co.MIN_BLOCK_SECONDS else None
        key = self._keys.events
        with translate_errors("read_events", writes=False):
            reply = await self._client.xread({key: after}, count=count, block=block or None)
        return stream_entries(reply)

    async def events_end(self) -> str:
        """The id of the log's last entry (``0-0`` when it is empty)."""
        with translate_errors("events_end", writes=False):
            last = await self._client.xrevrange(self._keys.events, count=1)
        return to_text(last[0][0]) if last else "0-0"
