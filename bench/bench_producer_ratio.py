"""The producer's one-by-one rate against huey's (issue 17), two fairque trees side by side.

    uv run --no-sync --with huey python bench/bench_producer_ratio.py [--compare OLD_SRC]
        [--rounds R] [--count N] [--blocks B]

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

from fairque_redis.embedded import EmbeddedValkey

CHILD = r"""
import json, sys, time
import redis
from huey import RedisHuey
from fairque_core import FairQueue, Task
from fairque_redis.backend import RedisBackend
url, tag, n, blocks = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
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

sides = {"fairque": fairque, "huey": hueys, "rpush": rpush}
for push in sides.values():
    for i in range(200):
        push(i)
spent = dict.fromkeys(sides, 0.0)
for b in range(blocks):
    order = list(sides)[b % 3:] + list(sides)[:b % 3]
    for side in order:
        push = sides[side]
        t0 = time.perf_counter()
        for i in range(n):
            push(i)
        spent[side] += time.perf_counter() - t0
print(json.dumps({side: spent[side] / (n * blocks) * 1e6 for side in sides}), flush=True)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--compare", metavar="OLD_SRC", help="another tree's src/ to run beside")
    parser.add_argument("--rounds", type=int, default=7, help="rounds (medians printed)")
    parser.add_argument("--count", type=int, default=500, help="pushes per block")
    parser.add_argument("--blocks", type=int, default=6, help="blocks per side and round")
    opts = parser.parse_args()
    here = Path(__file__).resolve().parents[1] / "src"
    trees = {"new": here, **({"old": Path(opts.compare)} if opts.compare else {})}
    got: dict[str, list[dict[str, float]]] = {tree: [] for tree in trees}
    with EmbeddedValkey() as server:
        for r in range(opts.rounds):
            order = list(trees) if r % 2 == 0 else list(reversed(trees))
            for tree in order:
                args = ["-c", CHILD, server.url, f"{tree}{r}", str(opts.count), str(opts.blocks)]
                got[tree].append(run_child(args, str(trees[tree])))
            redis.Redis.from_url(server.url).flushdb()
    total = opts.count * opts.blocks
    print(f"{opts.rounds} rounds; per round and tree one process, {total} pushes per side in")
    print(f"blocks of {opts.count} alternating fairque/huey/RPUSH; wall clock, loopback")
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
