"""The Workers page's figures: the workers registry read through the queue (ADR 72).

Every worker writes its record every few seconds (``Worker``/``AsyncWorker``, from code or
``fairque worker``); a record not rewritten for three of its intervals is *gone*. The page
lists the live workers (id, host, pid, queue, state, busy slots of its concurrency, leases,
processed/failed, last seen) and, apart, the gone ones still on record; the overview's
*running* count is the sum of the live workers' busy slots (handlers running now), not the
server's leases.
"""

from __future__ import annotations

import time

import attrs

from fairque_core import AsyncFairQueue
from fairque_core.ports.workers import WorkerInfo, gone_after, is_stale, parse_record
from fairque_dashboard import figures

__all__ = ["WorkersView", "read_workers"]


@attrs.frozen
class WorkersView:
    """The registry at one instant: live workers first started first, then the gone ones."""

    live: tuple[WorkerInfo, ...]
    gone: tuple[WorkerInfo, ...]
    now: float

    @property
    def busy(self) -> int:
        """Handlers running now, over the live workers."""
        return sum(w.running for w in self.live)

    @property
    def gone_after(self) -> float:
        """Seconds without a record after which a worker counts as gone (its interval's)."""
        return max((gone_after(w.interval) for w in (*self.live, *self.gone)), default=gone_after())

    def ago(self, info: WorkerInfo) -> str:
        seconds = max(0.0, self.now - info.last_seen)
        if seconds < 120:
            return f"{seconds:.0f} s ago"
        if seconds < 7200:
            return f"{seconds / 60:.0f} min ago"
        return f"{seconds / 3600:.1f} h ago"


async def read_workers(queue: AsyncFairQueue) -> WorkersView | None:
    """The registry's workers, or None when the queue keeps no registry."""
    lister = figures.feature(queue, "list_workers")
    if lister is None:
        return None
    records = await lister()
    now = time.time()
    infos = [
        attrs.evolve(info, stale=is_stale(info, now))
        for info in (parse_record(str(k), str(v)) for k, v in dict(records).items())
    ]
    infos.sort(key=lambda w: (w.started_at, w.worker_id))
    return WorkersView(
        live=tuple(w for w in infos if not w.stale),
        gone=tuple(w for w in infos if w.stale),
        now=now,
    )
