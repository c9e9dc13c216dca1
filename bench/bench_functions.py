"""Scripts as Redis Functions vs EVALSHA (ADR 41), A/B in one run on an embedded Valkey.

    uv run --no-sync python bench/bench_functions.py [--rounds N] [--quick]

Each round runs every workload once with ``scripts=functions`` and once with ``scripts=eval``
(the order alternates from round to round), each on a queue of its own: push one by one, push
batches of 100, claim+finish one task at a time (1,000 active tenants), and a thread Worker
(no-op handler, 16 slots) draining 3,000 tasks. For each it prints the client rate and the
server's µs per script call from ``INFO commandstats`` (``cmdstat_fcall`` + ``cmdstat_evalsha``,
reset before each run), per round and the median ratio functions/eval. The machine this is
run on is shared and noisy: read the ratios, which are taken in the same minute, not the
absolute figures.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Callable

import redis

from fairque_core import FairQueue, Message, Priority, Task, TaskHandler, Worker, WorkerConfig
from fairque_redis import connect
from fairque_redis.backends.backend import RedisBackend
from fairque_redis.servers.embedded import EmbeddedValkey

MODES = ("functions", "eval")


class Noop(TaskHandler):
    def process_task(self, task: Task) -> object:
        return None


def script_usec(client: redis.Redis) -> tuple[int, float]:
    """Script calls since the last reset and the server's µs per call (FCALL and EVALSHA)."""
    info = client.info("commandstats")
    stats = [info.get(f"cmdstat_{name}", {}) for name in ("fcall", "evalsha")]
    calls = sum(int(s.get("calls", 0)) for s in stats)
    usec = sum(float(s.get("usec", 0)) for s in stats)
    return calls, usec / calls if calls else 0.0


def _msg(i: int, tenant: str) -> Message:
    return Message(task_id=f"m{i}", tenant=tenant, priority=Priority.NORMAL, body=b'{"n": 1}')


def _backend(url: str, mode: str, tag: str) -> RedisBackend:
    return RedisBackend.from_url(url, queue=f"bf-{tag}-{uuid.uuid4().hex[:6]}", scripts=mode)


def push_one(url: str, mode: str, n: int) -> tuple[float, Callable[[], None]]:
    backend = _backend(url, mode, "p1")
    backend.push(_msg(-1, "t0"))  # loaded, checked

    def run() -> None:
        for i in range(n):
            backend.push(_msg(i, f"t{i % 100}"))

    return n, run


def push_batch(url: str, mode: str, n: int) -> tuple[float, Callable[[], None]]:
    backend = _backend(url, mode, "pb")
    backend.push(_msg(-1, "t0"))

    def run() -> None:
        for start in range(0, n, 100):
            backend.push_batch([_msg(i, f"t{i % 100}") for i in range(start, start + 100)])

    return n, run


def claim_finish(url: str, mode: str, n: int) -> tuple[float, Callable[[], None]]:
    backend = _backend(url, mode, "cf")
    for start in range(0, n + 1000, 1000):
        backend.push_batch([_msg(i, f"t{i % 1000}") for i in range(start, start + 1000)])

    def run() -> None:
        for _ in range(n):
            [claimed] = backend.claim(worker_id="bench")
            backend.finish(claimed.message.task_id, claimed.lease.token)

    return n, run


def drain(url: str, mode: str, n: int) -> tuple[float, Callable[[], None]]:
    name = f"bf-dr-{uuid.uuid4().hex[:6]}"
    queue = connect(f"{url}?scripts={mode}", queue=name)
    for start in range(0, n, 500):
        queue.push_batch(
            [Task.create(f"u{i % 50}", payload={"i": i}) for i in range(start, start + 500)]
        )
    monitor: FairQueue = connect(f"{url}?scripts={mode}", queue=name)

    def run() -> None:
        config = WorkerConfig(id="bench", max_concurrent_tasks=16, poll_interval_seconds=0.1)
        worker = Worker(config, Noop(), queue)
        worker.start()
        while monitor.get_stats()["finished"] < n:
            time.sleep(0.005)
        worker.stop(10)
        queue.close()
        monitor.close()

    return n, run


WORKLOADS: dict[str, tuple[Callable[[str, str, int], tuple[float, Callable[[], None]]], int]] = {
    "push one": (push_one, 2_000),
    "push_batch x100": (push_batch, 10_000),
    "claim+finish": (claim_finish, 2_000),
    "worker drain": (drain, 3_000),
}


def measure(url: str, raw: redis.Redis, workload: str, mode: str, scale: int) -> dict[str, float]:
    make, n = WORKLOADS[workload]
    count, run = make(url, mode, n // scale)
    raw.config_resetstat()
    started = time.perf_counter()
    run()
    elapsed = time.perf_counter() - started
    calls, per_call = script_usec(raw)
    return {
        "rate": count / elapsed,
        "us_per_call": per_call,
        "us_per_item": per_call * calls / count,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="a fifth of the work per run")
    opts = parser.parse_args()
    scale = 5 if opts.quick else 1
    results: dict[tuple[str, str], list[dict[str, float]]] = {}
    with EmbeddedValkey() as server:
        raw = redis.Redis.from_url(server.url)
        for r in range(opts.rounds):
            order = MODES if r % 2 == 0 else MODES[::-1]
            for workload in WORKLOADS:
                for mode in order:
                    got = measure(server.url, raw, workload, mode, scale)
                    results.setdefault((workload, mode), []).append(got)
                    print(
                        f"round {r + 1} {workload:16} {mode:9}: {got['rate']:9.0f}/s, "
                        f"server {got['us_per_call']:6.1f} µs/call, "
                        f"{got['us_per_item']:6.1f} µs/item",
                        flush=True,
                    )
    print("\nmedian over rounds, and the median of the per-round ratios functions/eval:")
    for workload in WORKLOADS:
        fn, ev = results[(workload, "functions")], results[(workload, "eval")]
        row: list[str] = []
        for key, label in (
            ("rate", "rate"),
            ("us_per_call", "server µs/call"),
            ("us_per_item", "server µs/item"),
        ):
            ratio = statistics.median(
                f[key] / e[key] for f, e in zip(fn, ev, strict=True) if e[key]
            )
            row.append(
                f"{label} {statistics.median(f[key] for f in fn):.1f} vs "
                f"{statistics.median(e[key] for e in ev):.1f} (x{ratio:.2f})"
            )
        print(f"{workload:16}: " + "; ".join(row))


if __name__ == "__main__":
    main()
