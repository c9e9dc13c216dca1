"""Cost of a push, client and server side, for this tree or two trees side by side.

    uv run --no-sync python bench/bench_push.py [--quick] [--rounds N]
    uv run --no-sync python bench/bench_push.py --compare OLD_SRC [--new NEW_SRC] [--count]

One embedded Valkey serves every measurement. Each measurement runs in a child process
(PYTHONPATH = the tree's ``src``), so two builds can share the server and alternate round by
round. Per measurement it prints the rate, the client's CPU time per task (``process_time``:
encoding, checks, redis-py packing; not the wait for the reply) and the server's time per task
(INFO commandstats of FCALL and EVALSHA, reset just before the timed part):

- ``backend one``: ``RedisBackend.push`` of a ready-made Message, one call per task;
- ``backend batch``: ``push_batch`` of 1,000 Messages per call;
- ``queue one``: ``FairQueue.push(Task.create(...))``, the whole client path per task;
- ``batcher``: the same tasks through ``FairQueue.batcher(max_size=100, max_delay_ms=5)``
  (ADR 35), one thread;
- ``async one``: ``await AsyncFairQueue.push(...)``, one coroutine, one task after the other;
- ``async 100``: 100 coroutines pushing at once, each one task after the other (concurrent
  pushes coalesced into shared calls, the default);
- ``async 100 off``: the same with ``coalesce_pushes = False`` (one call per push, up to 100
  connections);
- ``async batcher``: ``AsyncFairQueue.batcher(max_size=100, max_delay_ms=5)``, one coroutine;
- ``claim 100``: the other side of the same tasks, for the client cost of a claimed task:
  ``FairQueue.claim_batch(100)`` until the queue is empty (filled before the timed part, 100
  tenants), decoding included; the tasks are not finished.

Every row also prints its rate over ``queue one``'s in the same round (``x one``). A tree
without a mode (``--compare`` with a tree from before ADR 35 has no batcher) prints ``n/a``.

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

from fairque_redis.servers.embedded import EmbeddedValkey

TENANTS = 100
# Modes a tree from before ADR 35 cannot run (no batcher): n/a there instead of an error.
OPTIONAL_MODES = frozenset({"batcher", "abatcher"})

# Runs inside a child with the tree under test first on sys.path. Reads "go" on stdin after
# its warm-up, runs, prints one JSON line. Uses only names both old and new trees export.
CHILD = r"""
import asyncio, json, sys, time
from fairque_core import FairQueue, Message, Priority, Task
from fairque_redis.backends.backend import RedisBackend

url, queue, mode, n, tag = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
tenants = int(sys.argv[6])
CONCURRENT = 100

def msg(i, u):
    return Message(task_id=f"{tag}{i}", tenant=u, priority=Priority.NORMAL, body=b'{"n": 1}')

def go():
    print("ready", flush=True)
    sys.stdin.readline()
    return time.process_time(), time.perf_counter()

def done(c0, t0, count=None):
    t1, c1 = time.perf_counter(), time.process_time()
    count = n if count is None else count
    cpu_us = (c1 - c0) / count * 1e6
    print(json.dumps({"rate": count / (t1 - t0), "cpu_us": cpu_us, "tasks": count}), flush=True)

def run_sync():
    backend = RedisBackend.from_url(url, queue=queue)
    fq = FairQueue(backend)
    # warm-up: scripts loaded, registry written, every tenant active
    backend.push_batch([msg(-1 - t, f"u{t}") for t in range(tenants)])
    if mode == "batch":
        work = [[msg(i, f"u{i % tenants}") for i in range(s, s + 1000)] for s in range(0, n, 1000)]
    elif mode == "claim":
        fill = [Task.create(f"u{i % tenants}", Priority.NORMAL, {"n": i}) for i in range(n)]
        for s in range(0, n, 1000):
            fq.push_batch(fill[s : s + 1000])
    elif mode == "one":
        work = [msg(i, f"u{i % tenants}") for i in range(n)]
    else:
        work = [f"u{i % tenants}" for i in range(n)]
        if mode == "batcher":
            fq.batcher  # a tree without it fails here, before "ready"
    c0, t0 = go()
    if mode == "batch":
        for b in work:
            backend.push_batch(b)
    elif mode == "claim":  # the n tasks and the warm-up's one per tenant
        claimed = 0
        while True:
            got = fq.claim_batch(100)
            if not got:
                break
            claimed += len(got)
        return done(c0, t0, claimed)
    elif mode == "one":
        for m in work:
            backend.push(m)
    elif mode == "batcher":
        with fq.batcher(max_size=100, max_delay_ms=5) as buf:
            for u in work:
                buf.push(Task.create(u, Priority.NORMAL, {"n": 1}))
    else:
        for u in work:
            fq.push(Task.create(u, Priority.NORMAL, {"n": 1}))
    done(c0, t0)

async def run_async():
    from fairque_core import AsyncFairQueue
    from fairque_redis.backends.backend_async import AsyncRedisBackend

    backend = AsyncRedisBackend.from_url(url, queue=queue)
    aq = AsyncFairQueue(backend)
    await backend.push_batch([msg(-1 - t, f"u{t}") for t in range(tenants)])
    # open the connections the concurrent modes use, outside the timed part
    await asyncio.gather(*(backend.push(msg(-1000 - k, "u0")) for k in range(CONCURRENT)))
    if mode == "async100off":
        aq.coalesce_pushes = False
    if mode == "abatcher":
        aq.batcher  # a tree without it fails here, before "ready"
    tenant_ids = [f"u{i % tenants}" for i in range(n)]
    c0, t0 = go()
    if mode == "asyncone":
        for u in tenant_ids:
            await aq.push(Task.create(u, Priority.NORMAL, {"n": 1}))
    elif mode == "abatcher":
        async with aq.batcher(max_size=100, max_delay_ms=5) as buf:
            for u in tenant_ids:
                await buf.push(Task.create(u, Priority.NORMAL, {"n": 1}))
    else:
        async def producer(k):
            for u in tenant_ids[k::CONCURRENT]:
                await aq.push(Task.create(u, Priority.NORMAL, {"n": 1}))
        await asyncio.gather(*(producer(k) for k in range(CONCURRENT)))
    done(c0, t0)
    await aq.close()

if mode in ("asyncone", "async100", "async100off", "abatcher"):
    asyncio.run(run_async())
else:
    run_sync()
"""


def _run_child(
    src: Path, url: str, client: redis.Redis, mode: str, n: int, tag: str
) -> dict[str, float] | None:
    """The child's figures, or None when this tree cannot run ``mode``."""
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
        if mode in OPTIONAL_MODES:
            return None
        raise RuntimeError(f"child for {src} failed to start ({line!r})")
    client.config_resetstat()
    proc.stdin.write("go\n")
    proc.stdin.flush()
    result: dict[str, float] = json.loads(proc.stdout.readline())
    proc.wait()
    info = client.info("commandstats")  # script calls: FCALL and EVALSHA (ADR 41)
    both = [info.get(f"cmdstat_{name}", {}) for name in ("fcall", "evalsha")]
    stats = {"calls": sum(int(s.get("calls", 0)) for s in both)}
    stats["usec"] = sum(float(s.get("usec", 0)) for s in both)
    calls = int(stats.get("calls", 0)) or 1
    tasks = int(result.pop("tasks", n))
    result["server_us"] = float(stats.get("usec", 0)) / tasks
    result["server_us_call"] = float(stats.get("usec", 0)) / calls
    result["per_call"] = tasks / calls
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
        if c.startswith(("EVALSHA", "FCALL")):
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
    parser.add_argument(
        "--modes", help="comma-separated modes to run (default all): " + ",".join(LABELS)
    )
    opts = parser.parse_args()
    here = Path(opts.new) if opts.new else Path(__file__).resolve().parents[1] / "src"
    trees = {"new": here}
    if opts.compare:
        trees = {"old": Path(opts.compare), "new": here}
    scale = 5 if opts.quick else 1
    sizes = {
        "one": 4_000 // scale,
        "batch": 50_000 // scale,
        "queue": 4_000 // scale,
        "batcher": 20_000 // scale,
        "asyncone": 4_000 // scale,
        "async100": 20_000 // scale,
        "async100off": 8_000 // scale,
        "abatcher": 20_000 // scale,
        "claim": 20_000 // scale,
    }
    if opts.modes:
        wanted = [m.strip() for m in opts.modes.split(",") if m.strip()]
        unknown = [m for m in wanted if m not in sizes]
        if unknown:
            parser.error(f"unknown mode(s) {unknown}; known: {', '.join(sizes)}")
        sizes = {m: sizes[m] for m in wanted}
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
                    if res is not None:
                        results.setdefault((name, mode), []).append(res)
        client.close()
    _report(opts.rounds, trees, sizes, results)


LABELS = {
    "one": "backend one",
    "batch": "backend batch",
    "queue": "queue one",
    "batcher": "batcher",
    "asyncone": "async one",
    "async100": "async 100",
    "async100off": "async 100 off",
    "abatcher": "async batcher",
    "claim": "claim 100",
}


def _report(
    rounds: int,
    trees: dict[str, Path],
    sizes: dict[str, int],
    results: dict[tuple[str, str], list[dict[str, float]]],
) -> None:
    print(f"median of {rounds} rounds, {TENANTS} active tenants, no unique keys/limits")
    print(
        f"{'':<14} {'tree':<4} {'tasks/s':>9} {'x one':>6} {'tasks/call':>10}"
        f" {'client us/task':>15} {'server us/task':>15}"
    )
    med: dict[tuple[str, str], dict[str, float]] = {}
    for mode in sizes:
        for name in trees:
            rows = results.get((name, mode))
            if not rows:
                print(f"{LABELS[mode]:<14} {name:<4} {'n/a':>9}")
                continue
            m = {k: statistics.median(row[k] for row in rows) for k in rows[0]}
            med[(name, mode)] = m
    for mode in sizes:
        for name in trees:
            m_ = med.get((name, mode))
            if m_ is None:
                continue
            low = min(row["server_us"] for row in results[(name, mode)])
            base = med.get((name, "queue"))
            ratio = f"{m_['rate'] / base['rate']:.2f}" if base and mode != "claim" else "-"
            print(
                f"{LABELS[mode]:<14} {name:<4} {m_['rate']:>9,.0f} {ratio:>6}"
                f" {m_['per_call']:>10.1f} {m_['cpu_us']:>15.1f} {m_['server_us']:>15.1f}"
                f"  (least {low:.1f})"
            )
    if "old" in trees:
        print("new / old:")
        for mode in sizes:
            o, n_ = med.get(("old", mode)), med.get(("new", mode))
            if o is None or n_ is None:
                continue
            print(
                f"  {LABELS[mode]:<14} rate x{n_['rate'] / o['rate']:.2f}"
                f"  client us x{n_['cpu_us'] / o['cpu_us']:.2f}"
                f"  server us x{n_['server_us'] / o['server_us']:.2f}"
            )


if __name__ == "__main__":
    main()
