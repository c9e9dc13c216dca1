"""What every adapter in bench/peers/ shares: the base class, the sink, the entry point.

An adapter file defines ``class Adapter(Base)`` and ends with ``run(Adapter)``. It runs in the
peer's own environment (``uv run --no-project --with <peer>``), so this module and
``_measures.py`` import nothing but the standard library and redis-py (every peer depends on
it). ``bench/compare.py`` starts a fresh server per measurement and calls ``python <adapter>
'<json spec>'``; the spec holds ``measure``, ``url``, ``n`` and, for drains, ``mode``
(``defaults``, ``tuned``, ``async`` or a worker concurrency). What each measure does is in
``_measures.py``. A measurement the library cannot make raises :class:`Unsupported`; it is
printed as ``{"skip": reason}``.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import redis

BATCH = 1000
CONCURRENT = 100
DRAIN_TIMEOUT = 180.0
LATENCY_INTERVAL = 0.005


class Unsupported(Exception):
    """This library has no way to make this measurement."""


class Sink:
    """What the no-op task calls: counts runs and records (push, start - push) of stamped tasks
    (a stamp is the producer's ``perf_counter``: system-wide on Linux)."""

    def __init__(self) -> None:
        self.runs: list[None] = []
        self.stamped: list[tuple[float, float]] = []

    def __call__(self, pushed_at: float) -> None:
        if pushed_at > 0:
            self.stamped.append((pushed_at, time.perf_counter() - pushed_at))
        self.runs.append(None)  # list.append is atomic under the GIL

    def delays(self) -> list[float]:
        return sorted(delay for _, delay in self.stamped)


#: The sink of the running measurement; the adapters' task functions call :func:`hit`.
SINKS: list[Sink] = []


def hit(pushed_at: float) -> None:
    """What every adapter's no-op task does."""
    if SINKS:
        SINKS[0](pushed_at)


class Base:
    """One library, connected to ``url``. Override what the library can do."""

    name = "?"
    #: True: the library pushes only from asyncio, so one by one means one ``await`` after
    #: another on one loop (and the latency producer paces itself with ``asyncio.sleep``)
    async_only = False

    def __init__(self, url: str) -> None:
        self.url = url
        #: the spec's ``push`` (fairque: ``"intake"`` pushes through the intake, ADR 47; every
        #: other library has one push path and ignores it)
        self.push_mode: str | None = None

    def enqueue(self, i: int, pushed_at: float) -> None:
        raise NotImplementedError

    def enqueue_bulk(self, items: list[tuple[int, float]]) -> None:
        raise Unsupported("no bulk enqueue call")

    def enqueue_as(self, tenant: str, i: int, pushed_at: float) -> None:
        """A push on behalf of ``tenant`` (the flood scenario); peers have no tenants."""
        self.enqueue(i, pushed_at)

    def enqueue_bulk_as(self, tenant: str, items: list[tuple[int, float]]) -> None:
        self.enqueue_bulk(items)

    async def async_enqueuer(
        self,
    ) -> tuple[Callable[[int, float], Awaitable[object]], Callable[[], Awaitable[object]]]:
        """(push, close) bound to the running loop."""
        raise Unsupported("no asyncio producer")

    def start_worker(self, sink: Sink, mode: str | int) -> Any:
        """Start one worker in this process whose no-op task calls ``sink(pushed_at)``."""
        raise NotImplementedError

    def stop_worker(self, handle: Any) -> None:
        raise NotImplementedError

    def fill(self, n: int) -> None:
        """Queue ``n`` tasks before a drain (bulk when the library has it)."""
        items = [(i, 0.0) for i in range(n)]
        if self.async_only:

            async def serial() -> None:
                push, close = await self.async_enqueuer()
                for s in range(0, n, CONCURRENT):
                    await asyncio.gather(*(push(i, t) for i, t in items[s : s + CONCURRENT]))
                await close()

            asyncio.run(serial())
            return
        try:
            for start in range(0, n, BATCH):
                self.enqueue_bulk(items[start : start + BATCH])
        except Unsupported:
            for i, t in items:
                self.enqueue(i, t)

    def close(self) -> None:
        return None


class LoopThread:
    """An asyncio loop in a daemon thread, for async workers driven by the sync harness."""

    def __init__(self, main: Callable[[asyncio.Event], Awaitable[None]]) -> None:
        self.loop = asyncio.new_event_loop()
        self.stop_event: asyncio.Event | None = None
        self.ready = threading.Event()
        self.error: BaseException | None = None

        async def runner() -> None:
            self.stop_event = asyncio.Event()
            self.ready.set()
            await main(self.stop_event)

        def target() -> None:
            try:
                self.loop.run_until_complete(runner())
            except BaseException as exc:
                self.error = exc
                self.ready.set()

        self.thread = threading.Thread(target=target, daemon=True)
        self.thread.start()
        self.ready.wait(30)

    def stop(self, timeout: float = 15.0) -> None:
        if self.stop_event is not None:
            self.loop.call_soon_threadsafe(self.stop_event.set)
        self.thread.join(timeout)


def server_cpu(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


def wait_for(count: Callable[[], int], target: int, timeout: float) -> float:
    """Seconds until ``count() >= target``; raises TimeoutError past ``timeout``."""
    start = time.perf_counter()
    while count() < target:
        if time.perf_counter() - start > timeout:
            raise TimeoutError(f"{count()} of {target} after {timeout:.0f} s")
        time.sleep(0.002)
    return time.perf_counter() - start


def run(adapter_cls: type[Base]) -> None:
    """Entry point of an adapter file: ``python <file> '<json spec>'``."""
    import _measures

    spec = json.loads(sys.argv[1])
    adapter = adapter_cls(spec["url"])
    adapter.push_mode = spec.get("push")
    try:
        result = _measures.measure(adapter, spec, sys.argv[0])
    except Unsupported as exc:
        result = {"skip": str(exc)}
    finally:
        adapter.close()
    if result is not None:
        print(json.dumps(result), flush=True)
