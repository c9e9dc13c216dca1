"""What flow control (ADR 28) costs the claim, on an embedded Valkey (prints numbers; not a test).

    uv run --no-sync python bench/bench_limits.py [--quick] [--rounds N] [--backlog N]

1. claim+finish with 10,000 active tenants, two queues filled alike (4 tasks per tenant): one
   without limits, one where half the tenants are limited: a quarter capped (``max_running=1``,
   each holding one lease for the whole run, so they are out of the active set) and a quarter
   throttled (``rate=0.5/s``: each start parks the tenant for 2 s, and the claim's due-move
   step brings it back). Interleaved rounds, best of N; the ratio limited / unlimited (target
   >= 0.9).
2. a capped tenant with a large backlog (``--backlog``, default 100,000; the issue's figure is
   1,000,000) holding its one lease, beside 1,000 other tenants: claim+finish for the others,
   against the same queue where the capped tenant has 1 task queued (target: ratio ~1, the
   backlog is never looked at).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from functools import partial

import redis

from fairque_core import Message, Priority, QueueConfig
from fairque_redis.backends.backend import RedisBackend
from fairque_redis.servers.embedded import EmbeddedValkey

LEASE = 3600.0  # the held leases must outlive the run


def _msg(i: int, tenant: str, tag: str) -> Message:
    return Message(task_id=f"{tag}{i}", tenant=tenant, priority=Priority.NORMAL, body=b'{"n": 1}')


def _backend(url: str, name: str) -> RedisBackend:
    return RedisBackend.from_url(
        url, queue=name, config=QueueConfig(name=name, lease_seconds=LEASE)
    )


def _fill(backend: RedisBackend, tenants: list[str], per_tenant: int, tag: str) -> None:
    batch: list[Message] = []
    n = 0
    for _round in range(per_tenant):
        for tenant in tenants:
            batch.append(_msg(n, tenant, tag))
            n += 1
            if len(batch) == 1000:
                backend.push_batch(batch)
                batch = []
    if batch:
        backend.push_batch(batch)


def _rate(n: int, fn: Callable[[], None]) -> float:
    start = time.perf_counter()
    fn()
    return n / (time.perf_counter() - start)


def claim_finish(backend: RedisBackend, cycles: int) -> float:
    def run() -> None:
        for _ in range(cycles):
            got = backend.claim(worker_id="bench")
            if not got:
                raise SystemExit("the queue ran dry: use fewer cycles or more tasks")
            [c] = got
            backend.finish(c.message.task_id, c.lease.token)

    return _rate(cycles, run)


def server_usec(client: redis.Redis, fn: Callable[[], float]) -> tuple[float, float]:
    """Run ``fn`` (a rate) and also return the server's usec per script call during it
    (FCALL and EVALSHA together, ADR 41)."""
    client.config_resetstat()
    rate = fn()
    info = client.info("commandstats")
    stats = [info.get(f"cmdstat_{name}", {}) for name in ("fcall", "evalsha")]
    calls = sum(int(s.get("calls", 0)) for s in stats)
    return rate, sum(float(s.get("usec", 0)) for s in stats) / calls if calls else 0.0


def hold_one_each(backend: RedisBackend, tenants: list[str]) -> None:
    """Claim one task of each tenant and keep its lease: a cap of 1 then holds it."""
    for tenant in tenants:
        got = backend.claim(worker_id="holder", assigned=[tenant])
        assert got
        assert got[0].message.tenant == tenant


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller runs")
    parser.add_argument("--rounds", type=int, default=3, help="best of this many rounds")
    parser.add_argument("--backlog", type=int, default=100_000, help="the capped tenant's tasks")
    opts = parser.parse_args()
    scale = 5 if opts.quick else 1
    n_tenants = 10_000 // scale
    cycles = 3_000 // scale
    best: dict[str, float] = {}
    usec: dict[str, float] = {}

    def keep(name: str, measured: tuple[float, float]) -> None:
        rate, server_time = measured
        best[name] = max(best.get(name, 0.0), rate)
        usec[name] = min(usec.get(name, server_time), server_time)

    with EmbeddedValkey() as server:
        url = server.url
        client = redis.Redis.from_url(url)
        tenants = [f"t{i}" for i in range(n_tenants)]
        capped = tenants[: n_tenants // 4]
        throttled = tenants[n_tenants // 4 : n_tenants // 2]
        per_tenant = 4
        plain = _backend(url, "lim-none")
        limited = _backend(url, "lim-half")
        t0 = time.perf_counter()
        for backend in (plain, limited):
            _fill(backend, tenants, per_tenant, "f")
        for tenant in capped:
            limited.set_limits({"max_running": 1}, tenant=tenant)
        for tenant in throttled:
            limited.set_limits({"rate": 0.5, "burst": 1}, tenant=tenant)
        hold_one_each(limited, capped)
        hold_one_each(plain, capped)  # the same leases held, without the caps
        print(f"filled 2 x {n_tenants * per_tenant:,} tasks in {time.perf_counter() - t0:.1f} s")
        print(
            f"active tenants: no limits {plain.stats()['active_tenants']:,}, "
            f"half limited {limited.stats()['active_tenants']:,} "
            f"({len(capped):,} capped and out of the active set)"
        )

        # 2: a capped tenant with a large backlog, beside 1,000 others
        others = [f"o{i}" for i in range(1_000 // scale)]
        small = _backend(url, "hog-one")
        big = _backend(url, "hog-many")
        per_other = 2 * cycles * opts.rounds // len(others) + 2
        t0 = time.perf_counter()
        for backend, backlog in ((small, 1), (big, opts.backlog)):
            _fill(backend, others, per_other, "o")
            backend.set_limits({"max_running": 1}, tenant="hog")
            _fill(backend, ["hog"], backlog + 1, "h")
            hold_one_each(backend, ["hog"])
        fill_s = time.perf_counter() - t0
        print(f"capped tenant's backlog: {big.limit_status('hog').queued:,} tasks ({fill_s:.1f} s)")

        for _ in range(opts.rounds):  # interleaved, best of N: the load changes
            for name, backend in (
                ("plain", plain),
                ("limited", limited),
                ("small", small),
                ("big", big),
            ):
                keep(name, server_usec(client, partial(claim_finish, backend, cycles)))
        status = limited.limit_status(throttled[0])
        stats = limited.stats()
        for backend in (plain, limited, small, big):
            backend.close()
        client.close()
    print(f"best of {opts.rounds} rounds, {cycles:,} claim+finish each")
    rows = [
        (f"claim+finish, {n_tenants:,} tenants, no limits", "plain"),
        (f"claim+finish, {n_tenants:,} tenants, half limited", "limited"),
        (f"claim+finish, {len(others):,} tenants + a capped one, 1 queued", "small"),
        (f"same, the capped tenant with {opts.backlog:,} queued", "big"),
    ]
    width = max(len(name) for name, _ in rows)
    for name, key in rows:
        print(f"{name:<{width}}  {best[key]:>8,.0f} tasks/s  server {usec[key]:5.1f} us/call")
    print(
        f"limited queue: cap hits {stats.get('cap_hits', 0):,}, throttles "
        f"{stats.get('throttles', 0):,}; e.g. {throttled[0]} throttles {status.throttles}"
    )
    print()
    for label, a, b, target in (
        ("half limited / no limits         ", "limited", "plain", ">= 0.90"),
        ("capped backlog / capped, 1 queued", "big", "small", "~1"),
    ):
        rate_ratio = best[a] / best[b]
        server_ratio = usec[b] / usec[a]
        print(
            f"{label} = {rate_ratio:.2f} (server time alone: {server_ratio:.2f}; target {target})"
        )


if __name__ == "__main__":
    main()
