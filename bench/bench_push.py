"""Cost of a push, client and server side, for this tree or two trees side by side.

    uv run --no-sync python bench/bench_push.py [--quick] [--rounds N]
    uv run --no-sync python bench/bench_push.py --compare OLD_SRC [--new NEW_SRC] [--count]

One embedded Valkey serves every measurement. Each measurement runs in a child process
(PYTHONPATH = the tree's ``src``), so two builds can share the server and alternate round by
round. Per measurement it prints the rate, the client's CPU time per task (``process_time``:
encoding, checks, redis-py packing; not the wait for the reply) and the server's time per task
(INFO commandstats of EVALSHA, reset just before the timed part):

- ``backend one``: ``RedisBackend.push`` of a ready-made Message, one call per task;
- ``backend batch``: ``push_batch`` of 1,000 Messages per call;
- ``queue one``: ``FairQueue.push(Task.create(...))``, the whole client path per task.

100 tenants, each already active when the timed part starts (a warm-up push each), no unique
keys, no limits. ``--count`` also lists the commands one ``push`` runs inside its script
(MONITOR), for each tree.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import redis

from fairque_redis.embedded import EmbeddedValkey

TENANTS = 100

# Runs inside a child with the tree under test first on sys.path. Reads "go" on stdin after
# its warm-up, runs, prints one JSON line. Uses only names both old and new trees export.
CHILD = r"""
import json, sys, time
from fairque_core import FairQueue, Message, Priority, Task
from fairque_redis.backend import RedisBackend

url, queue, mode, n, tag = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
tenants = int(sys.argv[6])
backend = RedisBackend.from_url(url, queue=queue)
fq = FairQueue(backend)

def msg(i, u):
    return Message(task_id=f"{tag}{i}", user_id=u, priority=Priority.NORMAL, body=b'{"n": 1}')

# warm-up: scripts loaded, registry written, every tenant active
backend.push_batch([msg(-1 - t, f"u{t}") for t in range(tenants)])
if mode == "batch":
    work = [[msg(i, f"u{i % tenants}") for i in range(s, s + 1000)] for s in range(0, n, 1000)]
elif mode == "one":
    work = [msg(i, f"u{i % tenants}") for i in range(n)]
else:
    work = [f"u{i % tenants}" for i in range(n)]
print("ready", flush=True)
sys.stdin.readline()
c0, t0 = time.process_time(), time.perf_counter()
if mode == "batch":
    for b in work:
        backend.push_batch(b)
elif mode == "one":
    for m in work:
        backend.push(m)
else:
    for u in work:
        fq.push(Task.create(u, Priority.NORMAL, {"n": 1}))
t1, c1 = time.perf_counter(), time.process_time()
print(json.dumps({"rate": n / (t1 - t0), "cpu_us": (c1 - c0) / n * 1e6}), flush=True)
"""


def _run_child(
    src: Path, url: str, client: redis.Redis, mode: str, n: int, tag: str
) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=str(src))
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, url, f"q{tag}", mode, str(n), tag, str(TENANTS)],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if line != "ready":
        proc.wait()
        raise RuntimeError(f"child for {src} failed to start ({line!r})")
    client.config_resetstat()
    proc.stdin.write("go\n")
    proc.stdin.flush()
    result: dict[str, float] = json.loads(proc.stdout.readline())
    proc.wait()
    stats = client.info("commandstats").get("cmdstat_evalsha", {})
    calls = int(stats.get("calls", 0)) or 1
    tasks = n
    result["server_us"] = float(stats.get("usec", 0)) / tasks
    result["server_us_call"] = float(stats.get("usec", 0)) / calls
    return result


def _count_calls(src: Path, url: str, client: redis.Redis, tag: str) -> list[str]:
    """The commands run inside the scripts of 4 one-by-one pushes (MONITOR), per push."""
    seen: list[str] = []
    stop = threading.Event()

    def watch() -> None:
        with client.monitor() as mon:  # type: ignore[no-untyped-call]
            for event in mon.listen():
                if stop.is_set():
                    return
                seen.append(str(event.get("command", "")))

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    time.sleep(0.3)
    _run_child(src, url, client, "one", 4, tag)
    time.sleep(0.3)
    stop.set()
    client.ping()
    thread.join(timeout=2)
    pushes: list[list[str]] = []
    for c in seen:
        if c.startswith("EVALSHA"):
            pushes.append([])
        elif pushes and not c.startswith(("CONFIG", "INFO", "PING")):
            pushes[-1].append(c.split(" ")[0])
    # the last 4 scripts are the timed pushes (the first is the warm-up batch)
    return [c for p in pushes[-4:] for c in p]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller runs")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (median printed)")
    parser.add_argument("--compare", metavar="OLD_SRC", help="another tree's src/ to run beside")
    parser.add_argument("--new", metavar="NEW_SRC", help="this tree's src/ unless given")
    parser.add_argument("--count", action="store_true", help="list redis.call per push (MONITOR)")
    opts = parser.parse_args()
    here = Path(opts.new) if opts.new else Path(__file__).resolve().parents[1] / "src"
    trees = {"new": here}
    if opts.compare:
        trees = {"old": Path(opts.compare), "new": here}
    scale = 5 if opts.quick else 1
    sizes = {"one": 4_000 // scale, "batch": 50_000 // scale, "queue": 4_000 // scale}
    results: dict[tuple[str, str], list[dict[str, float]]] = {}
    with EmbeddedValkey() as server:
        client = redis.Redis.from_url(server.url)
        if opts.count:
            for name, src in trees.items():
                cmds = _count_calls(src, server.url, client, f"c{name}")
                per = len(cmds) / 4
                print(f"{name}: {per:.1f} commands per push inside the script")
                print("  one push:", " ".join(cmds[: len(cmds) // 4]))
        for r in range(opts.rounds):
            order = list(trees.items())
            if r % 2:
                order.reverse()
            for mode, n in sizes.items():
                for name, src in order:
                    res = _run_child(src, server.url, client, mode, n, f"{name}{mode}{r}")
                    results.setdefault((name, mode), []).append(res)
        client.close()
    print(f"median of {opts.rounds} rounds, {TENANTS} active tenants, no unique keys/limits")
    label = {"one": "backend one", "batch": "backend batch", "queue": "queue one"}
    print(f"{'':<14} {'tree':<4} {'tasks/s':>9} {'client us/task':>15} {'server us/task':>15}")
    med: dict[tuple[str, str], dict[str, float]] = {}
    for mode in sizes:
        for name in trees:
            rows = results[(name, mode)]
            m = {k: statistics.median(row[k] for row in rows) for k in rows[0]}
            med[(name, mode)] = m
            low = min(row["server_us"] for row in rows)
            print(
                f"{label[mode]:<14} {name:<4} {m['rate']:>9,.0f} {m['cpu_us']:>15.1f}"
                f" {m['server_us']:>15.1f}  (least {low:.1f})"
            )
    if "old" in trees:
        print("new / old:")
        for mode in sizes:
            o, n_ = med[("old", mode)], med[("new", mode)]
            print(
                f"  {label[mode]:<14} rate x{n_['rate'] / o['rate']:.2f}"
                f"  client us x{n_['cpu_us'] / o['cpu_us']:.2f}"
                f"  server us x{n_['server_us'] / o['server_us']:.2f}"
            )


if __name__ == "__main__":
    main()
