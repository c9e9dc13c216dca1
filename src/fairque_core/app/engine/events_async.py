"""AsyncEventStream: a queue's events as an iterator that resumes from an id (ADR 71).

``queue.events(since=...)`` returns one; each event it yields carries its ``id``, the position
to save and pass back as ``since`` to resume after it (none missed, none repeated, as long as
the log still holds it: it keeps about ``events_maxlen`` events). Reads are blocking reads of
the backend's log (XREAD BLOCK on Redis) of ``block`` seconds at most, so :meth:`stop`, from
any thread, ends the iteration within that time. Part of
:class:`~fairque_core.app.engine.queue_async.AsyncFairQueue` through :class:`AsyncEventMixin`.
"""

# events.py (EventStream, EventMixin) is generated from this file  # unasync: remove
# by tools/gen_sync.py: edit here, then run it.  # unasync: remove

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from fairque_core.domain.errors import TaskValidationError
from fairque_core.domain.events import QueueEvent, check_event_count
from fairque_core.domain.validation import check_wait_timeout
from fairque_core.ports import AsyncQueueBackend

if TYPE_CHECKING:  # the engine's members used here (MixinHost), a base for mypy only
    from fairque_core.app.engine.host_async import MixinHost
else:
    MixinHost = object

__all__ = ["AsyncEventMixin", "AsyncEventStream"]


class AsyncEventStream:
    """The events of a queue after ``since`` (None: after the log's end at the first read;
    ``"0"``: from the oldest kept; else an event's id). With ``follow`` it waits for new ones
    until :meth:`stop`; without, it ends when it has read what the log holds."""

    def __init__(
        self,
        backend: AsyncQueueBackend,
        since: str | None = None,
        *,
        follow: bool = True,
        block: float = 1.0,
        count: int = 100,
    ) -> None:
        if since is not None and not isinstance(since, str):
            raise TaskValidationError("since", since, "must be an event id or None")
        self._backend = backend
        self._cursor = since
        self._follow = follow
        self._block = check_wait_timeout(block)
        self._count = check_event_count(count)
        self._buffer: deque[QueueEvent] = deque()
        self._stopped = False

    @property
    def cursor(self) -> str | None:
        """The id of the last event yielded (where a new stream would resume), or the
        ``since`` given while none was."""
        return self._cursor

    def stop(self) -> None:
        """End the iteration: at once between events, else when the current read returns
        (within ``block`` seconds). Safe from another thread or a signal handler."""
        self._stopped = True

    def __aiter__(self) -> AsyncEventStream:
        return self

    async def __anext__(self) -> QueueEvent:
        while not self._stopped:
            if self._buffer:
                event = self._buffer.popleft()
                self._cursor = event.id
                return event
            if self._cursor is None:
                self._cursor = await self._backend.events_end()
            wait = self._block if self._follow else 0.0
            got = await self._backend.read_events(self._cursor, count=self._count, timeout=wait)
            if not got and not self._follow:
                break
            self._buffer.extend(got)
        raise StopAsyncIteration


class AsyncEventMixin(MixinHost):
    """``events``: the queue's event log (see the module doc)."""

    def events(
        self,
        since: str | None = None,
        *,
        follow: bool = True,
        block: float = 1.0,
        count: int = 100,
    ) -> AsyncEventStream:
        """The queue's events after ``since`` (see :class:`AsyncEventStream`): completed,
        failed, retried, dead_lettered, canceled, paused, resumed, limits_changed, progress
        (:class:`~fairque_core.domain.events.QueueEvent`). ``block`` bounds each wait (and so
        how soon :meth:`AsyncEventStream.stop` takes effect); ``count`` is events per read."""
        return AsyncEventStream(self._backend, since, follow=follow, block=block, count=count)
