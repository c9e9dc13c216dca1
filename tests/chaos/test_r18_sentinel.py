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

import contextlib
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from fairque_core import Task
from fairque_redis import connect

from .history import History, check, push_until_acknowledged, read_history
from .procs import WorkerProcs, wait_until
from .sentinels import SentinelRig

pytestmark = [pytest.mark.chaos, pytest.mark.redis, pytest.mark.timeout(300)]

#: The stated bound: 1 s until the sentinels call the primary down, their election and the
#: promotion (2-5 s measured), and the clients' next connection.
SERVICE_BACK_S = 20.0


@pytest.fixture
def rig() -> Any:
    rig = SentinelRig()
    try:
        yield rig
    finally:
        rig.close()


def test_a_queue_through_sentinels_pushes_claims_and_finishes(rig: SentinelRig) -> None:
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
    rig: SentinelRig, capsys: pytest.CaptureFixture[str]
) -> None:
    from fairque_cli.main import main

    name = f"sent-{uuid.uuid4().hex[:8]}"
    with connect(rig.url, queue=name) as queue:
        for n in range(3):
            queue.push(Task.create("acme", task_id=f"t{n}"))
    assert main(["--url", rig.url, "--queue", name, "stats"]) == 0
    out = capsys.readouterr().out
    assert "3" in out


def _failover(rig: SentinelRig, tmp_path: Path, durability: str) -> dict[str, Any]:
    name = f"sent-{uuid.uuid4().hex[:8]}"
    path = tmp_path / "history.jsonl"
    history = History(path)
    workers = WorkerProcs(rig.url, name, path)
    stop = threading.Event()
    errors: list[BaseException] = []
    killed_at: list[float] = []

    def produce(n: int) -> None:
        try:
            with connect(rig.url, queue=name, durability=durability) as queue:
                k = 0
                while not stop.is_set():
                    task = Task.create(f"t{k % 5}", task_id=f"p{n}-{k}")
                    push_until_acknowledged(
                        lambda task=task: queue.push(task),  # type: ignore[misc]
                        task.task_id,
                        history,
                        pause=0.05,
                        give_up_after=60.0,
                    )
                    k += 1
        except BaseException as exc:
            errors.append(exc)

    try:
        for _ in range(2):
            workers.start(concurrency=4, lease=2.0, reaper=0.5, poll=0.05)
        threads = [threading.Thread(target=produce, args=(n,)) for n in range(2)]
        for thread in threads:
            thread.start()
        time.sleep(2.0)  # load before the kill
        old = rig.kill_primary()
        killed_at.append(time.time())
        new = rig.wait_for_new_primary(old)
        time.sleep(3.0)  # load after the failover
        stop.set()
        for thread in threads:
            thread.join(90)
        assert not errors, errors
        records = read_history(path)
        ok_ids = {r["id"] for r in records if r["ev"] == "push:ok"}

        def end_states() -> dict[str, str]:
            with connect(rig.url, queue=name) as reader:
                return {i: str(reader.get_state(i)) for i in ok_ids}

        def drained() -> bool:
            states = end_states()
            return all(s in ("finished", "TaskState.FINISHED") for s in states.values())

        with contextlib.suppress(AssertionError):  # the verdict below names what is missing
            wait_until(drained, 90.0, "the workers to finish every acknowledged task")
        states = {i: s.rsplit(".", 1)[-1].lower() for i, s in end_states().items()}
        verdict = check(read_history(path), states)
        after = [r["t"] for r in records if r["ev"] == "push:ok" and r["t"] > killed_at[0]]
        back = (min(after) - killed_at[0]) if after else float("inf")
        figures = {
            "durability": durability,
            "old_primary": old,
            "new_primary": new,
            "service_back_s": round(back, 2),
            "verdict": verdict,
        }
        print(f"R18 sentinel failover {durability}: back in {back:.2f} s; {verdict.summary()}")
        return figures
    finally:
        stop.set()
        workers.cleanup()
        history.close()


@pytest.mark.slow
def test_failover_with_replicated_durability_loses_no_acknowledged_push(
    rig: SentinelRig, tmp_path: Path
) -> None:
    figures = _failover(rig, tmp_path, "replicated")
    verdict = figures["verdict"]
    assert len(verdict.ok_pushes) > 50, verdict.summary()  # load ran on both sides of the kill
    assert verdict.lost == set(), verdict.summary()
    assert figures["service_back_s"] < SERVICE_BACK_S, figures


@pytest.mark.slow
def test_failover_in_the_default_mode_measures_the_loss(rig: SentinelRig, tmp_path: Path) -> None:
    figures = _failover(rig, tmp_path, "default")
    verdict = figures["verdict"]
    assert len(verdict.ok_pushes) > 50, verdict.summary()
    assert figures["service_back_s"] < SERVICE_BACK_S, figures
    # not asserted to be 0: asynchronous replication may lose what the replica had not got
    print(f"R18 default-mode loss: {len(verdict.lost)} of {len(verdict.ok_pushes)} acknowledged")
