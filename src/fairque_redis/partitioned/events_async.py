"""The event log of a partitioned queue (ADR 71): one stream per partition, merged here.

Each partition's scripts write its own log (``lua/_include/events.lua``, key
``fq:{<queue>:<n>}:events``), so a change and its event stay one atomic step in one slot.
:meth:`AsyncPartitionEvents.read_events` reads every partition after its own last id and
merges what came by stream id (the server's ms, then the entry's number), partition number
breaking ties, so:

- events of one partition (so of one tenant) come in the order they were written;
- across partitions they come in about time order, as read: an event written later with an
  earlier stamp (another master's clock, a slower call) is still delivered, after the ones
  already read;
- none is lost or repeated: an event's ``id`` is a cursor naming the last id read of every
  partition (:func:`fairque_core.domain.events.merge_cursor`), and a read resumes after each.

A queue-wide pause, resume or limits change runs in every partition and writes one event in
each; only partition 0's is delivered, so the reader sees it once.
"""

# events.py (PartitionEvents) is generated from this file  # unasync: remove
# by tools/gen_sync.py: edit here, then run it.  # unasync: remove

from __future__ import annotations

import time
from collections.abc import Sequence

import attrs

from fairque_core.domain.events import (
    QueueEvent,
    check_event_count,
    merge_cursor,
    parse_stream_id,
    split_cursor,
)
from fairque_core.domain.validation import check_wait_timeout
from fairque_redis.partitioned.reads_async import AsyncPartition

__all__ = ["AsyncPartitionEvents"]

#: A blocked read waits on one partition this long, then looks at all of them again.
_BLOCK_SLICE_SECONDS = 0.05


def _queue_wide(event: QueueEvent) -> bool:
    return not event.task_id and not event.tenant


class AsyncPartitionEvents:
    """read_events, events_end and set_progress of the partitioned backend (see the module
    doc)."""

    _parts: Sequence[AsyncPartition]
    _count: int

    async def _ready(self) -> None:
        raise NotImplementedError

    def _part_of(self, tenant: str) -> int:
        raise NotImplementedError

    async def set_progress(self, tenant: str, task_id: str, token: str, body: bytes) -> bool:
        """In the partition of ``tenant``, which holds its tasks (ADR 34)."""
        await self._ready()
        return await self._parts[self._part_of(tenant)].set_progress(tenant, task_id, token, body)

    async def events_end(self) -> str:
        await self._ready()
        return merge_cursor([await part.events_end() for part in self._parts])

    async def read_events(
        self, after: str, *, count: int = 100, timeout: float = 0.0
    ) -> list[QueueEvent]:
        ids = split_cursor(after, self._count)
        count = check_event_count(count)
        deadline = time.monotonic() + check_wait_timeout(timeout)
        await self._ready()
        home = 0
        while True:
            out = await self._merged(ids, count)
            left = deadline - time.monotonic()
            if out or left <= 0:
                return out
            # nothing anywhere: block on one partition a slice at a time, rotating
            home = (home + 1) % self._count
            await self._parts[home].read_events(
                ids[home], count=1, timeout=min(left, _BLOCK_SLICE_SECONDS)
            )

    async def _merged(self, ids: list[str], count: int) -> list[QueueEvent]:
        """One pass over the partitions: up to ``count`` events after ``ids`` (advanced past
        what is returned or skipped), merged."""
        read: list[tuple[tuple[int, int], int, QueueEvent]] = []
        for n, part in enumerate(self._parts):
            for event in await part.read_events(ids[n], count=count):
                read.append((parse_stream_id(event.id), n, event))
        read.sort(key=lambda item: (item[0], item[1]))
        out: list[QueueEvent] = []
        for _key, n, event in read[:count]:
            ids[n] = event.id
            if n != 0 and _queue_wide(event):
                continue  # told by partition 0
            out.append(attrs.evolve(event, id=merge_cursor(ids)))
        return out
