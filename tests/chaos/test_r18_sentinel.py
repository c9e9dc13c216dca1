"""R18, Sentinel (issue 34, item 4): a queue reached through sentinels, and a failover under
live producers and workers.

The rig (``sentinels.py``) is real processes: a primary, two replicas with ``appendfsync
always`` and three sentinels (quorum 2, ``down-after-milliseconds 1000``). Producers push with
``connect(redis+sentinel://...)``; workers are ``chaos_worker.py`` processes on the same URL.
The primary gets ``kill -9``; the sentinels promote a replica; redis-py's sentinel pool finds
it on the next connection.

* ``durability="replicated"``: every acknowledged push survives (``lost == 0``), and service
  comes back within :data:`SERVICE_BACK_S` of the kill (measured figure printed).
* default durability: the loss is measured and printed, not asserted (it is the window that
  the replicated mode closes; on loopback it is usually 0 to a few tasks).
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from fairque_core import Task
from fairque_redis import connect

from .failover_run import run_failover
from .sentinels import SentinelRig

pytestmark = [pytest.mark.chaos, pytest.mark.redis, pytest.mark.timeout(300)]

#: The stated bound: 1 s until the sentinels call the primary down, their election and the
#: promotion (2-5 s measured), and the clients' next connection.
SERVICE_BACK_S = 20.0


@pytest.fixture
def rig() -> Any:
    """A rig of its own: for the tests that kill its primary."""
    rig = SentinelRig()
    try:
        yield rig
    finally:
        rig.close()


@pytest.fixture(scope="module")
def shared_rig() -> Any:
    """One rig for the tests that only use it."""
    rig = SentinelRig()
    try:
        yield rig
    finally:
        rig.close()


def test_a_queue_through_sentinels_pushes_claims_and_finishes(shared_rig: SentinelRig) -> None:
    rig = shared_rig
    name = f"sent-{uuid.uuid4().hex[:8]}"
    with connect(rig.url, queue=name) as queue:
        queue.push(Task.create("acme", task_id="t1", payload={"n": 1}))
        task = queue.claim(["acme"])
        assert task is not None
        assert task.task_id == "t1"
        queue.finish(task, result={"ok": True})
        assert queue.get_stats()["finished"] == 1
    port = rig.primary_port()
    assert port is not None
    import redis

    with redis.Redis(port=port) as primary:  # the keys live on the primary the sentinels name
        assert primary.exists(f"fq:{{{name}}}:meta") == 1


def test_the_cli_reaches_a_queue_through_sentinels(
    shared_rig: SentinelRig, capsys: pytest.CaptureFixture[str]
) -> None:
    rig = shared_rig
    from fairque_cli.main import main

    name = f"sent-{uuid.uuid4().hex[:8]}"
    with connect(rig.url, queue=name) as queue:
        for n in range(3):
            queue.push(Task.create("acme", task_id=f"t{n}"))
    assert main(["--url", rig.url, "--queue", name, "stats"]) == 0
    out = capsys.readouterr().out
    assert "3" in out


def test_the_scheduler_and_the_dashboard_work_through_sentinels(shared_rig: SentinelRig) -> None:
    """Every entry point takes the URL: the scheduler fires a schedule, the dashboard (its
    queue opened by the backend factory from a config, as ``fairque dashboard`` does) shows
    the queue."""
    from starlette.testclient import TestClient

    from fairque_core import AsyncFairQueue, FairQueueConfig
    from fairque_core.app.backend_loading import open_async_backend
    from fairque_core.app.scheduler.scheduler import Scheduler
    from fairque_dashboard import DashboardSettings, create_app

    rig = shared_rig
    name = f"sent-{uuid.uuid4().hex[:8]}"
    with connect(rig.url, queue=name) as queue:
        queue.add_schedule("every-minute", "* * * * *", {"tenant": "acme", "payload": {}})
        scheduler = Scheduler(queue, lock_seconds=2.0, poll_seconds=0.5)
        fired = scheduler.run_once((int(time.time()) // 60 + 1) * 60 + 1.0)
        assert len(fired) == 1
        assert queue.get_stats()["pushed"] == 1
    config = FairQueueConfig.from_dict({"redis": {"url": rig.url}, "queue": {"name": name}}, env={})

    async def opener() -> AsyncFairQueue:
        return AsyncFairQueue(open_async_backend(config))

    with TestClient(create_app(opener, DashboardSettings(sample_interval=0))) as client:
        page = client.get("/tenants")
        assert page.status_code == 200
        assert 'data-tenant="acme"' in page.text


def _run(rig: SentinelRig, tmp_path: Path, durability: str) -> dict[str, Any]:
    return run_failover(
        rig.url,
        tmp_path,
        durability,
        kill=lambda _queue: rig.kill_primary(),
        wait_for_new=lambda _queue, old: rig.wait_for_new_primary(old),
    )


@pytest.mark.slow
def test_failover_with_replicated_durability_loses_no_acknowledged_push(
    rig: SentinelRig, tmp_path: Path
) -> None:
    figures = _run(rig, tmp_path, "replicated")
    verdict = figures["verdict"]
    assert len(verdict.ok_pushes) > 50, verdict.summary()  # load ran on both sides of the kill
    assert verdict.lost == set(), verdict.summary()
    assert figures["service_back_s"] < SERVICE_BACK_S, figures


@pytest.mark.slow
def test_failover_in_the_default_mode_measures_the_loss(rig: SentinelRig, tmp_path: Path) -> None:
    figures = _run(rig, tmp_path, "default")
    verdict = figures["verdict"]
    assert len(verdict.ok_pushes) > 50, verdict.summary()
    assert figures["service_back_s"] < SERVICE_BACK_S, figures
    # not asserted to be 0: asynchronous replication may lose what the replica had not got
    print(f"R18 default-mode loss: {len(verdict.lost)} of {len(verdict.ok_pushes)} acknowledged")
