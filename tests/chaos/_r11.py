"""R11's "eight callers" run, shared by test_r11_script_flush.py (``SCRIPT FLUSH``, the EVALSHA
path) and test_r11_function_flush.py (``FUNCTION FLUSH``, Redis Functions, ADR 41).

The server forgets fairque's scripts, then ``CLIENT PAUSE`` holds every command back so eight
callers of one queue (threads sharing a :class:`FairQueue`, or asyncio tasks sharing an
:class:`AsyncFairQueue`) all meet the missing script together. Pass: none of them fails and the
server sees exactly one load. A :class:`Herd` says what is flushed and how loads are counted;
each test is then a row of (server, callers).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fairque_core import FairQueue
from fairque_core.app.engine.queue_async import AsyncFairQueue
from fairque_redis.backends.backend import RedisBackend
from fairque_redis.backends.backend_async import AsyncRedisBackend

CALLERS = 8
PAUSE_MS = 300  # long enough for all eight to be sent before the server answers any


@dataclass(frozen=True)
class Herd:
    """What the eight callers meet and how the server's loads are read."""

    label: str  # the printed line's, e.g. "R11 herd"
    missing: str  # what the callers meet, for the printed line: "NOSCRIPT"
    load: str  # the command counted, for the printed line: "SCRIPT LOAD"
    url_suffix: str  # for the backend ("?scripts=eval" for the EVALSHA path)
    queue: str
    forget: Callable[[Any], object]  # (raw client): flush the scripts or the library
    loads: Callable[[Any], int]  # (raw client): loads so far


def _threads(url: str, herd: Herd, raw: Any) -> int:
    backend = RedisBackend.from_url(url + herd.url_suffix, queue=herd.queue)
    fq = FairQueue(backend)
    try:
        fq.get_stats()  # scripts loaded, connection made
        pool = backend.client.connection_pool
        held = [pool.get_connection() for _ in range(CALLERS)]  # eight connections, ready
        for conn in held:
            pool.release(conn)
        before = herd.loads(raw)
        herd.forget(raw)
        # every call waits behind the pause, so all eight meet the missing script at once
        raw.execute_command("CLIENT", "PAUSE", PAUSE_MS, "ALL")
        failures: list[BaseException] = []

        def stats() -> None:
            try:
                fq.get_stats()
            except BaseException as exc:  # reported below
                failures.append(exc)

        threads = [threading.Thread(target=stats) for _ in range(CALLERS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
        assert not any(thread.is_alive() for thread in threads)
        assert failures == []
        return herd.loads(raw) - before
    finally:
        fq.close()


def _tasks(url: str, herd: Herd, raw: Any) -> int:
    async def run() -> int:
        backend = AsyncRedisBackend.from_url(url + herd.url_suffix, queue=herd.queue)
        fq = AsyncFairQueue(backend)
        try:
            await fq.get_stats()
            pool = backend.client.connection_pool
            held = [await pool.get_connection() for _ in range(CALLERS)]
            for conn in held:
                await pool.release(conn)
            before = herd.loads(raw)
            herd.forget(raw)
            raw.execute_command("CLIENT", "PAUSE", PAUSE_MS, "ALL")
            # gather raises the first failure of the eight
            await asyncio.gather(*(fq.get_stats() for _ in range(CALLERS)))
            return herd.loads(raw) - before
        finally:
            await fq.close()

    return asyncio.run(run())


RUNS: dict[str, Callable[[str, Herd, Any], int]] = {"threads": _threads, "tasks": _tasks}


def eight_callers_load_once(kind: str, url: str, herd: Herd, callers: str) -> None:
    """Eight ``callers`` ("threads" or "tasks", keys of :data:`RUNS`) meet what ``herd``
    flushes at once: none fails, and the server sees exactly one load."""
    import redis

    raw = redis.Redis.from_url(url)
    try:
        loads = RUNS[callers](url, herd, raw)
        print(f"{herd.label} {kind}: 8 {callers} met {herd.missing}, {loads} {herd.load}")
        assert loads == 1
    finally:
        raw.close()
