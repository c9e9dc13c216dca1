"""The dashboard's copy of the newest events of its queue (ADR 71), refreshed from the
queue's event log on demand: each refresh reads only what was written after the last event it
holds (no waiting), so a page that polls it shows live events without reading the whole log
again (``event_pages.py``)."""

from __future__ import annotations

from collections import deque

from fairque_core import AsyncFairQueue
from fairque_core.domain.events import QueueEvent

__all__ = ["EventFeed"]

#: Events the page holds (newest first).
KEPT = 200
#: Events one read takes, and reads per refresh at most (the first one catches up with a
#: log of up to READ * READS events; older ones are skipped).
READ = 1000
READS = 20


class EventFeed:
    """The newest events of one queue, refreshed from its log on demand."""

    def __init__(self) -> None:
        self.events: deque[QueueEvent] = deque(maxlen=KEPT)
        self.cursor = "0"

    async def refresh(self, queue: AsyncFairQueue) -> None:
        for _ in range(READS):
            got = [e async for e in queue.events(self.cursor, follow=False, count=READ)]
            if not got:
                return
            self.events.extend(got)
            self.cursor = got[-1].id
            if len(got) < READ:
                return

    def newest(self) -> list[QueueEvent]:
        return list(reversed(self.events))
