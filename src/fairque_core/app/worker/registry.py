"""The registrar of a worker's heartbeat record, and the reader of everyone's.

Each worker writes its record (JSON: id, host, pid, tasks running, counters, its state, the
time it was written and its beat interval) every ``interval`` seconds with
``register_worker`` (on Redis one ``HSET`` of the queue's ``workers`` hash), and removes it
when it stops. Readers (``fairque workers``, the dashboard) call :meth:`WorkerRegistry.list`:
a record not rewritten for ``stale_after`` of its own intervals is shown as stale (the worker
died or lost the server), and one older than ``prune_after`` intervals is deleted by the
reader. Times are the writers' wall clocks: hosts with skewed clocks look fresher or staler
than they are by the skew. The record format and the backend's side are
:mod:`fairque_core.ports.workers`.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from fairque_core.ports.workers import (
    DEFAULT_INTERVAL,
    PRUNE_AFTER,
    WorkerInfo,
    WorkerRegistryBackend,
    is_stale,
    parse_record,
)

__all__ = ["WorkerRegistry"]


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
            out.append(attrs.evolve(info, stale=is_stale(info, now)))
        if prune and dead:
            self._backend.remove_workers(dead)
        return sorted(out, key=lambda w: (w.started_at, w.worker_id))
