"""Throughput of the Redis backend on an embedded Valkey (prints numbers; not a test).

    uv run --no-sync python bench/bench_redis.py [--quick]

Measures, on one loopback connection: a bare EVALSHA round trip of a trivial script (the floor),
the floor of a push (the same writes as push.lua, hand-inlined in a minimal script),
push one by one, push_batch (1000 per call), and claim+finish with 10 / 1,000 / 100,000 active
tenants (120,000 queued tasks each; interleaved rounds, best of N, since a shared machine's
load changes from second to second) (the fair choice is O(log T), so the tenant count
should not change the rate). ``--claims-only`` runs only the claim+finish part (more rounds
fit in the same time); the active-tenant count each queue still has at the end is printed.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from functools import partial

import redis

from fairque_core import Message, Priority
from fairque_redis.backends.backend import RedisBackend
from fairque_redis.servers.embedded import EmbeddedValkey


def _msg(i: int, tenant: str, tag: str) -> Message:
    return Message(task_id=f"{tag}{i}", tenant=tenant, priority=Priority.NORMAL, body=b'{"n": 1}')


def _rate(n: int, fn: Callable[[], None]) -> float:
    start = time.perf_counter()
    fn()
    return n / (time.perf_counter() - start)


def bare_evalsha(client: redis.Redis, n: int) -> float:
    script = client.register_script("return 1")
    script(keys=["fq:{bench}:x"], args=["a"])

    def run() -> None:
        for _ in range(n):
            script(keys=["fq:{bench}:x"], args=["a"])

    return _rate(n, run)


# The writes one push of a ready task must make (task hash, tenant queue, active set, queue and
# tenant counters, queue meta), inlined with no validation, no include library and no
# idempotence or fairness bookkeeping: the server-side floor of any push with these guarantees.
FLOOR_PUSH = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local id, u = ARGV[1], ARGV[2]
local p = 'fq:{floor}:'
local key = p .. 'task:' .. id
redis.call('HMGET', key, 'st', 'exp')
local m = redis.call('HMGET', KEYS[1], 'vtime', 'seq', 'ready')
local seq = (tonumber(m[2]) or 0) + 1
redis.call('HSET', key, 'u', u, 'p', '3', 'b', ARGV[3], 'm', '', 'rc', '0', 'seq', seq,
  'st', 'queued', 'rd', now, 'due', now, 'dms', '0', 'rec', '0')
redis.call('ZADD', p .. 'n:' .. u, now, string.format('%016d', seq) .. id)
if redis.call('ZSCORE', p .. 'active:0', u) == false then
  redis.call('ZADD', p .. 'active:0', 0, u)
end
redis.call('HINCRBY', p .. 'stats', 'pushed', 1)
redis.call('HINCRBY', p .. 'ts:' .. u, 'pushed', 1)
redis.call('HSET', KEYS[1], 'seq', seq, 'ready', (tonumber(m[3]) or 0) + 1)
return {1}
"""


def floor_push(client: redis.Redis, n: int, tag: str) -> float:
    script = client.register_script(FLOOR_PUSH)
    args = [(f"{tag}{i}", f"u{i % 100}", b'{"n": 1}') for i in range(n)]

    def run() -> None:
        for a in args:
            script(keys=["fq:{floor}:meta"], args=a)

    return _rate(n, run)


def push_one(backend: RedisBackend, n: int, tag: str) -> float:
    msgs = [_msg(i, f"u{i % 100}", tag) for i in range(n)]

    def run() -> None:
        for m in msgs:
            backend.push(m)

    return _rate(n, run)


def push_batch(backend: RedisBackend, n: int, tag: str, size: int = 1000) -> float:
    batches = [[_msg(i, f"u{i % 100}", tag) for i in range(s, s + size)] for s in range(0, n, size)]

    def run() -> None:
        for batch in batches:
            backend.push_batch(batch)

    return _rate(n, run)


def server_usec(client: redis.Redis, fn: Callable[[], float]) -> tuple[float, float]:
    """Run ``fn`` (a rate) and also return the server's usec per script call during it:
    FCALL and EVALSHA together (functions by default, ADR 41; bench_functions.py for A/B)."""
    client.config_resetstat()
    rate = fn()
    info = client.info("commandstats")
    stats = [info.get(f"cmdstat_{name}", {}) for name in ("fcall", "evalsha")]
    calls = sum(int(s.get("calls", 0)) for s in stats)
    return rate, sum(float(s.get("usec", 0)) for s in stats) / calls if calls else 0.0


def fill(url: str, tenants: int, total: int) -> RedisBackend:
    backend = RedisBackend.from_url(url, queue=f"cf{tenants}")
    for start in range(0, total, 1000):
        backend.push_batch(
            [_msg(i, f"tenant-{i % tenants}", "f") for i in range(start, min(total, start + 1000))]
        )
    assert backend.stats()["active_tenants"] == tenants
    return backend


def claim_finish(backend: RedisBackend, cycles: int) -> float:
    def run() -> None:
        for _ in range(cycles):
            [c] = backend.claim(worker_id="bench")
            backend.finish(c.message.task_id, c.lease.token)

    return _rate(cycles, run)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller runs")
    parser.add_argument("--rounds", type=int, default=3, help="best of this many rounds")
    parser.add_argument(
        "--claims-only", action="store_true", help="only claim+finish at 10/1k/100k tenants"
    )
    opts = parser.parse_args()
    scale = 5 if opts.quick else 1
    tenant_counts: tuple[int, ...] = (10, 1_000, 100_000)
    best: dict[str, float] = {}
    usec: dict[str, float] = {}

    def keep(name: str, rate: float, server: float | None = None) -> None:
        best[name] = max(best.get(name, 0.0), rate)
        if server is not None:
            usec[name] = min(usec.get(name, server), server)

    with EmbeddedValkey() as server:
        client = redis.Redis.from_url(server.url)
        pusher = RedisBackend.from_url(server.url, queue="push")
        pusher.push(_msg(-1, "warm", "w"))
        # --quick fills fewer tasks, so at most one task per tenant
        tenant_counts = tuple(min(t, 120_000 // scale) for t in tenant_counts)
        queues = {t: fill(server.url, t, 120_000 // scale) for t in tenant_counts}
        for r in range(opts.rounds):
            # interleaved, best of N: the machine's load changes from second to second
            for t in tenant_counts:
                keep(
                    f"cf{t}", *server_usec(client, partial(claim_finish, queues[t], 3_000 // scale))
                )
            if opts.claims_only:
                continue
            keep("bare", *server_usec(client, partial(bare_evalsha, client, 5_000 // scale)))
            floor = partial(floor_push, client, 5_000 // scale, f"f{r}")
            keep("floor", *server_usec(client, floor))
            keep("one", *server_usec(client, partial(push_one, pusher, 5_000 // scale, f"o{r}")))
            keep(
                "batch",
                *server_usec(client, partial(push_batch, pusher, 50_000 // scale, f"b{r}")),
            )
        active = {t: queues[t].stats()["active_tenants"] for t in tenant_counts}
        for backend in (pusher, *queues.values()):
            backend.close()
        client.close()
    rows = [
        *(
            (f"claim+finish, {t:,} active tenants", best[f"cf{t}"], "tasks/s")
            for t in tenant_counts
        ),
    ]
    if not opts.claims_only:
        rows = [
            ("bare EVALSHA (trivial script)", best["bare"], "calls/s"),
            ("push floor (same writes, inlined)", best["floor"], "tasks/s"),
            ("push one by one", best["one"], "tasks/s"),
            ("push_batch (1000 per call)", best["batch"], "tasks/s"),
            *rows,
        ]
    width = max(len(name) for name, _, _ in rows)
    print(f"best of {opts.rounds} rounds")
    for name, rate, unit in rows:
        print(f"{name:<{width}}  {rate:>10,.0f} {unit}")
    left = ", ".join(f"{active[t]:,}" for t in tenant_counts)
    print(f"active tenants left at the end: {left}")
    server = "  ".join(f"{t:,} tenants {usec[f'cf{t}']:.1f}" for t in tenant_counts)
    print(
        "server script usec_per_call (FCALL/EVALSHA) during claim+finish "
        f"(claim and finish averaged): {server}"
    )
    print()
    ratio = best[f"cf{tenant_counts[-1]}"] / best["cf10"]
    server_ratio = usec["cf10"] / usec[f"cf{tenant_counts[-1]}"]
    cf_line = (
        f"claim+finish {tenant_counts[-1]:,} tenants / 10 tenants = {ratio:.2f} "
        f"(server time alone: {server_ratio:.2f})"
    )
    if opts.claims_only:
        print(f"{cf_line} (target >= 0.90)")
        return
    print("server script usec_per_call, FCALL/EVALSHA (INFO commandstats, best round):")
    print(f"  bare {usec['bare']:.1f}  push floor {usec['floor']:.1f}  ", end="")
    print(f"push one {usec['one']:.1f}  ", end="")
    print(f"push_batch {usec['batch']:.0f} per call = {usec['batch'] / 1000:.1f} per task")
    print()
    one_ratio = best["one"] / best["bare"]
    print(f"push one by one / bare EVALSHA         = {one_ratio:.2f} (target >= 0.80)")
    floor_ratio = best["floor"] / best["bare"]
    print(f"push floor / bare EVALSHA              = {floor_ratio:.2f} (the writes alone)")
    print(f"push_batch                             = {best['batch']:,.0f}/s (target >= 40,000)")
    print(f"{cf_line} (target >= 0.90)")


if __name__ == "__main__":
    main()
