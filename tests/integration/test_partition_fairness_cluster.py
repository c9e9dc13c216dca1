"""ADR 34's two-level bound on a real 3-master cluster, under churn (slow).

The property of ``tests/property/test_partition_fairness.py`` run through a real
``PartitionedBackend``: tenants join (weights 0.01-100), leave (purge) and change weight
between epochs; within an epoch every active tenant stays backlogged and one worker claims one
task at a time; every tenant's deficit (its fluid share w_i / W of each claimed task minus the
tasks it got) must stay within ``_partition_model.bound`` at every claim.
"""

from __future__ import annotations

import math
import random
import uuid
from collections import defaultdict
from typing import Any

import pytest

from fairque_core import Message, Priority
from fairque_redis import connect
from fairque_redis.keys import partition_for
from property._partition_model import bound, effective_weight

pytestmark = [pytest.mark.redis, pytest.mark.cluster, pytest.mark.slow]

EPOCH_CLAIMS = 40


def _weight(rng: random.Random) -> float:
    return float(f"{math.exp(rng.uniform(math.log(0.01), math.log(100.0))):.2g}")


@pytest.mark.parametrize("partitions", [3, 6])
def test_every_deficit_stays_within_the_bound_under_churn_on_the_cluster(
    valkey_cluster: Any, partitions: int
) -> None:
    rng = random.Random(partitions)
    homes: dict[str, int] = {}
    k = 0
    while len(homes) < 4 * partitions:
        name = f"tenant-{k}"
        k += 1
        if sum(1 for h in homes.values() if h == partition_for(name, partitions)) < 4:
            homes[name] = partition_for(name, partitions)
    queue_name = "pfair-" + uuid.uuid4().hex[:10]
    checked = over = 0
    worst = 0.0
    with connect(
        valkey_cluster.url, queue=queue_name, cluster=True, partitions=partitions
    ) as queue:
        backend = queue.backend
        weights: dict[str, float] = {}
        ready: dict[str, int] = defaultdict(int)
        active: set[str] = set()
        n = 0
        for _epoch in range(12):
            for name in homes:
                roll = rng.random()
                if name not in active and roll < 0.3:
                    active.add(name)
                    weights[name] = _weight(rng)
                    backend.set_tenant_weight(name, weights[name])
                elif name in active and roll < 0.2:
                    active.discard(name)
                    backend.purge_tenant(name)
                    ready[name] = 0
                elif name in active and roll < 0.35:
                    weights[name] = _weight(rng)
                    backend.set_tenant_weight(name, weights[name])
            if not active:
                name = rng.choice(list(homes))
                active.add(name)
                weights[name] = _weight(rng)
                backend.set_tenant_weight(name, weights[name])
            for name in active:  # backlogged through the epoch
                top = EPOCH_CLAIMS + 1 - ready[name]
                if top > 0:
                    batch = []
                    for _ in range(top):
                        n += 1
                        batch.append(
                            Message(
                                task_id=f"t{n}", tenant=name, priority=Priority.NORMAL, body=b"{}"
                            )
                        )
                    backend.push_batch(batch)
                    ready[name] += top
            part_w = [0.0] * partitions
            for name in active:
                part_w[homes[name]] += effective_weight(weights[name])
            total = sum(part_w)
            live = sum(1 for w in part_w if w > 0.0)
            limits = {
                t: bound(
                    share=effective_weight(weights[t]) / part_w[homes[t]],
                    partition_share=part_w[homes[t]] / total,
                    live=live,
                    tenants=sum(1 for u in active if homes[u] == homes[t]),
                    batch=1,
                )
                for t in active
            }
            deficit = dict.fromkeys(active, 0.0)
            epoch_worst = dict.fromkeys(active, 0.0)
            for _ in range(EPOCH_CLAIMS):
                got = backend.claim(count=1)
                assert len(got) == 1
                tenant = got[0].message.tenant
                ready[tenant] -= 1
                backend.finish_batch([(c.message.task_id, c.lease.token, None) for c in got])
                for t in active:
                    deficit[t] += effective_weight(weights[t]) / total
                deficit[tenant] -= 1.0
                for t in active:
                    epoch_worst[t] = max(epoch_worst[t], deficit[t])
            for t in active:
                checked += 1
                if limits[t] > 0.0:
                    worst = max(worst, epoch_worst[t] / limits[t])
                if epoch_worst[t] > limits[t] + 1e-9:
                    over += 1
        backend.purge_all()
    print(
        f"cluster P={partitions}: {checked} tenant-epochs, {over} over the bound, "
        f"worst {worst:.3f} of it"
    )
    assert over == 0
