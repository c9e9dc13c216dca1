"""How soon ``handle.get`` returns after the finish (ADR 27; prints numbers, not a test).

    uv run python bench/bench_results.py [--rounds 200]

For each backend (the in-memory model, an embedded Valkey): push a task, claim it, start a
waiter thread blocked in ``handle.get(timeout=5)``, finish the task on the main thread, and
measure from the finish call's return to ``get``'s return. Also ``get`` on a finished task
(one read) and a chord of 1,000 members from push to the callback's result.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
import uuid

from fairque_core import FairQueue, InMemoryBackend, Task, chord, group
from fairque_redis import connect
from fairque_redis.servers.embedded import EmbeddedValkey


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def wake_latency(queue: FairQueue, rounds: int) -> list[float]:
    gaps: list[float] = []
    for n in range(rounds):
        handle = queue.push(Task.create("bench", task_id=f"r{n}-{uuid.uuid4().hex[:6]}"))
        [task] = queue.claim_batch(1)
        returned: list[float] = []
        ready = threading.Event()

        def wait(h: str = handle, out: list[float] = returned, go: threading.Event = ready) -> None:
            go.set()
            queue.result(h).get(timeout=5)
            out.append(time.perf_counter())

        waiter = threading.Thread(target=wait)
        waiter.start()
        ready.wait()
        time.sleep(0.002)  # let the waiter block
        queue.finish(task, n)
        finished = time.perf_counter()
        waiter.join()
        gaps.append((returned[0] - finished) * 1000)
    return gaps


def chord_seconds(queue: FairQueue, members: int) -> float:
    started = time.perf_counter()
    flow = chord(group(Task.create("bench") for _ in range(members)), Task.create("bench"))
    callback = queue.push_chord(flow)
    while True:
        tasks = queue.claim_batch(200)
        if not tasks:
            break
        queue.finish_batch([(t, 1) for t in tasks])
    callback.get(timeout=30)
    return time.perf_counter() - started


def report(name: str, queue: FairQueue, rounds: int) -> None:
    gaps = wake_latency(queue, rounds)
    print(
        f"{name:>8}: get after finish  median {statistics.median(gaps):.3f} ms  "
        f"p99 {_pct(gaps, 0.99):.3f} ms  max {max(gaps):.3f} ms  ({rounds} rounds)"
    )
    print(
        f"{name:>8}: chord of 1,000 members, push to callback result "
        f"{chord_seconds(queue, 1000):.2f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=200)
    opts = parser.parse_args()
    report("model", FairQueue(InMemoryBackend(queue="bench")), opts.rounds)
    with EmbeddedValkey() as server:
        queue = connect(server.url, queue=f"bench-{uuid.uuid4().hex[:8]}")
        try:
            report("valkey", queue, opts.rounds)
        finally:
            queue.close()


if __name__ == "__main__":
    main()
