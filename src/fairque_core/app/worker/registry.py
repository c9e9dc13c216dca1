"""The registrar of a worker's heartbeat record, and the reader of everyone's.

Every worker writes its record (JSON: host, pid, queue, state, busy slots, leases, buffered
tasks, concurrency, counters, the time it was written and its beat interval) every
``interval`` seconds with ``register_worker`` (on Redis one ``HSET`` of the queue's
``workers`` hash), and removes it when it stops: ``Worker`` and ``AsyncWorker`` do so
themselves from ``start()`` on (``WorkerConfig.registry_interval_seconds``, 0: not at all),
whoever started them. Readers (``fairque workers``, the dashboard, ``fairque exporter``) call
:meth:`WorkerRegistry.list`: a record not rewritten for ``STALE_AFTER`` of its own intervals
is gone (the worker died or lost the server), and one older than ``PRUNE_AFTER`` intervals
is deleted by the reader. Times are the writers' wall clocks: hosts with skewed clocks look
fresher or staler than they are by the skew. The record format and the backend's side are
:mod:`fairque_core.ports.workers`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
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

__all__ = ["Registration", "WorkerRegistry"]

_log = logging.getLogger("fairque.worker")

#: The longest a sync worker's ``start()`` waits for its first registry record (seconds).
FIRST_WRITE_WAIT = 1.0


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
        """The JSON record of this worker for a ``health()`` snapshot: ``busy`` is its slots
        running a handler (``executing``), ``leased`` the tasks it holds (``in_flight``)."""

        def count(key: str) -> int:
            value = health.get(key, 0)
            return int(value) if isinstance(value, (int, float)) else 0

        return json.dumps(
            {
                "host": self._host,
                "pid": os.getpid(),
                "queue": self.queue,
                "state": str(health.get("state", "")),
                "busy": count("executing"),
                "leased": count("in_flight"),
                "buffered": count("buffered"),
                "concurrency": self.concurrency,
                "processed": count("processed"),
                "failed": count("failed"),
                "backend_errors": count("backend_errors"),
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
        self,
        health: Callable[[], Mapping[str, Any]],
        on_error: Callable[[BaseException], None],
        *,
        first: threading.Event | None = None,
    ) -> None:
        """Beat every ``interval`` seconds on a daemon thread until :meth:`stop_thread`;
        ``first`` is set once the first write was tried.

        A failed write goes to ``on_error`` and the thread keeps going (the server may be
        back at the next beat)."""

        def loop() -> None:
            while True:
                try:
                    self.beat(health())
                except Exception as exc:  # the registry must never stop the worker
                    on_error(exc)
                if first is not None:
                    first.set()
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


class Registration:
    """A started worker's own record: the beat of :class:`WorkerRegistry` on a daemon thread
    (a sync ``Worker``) or an asyncio task (an ``AsyncWorker``, whose backend's calls are
    coroutines). Failures are logged at debug level and never reach the worker: a worker whose
    record cannot be written still runs, and readers see it as gone after ``STALE_AFTER``
    intervals."""

    def __init__(
        self, backend: Any, worker_id: str, *, queue: str, concurrency: int, interval: float
    ) -> None:
        self._backend = backend
        self.writer = WorkerRegistry(
            backend, worker_id, queue=queue, concurrency=concurrency, interval=interval
        )
        self._task: asyncio.Task[None] | None = None

    @classmethod
    def of(
        cls, queue: Any, worker_id: str, concurrency: int, interval: float
    ) -> Registration | None:
        """The registration of a worker of ``queue`` (None: ``interval`` 0, or a queue whose
        backend keeps no records)."""
        backend = getattr(queue, "backend", None)
        if not interval or not callable(getattr(backend, "register_worker", None)):
            return None
        name = getattr(queue, "name", "")
        return cls(backend, worker_id, queue=str(name), concurrency=concurrency, interval=interval)

    @staticmethod
    def _failed(exc: BaseException) -> None:
        _log.debug("workers registry: cannot write this worker's record: %s", exc)

    # ------------------------------------------------------------------ sync worker
    def start_thread(self, health: Callable[[], Mapping[str, Any]]) -> None:
        """Beat from a daemon thread; wait up to :data:`FIRST_WRITE_WAIT` seconds for the
        first write, so that the worker is listed once ``start()`` returned (a server that
        does not answer delays the start by no more than that)."""
        first = threading.Event()
        self.writer.run_in_thread(health, self._failed, first=first)
        first.wait(FIRST_WRITE_WAIT)

    def stop_thread(self) -> None:
        try:
            self.writer.stop_thread()
        except Exception as exc:  # the server may be gone; the record then goes stale
            _log.debug("workers registry: cannot remove this worker's record: %s", exc)

    # ------------------------------------------------------------------ async worker
    def start_task(self, health: Callable[[], Mapping[str, Any]]) -> None:
        writer = self.writer

        async def beat() -> None:
            while True:
                try:
                    await self._backend.register_worker(writer.worker_id, writer.record(health()))
                except Exception as exc:  # the registry must never stop the worker
                    self._failed(exc)
                await asyncio.sleep(writer.interval)

        self._task = asyncio.create_task(beat(), name=f"fairque-{writer.worker_id}-registry")

    async def stop_task(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        try:
            await self._backend.remove_workers([self.writer.worker_id])
        except Exception as exc:
            _log.debug("workers registry: cannot remove this worker's record: %s", exc)
