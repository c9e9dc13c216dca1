"""Partitioned queues (ADR 34) on real servers: the 3-master cluster and one Valkey.

- P=3 on the cluster, 30 equally weighted backlogged tenants (10 per partition, chosen by
  ``partition_for``): at a cut point while every tenant is still backlogged Jain's index over
  the served counts is >= 0.98, each master served a third of the claims (+-10 %), every
  tenant's tasks came in push order, and the drain loses nothing;
- the partitions of a queue lie on three different masters (the slot-range placement);
- a different P on a non-empty queue is refused (ConfigurationError), on an empty one accepted;
- P=1 is the one-slot layout: no key outside ``fq:{<queue>}:``, no partitions record;
- the asyncio face (``aconnect(partitions=3)``) pushes, claims and finishes.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter, defaultdict
from typing import Any

import pytest
from redis.cluster import RedisCluster

from fairque_core import Message, Priority
from fairque_core.domain.errors import ConfigurationError, LeaseLostError
from fairque_redis import aconnect, connect
from fairque_redis.keys import KeySpace, partition_for
from fairque_redis.partitioned.backend import PartitionedBackend

pytestmark = [pytest.mark.redis]

P = 3
TENANTS_PER_PARTITION = 10
TASKS_PER_TENANT = 40
CLAIM_COUNT = 5


def _queue() -> str:
    return "part-" + uuid.uuid4().hex[:12]


def _tenants(counts: tuple[int, ...] = (TENANTS_PER_PARTITION,) * P) -> list[str]:
    """``counts[n]`` tenant ids in partition n of P=3 (tenants hash where they hash: the ids
    are picked, not moved)."""
    chosen: dict[int, list[str]] = defaultdict(list)
    k = 0
    while any(len(chosen[n]) < counts[n] for n in range(P)):
        name = f"tenant-{k}"
        k += 1
        n = partition_for(name, P)
        if len(chosen[n]) < counts[n]:
            chosen[n].append(name)
    return [name for n in range(P) for name in chosen[n]]


def _jain(values: list[int]) -> float:
    return sum(values) ** 2 / (len(values) * sum(v * v for v in values))


def _message(task_id: str, tenant: str) -> Message:
    return Message(task_id=task_id, tenant=tenant, priority=Priority.NORMAL, body=b"{}")


def _drop(client: Any, backend: PartitionedBackend) -> None:
    for keys in [KeySpace(backend.queue), *backend.partition_keys()]:
        node = client.get_node_from_key(keys.meta)
        found = list(client.scan_iter(match=keys.prefix + "*", count=1000, target_nodes=node))
        for key in found:
            client.delete(key)


@pytest.mark.cluster
def test_three_partitions_on_the_cluster_are_fair_spread_ordered_and_lose_nothing(
    valkey_cluster: Any,
) -> None:
    raw = RedisCluster.from_url(valkey_cluster.url)
    backend = PartitionedBackend.from_url(
        valkey_cluster.url, queue=_queue(), cluster=True, partitions=P
    )
    try:
        masters = [raw.get_node_from_key(keys.meta).name for keys in backend.partition_keys()]
        assert len(set(masters)) == P  # each partition on its own master

        tenants = _tenants()
        pushed: dict[str, list[str]] = {
            t: [f"{t}.{i}" for i in range(TASKS_PER_TENANT)] for t in tenants
        }
        for i in range(TASKS_PER_TENANT):  # interleaved, in batches of one task per tenant
            assert all(backend.push_batch([_message(pushed[t][i], t) for t in tenants]))

        served: Counter[str] = Counter()
        per_master: Counter[str] = Counter()
        order: dict[str, list[str]] = defaultdict(list)
        cut: dict[str, int] | None = None
        cut_masters: Counter[str] | None = None
        total = len(tenants) * TASKS_PER_TENANT
        while sum(served.values()) < total:
            got = backend.claim(count=CLAIM_COUNT)
            assert got, "the queue ran dry before every task was served"
            for claimed in got:
                tenant = claimed.message.tenant
                served[tenant] += 1
                order[tenant].append(claimed.message.task_id)
                per_master[masters[partition_for(tenant, P)]] += 1
            assert backend.finish_batch([(c.message.task_id, c.lease.token, None) for c in got])
            if cut is None and sum(served.values()) >= total // 2:
                cut = {t: served[t] for t in tenants}
                cut_masters = Counter(per_master)

        assert cut is not None
        assert cut_masters is not None
        assert max(cut.values()) < TASKS_PER_TENANT  # everyone still backlogged at the cut
        assert _jain(list(cut.values())) >= 0.98, cut
        claims_at_cut = sum(cut_masters.values())
        for master in set(masters):
            share = cut_masters[master] / claims_at_cut
            assert abs(share - 1 / 3) <= 0.1 / 3, (master, share)
        assert order == pushed  # per-tenant FIFO, every task exactly once
        stats = backend.stats()
        assert stats["pushed"] == stats["claimed"] == stats["finished"] == total
        assert (stats["ready"], stats["leased"], stats["scheduled"], stats["dlq"]) == (0, 0, 0, 0)
    finally:
        _drop(raw, backend)
        backend.close()
        raw.close()


@pytest.mark.cluster
def test_a_different_partition_count_is_refused_on_a_non_empty_queue(valkey_cluster: Any) -> None:
    name = _queue()
    url = valkey_cluster.url
    with connect(url, queue=name, cluster=True, partitions=P) as queue:
        queue.backend.push(_message_task("alice"))
        for other in (1, 2, 4):
            with pytest.raises(ConfigurationError, match="non-empty queue is refused"):
                connect(url, queue=name, cluster=True, partitions=other).close()
        [claimed] = queue.backend.claim()
        queue.backend.finish(claimed.message.task_id, claimed.lease.token)
    # empty now: another P re-creates it
    with connect(url, queue=name, cluster=True, partitions=2) as again:
        assert again.backend.partitions == 2  # type: ignore[attr-defined]
        assert again.backend.stats()["pushed"] == 0
    raw = RedisCluster.from_url(url)
    try:
        assert raw.get(KeySpace(name).partition_count) == b"2"
    finally:
        raw.close()


def test_partitions_with_unequal_tenant_counts_are_served_by_their_active_weight(
    valkey_server: Any,
) -> None:
    """4, 8 and 16 backlogged tenants in the three partitions: a picker that asked the
    partitions in turn would give the 4 tenants 4x the share of the 16 (Jain about 0.7);
    weighted by active tenants every tenant gets about 1/28."""
    backend = PartitionedBackend.from_url(valkey_server.url, queue=_queue(), partitions=P)
    try:
        tenants = _tenants((4, 8, 16))
        for i in range(20):
            backend.push_batch([_message(f"{t}.{i}", t) for t in tenants])
        served: Counter[str] = Counter()
        while sum(served.values()) < 10 * len(tenants):
            got = backend.claim(count=CLAIM_COUNT)
            served.update(c.message.tenant for c in got)
            backend.finish_batch([(c.message.task_id, c.lease.token, None) for c in got])
        assert max(served.values()) < 20
        assert _jain([served[t] for t in tenants]) >= 0.98, served
        backend.purge_all()
    finally:
        backend.close()


def _message_task(tenant: str) -> Message:
    return _message("task-" + uuid.uuid4().hex[:8], tenant)


def test_one_partition_is_the_one_slot_layout(valkey_server: Any) -> None:
    import redis

    name = _queue()
    raw = redis.Redis.from_url(valkey_server.url)
    try:
        with connect(valkey_server.url, queue=name, partitions=1) as queue:
            queue.backend.push(_message_task("alice"))
            keys = {k.decode() for k in raw.scan_iter(match=f"fq:{{{name}*", count=1000)}
            assert keys
            assert all(k.startswith(f"fq:{{{name}}}:") for k in keys)
            assert raw.get(KeySpace(name).partition_count) is None
            with pytest.raises(ConfigurationError):
                connect(valkey_server.url, queue=name, partitions=3).close()
    finally:
        for key in raw.scan_iter(match=f"fq:{{{name}*", count=1000):
            raw.delete(key)
        raw.close()


def test_the_asyncio_face_pushes_claims_and_finishes(valkey_server: Any) -> None:
    async def scenario() -> None:
        queue = await aconnect(valkey_server.url, queue=_queue(), partitions=P)
        try:
            tenants = _tenants()[:: TENANTS_PER_PARTITION // 2]
            for tenant in tenants:
                await queue.backend.push(_message_task(tenant))
            assert await queue.backend.wait_for_work(1.0)
            seen: set[str] = set()
            while len(seen) < len(tenants):
                got = await queue.backend.claim(count=2)
                assert got
                for claimed in got:
                    seen.add(claimed.message.tenant)
                    await queue.backend.finish(claimed.message.task_id, claimed.lease.token)
            assert seen == set(tenants)
            assert (await queue.backend.stats())["finished"] == len(tenants)
            await queue.backend.purge_all()
        finally:
            await queue.close()

    asyncio.run(scenario())


def test_replicated_durability_is_refused_for_a_partitioned_queue(valkey_server: Any) -> None:
    """Not supported yet (ADR 33): refused by connect and by from_config alike, never ignored."""
    from fairque_core import QueueConfig, RedisConfig

    name = f"pd{uuid.uuid4().hex[:8]}"
    with pytest.raises(ConfigurationError, match="partitioned"):
        connect(valkey_server.url, queue=name, partitions=3, durability="replicated")
    redis_config = RedisConfig(url=valkey_server.url, durability="replicated")
    with pytest.raises(ConfigurationError, match="partitioned"):
        PartitionedBackend.from_config(redis_config, QueueConfig(name=name, partitions=3))


def test_one_id_in_two_partitions_each_handle_reads_its_own_tenants_task(
    valkey_server: Any,
) -> None:
    """ADR 60 on a partitioned queue: ids are unique per partition (ADR 34), so two tenants
    of different partitions may each hold "report-1". Each push's handle reads its own
    tenant's task (``tenant_backend``), never the other's result, whichever partition the
    backend last saw the id in; a push of the id for a tenant of the same partition as a live
    holder is still refused."""
    from fairque_core import Task, TaskIdConflictError

    tenants: dict[int, str] = {}
    k = 0
    while len(tenants) < P:
        tenants.setdefault(partition_for(f"t{k}", P), f"t{k}")
        k += 1
    first, second = tenants[0], tenants[1]
    with connect(valkey_server.url, queue=_queue(), partitions=P) as queue:
        mine = queue.push(Task.create(first, payload={"n": 1}, task_id="report-1"))
        theirs = queue.push(Task.create(second, payload={"n": 2}, task_id="report-1"))
        for task in queue.claim_batch(5):
            queue.finish(task, {"tenant": task.tenant})
        assert mine.get(timeout=5) == {"tenant": first}
        assert theirs.get(timeout=5) == {"tenant": second}
        same = next(f"s{j}" for j in range(1000) if partition_for(f"s{j}", P) == 0)
        with pytest.raises(TaskIdConflictError):
            queue.push(Task.create(same, payload={}, task_id="report-1"))


def test_the_lease_map_holds_only_the_leases_in_flight(valkey_server: Any) -> None:
    """A lease call goes to the partition its claim came from, by its token (ADR 60). The
    backend forgets a token when its lease ends, by finish, finish_batch, fail or release, or
    when the call finds it lost, so a long-running worker's map holds the leases it has in
    flight, not its last claims."""
    with connect(valkey_server.url, queue=_queue(), partitions=P) as queue:
        backend = queue.backend
        assert isinstance(backend, PartitionedBackend)
        for tenant in _tenants()[:: TENANTS_PER_PARTITION // 2]:
            for _ in range(2):
                backend.push(_message_task(tenant))
        claimed = backend.claim(count=12)
        assert len(claimed) == 12
        assert len(backend._leases) == 12
        one, two, three, four, *rest = claimed
        backend.finish(one.message.task_id, one.lease.token)
        backend.fail(two.message.task_id, two.lease.token, retry_delay=None)
        backend.release(three.message.task_id, three.lease.token)
        assert len(backend._leases) == 9
        done = backend.finish_batch([(c.message.task_id, c.lease.token, None) for c in rest])
        assert done == [True] * len(rest)
        assert set(backend._leases) == {four.lease.token}
        # a lease that ran out and went back to the queue: the finish is refused, and forgotten
        backend.heartbeat(four.message.task_id, four.lease.token, lease_seconds=0.1)
        time.sleep(0.3)
        assert backend.requeue_expired() == 1
        with pytest.raises(LeaseLostError):
            backend.finish(four.message.task_id, four.lease.token)
        assert backend._leases == {}
        backend.purge_all()


@pytest.mark.parametrize("held", ["intake", "pause", "schedule", "worker"])
def test_a_queue_holding_more_than_tasks_keeps_its_partition_count(
    valkey_server: Any, held: str
) -> None:
    """Changing P re-creates the queue empty, so it is refused while the recorded layout holds
    what the new one would lose or not see: acknowledged intake entries, a pause of the queue,
    cron schedules, or a live worker that opened it with the recorded P (each was lost or
    stranded before). Once that is gone, the change is accepted."""
    from fairque_core.app.worker.registry import WorkerRegistry

    name = _queue()
    url = valkey_server.url
    with connect(url, queue=name, partitions=4) as queue:
        registry = WorkerRegistry(queue.backend, "w1", queue=name)
        if held == "intake":
            queue.backend.push_intake([_message_task("alice")])  # type: ignore[attr-defined]
            needle = "holds tasks"
        elif held == "pause":
            queue.pause()
            needle = "holds a pause of the queue"
        elif held == "schedule":
            queue.add_schedule("nightly", "0 3 * * *", {"tenant": "alice"})
            needle = "holds cron schedules"
        else:
            registry.beat({"state": "running"})
            needle = "holds a live worker"
        for other in (1, 2):
            with pytest.raises(ConfigurationError, match=needle):
                connect(url, queue=name, partitions=other).close()
        # what was held is still there, under the recorded layout
        if held == "intake":
            assert queue.backend.stats()["intake"] == 1
            queue.backend.ingest()  # type: ignore[attr-defined]
            [claimed] = queue.backend.claim()
            queue.backend.finish(claimed.message.task_id, claimed.lease.token)
        elif held == "pause":
            assert queue.is_paused()
            queue.resume()
        elif held == "schedule":
            assert [s.name for s in queue.list_schedules()] == ["nightly"]
            queue.remove_schedule("nightly")
        else:
            registry.remove()
    with connect(url, queue=name, partitions=2) as again:  # nothing held: accepted
        assert again.backend.partitions == 2  # type: ignore[attr-defined]
