"""A real three-master cluster on loopback, built from the embedded Valkey binary.

No ``redis-cli`` is needed: slots are assigned with ``CLUSTER ADDSLOTSRANGE`` and the nodes joined
with ``CLUSTER MEET`` through redis-py. Used by the tests' cluster backend and by anyone who wants
to try fairque on a cluster locally.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from fairque_redis.servers.embedded import (
    ServerProcess,
    ServerStartError,
    find_valkey_binary,
)

if TYPE_CHECKING:
    import redis
    from redis.cluster import ClusterNode

__all__ = ["CLUSTER_SLOT_RANGES", "ClusterNodeProcess", "EmbeddedCluster"]

CLUSTER_SLOT_RANGES: tuple[tuple[int, int], ...] = ((0, 5460), (5461, 10922), (10923, 16383))


# --------------------------------------------------------------------------------------------
# A three-master cluster


class ClusterNodeProcess(ServerProcess):
    """One cluster-enabled server; its cluster bus gets its own free port (``--cluster-port``).

    An explicit bus port avoids the default ``port + 10000``, which can exceed 65535 or be
    taken when the client port comes from the ephemeral range.
    """

    kind = "cluster node"

    def __init__(
        self,
        binary: str | os.PathLike[str],
        *,
        node_timeout_ms: int = 2000,
        appendonly: bool = False,
        extra_args: Sequence[str] = (),
        startup_timeout: float = 15.0,
        stop_timeout: float = 5.0,
    ) -> None:
        super().__init__(
            binary,
            appendonly=appendonly,
            extra_args=extra_args,
            startup_timeout=startup_timeout,
            stop_timeout=stop_timeout,
            dir_prefix="fairque-cluster-node-",
        )
        self.node_timeout_ms = node_timeout_ms

    @property
    def bus_port(self) -> int:
        if not self._extra_ports:
            raise RuntimeError("cluster node has not been started")
        return self._extra_ports[0]

    def _extra_port_count(self) -> int:
        return 1

    def _server_args(self) -> list[str]:
        return [
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            str(self.node_timeout_ms),
            "--cluster-port",
            str(self.bus_port),
        ]


class EmbeddedCluster:
    """A real three-master cluster (no replicas) built from the Valkey binary.

    Slots are assigned with ``CLUSTER ADDSLOTSRANGE`` as in :data:`CLUSTER_SLOT_RANGES`, the nodes
    are joined with ``CLUSTER MEET``, and :meth:`start` returns once every node reports
    ``cluster_state:ok`` and sees all 16384 slots served by the three masters.

    >>> with EmbeddedCluster() as cluster:           # doctest: +SKIP
    ...     RedisCluster(startup_nodes=cluster.startup_nodes).set("{q}:a", 1)
    """

    size = 3

    def __init__(
        self,
        *,
        binary: str | os.PathLike[str] | None = None,
        node_timeout_ms: int = 2000,
        extra_args: Sequence[str] = (),
        startup_timeout: float = 15.0,
        converge_timeout: float = 30.0,
        stop_timeout: float = 5.0,
    ) -> None:
        path = find_valkey_binary() if binary is None else Path(binary)
        self.converge_timeout = converge_timeout
        self.nodes: tuple[ClusterNodeProcess, ...] = tuple(
            ClusterNodeProcess(
                path,
                node_timeout_ms=node_timeout_ms,
                extra_args=extra_args,
                startup_timeout=startup_timeout,
                stop_timeout=stop_timeout,
            )
            for _ in range(self.size)
        )

    @property
    def running(self) -> bool:
        return all(node.running for node in self.nodes)

    @property
    def ports(self) -> tuple[int, ...]:
        return tuple(node.port for node in self.nodes)

    @property
    def url(self) -> str:
        """URL of the first node; ``RedisCluster.from_url`` discovers the others from it."""
        return self.nodes[0].url

    @property
    def urls(self) -> tuple[str, ...]:
        return tuple(node.url for node in self.nodes)

    @property
    def startup_nodes(self) -> list[ClusterNode]:
        """Every node, ready for ``RedisCluster(startup_nodes=...)``."""
        from redis.cluster import ClusterNode

        return [
            ClusterNode(node.host, node.port)  # type: ignore[no-untyped-call]
            for node in self.nodes
        ]

    def start(self) -> EmbeddedCluster:
        """Start the nodes, assign the slots, join them and wait for the cluster to converge."""
        if self.running:
            return self
        try:
            for node in self.nodes:
                node.start()
            self._form()
            self._wait_converged()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop every node (SIGTERM, then SIGKILL) and remove their directories."""
        for node in self.nodes:
            node.stop()

    def __enter__(self) -> EmbeddedCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"ports={self.ports}" if self.running else "stopped"
        return f"<{type(self).__name__} {state}>"

    # ---- internals --------------------------------------------------------------------------

    def _form(self) -> None:
        import redis

        first = self.nodes[0]
        for node, (low, high) in zip(self.nodes, CLUSTER_SLOT_RANGES, strict=True):
            with redis.Redis(host=node.host, port=node.port, socket_timeout=5.0) as client:
                _command(client, "CLUSTER", "ADDSLOTSRANGE", low, high)
        with redis.Redis(host=first.host, port=first.port, socket_timeout=5.0) as client:
            for other in self.nodes[1:]:
                _command(client, "CLUSTER", "MEET", other.host, other.port, other.bus_port)

    def _wait_converged(self) -> None:
        import redis

        deadline = time.monotonic() + self.converge_timeout
        problem = "not checked yet"
        clients = [
            redis.Redis(host=node.host, port=node.port, socket_timeout=2.0, decode_responses=True)
            for node in self.nodes
        ]
        try:
            while time.monotonic() < deadline:
                problem = ""
                for node, client in zip(self.nodes, clients, strict=True):
                    try:
                        problem = _cluster_problem(client)
                    except redis.RedisError as exc:
                        problem = f"{exc!r}"
                    if problem:
                        problem = f"node {node.port}: {problem}"
                        break
                if not problem:
                    return
                time.sleep(0.05)
        finally:
            for client in clients:
                client.close()
        tails = "\n".join(f"[node {n.port}]\n{n.log_tail(10)}" for n in self.nodes)
        raise ServerStartError(
            f"cluster of {self.size} masters did not converge within "
            f"{self.converge_timeout:.1f} s ({problem})",
            tails,
        )


def _cluster_problem(client: redis.Redis) -> str:
    """Why a node does not see a healthy three-master cluster yet ("" when it does)."""
    reply = _command(client, "CLUSTER", "INFO")
    if isinstance(reply, dict):
        fields = {str(key): str(value) for key, value in reply.items()}
    else:
        fields = dict(
            line.split(":", 1)
            for line in str(reply).splitlines()
            if ":" in line and not line.startswith("#")
        )
    if fields.get("cluster_state") != "ok":
        return f"cluster_state:{fields.get('cluster_state')}"
    if fields.get("cluster_known_nodes") != str(EmbeddedCluster.size):
        return f"knows {fields.get('cluster_known_nodes')} nodes"
    if fields.get("cluster_slots_ok") != "16384":
        return f"cluster_slots_ok:{fields.get('cluster_slots_ok')}"
    covered = 0
    masters: set[int] = set()
    for entry in _iter_slot_entries(_command(client, "CLUSTER", "SLOTS")):
        low, high, port = entry
        covered += high - low + 1
        masters.add(port)
    if covered != 16384 or len(masters) != EmbeddedCluster.size:
        return f"CLUSTER SLOTS covers {covered} slots on {len(masters)} masters"
    return ""


def _iter_slot_entries(reply: object) -> Iterator[tuple[int, int, int]]:
    """(first slot, last slot, master port) from a CLUSTER SLOTS reply, raw or parsed."""
    if isinstance(reply, dict):  # redis-py's parsed form: {(low, high): {"primary": (host, port)}}
        for (low, high), owners in reply.items():
            yield int(low), int(high), int(owners["primary"][1])
        return
    if isinstance(reply, list):
        for item in reply:
            yield int(item[0]), int(item[1]), int(item[2][1])


def _command(client: redis.Redis, *args: str | int) -> object:
    """``client.execute_command`` with a type (redis-py leaves it unannotated)."""
    return client.execute_command(*args)  # type: ignore[no-untyped-call]
