"""The measurements an adapter can make (see _common.py); each returns one JSON-able dict.

- ``enqueue_one``: ``n`` no-op tasks, one call each (asyncio-only libraries: one ``await``
  after another on one loop).
- ``enqueue_bulk``: ``n`` tasks in batches of 1,000 (the library's own bulk call).
- ``async_push``: ``n`` tasks from asyncio, ``asyncio.gather`` of 100 pushes at a time.
- ``drain``: ``n`` tasks queued beforehand (not timed), then one worker in this process is
  started and timed until its handler ran ``n`` times; the server's CPU (INFO cpu, sys + user)
  from the worker's start until it stopped, per task.
- ``latency``: a producer process pushes one task every 5 ms (200/s), its ``perf_counter`` in
  the payload, to a worker that is running and idle; the handler records start - push.
  Also the server's CPU per task over the phase (``server_us``): at this trickle every push,
  claim and finish is a call of its own, so it reads what a lightly loaded queue costs the
  server per task (the drains share each call's fixed cost among a batch).
  ``"keep": true`` in the spec also returns every delay (for a CDF).
- ``flood``: a worker with its defaults; a producer process pushes a task of one of 5 light
  tenants every 10 ms for ``seconds`` (default 8), and one second in, ``n`` tasks of a
  ``flood`` tenant at once (bulk where the library has it). Returns each light task's push
  time (from the first push) and wait. Sync producers only.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from typing import Any

import redis
from _common import (
    BATCH,
    CONCURRENT,
    DRAIN_TIMEOUT,
    LATENCY_INTERVAL,
    SINKS,
    Base,
    Sink,
    Unsupported,
    server_cpu,
    wait_for,
)

LIGHT_TENANTS = 5
LIGHT_INTERVAL = 0.01
FLOOD_AT = 1.0


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
    SINKS[:] = [sink]
    load = os.getloadavg()[0]
    cpu0 = server_cpu(client)
    handle = adapter.start_worker(sink, mode)
    try:
        elapsed = wait_for(lambda: len(sink.runs), n, DRAIN_TIMEOUT)
    finally:
        adapter.stop_worker(handle)
    cpu = server_cpu(client) - cpu0
    client.close()
    return {"rate": n / elapsed, "server_us": cpu / n * 1e6, "load": load}


def _with_producer(
    adapter: Base, spec: dict[str, Any], adapter_file: str, until: Any
) -> tuple[Sink, float, str, float]:
    """Start a worker (defaults), then a producer process running ``spec``; once the producer's
    warm-up task ran and the worker is idle again, say go and wait for ``until(sink)``.
    Returns the sink, the load average at go, the producer's last line and the server's CPU
    seconds (INFO cpu) from go until ``until`` returned: the pushes, the worker's claims and
    finishes, and its idle polls between them."""
    client = redis.Redis.from_url(adapter.url)
    sink = Sink()
    SINKS[:] = [sink]
    handle = adapter.start_worker(sink, "defaults")
    producer = subprocess.Popen(
        [sys.executable, adapter_file, json.dumps({**spec, "url": adapter.url})],
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
        cpu0 = server_cpu(client)
        producer.stdin.write("go\n")
        producer.stdin.flush()
        until(sink)
        cpu = server_cpu(client) - cpu0
        last = producer.stdout.read().strip()
    finally:
        producer.wait(30)
        adapter.stop_worker(handle)
        client.close()
    return sink, load, last, cpu


def latency(adapter: Base, n: int, adapter_file: str, keep: bool) -> dict[str, Any]:
    def until(sink: Sink) -> None:
        wait_for(lambda: len(sink.stamped), n, 30 + n * LATENCY_INTERVAL)

    spec = {"measure": "produce", "n": n, "push": adapter.push_mode}
    sink, load, _, cpu = _with_producer(adapter, spec, adapter_file, until)
    delays = sink.delays()
    result = {
        "p50": delays[len(delays) // 2] * 1000,
        "p99": delays[min(len(delays) - 1, int(len(delays) * 0.99))] * 1000,
        # the server's CPU per task at this trickle: a push, a claim and a finish each paid
        # alone (no batch to share a call's fixed cost), and the idle worker's polls
        "server_us": cpu / n * 1e6,
        "load": load,
    }
    if keep:
        result["delays_ms"] = [round(d * 1000, 4) for d in delays]
    return result


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


def flood(adapter: Base, n: int, adapter_file: str, seconds: float) -> dict[str, Any]:
    if adapter.async_only:
        raise Unsupported("the flood scenario drives sync producers only")

    def until(sink: Sink) -> None:
        # every light task (~seconds / LIGHT_INTERVAL) and the flood, with the warm-up
        light = int(seconds / LIGHT_INTERVAL)
        wait_for(lambda: len(sink.runs), n + light + 1, DRAIN_TIMEOUT + seconds)

    spec = {"measure": "flood_produce", "n": n, "seconds": seconds}
    sink, load, last, _ = _with_producer(adapter, spec, adapter_file, until)
    started = json.loads(last)["started"]
    samples = sorted((pushed - started, delay * 1000) for pushed, delay in sink.stamped)
    return {"load": load, "flood_at": FLOOD_AT, "samples": samples}


def flood_produce(adapter: Base, n: int, seconds: float) -> None:
    adapter.enqueue_as("light-0", -1, -1.0)
    print("ready", flush=True)
    sys.stdin.readline()
    started = time.perf_counter()

    def flood_all() -> None:
        time.sleep(FLOOD_AT)
        items = [(i, 0.0) for i in range(n)]
        try:
            for s in range(0, n, BATCH):
                adapter.enqueue_bulk_as("flood", items[s : s + BATCH])
        except Unsupported:
            for i, t in items:
                adapter.enqueue_as("flood", i, t)

    flooder = threading.Thread(target=flood_all)
    flooder.start()
    next_at = started
    k = 0
    while next_at - started < seconds - LIGHT_INTERVAL / 2:
        pause = next_at - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
        adapter.enqueue_as(f"light-{k % LIGHT_TENANTS}", k, time.perf_counter())
        k += 1
        next_at += LIGHT_INTERVAL
    flooder.join()
    print(json.dumps({"started": started, "light": k}), flush=True)


def measure(adapter: Base, spec: dict[str, Any], adapter_file: str) -> dict[str, Any] | None:
    """Run ``spec["measure"]``; None for the producer processes (they print their own)."""
    name, n = spec["measure"], int(spec["n"])
    seconds = float(spec.get("seconds", 8.0))
    if name == "produce":
        produce(adapter, n)
        return None
    if name == "flood_produce":
        flood_produce(adapter, n, seconds)
        return None
    if name == "enqueue_one":
        return enqueue_one(adapter, n)
    if name == "enqueue_bulk":
        return enqueue_bulk(adapter, n)
    if name == "async_push":
        return async_push(adapter, n)
    if name == "drain":
        return drain(adapter, n, spec.get("mode", "defaults"))
    if name == "latency":
        return latency(adapter, n, adapter_file, bool(spec.get("keep")))
    if name == "flood":
        return flood(adapter, n, adapter_file, seconds)
    raise SystemExit(f"unknown measure {name!r}")
