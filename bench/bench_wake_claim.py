"""An idle worker's first task: push-to-start latency with the listener's one-trip claim on and
off, side by side in one run (ADR 38; prints numbers, not a test).

    uv run --no-sync python bench/bench_wake_claim.py [--rounds 6] [--n 600] [--kinds thread,async]

The scenario of ``compare.py``'s latency phase: a producer PROCESS pushes one task every 5 ms
(200/s), its ``perf_counter`` in the payload, to one worker with ``WorkerConfig`` defaults (a
thread ``Worker`` or an ``AsyncWorker``, no ``prefetch`` argument) that is running and idle;
the handler records start - push. ``on``: the listener makes the claim the idle loop hands it
(``claim_when_ready``: BLPOP and the claim pipelined, one round trip); ``off``: the listener
only wakes the loop, which then claims (``WorkerDriver.listener_claims = False``, the way
before). One embedded Valkey for the run, a fresh queue per measurement, the order of ``on``
and ``off`` alternating by round (on/off, off/on, ...). Per round and kind: p50 and p99 of
each, and the ratios on/off; then the medians over the rounds. The machine's load goes into
every line: on a shared machine compare the ratios, not the absolute figures.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from typing import Any

from fairque_core import AsyncWorker, Task, TaskHandler, Worker, WorkerConfig
from fairque_core.app.worker.driver import WorkerDriver
from fairque_redis import aconnect, connect
from fairque_redis.servers.embedded import EmbeddedValkey

INTERVAL = 0.005  # 200 tasks/s
WARMUP = 20  # first samples dropped (connections, script loads, the adaptive poll settling)


def produce(url: str, queue_name: str, n: int) -> None:
    """The producer process: warm up, say ready, wait for go, push one task every 5 ms."""
    queue = connect(url, queue=queue_name)
    queue.push(Task.create("warm", payload={"t": -1.0}))
    print("ready", flush=True)
    sys.stdin.readline()
    next_at = time.perf_counter()
    for i in range(n):
        next_at += INTERVAL
        pause = next_at - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
        queue.push(Task.create(f"tenant-{i % 100}", payload={"t": time.perf_counter()}))
    queue.close()


class Stamps(TaskHandler):
    def __init__(self) -> None:
        self.delays: list[float] = []
        self.lock = threading.Lock()

    def _note(self, task: Task) -> None:
        now = time.perf_counter()
        pushed = float(task.payload.get("t", -1.0))
        if pushed > 0:
            with self.lock:
                self.delays.append(now - pushed)

    def process_task(self, task: Task) -> object:
        self._note(task)
        return None

    async def process_task_async(self, task: Task) -> object:
        self._note(task)
        return None


def _start_producer(url: str, queue_name: str, n: int) -> subprocess.Popen[str]:
    args = [sys.executable, __file__, "--produce", url, queue_name, str(n)]
    producer = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert producer.stdout is not None
    line = producer.stdout.readline().strip()
    if line != "ready":
        raise SystemExit(f"producer: {line!r}")
    return producer


def _go_and_wait(producer: subprocess.Popen[str], stamps: Stamps, n: int) -> None:
    assert producer.stdin is not None
    time.sleep(0.3)  # the worker has taken the warm-up task and is idle again
    producer.stdin.write("go\n")
    producer.stdin.flush()
    deadline = time.monotonic() + 30 + n * INTERVAL
    while len(stamps.delays) < n and time.monotonic() < deadline:
        time.sleep(0.02)
    producer.wait(30)


def measure(url: str, kind: str, on: bool, n: int) -> list[float]:
    """One measurement: n delays (seconds), sorted, warm-up dropped."""
    WorkerDriver.listener_claims = on  # read when a worker is made
    queue_name = f"wake-claim-{uuid.uuid4().hex[:8]}"
    stamps = Stamps()
    producer = _start_producer(url, queue_name, n)
    if kind == "thread":
        queue = connect(url, queue=queue_name)
        worker = Worker(WorkerConfig(id="bench"), stamps, queue)
        worker.start()
        try:
            _go_and_wait(producer, stamps, n)
        finally:
            worker.stop(10)
            queue.close()
    else:
        ready = threading.Event()
        done = threading.Event()

        async def main() -> None:
            aqueue = await aconnect(url, queue=queue_name)
            aworker = AsyncWorker(WorkerConfig(id="bench-async"), stamps, aqueue)
            await aworker.start()
            ready.set()
            while not done.is_set():
                await asyncio.sleep(0.02)
            await aworker.stop(10)
            await aqueue.close()

        thread = threading.Thread(target=asyncio.run, args=(main(),))
        thread.start()
        ready.wait(10)
        try:
            _go_and_wait(producer, stamps, n)
        finally:
            done.set()
            thread.join(30)
    return sorted(stamps.delays[WARMUP:])


def _pct(delays: list[float], q: float) -> float:
    return delays[min(len(delays) - 1, int(len(delays) * q))] * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--n", type=int, default=600, help="tasks per measurement")
    parser.add_argument("--kinds", default="thread,async")
    parser.add_argument("--produce", nargs=3, help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.produce:
        produce(opts.produce[0], opts.produce[1], int(opts.produce[2]))
        return
    kinds = opts.kinds.split(",")
    figures: dict[tuple[str, bool], list[tuple[float, float]]] = {}
    with EmbeddedValkey() as server:
        url = str(server.url)
        for r in range(opts.rounds):
            for kind in kinds:
                order = (True, False) if r % 2 == 0 else (False, True)
                got: dict[bool, tuple[float, float]] = {}
                for on in order:
                    delays = measure(url, kind, on, opts.n + WARMUP)
                    got[on] = (_pct(delays, 0.5), _pct(delays, 0.99))
                    figures.setdefault((kind, on), []).append(got[on])
                load = os.getloadavg()[0]
                print(
                    f"round {r + 1} {kind:6}  off p50 {got[False][0]:.3f} p99 {got[False][1]:.3f}"
                    f"  on p50 {got[True][0]:.3f} p99 {got[True][1]:.3f} ms"
                    f"  on/off p50 {got[True][0] / got[False][0]:.2f}"
                    f" p99 {got[True][1] / got[False][1]:.2f}  (load {load:.1f})",
                    flush=True,
                )
    WorkerDriver.listener_claims = True
    print("\nmedians over the rounds (ms):")
    for kind in kinds:
        med: dict[bool, Any] = {}
        for on in (False, True):
            rows = figures[(kind, on)]
            med[on] = (
                statistics.median(p50 for p50, _ in rows),
                statistics.median(p99 for _, p99 in rows),
            )
        (off50, off99), (on50, on99) = med[False], med[True]
        print(
            f"  {kind:6}  off p50 {off50:.3f} p99 {off99:.3f}  on p50 {on50:.3f} p99 {on99:.3f}"
            f"  on/off p50 {on50 / off50:.2f} p99 {on99 / off99:.2f}"
        )


if __name__ == "__main__":
    main()
