"""The producer's one-by-one rate against huey's (issue 17), two fairque trees side by side.

    uv run --no-sync --with huey python bench/bench_producer_ratio.py [--compare OLD_SRC]
        [--rounds R] [--count N]

One embedded Valkey; each measurement is a child process (PYTHONPATH = the tree's ``src``,
``_child.py``) that warms up (200 pushes) and then times ``N`` pushes one by one on the wall
clock, the real round trip included:

- ``fairque`` (and ``old`` with ``--compare``): ``FairQueue.push_intake(Task.create(
  f"tenant-{i % 100}", payload={"t": time.time()}))``, as ``bench/peers/fairque_peer.py``
  pushes in ``compare.py``'s intake rows;
- ``huey``: ``noop(i, time.time())`` on a ``RedisHuey`` (``bench/peers/huey_peer.py``: one
  ``LPUSH`` of a pickled message per call);
- ``rpush``: ``client.execute_command("RPUSH", key, entry)`` of a 150-byte entry through
  redis-py, the floor both stand on.

Each round runs every side once, the order rotating from round to round, on fresh keys. The
report gives the median µs per push of each side and, per fairque tree, the median of the
per-round ratios of its rate to huey's (huey's µs / fairque's µs: above 1 is faster than huey),
and to the floor. Other work on a shared machine moves the µs; read the per-round ratios.
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
side, url, tag, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
if side == "huey":
    from huey import RedisHuey
    huey = RedisHuey(f"pr{tag}", url=url)

    @huey.task()
    def noop(i, pushed_at):
        return None

    def push(i):
        noop(i, time.time())
elif side == "rpush":
    import redis
    client = redis.Redis.from_url(url)
    key, entry = f"pr{tag}", b"e" * 150

    def push(i):
        client.execute_command("RPUSH", key, entry)
else:
    from fairque_core import FairQueue, Task
    from fairque_redis.backend import RedisBackend
    queue = FairQueue(RedisBackend.from_url(url, queue=f"pr{tag}"))

    def push(i):
        queue.push_intake(Task.create(f"tenant-{i % 100}", payload={"t": time.time()}))
for i in range(200):
    push(i)
t0 = time.perf_counter()
for i in range(n):
    push(i)
print(json.dumps({"us": (time.perf_counter() - t0) / n * 1e6}), flush=True)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--compare", metavar="OLD_SRC", help="another tree's src/ to run beside")
    parser.add_argument("--rounds", type=int, default=7, help="rounds (medians printed)")
    parser.add_argument("--count", type=int, default=5000, help="pushes per measurement")
    opts = parser.parse_args()
    here = Path(__file__).resolve().parents[1] / "src"
    trees = {"fairque": here, **({"old": Path(opts.compare)} if opts.compare else {})}
    sides = [*trees, "huey", "rpush"]
    got: dict[str, list[float]] = {side: [] for side in sides}
    with EmbeddedValkey() as server:
        for r in range(opts.rounds):
            order = sides[r % len(sides) :] + sides[: r % len(sides)]
            for side in order:
                src = trees.get(side, here)
                kind = side if side in ("huey", "rpush") else "fairque"
                args = ["-c", CHILD, kind, server.url, f"{side}{r}", str(opts.count)]
                got[side].append(run_child(args, str(src))["us"])
            redis.Redis.from_url(server.url).flushdb()
    print(f"{opts.rounds} rounds of {opts.count} pushes, one by one, wall clock, loopback")
    for side in sides:
        print(f"  {side:<8} {statistics.median(got[side]):7.1f} us/push")
    for tree in trees:
        vs_huey = statistics.median(h / f for h, f in zip(got["huey"], got[tree], strict=True))
        vs_floor = statistics.median(p / f for p, f in zip(got["rpush"], got[tree], strict=True))
        print(f"  {tree:<8} rate x{vs_huey:.2f} huey's, x{vs_floor:.2f} the bare RPUSH's")
    if "old" in trees:
        ratio = statistics.median(o / f for o, f in zip(got["old"], got["fairque"], strict=True))
        print(f"  fairque rate x{ratio:.2f} the old tree's (median of per-round ratios)")


if __name__ == "__main__":
    main()
