"""``durability="replicated"`` on a ``redis.asyncio`` cluster client: the waiter takes its one
connection from the node that owns the queue's slot, sends the script and the ``WAIT`` there,
and gives the connection back to that node (ADR 33; the sync face is in test_durability.py).

The 3-master cluster has no replica, so every wait runs out: each write raises
NotReplicatedError after it was applied.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
import redis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster

from fairque_core import Message, NotReplicatedError, Priority, QueueConfig
from fairque_redis.backends.backend_async import AsyncRedisBackend
from fairque_redis.durability.modes import Durability

SHORT_MS = 50


def _msg(task_id: str, tenant: str) -> Message:
    return Message(task_id=task_id, tenant=tenant, priority=Priority.NORMAL, body=b"{}")


def _waits(client: Any) -> int:
    """Calls of WAIT the server has run (INFO commandstats)."""
    return int(client.info("commandstats").get("cmdstat_wait", {}).get("calls", 0))


@pytest.mark.redis
@pytest.mark.cluster
def test_async_cluster_waits_on_the_node_of_the_queue(valkey_cluster: Any) -> None:
    queue = f"dur-{uuid.uuid4().hex[:8]}"
    probe = RedisCluster.from_url(valkey_cluster.url)
    owner = probe.get_node_from_key(f"fq:{{{queue}}}:x")
    nodes = {node.name: redis.Redis(host=node.host, port=node.port) for node in probe.get_nodes()}
    before = {name: _waits(client) for name, client in nodes.items()}
    writes = 4

    async def main() -> int:
        # one connection per node: a connection the waiter took and did not give back would
        # leave the owner none, and the next command there would raise MaxConnectionsError
        # (redis-py's ClusterNode.acquire_connection)
        backend = AsyncRedisBackend.from_url(
            valkey_cluster.url,
            cluster=True,
            config=QueueConfig(name=queue),
            durability=Durability("replicated", timeout_ms=SHORT_MS),
            max_connections=1,
        )
        try:
            client = backend.client
            assert isinstance(client, AsyncRedisCluster)
            await client.initialize()
            node = client.get_node_from_key(f"fq:{{{queue}}}:x")
            assert node is not None
            assert node.name == owner.name
            assert node.max_connections == 1
            # the library is loaded on the owner first: a write's wait then needs no
            # second connection there (a load goes through the client while the waiter
            # holds its own)
            assert (await backend.stats())["pushed"] == 0
            for n in range(writes):
                with pytest.raises(NotReplicatedError) as caught:
                    await backend.push(_msg(f"t{n}", tenant=f"u{n}"))
                assert caught.value.result == [True]
            # the stats read runs on the owner too, after the last wait: that connection is back
            return int((await backend.stats())["pushed"])
        finally:
            await backend.close()

    assert asyncio.run(main()) == writes
    grew = {name for name, client in nodes.items() if _waits(client) != before[name]}
    assert grew == {owner.name}
    assert _waits(nodes[owner.name]) - before[owner.name] >= writes
    for client in nodes.values():
        client.close()
    probe.close()
