"""R16, dependencies under faults: DAGs worked off while a worker is killed and the server restarts.

A Valkey with ``appendonly yes`` + ``appendfsync always`` holds diamond DAGs of depth 3 (a root,
two children depending on it, a grandchild depending on both children), pushed up front, one
batch per DAG. Two worker processes (``chaos_worker.py``: 1 s leases, reaper 0.5 s, 1 s socket
timeout, 40 ms tasks) work them off. Mid-run one worker is killed with SIGKILL (a replacement is
started), then the server is killed with SIGKILL and restarted on the same port and AOF.

Pass: every task ends FINISHED and none is left DEFERRED, no acknowledged
push is lost, and no child started before every parent's last execution ended (a parent whose
run was cut short by the kill runs again before its children); the invariant checker holds.
Printed: DAGs, tasks, executions repeated by the faults, time to drain, the worker errors seen.
"""

from __future__ import annotations

import os
import signal
import time
from collections import defaultdict
from pathlib import Path

import pytest

from fairque_core import FairQueue, QueueConfig, Task, TaskState
from fairque_redis.backends.backend import RedisBackend

from .history import History, check, read_history
from .invariants import check as check_invariants
from .procs import WorkerProcs, wait_until
from .servers import durable_server, wait_loaded

pytestmark = [pytest.mark.chaos, pytest.mark.redis]

LEASE = 1.0


def _dag(d: int) -> list[Task]:
    tenant = f"u{d % 8}"
    root = f"d{d}-r"
    kids = [f"d{d}-a", f"d{d}-b"]
    return [
        Task.create(tenant, task_id=root, payload={"sleep": 0.04}),
        *(Task.create(tenant, task_id=k, payload={"sleep": 0.04}, depends_on=[root]) for k in kids),
        Task.create(tenant, task_id=f"d{d}-g", payload={"sleep": 0.04}, depends_on=kids),
    ]


def _scenario(dags: int, tmp_path: Path) -> None:
    import redis

    queue = "r16"
    server = durable_server("valkey")
    history_path = tmp_path / "history.jsonl"
    with server:
        raw = redis.Redis.from_url(server.url)
        config = QueueConfig(name=queue, lease_seconds=LEASE)
        fq = FairQueue(RedisBackend.from_url(server.url, queue=queue, config=config))
        workers = WorkerProcs(server.url, queue, history_path)
        history = History(history_path)
        try:
            parents: dict[str, list[str]] = {}
            for d in range(dags):
                tasks = _dag(d)
                for task in tasks:
                    parents[task.task_id] = list(task.depends_on)
                    history.record("push:invoke", task.task_id)
                fq.push_batch(tasks)
                for task in tasks:
                    history.record("push:ok", task.task_id)
            total = len(parents)
            opts = {"lease": LEASE, "reaper": 0.5, "concurrency": 2, "socket_timeout": 1.0}
            first = workers.start(id="w1", **opts)
            workers.start(id="w2", **opts)
            started = time.monotonic()

            def executed() -> int:
                return sum(r["ev"] == "exec:start" for r in read_history(history_path))

            wait_until(lambda: executed() >= total // 4, 60, "a quarter of the tasks started")
            os.kill(first.pid, signal.SIGKILL)  # mid-run: it holds leases
            first.wait(timeout=10)
            killed_at = executed()
            workers.start(id="w3", **opts)
            wait_until(lambda: executed() >= total // 2, 60, "half of the tasks started")
            server.kill()
            restarted_at = executed()
            server.start()
            raw.connection_pool.disconnect()
            wait_loaded(raw)
            wait_until(lambda: fq.get_stats()["finished"] >= total, 120, "the drain", step=0.1)
            drained = time.monotonic() - started
            for proc in workers.procs:
                if proc.poll() is None:
                    workers.stop(proc)

            records = read_history(history_path)
            states = {i: str(fq.get_state(i)) for i in parents}
            verdict = check(records, states)
            first_start: dict[str, float] = {}
            last_end: dict[str, float] = defaultdict(float)
            for rec in records:
                if rec["ev"] == "exec:start":
                    first_start.setdefault(rec["id"], rec["t"])
                elif rec["ev"] == "exec:end":
                    last_end[rec["id"]] = max(last_end[rec["id"]], rec["t"])
            early = [
                (child, parent)
                for child, ps in parents.items()
                for parent in ps
                if first_start.get(child, 0.0) <= last_end.get(parent, 0.0)
            ]
            stats = fq.get_stats()
            deferred = sum(state == str(TaskState.DEFERRED) for state in states.values())
            errors = sorted({r["error"] for r in records if r["ev"] == "error"})
            print(
                f"R16: {dags} DAGs, {total} tasks; worker SIGKILLed after {killed_at} starts, "
                f"server SIGKILLed + restarted after {restarted_at}; drained in {drained:.1f}s; "
                f"{verdict.summary()}; children started early: {len(early)}; "
                f"left deferred {deferred}; worker errors {errors}"
            )
            assert verdict.lost == set()
            assert verdict.unexpected == set()
            assert set(states.values()) == {str(TaskState.FINISHED)}
            assert early == []
            assert deferred == 0
            assert stats["finished"] == total
            assert check_invariants(raw, queue) == []
        finally:
            history.close()
            workers.cleanup()
            fq.close()
            raw.close()


@pytest.mark.timeout(90)
def test_r16_dependencies_under_faults_short(tmp_path: Path) -> None:
    _scenario(dags=30, tmp_path=tmp_path)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_r16_dependencies_under_faults(tmp_path: Path) -> None:
    _scenario(dags=500, tmp_path=tmp_path)
