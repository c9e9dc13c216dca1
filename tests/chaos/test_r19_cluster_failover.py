"""R19, cluster failover (issue 34, item 4): a three-master cluster with one replica per master
(real processes, ``cluster-node-timeout 2000``); ``kill -9`` of the master that holds the queue
under live producers and worker processes; its replica takes over.

* ``durability="replicated"``: every acknowledged push survives, service back within
  :data:`SERVICE_BACK_S` of the kill.
* default durability: the loss measured and printed.

After the promotion the killed master's replica has no replica of its own, so a replicated
write would wait in vain: the rig restarts the killed node, which rejoins as the new master's
replica (what an operator's process supervisor does).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from .cluster_replicas import ReplicatedCluster
from .failover_run import run_failover

pytestmark = [pytest.mark.chaos, pytest.mark.redis, pytest.mark.slow, pytest.mark.timeout(300)]

#: node timeout (2 s), the replica's election, then the clients' slot refresh
SERVICE_BACK_S = 25.0


@pytest.fixture
def rig() -> Any:
    rig = ReplicatedCluster()
    try:
        yield rig
    finally:
        rig.close()


def _run(rig: ReplicatedCluster, tmp_path: Path, durability: str) -> dict[str, Any]:
    killed: list[int] = []

    def kill(queue: str) -> int:
        port = rig.master_of(f"fq:{{{queue}}}:meta")
        rig.kill(port)
        killed.append(port)
        return port

    def wait_for_new(queue: str, old: int) -> int:
        deadline = time.monotonic() + 60
        while True:
            port = rig.master_of(f"fq:{{{queue}}}:meta")
            if port != old:
                break
            assert time.monotonic() < deadline, "no replica took over"
            time.sleep(0.1)
        # the old master back, as its supervisor would restart it: it rejoins as a replica
        threading.Thread(target=rig.restart, args=(old,), daemon=True).start()
        return port

    return run_failover(
        rig.url,
        tmp_path,
        durability,
        kill=kill,
        wait_for_new=wait_for_new,
        cluster=True,
        label="R19 cluster failover",
    )


def test_cluster_failover_with_replicated_durability_loses_no_acknowledged_push(
    rig: ReplicatedCluster, tmp_path: Path
) -> None:
    figures = _run(rig, tmp_path, "replicated")
    verdict = figures["verdict"]
    assert len(verdict.ok_pushes) > 50, verdict.summary()
    assert verdict.lost == set(), verdict.summary()
    assert figures["service_back_s"] < SERVICE_BACK_S, figures


def test_cluster_failover_in_the_default_mode_measures_the_loss(
    rig: ReplicatedCluster, tmp_path: Path
) -> None:
    figures = _run(rig, tmp_path, "default")
    verdict = figures["verdict"]
    assert len(verdict.ok_pushes) > 50, verdict.summary()
    assert figures["service_back_s"] < SERVICE_BACK_S, figures
    print(f"R19 default-mode loss: {len(verdict.lost)} of {len(verdict.ok_pushes)} acknowledged")
