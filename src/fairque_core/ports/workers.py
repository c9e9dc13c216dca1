"""The live workers' registry: a heartbeat record per worker, kept in the queue's backend.

Each worker writes its record (JSON: id, host, pid, tasks running, counters, its state, the
time it was written and its beat interval) every ``interval`` seconds with
``register_worker`` (on Redis one ``HSET`` of the queue's ``workers`` hash), and removes it
when it stops. Readers (``fairque workers``, the dashboard) call :meth:`WorkerRegistry.list`:
a record not rewritten for ``stale_after`` of its own intervals is shown as stale (the worker
died or lost the server), and one older than ``prune_after`` intervals is deleted by the
reader. Times are the writers' wall clocks: hosts with skewed clocks look fresher or staler
than they are by the skew.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import attrs

__all__ = [
    "DEFAULT_INTERVAL",
    "WorkerInfo",
    "WorkerRegistry",
    "WorkerRegistryBackend",
    "any_live",
]

#: Seconds between two records of one worker.
DEFAULT_INTERVAL = 5.0
#: A record older than this many of its intervals is stale ...
STALE_AFTER = 3
#: ... and one older than this many is removed by the next reader.
PRUNE_AFTER = 60


class WorkerRegistryBackend(Protocol):
    """What the registry needs from a backend (``QueueBackend`` has these)."""

    def register_worker(self, worker_id: str, record: str) -> None: ...

    def list_workers(self) -> dict[str, str]: ...

    def remove_workers(self, worker_ids: list[str]) -> int: ...


@attrs.frozen
class WorkerInfo:
    """One worker as its last record describes it."""

    worker_id: str
    host: str = ""
    pid: int = 0
    queue: str = ""
    state: str = ""
    running: int = 0
    concurrency: int = 0
    processed: int = 0
    failed: int = 0
    started_at: float = 0.0
    last_seen: float = 0.0
    interval: float = DEFAULT_INTERVAL
    #: Not rewritten for ``STALE_AFTER`` intervals (set by the reader).
    stale: bool = False

    def as_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)


def _number(value: object, default: float = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return default
    return float(value)


def parse_record(worker_id: str, text: str) -> WorkerInfo:
    """A stored record read back (a damaged one reads as an empty, long-stale record)."""
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        return WorkerInfo(worker_id=worker_id)
    return WorkerInfo(
        worker_id=worker_id,
        host=str(data.get("host", "")),
        pid=int(_number(data.get("pid"))),
        queue=str(data.get("queue", "")),
        state=str(data.get("state", "")),
        running=int(_number(data.get("running"))),
        concurrency=int(_number(data.get("concurrency"))),
        processed=int(_number(data.get("processed"))),
        failed=int(_number(data.get("failed"))),
        started_at=_number(data.get("started_at")),
        last_seen=_number(data.get("last_seen")),
        interval=_number(data.get("interval"), DEFAULT_INTERVAL) or DEFAULT_INTERVAL,
    )


def _stale(info: WorkerInfo, now: float) -> bool:
    return now - info.last_seen > STALE_AFTER * info.interval


def any_live(records: Mapping[str, str], now: float) -> bool:
    """Whether one of the stored ``records`` (id -> JSON) is not stale at wall time ``now``."""
    return any(not _stale(parse_record(i, text), now) for i, text in records.items())


class WorkerRegistry:
    """Writes one worker's record and reads everyone's.

    ``health`` (for :meth:`beat` and :meth:`run_in_thread`) returns the worker's
    ``health()`` dict: its ``state``, ``in_flight``, ``processed`` and ``failed`` go into
    the record.
    """

    def __init__(
        self,
        backend: WorkerRegistryBackend,
        worker_id: str = "",
        *,
        queue: str = "",
        concurrency: int = 0,
        interval: float = DEFAULT_INTERVAL,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not interval > 0:
            raise ValueError("interval must be > 0")
        self._backend = backend
        self.worker_id = worker_id
        self.queue = queue
        self.concurrency = concurrency
        self.interval = float(interval)
        self._clock = clock
        self._started_at = clock()
        self._host = socket.gethostname()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ writing
    def record(self, health: Mapping[str, Any]) -> str:
        """The JSON record of this worker for a ``health()`` snapshot."""
        return json.dumps(
            {
                "host": self._host,
                "pid": os.getpid(),
                "queue": self.queue,
                "state": str(health.get("state", "")),
                "running": int(health.get("in_flight", 0) or 0),
                "concurrency": self.concurrency,
                "processed": int(health.get("processed", 0) or 0),
                "failed": int(health.get("failed", 0) or 0),
                "started_at": self._started_at,
                "last_seen": self._clock(),
                "interval": self.interval,
            },
            separators=(",", ":"),
        )

    def beat(self, health: Mapping[str, Any]) -> None:
        """Write this worker's record now."""
        self._backend.register_worker(self.worker_id, self.record(health))

    def remove(self) -> None:
        """Delete this worker's record (a clean stop)."""
        self._backend.remove_workers([self.worker_id])

    def run_in_thread(
        self, health: Callable[[], Mapping[str, Any]], on_error: Callable[[BaseException], None]
    ) -> None:
        """Beat every ``interval`` seconds on a daemon thread until :meth:`stop_thread`.

        A failed write goes to ``on_error`` and the thread keeps going (the server may be
        back at the next beat)."""

        def loop() -> None:
            while True:
                try:
                    self.beat(health())
                except Exception as exc:  # the registry must never stop the worker
                    on_error(exc)
                if self._stop.wait(self.interval):
                    return

        self._thread = threading.Thread(
            target=loop, name=f"fairque-{self.worker_id}-registry", daemon=True
        )
        self._thread.start()

    def stop_thread(self, *, remove: bool = True) -> None:
        """Stop the beat thread and (by default) delete the record."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval + 5.0)
        if remove:
            self.remove()

    # ------------------------------------------------------------------ reading
    def list(self, *, prune: bool = True) -> list[WorkerInfo]:
        """Every worker's last record, oldest start first; stale ones flagged, long-dead ones
        deleted (with ``prune``) and left out."""
        now = self._clock()
        out: list[WorkerInfo] = []
        dead: list[str] = []
        for worker_id, text in self._backend.list_workers().items():
            info = parse_record(worker_id, text)
            age = now - info.last_seen
            if age > PRUNE_AFTER * info.interval:
                dead.append(worker_id)
                if prune:
                    continue
            out.append(attrs.evolve(info, stale=_stale(info, now)))
        if prune and dead:
            self._backend.remove_workers(dead)
        return sorted(out, key=lambda w: (w.started_at, w.worker_id))
