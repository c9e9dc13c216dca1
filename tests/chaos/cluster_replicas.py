"""A three-master Valkey cluster with one replica per master (real processes), for the cluster
failover test (issue 34). Built on :class:`EmbeddedCluster`: three more nodes meet it and each
``CLUSTER REPLICATE``\\ s one master; ``kill -9`` of a master lets its replica take over after
the node timeout.
"""

from __future__ import annotations

import time
from typing import Any

import redis

from fairque_redis.servers.cluster import ClusterNodeProcess, EmbeddedCluster
from fairque_redis.servers.embedded import find_valkey_binary

__all__ = ["ReplicatedCluster"]

NODE_TIMEOUT_MS = 2000


class ReplicatedCluster:
    def __init__(self) -> None:
        # every node with appendfsync always: WAITAOF (durability="replicated") counts only a
        # replica with an AOF, and a killed master comes back as its successor's replica
        self.cluster = EmbeddedCluster(
            node_timeout_ms=NODE_TIMEOUT_MS,
            extra_args=["--appendonly", "yes", "--appendfsync", "always"],
        )
        self.replicas: list[ClusterNodeProcess] = []
        try:
            self.cluster.start()
            binary = find_valkey_binary()
            ids = [self._node_id(node.port) for node in self.cluster.nodes]
            first = self.cluster.nodes[0]
            for master_id in ids:
                replica = ClusterNodeProcess(
                    binary,
                    node_timeout_ms=NODE_TIMEOUT_MS,
                    appendonly=True,
                    extra_args=["--appendfsync", "always", "--repl-diskless-sync-delay", "0"],
                )
                replica.start()
                self.replicas.append(replica)
                with redis.Redis(port=replica.port, decode_responses=True) as client:
                    client.execute_command(
                        "CLUSTER", "MEET", first.host, first.port, first.bus_port
                    )
                    self._wait(
                        lambda c=client, m=master_id: self._knows(c, m), "the replica to meet"
                    )
                    client.execute_command("CLUSTER", "REPLICATE", master_id)
            self._wait(self._replicated, "every replica to sync")
        except BaseException:
            self.close()
            raise

    @property
    def url(self) -> str:
        return self.cluster.url

    def _node_id(self, port: int) -> str:
        with redis.Redis(port=port, decode_responses=True) as client:
            return str(client.execute_command("CLUSTER", "MYID"))

    @staticmethod
    def _knows(client: Any, node_id: str) -> bool:
        nodes = str(client.execute_command("CLUSTER", "NODES"))
        return node_id in nodes

    def _replicated(self) -> bool:
        for replica in self.replicas:
            with redis.Redis(port=replica.port, decode_responses=True) as client:
                info = client.info("replication")
                if info.get("role") != "slave" or info.get("master_link_status") != "up":
                    return False
        return True

    @staticmethod
    def _wait(cond: Any, what: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not cond():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout} s waiting for {what}")
            time.sleep(0.05)

    def master_of(self, key: str) -> int:
        """The port of the master serving ``key``'s slot now."""
        for node in [*self.cluster.nodes, *self.replicas]:
            if not node.running:
                continue
            try:
                with redis.Redis(port=node.port, socket_timeout=2.0) as client:
                    slot = int(client.execute_command("CLUSTER", "KEYSLOT", key))
                    for low, high, master, *_ in client.execute_command("CLUSTER", "SLOTS"):
                        if low <= slot <= high:
                            return int(master[1])
            except redis.RedisError:
                continue
        raise AssertionError("no node answers CLUSTER SLOTS")

    def _node(self, port: int) -> ClusterNodeProcess:
        return next(n for n in [*self.cluster.nodes, *self.replicas] if n.port == port)

    def kill(self, port: int) -> None:
        self._node(port).kill()

    def restart(self, port: int) -> None:
        """Start a killed node again on its port and data (its nodes.conf rejoins it)."""
        self._node(port).start()

    def close(self) -> None:
        for replica in self.replicas:
            replica.stop()
        self.cluster.stop()
