"""R11 for Redis Functions (ADR 41), ``FUNCTION FLUSH`` under load: the server forgets
fairque's function library while work flows.

Three producer threads (one shared FairQueue, single pushes and batches of 5) and a worker
process (``chaos_worker.py``, 8 handler threads) run their scripts as functions (the default)
while the test flushes every function library twice a second for 6 s, on Valkey 9 and Redis 7.
A reload is one ``FUNCTION LOAD`` (``cmdstat_function|load``); the reading and the flush run in
one MULTI/EXEC with ``FUNCTION LIST`` of this build's library, so each interval between two
flushes is counted exactly. The run is test_r11_script_flush.py's (``flush_under_load``) with
:data:`FUNCTIONS` for what it flushes, reads and judges.

Pass: no exception reaches a producer or the worker (its handler never fails, its backend
records no error); ``lost = 0`` after a drain; in every interval at most one load per client
(the producers' backend and the worker's: 2), however many threads meet ``Function not
found`` at once; the flushes bit (loads >= flushes); invariants hold. ``CLIENT PAUSE`` makes
eight callers meet the missing library together: one ``FUNCTION LOAD``, threads and asyncio
tasks alike.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from fairque_core import FairQueue
from fairque_core.app.engine_async import AsyncFairQueue
from fairque_redis._function_library import LIBRARY
from fairque_redis.async_backend import AsyncRedisBackend
from fairque_redis.backend import RedisBackend

from .test_r11_script_flush import FIXTURES, KINDS, Flushing, Intervals, flush_under_load

pytestmark = [pytest.mark.chaos, pytest.mark.redis]

CLIENTS = 2  # the producers' backend and the worker process's


def reading(raw: Any, *, flush: bool) -> tuple[int, bool]:
    """``(FUNCTION LOADs so far, this build's library loaded)``, then a FUNCTION FLUSH."""
    pipe = raw.pipeline(transaction=True)
    pipe.info("commandstats")
    pipe.function_list(library=LIBRARY.name)
    if flush:
        pipe.function_flush()
    stats, listed, *_ = pipe.execute()
    return int(stats.get("cmdstat_function|load", {}).get("calls", 0)), bool(listed)


def _function_intervals(intervals: Intervals, flushes: int) -> None:
    """At most one load per client in each interval, the flushes bit and were healed."""
    assert all(n <= CLIENTS for n, _ in intervals), intervals
    assert sum(n for n, _ in intervals) >= flushes  # the flushes bit, and were healed
    assert all(listed for n, listed in intervals if n), intervals


FUNCTIONS = Flushing("R11 functions", "", "r11f", 0.5, reading, _function_intervals)


@pytest.mark.timeout(90)
# Redis 7 in the slow run only: the same client code meets the same reply on both servers;
# the quick tests below still load the library on Redis 7
@pytest.mark.parametrize("kind", ["valkey", pytest.param("redis7", marks=pytest.mark.slow)])
def test_r11_function_flush_under_load(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    url = str(request.getfixturevalue(FIXTURES[kind]).url)
    flush_under_load(kind, url, tmp_path, seconds=6.0, flushing=FUNCTIONS)


def _loads(raw: Any) -> int:
    return reading(raw, flush=False)[0]


@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", KINDS)
def test_eight_threads_meeting_a_missing_library_load_it_once(
    kind: str, request: pytest.FixtureRequest
) -> None:
    import redis

    url = str(request.getfixturevalue(FIXTURES[kind]).url)
    raw = redis.Redis.from_url(url)
    backend = RedisBackend.from_url(url, queue="r11f-herd")
    fq = FairQueue(backend)
    try:
        fq.get_stats()
        pool = backend.client.connection_pool
        held = [pool.get_connection() for _ in range(8)]  # eight connections, ready
        for conn in held:
            pool.release(conn)
        before = _loads(raw)
        raw.function_flush()
        # every FCALL waits behind the pause, so all eight meet the missing library at once
        raw.execute_command("CLIENT", "PAUSE", 300, "ALL")
        failures: list[BaseException] = []

        def stats() -> None:
            try:
                fq.get_stats()
            except BaseException as exc:  # reported below
                failures.append(exc)

        threads = [threading.Thread(target=stats) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
        loads = _loads(raw) - before
        print(f"R11 functions herd {kind}: 8 threads met a missing library, {loads} LOAD")
        assert failures == []
        assert loads == 1
    finally:
        fq.close()
        raw.close()


@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", KINDS)
def test_eight_tasks_meeting_a_missing_library_load_it_once(
    kind: str, request: pytest.FixtureRequest
) -> None:
    import redis

    url = str(request.getfixturevalue(FIXTURES[kind]).url)
    raw = redis.Redis.from_url(url)

    async def run() -> int:
        backend = AsyncRedisBackend.from_url(url, queue="r11f-herd")
        fq = AsyncFairQueue(backend)
        try:
            await fq.get_stats()
            pool = backend.client.connection_pool
            held = [await pool.get_connection() for _ in range(8)]
            for conn in held:
                await pool.release(conn)
            before = _loads(raw)
            raw.function_flush()
            raw.execute_command("CLIENT", "PAUSE", 300, "ALL")
            await asyncio.gather(*(fq.get_stats() for _ in range(8)))
            return _loads(raw) - before
        finally:
            await fq.close()

    try:
        loads = asyncio.run(run())
        print(f"R11 functions herd {kind} (asyncio): 8 tasks, {loads} FUNCTION LOAD")
        assert loads == 1
    finally:
        raw.close()
