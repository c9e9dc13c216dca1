"""`fairque_redis.doctor.examine` on a partitioned queue (ADR 34) on the 3-master cluster: the key
spaces come from the server's record, each partition is read on the master that holds it,
a damage in one partition is found there and repaired there, and the others stay sound."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from redis.cluster import RedisCluster

from fairque_core import Message, Priority
from fairque_redis import connect
from fairque_redis.doctor.examine import check, node_client, queue_spaces
from fairque_redis.doctor.repair import repair
from fairque_redis.keys import KeySpace

pytestmark = [pytest.mark.redis]


def _message(task_id: str, tenant: str) -> Message:
    return Message(task_id=task_id, tenant=tenant, priority=Priority.NORMAL, body=b"{}")


def test_each_partition_is_checked_and_repaired_on_its_master(valkey_cluster: Any) -> None:
    name = "doc-" + uuid.uuid4().hex[:10]
    raw = RedisCluster.from_url(valkey_cluster.url)
    try:
        # before the queue is made: its one (unpartitioned) key space
        assert [keys.prefix for keys in queue_spaces(raw, name)] == [KeySpace(name).prefix]
        with connect(valkey_cluster.url, queue=name, cluster=True, partitions=3) as queue:
            queue.backend.push_batch([_message(f"m{i}", f"tenant-{i % 12}") for i in range(60)])
            spaces = queue_spaces(raw, name)
            assert [keys.prefix for keys in spaces] == [
                KeySpace(name, partition=n, partitions=3).prefix for n in range(3)
            ]
            # the three partitions lie on three masters, and each is read on its own
            masters = {raw.get_node_from_key(keys.meta).name for keys in spaces}
            assert len(masters) == 3
            for keys in spaces:  # node_client reads the partition on the master that owns it
                reader = node_client(raw, keys)
                assert reader.exists(keys.meta) == 1
                assert reader.get_connection_kwargs()["port"] == (
                    raw.get_node_from_key(keys.meta).port
                )
            assert [check(raw, keys) for keys in spaces] == [[], [], []]

            # a tenant queue of partition 1 turned into a string behind the client's back
            damaged = spaces[1]
            tenant = next(
                key.decode().rsplit(":", 1)[1]
                for key in node_client(raw, damaged).scan_iter(match=damaged.prefix + "n:*")
            )
            node_client(raw, damaged).delete(damaged.normal(tenant))
            node_client(raw, damaged).set(damaged.normal(tenant), "junk")
            found = [check(raw, keys) for keys in spaces]
            assert found[0] == []
            assert found[2] == []
            assert any(f"n:{tenant}" in line for line in found[1])

            done = repair(raw, damaged)
            assert any("deleted" in line and f"n:{tenant}" in line for line in done)
            assert [check(raw, keys) for keys in spaces] == [[], [], []]
            # the tenant's five tasks are back in its queue, from their records
            assert node_client(raw, damaged).zcard(damaged.normal(tenant)) == 5
    finally:
        raw.close()
