"""The producer's cost through the intake (ADR 47) against push, in one run, rounds alternating.

    uv run --no-sync python bench/bench_intake.py [--rounds R] [--count N] [--tenants T] [--ir]

One embedded Valkey, one process. Each round runs every mode once, the order rotating from
round to round, on a fresh queue whose T tenants are already active (a warm-up push each):

- ``push one``: ``RedisBackend.push(message)``, one call per task (the push script);
- ``intake one``: ``RedisBackend.push_intake([message])``, one call per task (one plain RPUSH;
  LREM + LPUSH of the wake after one that found the intake empty);
- ``huey-like``: ``LPUSH`` of a 100-byte string per task on a plain client, the floor;
- ``push batch``: ``push_batch`` of 1,000 messages per call;
- ``ingest``: ``ingest(1000)`` until the intake is empty (the entries ``intake one`` left), the
  server's side of what the intake defers.

Per mode: the rate (tasks/s, wall clock, client included), the client's CPU per task, and the
server's µs per task (INFO commandstats, reset before the timed part: FCALL, EVALSHA, RPUSH,
LPUSH, LREM). Medians over the rounds and the median of the per-round ratios against ``push
one``; on a shared machine read the ratios, not the absolute figures.

``--ir`` counts instead of timing: a Valkey under callgrind (``_callgrind.py``, counting inside
FCALL only), and per round the instructions per message of ``ingest(1000)`` of 1,000 entries
``push_intake`` left, and of ``push_batch`` of 1,000 messages (the same work done at once),
each counted after a full collection of the functions' Lua heap.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

import redis

from fairque_core import Message, Priority
from fairque_redis.backends.backend import RedisBackend
from fairque_redis.servers.embedded import EmbeddedValkey

COUNTED = ("fcall", "evalsha", "rpush", "lpush", "lrem")
MODES = ("push one", "intake one", "huey-like", "push batch", "ingest")


def server_us(admin: redis.Redis) -> float:
    stats = admin.info("commandstats")
    return sum(float(stats.get(f"cmdstat_{name}", {}).get("usec", 0)) for name in COUNTED)


def messages(tag: str, n: int, tenants: int) -> list[Message]:
    return [
        Message(task_id=f"{tag}{i}", tenant=f"u{i % tenants}", priority=Priority.NORMAL, body=b"{}")
        for i in range(n)
    ]


def huey_like(client: redis.Redis, key: str, n: int) -> None:
    body = b"x" * 100
    for _ in range(n):
        client.lpush(key, body)


def timed(admin: redis.Redis, n: int, work: Callable[[], Any]) -> dict[str, float]:
    admin.config_resetstat()
    c0, t0 = time.process_time(), time.perf_counter()
    work()
    t1, c1 = time.perf_counter(), time.process_time()
    return {"rate": n / (t1 - t0), "cpu_us": (c1 - c0) / n * 1e6, "srv_us": server_us(admin) / n}


def one_round(url: str, admin: redis.Redis, n: int, tenants: int, order: list[str]) -> dict:
    out: dict[str, dict[str, float]] = {}
    queue = f"bi-{uuid.uuid4().hex[:8]}"
    with RedisBackend.from_url(url, queue=queue) as backend:
        backend.push_batch(messages("warm", tenants, tenants))
        for mode in order:
            tag = mode.replace(" ", "")
            if mode == "push one":
                work = messages(tag, n, tenants)
                out[mode] = timed(admin, n, lambda w=work: [backend.push(m) for m in w])
            elif mode == "intake one":
                work = messages(tag, n, tenants)
                out[mode] = timed(admin, n, lambda w=work: [backend.push_intake([m]) for m in w])
                waiting = backend.intake_size()

                def drain() -> None:
                    while backend.ingest(1000).left:
                        pass

                out["ingest"] = timed(admin, waiting, drain)
            elif mode == "huey-like":
                client = redis.Redis.from_url(url)
                out[mode] = timed(admin, n, lambda c=client, k=f"hl-{queue}": huey_like(c, k, n))
                client.delete(f"hl-{queue}")
                client.close()
            elif mode == "push batch":
                work = messages(tag, n, tenants)
                chunks = [work[s : s + 1000] for s in range(0, n, 1000)]
                out[mode] = timed(admin, n, lambda c=chunks: [backend.push_batch(b) for b in c])
        backend.purge_all()
    return out


def count_ir(rounds: int, tenants: int) -> None:
    from _callgrind import GC_FUNCTION, GC_LIBRARY, TIMEOUT, callgrind_server

    n = 1000
    with callgrind_server(("fcallCommand",)) as (url, counter):
        admin = redis.Redis.from_url(url, socket_timeout=TIMEOUT)
        admin.function_load(GC_LIBRARY, replace=True)
        got: dict[str, list[float]] = {"ingest": [], "push_batch": []}
        for r in range(rounds):
            queue = f"bi-{uuid.uuid4().hex[:8]}"
            with RedisBackend.from_url(url, queue=queue, socket_timeout=TIMEOUT) as backend:
                backend.push_batch(messages(f"w{r}-", tenants, tenants))  # library and tenants
                backend.push_intake(messages(f"i{r}-", n, tenants))
                admin.fcall(GC_FUNCTION, 0)
                counter.zero()
                report = backend.ingest(n)
                got["ingest"].append(counter.dump() / n)
                assert report.ingested == n, report
                batch = messages(f"b{r}-", n, tenants)
                admin.fcall(GC_FUNCTION, 0)
                counter.zero()
                backend.push_batch(batch)
                got["push_batch"].append(counter.dump() / n)
        admin.close()
    print(f"instructions per message inside FCALL ({rounds} rounds, {tenants} active tenants)")
    for name, values in got.items():
        print(f"  {name:<11} {statistics.median(values):>10,.0f}  rounds: {values}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--count", type=int, default=3000)
    parser.add_argument("--tenants", type=int, default=100)
    parser.add_argument("--ir", action="store_true", help="count instructions (callgrind)")
    args = parser.parse_args()
    if args.ir:
        count_ir(min(args.rounds, 3), args.tenants)
        return
    rounds: list[dict[str, dict[str, float]]] = []
    with EmbeddedValkey() as server:
        admin = redis.Redis.from_url(server.url)
        timed_modes = [m for m in MODES if m != "ingest"]
        for r in range(args.rounds):
            k = r % len(timed_modes)
            order = timed_modes[k:] + timed_modes[:k]
            rounds.append(one_round(server.url, admin, args.count, args.tenants, order))
            print(
                f"round {r + 1}: " + ", ".join(f"{m} {rounds[-1][m]['rate']:,.0f}/s" for m in MODES)
            )
        admin.close()
    print(f"\n{args.rounds} rounds of {args.count} tasks, {args.tenants} tenants (medians)")
    head = ("mode", "tasks/s", "client µs", "server µs", "rate x push", "srv x push")
    print(f"{head[0]:<12} {head[1]:>10} {head[2]:>10} {head[3]:>10} {head[4]:>12} {head[5]:>11}")
    for mode in MODES:
        rate = statistics.median(r[mode]["rate"] for r in rounds)
        cpu = statistics.median(r[mode]["cpu_us"] for r in rounds)
        srv = statistics.median(r[mode]["srv_us"] for r in rounds)
        rx = statistics.median(r[mode]["rate"] / r["push one"]["rate"] for r in rounds)
        sx = statistics.median(r[mode]["srv_us"] / r["push one"]["srv_us"] for r in rounds)
        print(f"{mode:<12} {rate:>10,.0f} {cpu:>10.1f} {srv:>10.2f} {rx:>11.2f}x {sx:>10.3f}x")


if __name__ == "__main__":
    main()
