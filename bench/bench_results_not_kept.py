"""Results you don't keep (ADR 78, issue 35 item 1): the same queue with results kept and not,
side by side in one run (prints numbers; not a test).

    uv run --no-sync python bench/bench_results_not_kept.py [--n 20000] [--rounds 3]

One embedded Valkey. Per round, for each mode (``keep``: ``Task.create(...)`` as always;
``none``: ``keep_result=False``), the order alternating from round to round, a fresh queue is
filled with ``--n`` no-op tasks over 100 tenants (push_batch, 1,000 per call) and drained
twice over (two fresh queues):

- ``loop``: one caller, ``claim_batch(50)`` then ``finish_and_claim`` of the 50 and the next
  50 until empty (the worker's acknowledgement shape without threads): the server's CPU per
  drained task (``used_cpu_sys + used_cpu_user`` of INFO cpu over the drain) and its time in
  FCALL per task (INFO commandstats, reset before the drain); the caller's rate;
- ``tuned``: a ``Worker`` with ``max_concurrent_tasks=100, prefetch=50`` (the ledger's tuned
  drain), timed until ``stats()["finished"]`` reaches ``--n``: rate and server CPU per task.

After each drain: the queue's keys (SCAN of its prefix) and how many of them are per-task
(``task:``, ``children:``, ``waits:``, ``done:``, ``xcom:``), and ``used_memory`` against the
empty queue's. Medians over rounds, and the medians of the per-round none/keep ratios: on this
shared 2-core machine the ratios measured side by side mean more than the absolute figures.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/, for bench_worker

from bench_worker import Noop, scripts_usec

from fairque_core import FairQueue, Task, Worker, WorkerConfig
from fairque_redis import connect
from fairque_redis.servers.embedded import EmbeddedValkey

TENANTS = 100
PER_TASK = (":task:", ":children:", ":waits:", ":done:", ":xcom:")


def server_cpu(client: Any) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


def fill(queue: FairQueue, total: int, keep: bool) -> None:
    for start in range(0, total, 1000):
        queue.push_batch(
            [
                Task.create(f"tenant-{i % TENANTS}", payload={"n": i}, keep_result=keep)
                for i in range(start, min(total, start + 1000))
            ]
        )


def queue_keys(client: Any, name: str) -> tuple[int, int]:
    keys = [k.decode() for k in client.scan_iter(match=f"fq:{{{name}}}:*", count=1000)]
    return len(keys), sum(1 for k in keys if any(p in k for p in PER_TASK))


def drain_loop(queue: FairQueue) -> None:
    tasks = queue.claim_batch(50)
    while tasks:
        _done, tasks = queue.finish_and_claim([(t, None) for t in tasks], 50)


def drain_tuned(url: str, queue: FairQueue, total: int) -> None:
    config = WorkerConfig(id="bench-nokeep", max_concurrent_tasks=100, poll_interval_seconds=0.1)
    worker = Worker(config, Noop(), connect(url, queue=queue.name), prefetch=50)
    worker.start()
    deadline = time.perf_counter() + 600
    while queue.get_stats()["finished"] < total:
        if time.perf_counter() > deadline:
            raise RuntimeError("drain timed out")
        time.sleep(0.005)
    worker.stop(10)


def one(url: str, total: int, keep: bool, how: str) -> dict[str, float]:
    name = f"nk{uuid.uuid4().hex[:10]}"
    queue = connect(url, queue=name)
    client = queue.backend.client  # type: ignore[attr-defined]
    queue.get_stats()  # the queue's fixed keys exist before the baseline
    base_memory = float(client.info("memory")["used_memory"])
    fill(queue, total, keep)
    client.config_resetstat()
    cpu = server_cpu(client)
    start = time.perf_counter()
    if how == "loop":
        drain_loop(queue)
    else:
        drain_tuned(url, queue, total)
    elapsed = time.perf_counter() - start
    cpu = server_cpu(client) - cpu
    fcall = scripts_usec(client.info("commandstats"))
    assert queue.get_stats()["finished"] == total
    keys, per_task = queue_keys(client, name)
    memory = float(client.info("memory")["used_memory"]) - base_memory
    out = {
        "rate": total / elapsed,
        "cpu_us": cpu / total * 1e6,
        "fcall_us": fcall / total,
        "keys": keys,
        "per_task_keys": per_task,
        "memory_kb": memory / 1024,
    }
    for key in client.scan_iter(match=f"fq:{{{name}}}:*", count=1000):
        client.delete(key)
    queue.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    opts = parser.parse_args()
    runs: dict[tuple[str, str], list[dict[str, float]]] = {}
    with EmbeddedValkey() as server:
        for r in range(opts.rounds):
            modes = ("keep", "none") if r % 2 == 0 else ("none", "keep")
            for how in ("loop", "tuned"):
                for mode in modes:
                    got = one(server.url, opts.n, mode == "keep", how)
                    runs.setdefault((how, mode), []).append(got)
                    print(f"round {r + 1} {how:5} {mode:4}: " + _line(got), flush=True)
    print(f"\n{opts.n} tasks over {TENANTS} tenants, {opts.rounds} rounds, load {_load()}")
    print("medians:")
    for (how, mode), got in sorted(runs.items()):
        med = {k: statistics.median(g[k] for g in got) for k in got[0]}
        print(f"  {how:5} {mode:4}: " + _line(med))
    print("none/keep, median of the per-round ratios:")
    for how in ("loop", "tuned"):
        pairs = list(zip(runs[(how, "none")], runs[(how, "keep")], strict=True))
        for key in ("rate", "cpu_us", "fcall_us", "memory_kb"):
            ratios = [a[key] / b[key] for a, b in pairs if b[key]]
            if ratios:
                print(f"  {how:5} {key:9}: x{statistics.median(ratios):.3f}")


def _line(got: dict[str, float]) -> str:
    return (
        f"{got['rate']:8.0f}/s  server CPU {got['cpu_us']:5.1f} µs/task  FCALL "
        f"{got['fcall_us']:5.1f} µs/task  keys {got['keys']:6.0f} (per task "
        f"{got['per_task_keys']:6.0f})  memory +{got['memory_kb']:8.0f} KB"
    )


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


if __name__ == "__main__":
    main()
