"""What the server runs between a push and an idle worker's task, with and without the hand-off
of ADR 81: instructions inside FCALL, counted under callgrind (load-independent; not a test).

    uv run --no-sync python bench/bench_handoff_ir.py [--rounds 20]

Per round, on an idle queue whose 100 tenants have pushed before (the latency benchmark's
shape): ``wake then claim``, today's path (the push, then the claim of one that the wake's
BLPOP lets run); ``hand-off``, the push that finds a waiting round and claims for it, then the
claim pipelined behind that round's BLPOP (which only ends the round); and the push alone (what
any path must run before a worker can have the task: the floor of a hand-off that keeps the
claim's writes is above it). Printed: the median instructions of each and their ratios.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import redis  # noqa: E402
from _callgrind import GC_LIBRARY, callgrind_server  # noqa: E402

from fairque_core import Task  # noqa: E402
from fairque_redis import connect  # noqa: E402
from fairque_redis.backends import wake_claim as wc  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    opts = parser.parse_args()
    with callgrind_server() as (url, counter):
        client = redis.Redis.from_url(url)
        client.function_load(GC_LIBRARY, replace=True)
        queue = connect(url, queue="ir")
        backend = queue.backend
        keys = backend._keys
        for i in range(100):  # every tenant has pushed and been served once
            queue.push(Task.create(f"tenant-{i}", payload={"i": i}))
        while queue.claim_batch(50, worker_id="w"):
            pass
        script = backend._scripts["claim"]
        plain: list[int] = []
        hand: list[int] = []
        alone: list[int] = []
        for r in range(opts.rounds):
            task = Task.create(f"tenant-{r % 100}", payload={"i": r})

            def today(task: Task = task) -> None:
                queue.push(task)
                assert len(queue.claim_batch(1, worker_id="w")) == 1

            plain.append(counter.count(client, today))
            task = Task.create(f"tenant-{(r + 50) % 100}", payload={"i": r})
            call = backend._planner.claim(worker_id="w", count=1)
            round_ = wc.hand_round(keys, backend._planner.anchors, call.args, 1.0, wc.wall_ms())
            assert round_ is not None
            client.hset(keys.waiters, round_.own, round_.entry)

            def handed(task: Task = task, round_: wc.HandRound = round_) -> None:
                queue.push(task)
                reply = script(keys=round_.keys, args=call.args)
                _, reply = wc.read_hand_round(round_, keys.wake.encode(), None, reply)
                assert len(call.parse(reply)) == 1

            hand.append(counter.count(client, handed))
            task = Task.create(f"tenant-{(r + 25) % 100}", payload={"i": r})
            alone.append(counter.count(client, lambda task=task: queue.push(task)))
            while queue.claim_batch(10, worker_id="w"):
                pass
        queue.close()
    a, b, c = statistics.median(plain), statistics.median(hand), statistics.median(alone)
    print(f"instructions inside FCALL, median of {opts.rounds} rounds (100 tenants, idle queue)")
    print(f"  wake then claim (push + claim)   {a:>10,.0f}")
    print(f"  hand-off (push + round's claim)  {b:>10,.0f}")
    print(f"  hand-off / today                 {b / a:>10.3f}")
    print(f"  the push alone                   {c:>10,.0f}  ({c / a:.3f} of today's)")


if __name__ == "__main__":
    main()
