"""R12, cluster under load: producers and workers on the 3-master Valkey cluster.

Eight queues, named so that their hash-tag slots cover all three masters, take pushes (batches
of 20, spread over many tenants and all priorities) from two producer threads while three worker
threads claim and finish across every queue. Then:

- no call failed (a CROSSSLOT or MOVED surfacing would raise);
- every key of each queue lies in its queue's slot (``CLUSTER KEYSLOT`` of every key equals the
  slot of ``{<queue>}``), and ``CLUSTER COUNTKEYSINSLOT`` on the node owning it counts exactly
  the queue's keys: nothing of the queue sits anywhere else;
- nothing is lost: per queue ``pushed`` = acknowledged pushes = ``finished``, nothing ready or
  leased, and the invariant checker holds (read on the queue's node).

The only key outside a queue's slot is the registry ``fq:queues`` (one set for the whole
deployment, by design).
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections import Counter
from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster

from fairque_core import Message, Priority, QueueConfig
from fairque_redis.backends.backend import RedisBackend
from fairque_redis.keys import QUEUES_KEY

from .invariants import check as check_invariants

pytestmark = [pytest.mark.chaos, pytest.mark.redis, pytest.mark.cluster]

QUEUES = 8
PRODUCERS = 2
WORKERS = 3
BATCH = 20


def _queue_names(client: Any, run: str) -> list[str]:
    """``QUEUES`` names whose slots are served by every master in turn."""
    masters = sorted(f"{n.host}:{n.port}" for n in client.get_primaries())
    names: list[str] = []
    k = 0
    while len(names) < QUEUES:
        name = f"r12-{run}-{k}"
        k += 1
        node = client.get_node_from_key("{" + name + "}")
        if f"{node.host}:{node.port}" == masters[len(names) % len(masters)]:
            names.append(name)
    return names


def _scenario(cluster: Any, tasks: int, tenants: int, seed: int) -> None:
    client = RedisCluster.from_url(cluster.url)
    run = uuid.uuid4().hex[:6]
    names = _queue_names(client, run)
    backends = {
        q: RedisBackend(client, queue=q, config=QueueConfig(name=q, lease_seconds=30))
        for q in names
    }
    acked: Counter[str] = Counter()
    finished: Counter[str] = Counter()
    errors: list[str] = []
    lock = threading.Lock()
    producing = threading.Event()
    producing.set()

    def produce(part: int) -> None:
        rng = random.Random(seed + part)
        try:
            for start in range(part * BATCH, tasks, PRODUCERS * BATCH):
                queue = rng.choice(names)
                batch = [
                    Message(
                        task_id=f"p{part}-{n}",
                        tenant=f"u{rng.randrange(tenants)}",
                        priority=rng.choice(list(Priority)),
                        body=b"{}",
                    )
                    for n in range(start, min(start + BATCH, tasks))
                ]
                created = backends[queue].push_batch(batch)
                with lock:
                    acked[queue] += sum(created)
        except Exception as exc:
            errors.append(f"producer: {exc!r}")

    def work(k: int) -> None:
        order = names[k:] + names[:k]
        try:
            while True:
                got = 0
                for queue in order:
                    claimed = backends[queue].claim(worker_id=f"w{k}", count=10)
                    if claimed:
                        items = [(c.message.task_id, c.lease.token, b"1") for c in claimed]
                        done = sum(backends[queue].finish_batch(items))
                        got += len(claimed)
                        with lock:
                            finished[queue] += done
                if not got and not producing.is_set():
                    return
        except Exception as exc:
            errors.append(f"worker {k}: {exc!r}")

    started = time.monotonic()
    producers = [threading.Thread(target=produce, args=(p,)) for p in range(PRODUCERS)]
    workers = [threading.Thread(target=work, args=(k,)) for k in range(WORKERS)]
    for thread in producers + workers:
        thread.start()
    for thread in producers:
        thread.join(timeout=240)
    pushed_in = time.monotonic() - started
    producing.clear()
    for thread in workers:
        thread.join(timeout=240)
    elapsed = time.monotonic() - started
    try:
        assert errors == []
        assert sum(acked.values()) == tasks
        misplaced = 0
        per_master: Counter[str] = Counter()
        total_keys = 0
        for queue in names:
            slot = int(client.cluster_keyslot("{" + queue + "}"))
            node = client.get_node_from_key("{" + queue + "}")
            per_master[f"{node.host}:{node.port}"] += 1
            raw = redis.Redis(host=node.host, port=node.port)
            try:
                keys = list(raw.scan_iter(match=f"fq:{{{queue}}}:*", count=1000))
                strays = [
                    k
                    for other in client.get_primaries()
                    if other.port != node.port
                    for k in client.scan_iter(match=f"*{{{queue}}}*", target_nodes=other)
                ]
                assert strays == [], strays
                slots = raw.pipeline(transaction=False)
                for key in keys:
                    slots.cluster("KEYSLOT", key)
                misplaced += sum(int(s) != slot for s in slots.execute())
                assert int(raw.cluster("COUNTKEYSINSLOT", slot)) == len(keys)
                total_keys += len(keys)
                stats = backends[queue].stats()
                assert stats["pushed"] == acked[queue] == stats["finished"] == finished[queue]
                assert (stats["ready"], stats["leased"]) == (0, 0)
                assert check_invariants(raw, queue) == []
            finally:
                raw.close()
        assert misplaced == 0
        assert len(per_master) == 3
        print(
            f"R12: {tasks} tasks over {QUEUES} queues ({sorted(acked.values())}), "
            f"{tenants} tenants, {PRODUCERS} producers + {WORKERS} workers: pushed in "
            f"{pushed_in:.1f}s, drained in {elapsed:.1f}s ({tasks / elapsed:.0f} tasks/s); "
            f"queues per master {sorted(per_master.values())}; {total_keys} keys checked, "
            f"0 outside their queue's slot, 0 CROSSSLOT/errors, lost 0, invariants hold"
        )
    finally:
        for queue in names:
            keys = list(client.scan_iter(match=f"fq:{{{queue}}}:*", count=1000))
            for start in range(0, len(keys), 500):
                client.delete(*keys[start : start + 500])
        client.srem(QUEUES_KEY, *names)
        client.close()


@pytest.mark.timeout(60)
def test_r12_cluster_under_load_short(valkey_cluster: Any, seed: int) -> None:
    _scenario(valkey_cluster, tasks=2_000, tenants=300, seed=seed)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_r12_cluster_under_load(valkey_cluster: Any, seed: int) -> None:
    _scenario(valkey_cluster, tasks=20_000, tenants=1_000, seed=seed)
