"""The producer's one-by-one rate against huey's (issue 17), two fairque trees side by side.

    uv run --no-sync --with huey python bench/bench_producer_ratio.py [--compare OLD_SRC]
        [--new NEW_SRC] [--rounds R] [--count N] [--blocks B] [--async]

One embedded Valkey. Each round runs one child process per fairque tree (PYTHONPATH = the
tree's ``src``, ``_child.py``; the trees' order alternating from round to round). A child
warms up, then times on the wall clock, the real round trip included, ``B`` blocks of ``N``
pushes of each side one by one, the sides' order rotating from block to block, so that the
sides it compares run in the same few seconds of a shared machine's load:

- ``fairque``: ``FairQueue.push_intake(Task.create(f"tenant-{i % 100}", payload={"t":
  time.time()}))``, as ``bench/peers/fairque_peer.py`` pushes in ``compare.py``'s intake rows;
- ``huey``: ``noop(i, time.time())`` on a ``RedisHuey`` (``bench/peers/huey_peer.py``: one
  ``LPUSH`` of a pickled message per call);
- ``rpush``: ``client.execute_command("RPUSH", key, entry)`` of a 150-byte entry through
  redis-py, the floor both stand on.

With ``--async`` the fairque side is issue 17's second producer target instead:
``AsyncFairQueue.push_intake`` of the same tasks from asyncio, ``asyncio.gather`` of 100 at a
time (``bench/peers/_measures.py``'s ``async_push``, concurrent pushes grouped by the coalescer
of ADR 35), on one event loop the child keeps between its blocks; huey and the bare ``RPUSH``
stay one by one (the target is 3x huey's one-by-one rate).

The report gives per tree the median µs per push of each side and the median of the per-round
ratios of fairque's rate to huey's (huey's µs / fairque's: above 1 is faster than huey) and to
the floor, and the median per-round ratio of the new tree's fairque rate to the old one's.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import redis
from _child import run_child

from fairque_redis.servers.embedded import EmbeddedValkey

CHILD = r"""
import asyncio, json, sys, time
import redis
from huey import RedisHuey
from fairque_core import AsyncFairQueue, FairQueue, Task
from fairque_redis.backends.backend_async import AsyncRedisBackend
from fairque_redis.backends.backend import RedisBackend
url, tag, n, blocks = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
concurrent = sys.argv[5] == "async"
huey = RedisHuey(f"h{tag}", url=url)

@huey.task()
def noop(i, pushed_at):
    return None

queue = FairQueue(RedisBackend.from_url(url, queue=f"q{tag}"))
client = redis.Redis.from_url(url)
key, entry = f"r{tag}", b"e" * 150

def fairque(i):
    queue.push_intake(Task.create(f"tenant-{i % 100}", payload={"t": time.time()}))

def hueys(i):
    noop(i, time.time())

def rpush(i):
    client.execute_command("RPUSH", key, entry)

def block(push, n):
    for i in range(n):
        push(i)

sides = {"fairque": fairque, "huey": hueys, "rpush": rpush}
if concurrent:  # fairque's side: 100 concurrent async pushes at a time, one loop throughout
    loop = asyncio.new_event_loop()
    aqueue = AsyncFairQueue(AsyncRedisBackend.from_url(url, queue=f"a{tag}"))

    async def gathered(n):
        for s in range(0, n, 100):
            await asyncio.gather(*(
                aqueue.push_intake(Task.create(f"tenant-{i % 100}", payload={"t": time.time()}))
                for i in range(s, min(n, s + 100))
            ))

    def run_block(push, n):
        if push is fairque:
            loop.run_until_complete(gathered(n))
        else:
            block(push, n)
else:
    run_block = block
for push in sides.values():
    run_block(push, 200)
spent = dict.fromkeys(sides, 0.0)
for b in range(blocks):
    order = list(sides)[b % 3:] + list(sides)[:b % 3]
    for side in order:
        t0 = time.perf_counter()
        run_block(sides[side], n)
        spent[side] += time.perf_counter() - t0
print(json.dumps({side: spent[side] / (n * blocks) * 1e6 for side in sides}), flush=True)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--compare", metavar="OLD_SRC", help="another tree's src/ to run beside")
    parser.add_argument("--rounds", type=int, default=7, help="rounds (medians printed)")
    parser.add_argument("--count", type=int, default=500, help="pushes per block")
    parser.add_argument("--blocks", type=int, default=6, help="blocks per side and round")
    parser.add_argument(
        "--async",
        dest="concurrent",
        action="store_true",
        help="fairque's side: 100 concurrent async push_intake at a time (huey's one by one)",
    )
    parser.add_argument("--new", metavar="NEW_SRC", help="this tree's src/ unless given")
    opts = parser.parse_args()
    here = Path(opts.new) if opts.new else Path(__file__).resolve().parents[1] / "src"
    trees = {"new": here, **({"old": Path(opts.compare)} if opts.compare else {})}
    got: dict[str, list[dict[str, float]]] = {tree: [] for tree in trees}
    with EmbeddedValkey() as server:
        for r in range(opts.rounds):
            order = list(trees) if r % 2 == 0 else list(reversed(trees))
            for tree in order:
                args = ["-c", CHILD, server.url, f"{tree}{r}", str(opts.count), str(opts.blocks)]
                args.append("async" if opts.concurrent else "sync")
                got[tree].append(run_child(args, str(trees[tree])))
            redis.Redis.from_url(server.url).flushdb()
    total = opts.count * opts.blocks
    print(f"{opts.rounds} rounds; per round and tree one process, {total} pushes per side in")
    fq = "fairque (async, 100 concurrent)" if opts.concurrent else "fairque"
    print(f"blocks of {opts.count} alternating {fq}/huey/RPUSH; wall clock, loopback")
    for tree, rows in got.items():
        us = {side: statistics.median(row[side] for row in rows) for side in rows[0]}
        vs_huey = statistics.median(row["huey"] / row["fairque"] for row in rows)
        vs_floor = statistics.median(row["rpush"] / row["fairque"] for row in rows)
        print(
            f"  {tree}: fairque {us['fairque']:.1f} us/push, huey {us['huey']:.1f}, "
            f"RPUSH {us['rpush']:.1f}; fairque's rate x{vs_huey:.2f} huey's, "
            f"x{vs_floor:.2f} the bare RPUSH's"
        )
    if "old" in trees:
        pairs = zip(got["old"], got["new"], strict=True)
        ratio = statistics.median(o["fairque"] / n["fairque"] for o, n in pairs)
        print(f"  new fairque's rate x{ratio:.2f} the old tree's (median of per-round ratios)")


if __name__ == "__main__":
    main()
