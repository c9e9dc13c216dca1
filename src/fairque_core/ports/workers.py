"""The live workers' registry, its port: the record format and what a backend stores.

The registrar that writes a worker's record is :mod:`fairque_core.app.worker.registry`.

Every worker (``Worker``/``AsyncWorker`` started from code or by ``fairque worker``) writes
its record (JSON: host, pid, queue, state, busy slots, leases, buffered tasks, concurrency,
counters, the time it was written and its beat interval) every ``interval`` seconds with
``register_worker`` (on Redis one ``HSET`` of the queue's ``workers`` hash), and removes it
when it stops. Readers (``fairque workers``, the dashboard, ``fairque exporter``) call
``WorkerRegistry.list``: a record not rewritten for :data:`STALE_AFTER` of its own intervals
(15 s at the default 5 s beat) is *gone* (the worker died or lost the server: it is no longer
counted as live), and one older than :data:`PRUNE_AFTER` intervals is deleted by the reader
(ADR 72). Times are the writers' wall clocks: hosts with skewed clocks look fresher or staler
than they are by the skew.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Protocol

import attrs

__all__ = [
    "DEFAULT_INTERVAL",
    "PRUNE_AFTER",
    "STALE_AFTER",
    "WorkerInfo",
    "WorkerRegistryBackend",
    "any_live",
    "gone_after",
    "is_stale",
    "parse_record",
]

#: Seconds between two records of one worker.
DEFAULT_INTERVAL = 5.0
#: A record older than this many of its intervals is stale (the worker is gone) ...
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
    #: Slots running a handler now (not leases: see ``leased``).
    running: int = 0
    concurrency: int = 0
    processed: int = 0
    failed: int = 0
    #: Tasks this worker holds a lease on (running, buffered or waiting for their ack).
    leased: int = 0
    #: Claimed tasks waiting in the worker's buffer for a free slot.
    buffered: int = 0
    #: Failed calls to the server since the worker started.
    backend_errors: int = 0
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
        running=int(_number(data.get("busy", data.get("running")))),
        concurrency=int(_number(data.get("concurrency"))),
        processed=int(_number(data.get("processed"))),
        failed=int(_number(data.get("failed"))),
        leased=int(_number(data.get("leased", data.get("running")))),
        buffered=int(_number(data.get("buffered"))),
        backend_errors=int(_number(data.get("backend_errors"))),
        started_at=_number(data.get("started_at")),
        last_seen=_number(data.get("last_seen")),
        interval=_number(data.get("interval"), DEFAULT_INTERVAL) or DEFAULT_INTERVAL,
    )


def gone_after(interval: float = DEFAULT_INTERVAL) -> float:
    """Seconds without a record after which a worker beating every ``interval`` is gone."""
    return STALE_AFTER * interval


def is_stale(info: WorkerInfo, now: float) -> bool:
    """Whether the worker is gone: no record for :func:`gone_after` its interval."""
    return now - info.last_seen > gone_after(info.interval)


def any_live(records: Mapping[str, str], now: float) -> bool:
    """Whether one of the stored ``records`` (id -> JSON) is not stale at wall time ``now``."""
    return any(not is_stale(parse_record(i, text), now) for i, text in records.items())
