"""Client CPU per pushed and per claimed task, without the socket, for two trees side by side.

    uv run --no-sync python bench/bench_client_cost.py [--compare OLD_SRC] [--rounds N]
        [--modes backend,queue,async,claim,aclaim,intake,aintake,ibatch] [--count N]

What a push or a claim costs the client is the Python of fairque's layers and of redis-py
(packing, the pool, the reply parser); the kernel's share of a loopback ``sendall``/``recv``
is larger than either and moves with the machine's load, which hides a few µs of Python in
``bench_push.py``'s figures. Here each measurement runs in a child process (PYTHONPATH = the
tree's ``src``) that:

- talks to one embedded Valkey for its warm-up (scripts loaded, the queue registered, 100
  tenants active) and records the server's reply to one push and to one claim of 100;
- then makes the pooled connections' ``send_packed_command`` a no-op and their
  ``read_response`` return the recorded reply, so everything above the socket still runs
  (fairque's layers, redis-py's ``execute_command``, pool, packing) and nothing below it;
- runs ``--count`` tasks once to warm up, then 5 times timed (``process_time``; the least of
  the 5 is its figure: a loaded machine only adds to CPU time), then counts the function calls
  of the same work under cProfile (Python and built-in calls; deterministic, so the one figure
  here that the machine's load does not move).

Modes: ``backend`` (``RedisBackend.push`` of a ready-made Message, one by one), ``queue``
(``FairQueue.push(Task.create(...))``), ``async`` (``await AsyncFairQueue.push(Task.create(
...))``, one coroutine), ``claim`` and ``aclaim`` (``claim_batch(100)``, sync and asyncio,
decoding included: µs and calls per claimed task), ``intake`` and ``aintake``
(``FairQueue.push_intake(Task.create(...))`` one by one, sync and asyncio; the replayed reply
is an intake's length of 10**6, never a call's entry count, so no wake is raised),
``agather`` (``AsyncFairQueue.push_intake`` of 100 concurrent coroutines at a time, an
``asyncio.gather`` as ``compare.py``'s async push; the replayed read answers after one pass of
the loop, as a reply from the server would, so the pushes that arrive meanwhile are grouped by
the coalescer of ADR 35 as they are against a server), and
``ibatch`` (``FairQueue.push_intake_batch`` of 100 tasks made by ``Task.create``, per task).

The trees alternate order round by round; the report gives medians and the median of the
per-round ratios new/old (read those: the machine is shared and noisy). A replayed reply is
not a server: this measures client CPU only; ``bench_push.py`` measures the real round trip.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from _child import run_child

from fairque_redis.servers.embedded import EmbeddedValkey

MODES = (
    "backend",
    "queue",
    "async",
    "claim",
    "aclaim",
    "intake",
    "aintake",
    "agather",
    "ibatch",
)

CHILD = r"""
import asyncio, cProfile, json, pstats, sys, time
from fairque_core import AsyncFairQueue, FairQueue, Message, Priority, Task
from fairque_redis.backends.backend_async import AsyncRedisBackend
from fairque_redis.backends.backend import RedisBackend

url, queue, mode, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
TENANTS, CLAIM, REPS = 100, 100, 5

def msg(i, u):
    return Message(task_id=f"m{i}", tenant=u, priority=Priority.NORMAL, body=b'{"n": 1}')

def fill():
    return [Task.create(f"u{i % TENANTS}", Priority.NORMAL, {"n": i}) for i in range(2 * CLAIM)]

def record(conns, seen):
    # the server's replies, kept as they are read
    for conn in conns:
        real = conn.read_response
        if asyncio.iscoroutinefunction(real):
            async def read(*a, _real=real, **k):
                seen.append(await _real(*a, **k))
                return seen[-1]
        else:
            def read(*a, _real=real, **k):
                seen.append(_real(*a, **k))
                return seen[-1]
        conn.read_response = read

def replay(conns, reply, asynchronous, hop=False):
    # from here on nothing goes to the server: a send vanishes, a read answers ``reply``
    # (``hop``: after one pass of the loop, as a real reply would, so concurrent callers run)
    async def asend(*a, **k):
        return None
    async def aread(*a, **k):
        if hop:
            await asyncio.sleep(0)
        return reply
    for conn in conns:
        if asynchronous:
            conn.send_packed_command, conn.read_response = asend, aread
        else:
            conn.send_packed_command = lambda *a, **k: None
            conn.read_response = lambda *a, **k: reply

def report(cpus, calls):
    # the least of the repetitions: CPU time a noisy machine can only add to
    print(json.dumps({"cpu_us": min(cpus), "calls": calls}), flush=True)

def calls_of(prof, tasks):
    return sum(s[1] for s in pstats.Stats(prof).stats.values()) / tasks

def run_sync():
    backend = RedisBackend.from_url(url, queue=queue)
    fq = FairQueue(backend)
    backend.push_batch([msg(-1 - t, f"u{t}") for t in range(TENANTS)])
    fq.push_batch(fill())
    conns = list(backend.client.connection_pool._available_connections)
    seen = []
    record(conns, seen)
    backend.push(msg(10**9, "u0"))
    push_reply = seen[-1]
    if mode in ("intake", "ibatch"):
        push_reply = 10**6  # RPUSH's reply, an intake's length: never a call's count (no wake)
    assert len(fq.claim_batch(CLAIM)) == CLAIM
    replay(conns, seen[-1] if mode == "claim" else push_reply, asynchronous=False)
    ms = [msg(i, f"u{i % TENANTS}") for i in range(n)]  # outside the measured part

    def work():
        if mode == "backend":
            for m in ms:
                backend.push(m)
            return n
        if mode == "queue":
            for i in range(n):
                fq.push(Task.create(f"u{i % TENANTS}", Priority.NORMAL, {"n": 1}))
            return n
        if mode == "intake":
            for i in range(n):
                fq.push_intake(Task.create(f"u{i % TENANTS}", Priority.NORMAL, {"n": 1}))
            return n
        if mode == "ibatch":
            for _ in range(max(1, n // CLAIM)):
                fq.push_intake_batch(
                    [Task.create(f"u{i % TENANTS}", Priority.NORMAL, {"n": 1}) for i in range(100)]
                )
            return max(1, n // CLAIM) * CLAIM
        return sum(len(fq.claim_batch(CLAIM)) for _ in range(max(1, n // CLAIM)))

    work()  # warm-up
    cpus = []
    for _ in range(REPS):
        c0 = time.process_time()
        tasks = work()
        cpus.append((time.process_time() - c0) / tasks * 1e6)
    prof = cProfile.Profile()
    prof.enable()
    tasks = work()
    prof.disable()
    report(cpus, calls_of(prof, tasks))

async def run_async():
    backend = AsyncRedisBackend.from_url(url, queue=queue)
    aq = AsyncFairQueue(backend)
    await backend.push_batch([msg(-1 - t, f"u{t}") for t in range(TENANTS)])
    await aq.push_batch(fill())
    conns = list(backend.client.connection_pool._available_connections)
    seen = []
    record(conns, seen)
    await backend.push(msg(10**9, "u0"))
    push_reply = seen[-1]
    if mode in ("aintake", "agather"):
        push_reply = 10**6  # RPUSH's reply, an intake's length: never a call's count (no wake)
    assert len(await aq.claim_batch(CLAIM)) == CLAIM
    replay(conns, seen[-1] if mode == "aclaim" else push_reply, True, mode == "agather")

    async def work():
        if mode == "async":
            for i in range(n):
                await aq.push(Task.create(f"u{i % TENANTS}", Priority.NORMAL, {"n": 1}))
            return n
        if mode == "aintake":
            for i in range(n):
                await aq.push_intake(Task.create(f"u{i % TENANTS}", Priority.NORMAL, {"n": 1}))
            return n
        if mode == "agather":  # 100 concurrent pushes at a time, as compare.py's async_push
            for s in range(0, n, CLAIM):
                await asyncio.gather(
                    *(
                        aq.push_intake(Task.create(f"u{i % TENANTS}", Priority.NORMAL, {"n": 1}))
                        for i in range(s, min(n, s + CLAIM))
                    )
                )
            return n
        got = 0
        for _ in range(max(1, n // CLAIM)):
            got += len(await aq.claim_batch(CLAIM))
        return got

    await work()  # warm-up
    cpus = []
    for _ in range(REPS):
        c0 = time.process_time()
        tasks = await work()
        cpus.append((time.process_time() - c0) / tasks * 1e6)
    prof = cProfile.Profile()
    prof.enable()
    tasks = await work()
    prof.disable()
    report(cpus, calls_of(prof, tasks))

if mode in ("async", "aclaim", "aintake", "agather"):
    asyncio.run(run_async())
else:
    run_sync()
"""


def _child(src: Path, url: str, mode: str, n: int, tag: str) -> dict[str, float]:
    args = ["-c", CHILD, url, f"cc{tag}", mode, str(n)]
    return run_child(args, str(src), {"FAIRQUE_DISABLE_PLUGIN_AUTOLOAD": "1"})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--compare", metavar="OLD_SRC", help="another tree's src/ to run beside")
    parser.add_argument("--new", metavar="NEW_SRC", help="this tree's src/ unless given")
    parser.add_argument("--rounds", type=int, default=5, help="rounds (medians printed)")
    parser.add_argument("--count", type=int, default=3000, help="tasks per measurement")
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated modes")
    opts = parser.parse_args()
    modes = [m.strip() for m in opts.modes.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        parser.error(f"unknown mode(s) {unknown}; known: {', '.join(MODES)}")
    here = Path(opts.new) if opts.new else Path(__file__).resolve().parents[1] / "src"
    trees = {"old": Path(opts.compare), "new": here} if opts.compare else {"new": here}
    results: dict[tuple[str, str], list[dict[str, float]]] = {}
    with EmbeddedValkey() as server:
        for r in range(opts.rounds):
            order = list(trees.items())
            if r % 2:
                order.reverse()
            for mode in modes:
                for name, src in order:
                    res = _child(src, server.url, mode, opts.count, f"{name}{mode}{r}")
                    results.setdefault((name, mode), []).append(res)
    print(f"median of {opts.rounds} rounds, {opts.count} tasks each, socket replaced by replay")
    print(f"{'mode':<8} {'tree':<4} {'client us/task':>15} {'calls/task':>11}")
    for mode in modes:
        for name in trees:
            rows = results[(name, mode)]
            cpu = statistics.median(row["cpu_us"] for row in rows)
            calls = statistics.median(row["calls"] for row in rows)
            print(f"{mode:<8} {name:<4} {cpu:>15.1f} {calls:>11.1f}")
    if "old" in trees:
        print("new / old (median of the per-round ratios):")
        for mode in modes:
            pairs = list(zip(results[("old", mode)], results[("new", mode)], strict=True))
            cpu = statistics.median(n["cpu_us"] / o["cpu_us"] for o, n in pairs)
            calls = statistics.median(n["calls"] / o["calls"] for o, n in pairs)
            print(f"  {mode:<8} client us x{cpu:.2f}  calls x{calls:.2f}")


if __name__ == "__main__":
    main()
