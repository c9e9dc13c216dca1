"""Partitioned queues (ADR 34) on the embedded 3-master cluster: P=1 against P=3.

    uv run python bench/bench_partitions.py [--tenants 30] [--tasks 600] [--workers 3] [--rounds N]

For each P: one fresh queue, ``tenants`` x ``tasks`` no-op tasks pushed in batches (all
tenants equally weighted and backlogged; for P=3 the tenant ids are picked 1/3 per
partition), then ``workers`` worker processes drain it with claim batches of ``--count`` and
``finish_batch``. ``--rounds N`` repeats P=1 and P=3, the order flipping each round, and ends
with the median of the per-round ratios of the per-task CPU (the machine is shared: read
that). Printed per P:

- throughput (tasks per second of the drain, wall clock);
- Jain's index of the per-tenant served counts at the half-way cut (every tenant backlogged);
- claims served by each master;
- server CPU per task on each master: ``used_cpu_sys + used_cpu_user`` (INFO cpu) over the
  drain, divided by the tasks that master served (a master that served nothing shows its idle
  CPU only);
- the projection for 10 and 100 masters: with one partition per master and the measured
  per-task cost c (us), a queue's server-side ceiling is masters x 1e6 / c tasks/s (the
  client side must grow with it: more worker processes).

This machine has 2 cores shared by the three servers and the workers, so the absolute rates
are bounded by the clients; the per-task CPU per master is the figure that carries over.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import time
import uuid
from collections import Counter, defaultdict
from typing import Any

from fairque_core import Message, Priority
from fairque_redis import EmbeddedCluster
from fairque_redis.keys import KeySpace, partition_for
from fairque_redis.partitioned.backend import PartitionedBackend


def _tenants(count: int, partitions: int) -> list[str]:
    per = -(-count // partitions)
    chosen: dict[int, list[str]] = defaultdict(list)
    k = 0
    while sum(len(v) for v in chosen.values()) < count:
        name = f"tenant-{k}"
        k += 1
        n = partition_for(name, partitions)
        if len(chosen[n]) < per:
            chosen[n].append(name)
    return [t for n in range(partitions) for t in chosen[n]][:count]


def _cpu(client: Any) -> dict[str, float]:
    out: dict[str, float] = {}
    for node in client.get_primaries():
        info = client.info("cpu", target_nodes=node)
        out[node.name] = float(info["used_cpu_sys"]) + float(info["used_cpu_user"])
    return out


def _worker(url: str, queue: str, partitions: int, count: int, out: Any) -> None:
    # partitions=1 is the plain one-slot layout (one partition, no record)
    backend = PartitionedBackend.from_url(url, queue=queue, cluster=True, partitions=partitions)
    served: list[tuple[float, str]] = []
    empty = 0
    while empty < 3:
        got = backend.claim(count=count)
        if not got:
            empty += 1
            backend.wait_for_work(0.05)
            continue
        empty = 0
        backend.finish_batch([(c.message.task_id, c.lease.token, None) for c in got])
        now = time.monotonic()
        served.extend((now, c.message.tenant) for c in got)
    backend.close()
    out.put(served)


def _jain(values: list[int]) -> float:
    return sum(values) ** 2 / (len(values) * sum(v * v for v in values)) if values else 0.0


def run(cluster: EmbeddedCluster, partitions: int, args: argparse.Namespace) -> dict[str, Any]:
    from redis.cluster import RedisCluster

    queue = "bp-" + uuid.uuid4().hex[:10]
    raw = RedisCluster.from_url(cluster.url)
    masters_of: dict[int, str] = {}
    producer = PartitionedBackend.from_url(
        cluster.url, queue=queue, cluster=True, partitions=partitions
    )
    for n, keys in enumerate(producer.partition_keys()):
        masters_of[n] = raw.get_node_from_key(keys.meta).name
    if partitions == 1:
        assert producer.partition_keys()[0].prefix == KeySpace(queue).prefix
    tenants = _tenants(args.tenants, max(partitions, 1))
    for i in range(args.tasks):
        producer.push_batch(
            [
                Message(task_id=f"{t}.{i}", tenant=t, priority=Priority.NORMAL, body=b"{}")
                for t in tenants
            ]
        )
    producer.close()
    total = args.tenants * args.tasks
    before = _cpu(raw)
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [
        ctx.Process(target=_worker, args=(cluster.url, queue, partitions, args.count, out))
        for _ in range(args.workers)
    ]
    start = time.monotonic()
    for proc in procs:
        proc.start()
    served: list[tuple[float, str]] = []
    for _ in procs:
        served.extend(out.get())
    for proc in procs:
        proc.join()
    elapsed = max(t for t, _ in served) - start
    after = _cpu(raw)
    served.sort()
    cut = Counter(u for _, u in served[: total // 2])
    per_master: Counter[str] = Counter()
    for _, tenant in served:
        per_master[masters_of[partition_for(tenant, partitions) if partitions > 1 else 0]] += 1
    cpu_per_task = {
        name: (after[name] - before[name]) * 1e6 / per_master[name] if per_master[name] else None
        for name in after
    }
    for key in raw.scan_iter(match=f"fq:{{{queue}*", count=1000, target_nodes=raw.PRIMARIES):
        raw.delete(key)
    raw.close()
    return {
        "served": len(served),
        "total": total,
        "rate": len(served) / elapsed,
        "jain": _jain([cut[t] for t in tenants]),
        "per_master": {name: per_master[name] for name in after},
        "cpu_per_task": cpu_per_task,
    }


def report(results: dict[int, dict[str, Any]]) -> float | None:
    """Print one round's figures; the ratio of P=3's busiest master's per-task CPU to P=1's."""
    for p, r in results.items():
        print(
            f"\nP={p}: {r['served']}/{r['total']} served, {r['rate']:,.0f} tasks/s, "
            f"Jain at the half-way cut {r['jain']:.4f}"
        )
        for name in sorted(r["per_master"]):
            cpu = r["cpu_per_task"][name]
            share = r["per_master"][name] / r["served"]
            cost = f"{cpu:.1f} us/task" if cpu is not None else "-"
            print(f"  master {name}: {r['per_master'][name]:>7} claims ({share:6.1%}), {cost}")
    busy = [c for c in results[3]["cpu_per_task"].values() if c is not None]
    one = [c for c in results[1]["cpu_per_task"].values() if c is not None]
    if not (busy and one):
        return None
    cost = max(busy)
    print(
        f"\nper-task server CPU: P=1 {max(one):.1f} us on its one master; "
        f"P=3 at most {cost:.1f} us on each master (x{cost / max(one):.3f})"
    )
    for masters in (3, 10, 100):
        print(
            f"  projection, {masters} masters (P={masters}): server ceiling "
            f"{masters * 1e6 / cost:,.0f} tasks/s (vs {1e6 / max(one):,.0f} with P=1)"
        )
    return cost / max(one)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tenants", type=int, default=30)
    parser.add_argument("--tasks", type=int, default=600, help="tasks per tenant")
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--count", type=int, default=20, help="claim batch size")
    parser.add_argument(
        "--rounds", type=int, default=1, help="rounds of P=1 and P=3, the order flipping"
    )
    args = parser.parse_args()
    print(
        f"{args.tenants} tenants x {args.tasks} tasks, {args.workers} worker processes, "
        f"claim batches of {args.count}, 3-master embedded Valkey cluster"
    )
    ratios: list[float] = []
    jains: list[float] = []
    with EmbeddedCluster() as cluster:
        for r in range(args.rounds):
            order = (1, 3) if r % 2 == 0 else (3, 1)
            results = {p: run(cluster, p, args) for p in order}
            print(
                f"\n--- round {r + 1} (order P={order[0]}, P={order[1]}; "
                f"load {os.getloadavg()[0]:.1f})"
            )
            ratio = report({p: results[p] for p in (1, 3)})
            if ratio is not None:
                ratios.append(ratio)
            jains.append(results[3]["jain"])
    if args.rounds > 1 and ratios:
        print(
            f"\n{args.rounds} rounds: P=3's busiest master / P=1's master, per-task server CPU: "
            f"median x{statistics.median(ratios):.3f} (each: "
            + ", ".join(f"x{x:.2f}" for x in ratios)
            + f"); P=3 Jain at the half-way cut, least {min(jains):.4f}"
        )


if __name__ == "__main__":
    main()
