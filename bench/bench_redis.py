"""Throughput of the Redis backend on an embedded Valkey (prints numbers; not a test).

    uv run --no-sync python bench/bench_redis.py [--quick]

Measures, on one loopback connection: a bare EVALSHA round trip of a trivial script (the floor),
push one by one, push_batch (1000 per call), and claim+finish with 10 / 1,000 / 100,000 active
tenants over the same 200,000 queued tasks (the fair choice is O(log T), so the tenant count
should not change the rate).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import redis

from fairque_core import Message, Priority
from fairque_redis.backend import RedisBackend
from fairque_redis.embedded import EmbeddedValkey


def _msg(i: int, tenant: str) -> Message:
    return Message(task_id=f"t{i}", user_id=tenant, priority=Priority.NORMAL, body=b'{"n": 1}')


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


def push_one(url: str, n: int) -> float:
    backend = RedisBackend.from_url(url, queue="push1")
    backend.push(_msg(-1, "warm"))
    msgs = [_msg(i, f"u{i % 100}") for i in range(n)]

    def run() -> None:
        for m in msgs:
            backend.push(m)

    rate = _rate(n, run)
    backend.close()
    return rate


def push_batch(url: str, n: int, size: int = 1000) -> float:
    backend = RedisBackend.from_url(url, queue="pushn")
    backend.push(_msg(-1, "warm"))
    batches = [[_msg(i, f"u{i % 100}") for i in range(s, s + size)] for s in range(0, n, size)]

    def run() -> None:
        for batch in batches:
            backend.push_batch(batch)

    rate = _rate(n, run)
    backend.close()
    return rate


def claim_finish(url: str, tenants: int, total: int, cycles: int) -> float:
    queue = f"cf{tenants}"
    backend = RedisBackend.from_url(url, queue=queue)
    for start in range(0, total, 1000):
        backend.push_batch([_msg(i, f"tenant-{i % tenants}") for i in range(start, start + 1000)])
    assert backend.stats()["active_tenants"] == tenants

    def run() -> None:
        for _ in range(cycles):
            [c] = backend.claim(worker_id="bench")
            backend.finish(c.message.task_id, c.lease.token)

    rate = _rate(cycles, run)
    backend.close()
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller runs")
    opts = parser.parse_args()
    scale = 5 if opts.quick else 1
    with EmbeddedValkey() as server:
        client = redis.Redis.from_url(server.url)
        results: list[tuple[str, float, str]] = []
        bare = bare_evalsha(client, 20_000 // scale)
        results.append(("bare EVALSHA (trivial script)", bare, "calls/s"))
        one = push_one(server.url, 20_000 // scale)
        results.append(("push one by one", one, "tasks/s"))
        batch = push_batch(server.url, 200_000 // scale)
        results.append(("push_batch (1000 per call)", batch, "tasks/s"))
        client.flushall()
        by_tenants: dict[int, float] = {}
        for tenants in (10, 1_000, 100_000):
            rate = claim_finish(server.url, tenants, 200_000, 10_000 // scale)
            by_tenants[tenants] = rate
            results.append((f"claim+finish, {tenants:,} active tenants", rate, "tasks/s"))
            client.flushall()
        client.close()
    width = max(len(name) for name, _, _ in results)
    for name, rate, unit in results:
        print(f"{name:<{width}}  {rate:>10,.0f} {unit}")
    print()
    print(f"push one by one / bare EVALSHA        = {one / bare:.2f}  (target >= 0.80)")
    print(f"push_batch                            = {batch:,.0f}/s (target >= 40,000)")
    ratio = by_tenants[100_000] / by_tenants[10]
    print(f"claim+finish 100k tenants / 10 tenants = {ratio:.2f}  (target >= 0.90)")


if __name__ == "__main__":
    main()
