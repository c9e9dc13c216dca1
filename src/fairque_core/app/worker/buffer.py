"""The worker's buffer of claimed, unstarted tasks, served in turns across tenants (ADR 37).

The queue hands tasks out fairly at claim time. A worker that prefetches (ADR 30) holds some
of them for a few milliseconds before a place frees up; served first in, first out, a task of a
light tenant claimed now would wait behind everything a flooding tenant had in the buffer
already. So the buffer serves turns instead, stride scheduling with equal weights over what it
holds:

- each tenant's tasks leave in the order they came (the queue's order: priority, then FIFO);
- a tenant's next task takes the turn after its previous buffered one; a tenant with nothing in
  the buffer joins the turn being served;
- within a turn, tasks leave in the order they came (the queue's order within a claim).

So a task of a tenant with nothing in hand starts after at most one buffered task of each other
tenant, however deep the buffer. Which tasks a worker gets, and so each tenant's share, is
still the queue's decision: the buffer only orders the few it holds. No I/O, no clock.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator

from fairque_core.app.worker.actions import Slot

__all__ = ["TurnBuffer"]


class TurnBuffer:
    """Claimed tasks not started yet (see the module docstring). ``append`` and ``popleft``
    keep the deque interface the loop used before; iteration is in start order."""

    __slots__ = ("_count", "_heap", "_last", "_seq", "_turn")

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, Slot]] = []  # (turn, arrival, slot)
        self._turn = 0  # the turn being served
        self._seq = 0
        self._last: dict[str, int] = {}  # tenant -> turn of its last buffered task
        self._count: dict[str, int] = {}  # tenant -> its buffered tasks

    def __len__(self) -> int:
        return len(self._heap)

    def __bool__(self) -> bool:
        return bool(self._heap)

    def __iter__(self) -> Iterator[Slot]:
        return iter([slot for _, _, slot in sorted(self._heap, key=lambda e: e[:2])])

    def append(self, slot: Slot) -> None:
        tenant = slot.task.tenant
        last = self._last.get(tenant)
        turn = self._turn if last is None else last + 1
        self._last[tenant] = turn
        self._count[tenant] = self._count.get(tenant, 0) + 1
        self._seq += 1
        heapq.heappush(self._heap, (turn, self._seq, slot))

    def popleft(self) -> Slot:
        """The next task to start; IndexError when empty."""
        turn, _, slot = heapq.heappop(self._heap)
        self._turn = turn
        tenant = slot.task.tenant
        left = self._count[tenant] - 1
        if left:
            self._count[tenant] = left
        else:
            del self._count[tenant]
            del self._last[tenant]
        return slot

    def clear(self) -> None:
        self._heap.clear()
        self._last.clear()
        self._count.clear()

    def discard(self, drop: Callable[[Slot], bool]) -> None:
        """Forget the tasks ``drop`` picks (e.g. those whose lease was lost); the rest keep
        their turns."""
        kept = [entry for entry in self._heap if not drop(entry[2])]
        if len(kept) == len(self._heap):
            return
        heapq.heapify(kept)
        self._heap = kept
        self._last.clear()
        self._count.clear()
        for turn, _, slot in kept:
            tenant = slot.task.tenant
            self._last[tenant] = max(turn, self._last.get(tenant, turn))
            self._count[tenant] = self._count.get(tenant, 0) + 1
