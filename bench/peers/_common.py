"""The harness every adapter in bench/peers/ shares: one measurement, one JSON line on stdout.

An adapter file defines ``class Adapter(Base)`` and ends with ``run(Adapter)``. It runs in the
peer's own environment (``uv run --no-project --with <peer>``), so this module imports nothing
but the standard library and redis-py (every peer depends on it). ``bench/compare.py`` starts a
fresh server per measurement and calls ``python <adapter> '<json spec>'``; the spec holds
``measure``, ``url``, ``n`` and, for drains, ``mode`` (``defaults``, ``tuned``, ``async`` or a
worker concurrency). A measurement the library cannot make raises :class:`Unsupported`; it is
printed as ``{"skip": reason}``.

Measures:

- ``enqueue_one``: ``n`` no-op tasks, one call each.
- ``enqueue_bulk``: ``n`` tasks in batches of 1,000 (the library's own bulk call).
- ``async_push``: ``n`` tasks from asyncio, ``asyncio.gather`` of 100 pushes at a time.
- ``drain``: ``n`` tasks queued beforehand (not timed), then one worker in this process is
  started and timed until its handler ran ``n`` times; the server's CPU (INFO cpu, sys + user)
  from the worker's start until it stopped, per task.
- ``latency``: a producer process pushes one task every 5 ms (200/s), its ``perf_counter`` in
  the payload, to a worker that is running and idle; the handler records start - push.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
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
    """What the no-op task calls: counts runs and records start - push for stamped tasks."""

    def __init__(self) -> None:
        self.runs: list[None] = []
        self.delays: list[float] = []

    def __call__(self, pushed_at: float) -> None:
        if pushed_at > 0:
            self.delays.append(time.perf_counter() - pushed_at)
        self.runs.append(None)  # list.append is atomic under the GIL


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

    def enqueue(self, i: int, pushed_at: float) -> None:
        raise NotImplementedError

    def enqueue_bulk(self, items: list[tuple[int, float]]) -> None:
        raise Unsupported("no bulk enqueue call")

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


def enqueue_one(adapter: Base, n: int) -> dict[str, Any]:
    if adapter.async_only:
        return {"rate": asyncio.run(_serial(adapter, n, 0.0))}
    adapter.enqueue(-1, 0.0)  # connect (and load scripts) before the clock starts
    start = time.perf_counter()
    for i in range(n):
        adapter.enqueue(i, 0.0)
    return {"rate": n / (time.perf_counter() - start)}


async def _serial(adapter: Base, n: int, interval: float) -> float:
    """One push after another on one loop; paced every ``interval`` s (then says ready first)."""
    push, close = await adapter.async_enqueuer()
    await push(-1, -1.0)
    if interval:
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    start = next_at = time.perf_counter()
    for i in range(n):
        if interval:
            next_at += interval
            pause = next_at - time.perf_counter()
            if pause > 0:
                await asyncio.sleep(pause)
        await push(i, time.perf_counter() if interval else 0.0)
    elapsed = time.perf_counter() - start
    await close()
    return n / elapsed


def enqueue_bulk(adapter: Base, n: int) -> dict[str, Any]:
    batches = [[(i, 0.0) for i in range(s, min(n, s + BATCH))] for s in range(0, n, BATCH)]
    adapter.enqueue_bulk(batches[0][:1])  # raises Unsupported early; also connects and warms up
    start = time.perf_counter()
    for batch in batches:
        adapter.enqueue_bulk(batch)
    return {"rate": n / (time.perf_counter() - start)}


def async_push(adapter: Base, n: int) -> dict[str, Any]:
    async def main() -> float:
        push, close = await adapter.async_enqueuer()
        await push(-1, -1.0)  # connect and load scripts before the clock starts
        start = time.perf_counter()
        for s in range(0, n, CONCURRENT):
            await asyncio.gather(*(push(i, 0.0) for i in range(s, min(n, s + CONCURRENT))))
        elapsed = time.perf_counter() - start
        await close()
        return elapsed

    return {"rate": n / asyncio.run(main())}


def drain(adapter: Base, n: int, mode: str | int) -> dict[str, Any]:
    adapter.fill(n)
    client = redis.Redis.from_url(adapter.url)
    sink = Sink()
    load = os.getloadavg()[0]
    cpu0 = server_cpu(client)
    SINKS[:] = [sink]
    handle = adapter.start_worker(sink, mode)
    try:
        elapsed = wait_for(lambda: len(sink.runs), n, DRAIN_TIMEOUT)
    finally:
        adapter.stop_worker(handle)
    cpu = server_cpu(client) - cpu0
    client.close()
    return {"rate": n / elapsed, "server_us": cpu / n * 1e6, "load": load}


def latency(adapter: Base, n: int, adapter_file: str) -> dict[str, Any]:
    sink = Sink()
    SINKS[:] = [sink]
    handle = adapter.start_worker(sink, "defaults")
    spec = json.dumps({"measure": "produce", "url": adapter.url, "n": n})
    producer = subprocess.Popen(
        [sys.executable, adapter_file, spec],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert producer.stdin is not None
    assert producer.stdout is not None
    try:
        if producer.stdout.readline().strip() != "ready":
            raise RuntimeError("the producer did not start")
        wait_for(lambda: len(sink.runs), 1, 30)  # the warm-up task ran: the worker is up
        time.sleep(0.3)  # and idle again
        load = os.getloadavg()[0]
        producer.stdin.write("go\n")
        producer.stdin.flush()
        wait_for(lambda: len(sink.delays), n, 30 + n * LATENCY_INTERVAL)
    finally:
        producer.wait(30)
        adapter.stop_worker(handle)
    delays = sorted(sink.delays)
    return {
        "p50": delays[len(delays) // 2] * 1000,
        "p99": delays[min(len(delays) - 1, int(len(delays) * 0.99))] * 1000,
        "load": load,
    }


def produce(adapter: Base, n: int) -> None:
    """The latency producer process: warm up, say ready, wait for go, push at 200/s."""
    if adapter.async_only:
        asyncio.run(_serial(adapter, n, LATENCY_INTERVAL))
        return
    adapter.enqueue(-1, -1.0)
    print("ready", flush=True)
    sys.stdin.readline()
    next_at = time.perf_counter()
    for i in range(n):
        next_at += LATENCY_INTERVAL
        pause = next_at - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
        adapter.enqueue(i, time.perf_counter())


def run(adapter_cls: type[Base]) -> None:
    """Entry point of an adapter file: ``python <file> '<json spec>'``."""
    spec = json.loads(sys.argv[1])
    measure, n = spec["measure"], int(spec["n"])
    adapter = adapter_cls(spec["url"])
    try:
        if measure == "produce":
            produce(adapter, n)
            return
        if measure == "enqueue_one":
            result = enqueue_one(adapter, n)
        elif measure == "enqueue_bulk":
            result = enqueue_bulk(adapter, n)
        elif measure == "async_push":
            result = async_push(adapter, n)
        elif measure == "drain":
            result = drain(adapter, n, spec.get("mode", "defaults"))
        elif measure == "latency":
            result = latency(adapter, n, sys.argv[0])
        else:
            raise SystemExit(f"unknown measure {measure!r}")
    except Unsupported as exc:
        result = {"skip": str(exc)}
    finally:
        adapter.close()
    print(json.dumps(result), flush=True)
