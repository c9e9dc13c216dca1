"""Workers at scale (issue 14): ``fairque worker --processes N`` under a supervisor that
restarts a killed child without losing a task, the live workers registry, and the worker's
HTTP port with ``/healthz`` and ``/readyz`` beside ``/metrics``."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from fairque_cli.probes import liveness, readiness
from fairque_cli.supervisor import Supervisor
from fairque_core import Priority, Task, TaskState
from fairque_core.app.worker.registry import WorkerRegistry
from fairque_redis import connect

from .conftest import child_env

pytestmark = pytest.mark.redis

HANDLERS = """
import os
import time

from fairque_core.app.worker.handlers import TaskRegistry, task

registry = TaskRegistry()


@task("poison", registry=registry)
def poison(k: int) -> int:
    with open(os.environ["RUNS_FILE"], "a", encoding="utf-8") as f:
        f.write(f"poison {os.getpid()}\\n")
    os._exit(1)  # the process dies mid-task: no finish, no fail, no release


@task("work", registry=registry)
def work(k: int) -> int:
    with open(os.environ["RUNS_FILE"], "a", encoding="utf-8") as f:
        f.write(f"{k} {os.getpid()}\\n")
    time.sleep(0.15)
    return k
"""


@pytest.fixture
def handlers(tmp_path: Path) -> Path:
    (tmp_path / "scalehandlers.py").write_text(textwrap.dedent(HANDLERS), encoding="utf-8")
    return tmp_path


def _worker(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "fairque_cli", *args],
        cwd=cwd,
        env=child_env(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _children(pid: int) -> list[int]:
    """The pids whose parent is ``pid`` (Linux /proc)."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry.name))
    return out


def _wait(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


@pytest.mark.parametrize("processes", [2, pytest.param(4, marks=pytest.mark.slow)])
def test_supervisor_restarts_a_killed_child_and_no_task_is_lost(
    server_url: str, queue_name: str, handlers: Path, tmp_path: Path, processes: int
) -> None:
    runs = tmp_path / "runs.txt"
    runs.touch()
    n = 40
    with connect(server_url, queue=queue_name) as queue:
        ids = queue.push_batch(
            [Task.create("acme", Priority.NORMAL, {"args": [k]}, name="work") for k in range(n)]
        )
        env = {"RUNS_FILE": str(runs), "FAIRQUE_QUEUE__LEASE_SECONDS": "2"}
        args = ["--url", server_url, "--queue", queue_name, "worker", "--processes", str(processes)]
        args += ["--handler", "scalehandlers:registry", "--concurrency", "2"]
        proc = _worker([*args, "--status-every", "0"], handlers, env)
        try:
            _wait(lambda: len(_children(proc.pid)) == processes, 30, "every child")
            _wait(lambda: len(runs.read_text().splitlines()) >= 6, 30, "some tasks done")
            first = sorted(_children(proc.pid))
            victim = first[0]
            os.kill(victim, signal.SIGKILL)
            _wait(lambda: len(set(_children(proc.pid)) - set(first)) == 1, 30, "a new child")
            states = lambda: [queue.get_state(t) for t in ids]  # noqa: E731
            _wait(lambda: all(s is TaskState.FINISHED for s in states()), 60, "every task")
        finally:
            proc.send_signal(signal.SIGTERM)
            _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "died (exit -9" in err
    assert "restarting in" in err
    done = Counter(int(line.split()[0]) for line in runs.read_text().splitlines())
    assert set(done) == set(range(n))  # nothing lost
    again = {k for k, c in done.items() if c > 1}
    victim_runs = {
        int(k)
        for k, pid in (line.split() for line in runs.read_text().splitlines())
        if int(pid) == victim
    }
    assert again <= victim_runs  # only what the killed child held ran twice (redelivered)


def test_a_poison_task_that_kills_its_process_ends_in_the_dlq_and_nothing_is_lost(
    server_url: str, queue_name: str, handlers: Path, tmp_path: Path
) -> None:
    """The reliability plan's R2: a handler that calls ``os._exit`` takes its worker process
    down each time it runs. The supervisor restarts the child; the reaper hands the lease out
    again after it expires, ``max_recoveries`` times, then the task goes to the DLQ as expired.
    No task of the other tenant is lost: each finishes, or, when it shared a dying process
    with the poison as often (its lease expired each time), goes to the DLQ as expired too.
    The queue cannot tell which task of a dead process killed it; docs/delivery.md says so."""
    runs = tmp_path / "runs.txt"
    runs.touch()
    n = 30
    with connect(server_url, queue=queue_name) as queue:
        [bad] = queue.push_batch([Task.create("mallory", payload={"args": [0]}, name="poison")])
        ids = queue.push_batch(
            [Task.create("acme", payload={"args": [k]}, name="work") for k in range(n)]
        )
        env = {
            "RUNS_FILE": str(runs),
            "FAIRQUE_QUEUE__LEASE_SECONDS": "1",
            "FAIRQUE_QUEUE__MAX_RECOVERIES": "1",
        }
        args = ["--url", server_url, "--queue", queue_name, "worker", "--processes", "2"]
        args += ["--handler", "scalehandlers:registry", "--concurrency", "2"]
        proc = _worker([*args, "--status-every", "0"], handlers, env)
        ended = (TaskState.FINISHED, TaskState.FAILED)
        try:
            _wait(lambda: queue.get_state(bad) is TaskState.FAILED, 60, "the poison in the DLQ")
            states = lambda: [queue.get_state(t) for t in ids]  # noqa: E731
            _wait(lambda: all(s in ended for s in states()), 60, "every other task ended")
            final = dict(zip(ids, states(), strict=True))
            dlq = {e.original_task.task_id: e for e in queue.list_dlq(limit=100)}
        finally:
            proc.send_signal(signal.SIGTERM)
            _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert dlq[bad].failure_type.value == "expired"
    lines = [line.split() for line in runs.read_text().splitlines()]
    # run once, and once more after its one recovery: two children died of it
    assert sum(1 for what, _ in lines if what == "poison") == 2
    assert err.count("died (exit 1") == 2
    # nothing lost: every other task finished, or went to the DLQ as expired (it shared both
    # dying processes with the poison: a claimed task there, running or buffered)
    collateral = {t for t, state in final.items() if state is TaskState.FAILED}
    assert set(dlq) == collateral | {bad}
    assert all(dlq[t].failure_type.value == "expired" for t in collateral)
    assert len(collateral) < n // 2
    done = Counter(int(what) for what, _ in lines if what != "poison")
    finished = {t for t, state in final.items() if state is TaskState.FINISHED}
    assert len(finished) == n - len(collateral)
    assert len(done) >= len(finished)  # every finished task ran
    poison_pids = {int(pid) for what, pid in lines if what == "poison"}
    again = {k for k, c in done.items() if c > 1}
    dying = {int(what) for what, pid in lines if what != "poison" and int(pid) in poison_pids}
    assert again <= dying  # only what a dying child held ran twice


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never a proxy


def _get(url: str) -> tuple[int, str]:
    try:
        with _DIRECT.open(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_probes_metrics_and_the_workers_registry(
    server_url: str, queue_name: str, handlers: Path, tmp_path: Path
) -> None:
    pytest.importorskip("prometheus_client")
    port = _free_port()
    env = {"RUNS_FILE": str(tmp_path / "runs.txt")}
    args = ["--url", server_url, "--queue", queue_name, "worker", "--id", "probe-w"]
    args += ["--handler", "scalehandlers:registry", "--metrics-port", str(port)]
    proc = _worker([*args, "--status-every", "0"], handlers, env)
    base = f"http://127.0.0.1:{port}"
    try:
        _wait(lambda: _get_or_none(base + "/readyz") == 200, 30, "/readyz 200")
        code, body = _get(base + "/healthz")
        assert code == 200
        assert json.loads(body)["worker_id"] == "probe-w"
        code, body = _get(base + "/metrics")
        assert code == 200
        assert "# TYPE" in body
        assert _get(base + "/nope")[0] == 404
        with connect(server_url, queue=queue_name) as queue:
            _wait(lambda: _ids(queue) == ["probe-w"], 15, "the worker's record")
            [info] = WorkerRegistry(queue.backend).list()
            assert (info.state, info.pid, info.stale) == ("running", proc.pid, False)
            assert info.host == socket.gethostname()
    finally:
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    with connect(server_url, queue=queue_name) as queue:
        assert _ids(queue) == []  # a clean stop removes the record


def _ids(queue: Any) -> list[str]:
    return [w.worker_id for w in WorkerRegistry(queue.backend).list()]


def _get_or_none(url: str) -> int | None:
    try:
        return _get(url)[0]
    except OSError:
        return None


def test_probe_rules() -> None:
    assert liveness({"state": "running"})
    assert liveness({"state": "stopping"})
    assert not liveness({"state": "stopped"})
    assert readiness({"state": "running", "backing_off": False})
    assert not readiness({"state": "running", "backing_off": True})
    assert not readiness({"state": "stopping"})
    assert not readiness({"state": "new"})


def test_a_child_that_refuses_its_arguments_is_not_restarted() -> None:
    """Exit status 2 is a usage error: a restart would meet it again, so the slot is done and
    the supervisor ends with status 1 (it restarted such a child for ever)."""
    started = time.monotonic()
    supervisor = Supervisor(
        2, lambda k: [sys.executable, "-c", "import sys; sys.exit(2)"], backoff_first=0.05
    )
    assert supervisor.run() == 1
    assert time.monotonic() - started < 10
    assert supervisor.pids == []


HANG = """
import os
import time

from fairque_core.app.worker.handlers import TaskRegistry, task

registry = TaskRegistry()


@task("hang", registry=registry)
def hang(k: int) -> int:
    with open(os.environ["RUNS_FILE"], "a", encoding="utf-8") as f:
        f.write(f"hang {os.getpid()}\\n")
    while True:  # never looks at its context: only ending its process stops it
        time.sleep(1)


@task("work", registry=registry)
def work(k: int) -> int:
    with open(os.environ["RUNS_FILE"], "a", encoding="utf-8") as f:
        f.write(f"work {os.getpid()}\\n")
    return k
"""


@pytest.mark.slow  # about 15 s: two children start and stop
def test_a_terminating_cancel_ends_the_child_running_the_task_and_it_is_replaced(
    server_url: str, queue_name: str, tmp_path: Path
) -> None:
    """ADR 76: ``fairque task cancel --terminate`` of a non-cooperative thread handler under
    ``--processes``: the child running it ends (within a heartbeat interval), the supervisor
    starts a new one at once, which runs the next task; the task stays canceled, ran once."""
    (tmp_path / "hanghandlers.py").write_text(textwrap.dedent(HANG), encoding="utf-8")
    runs = tmp_path / "runs.txt"
    runs.touch()
    lines = lambda: runs.read_text().splitlines()  # noqa: E731
    with connect(server_url, queue=queue_name) as queue:
        [stuck] = queue.push_batch([Task.create("acme", payload={"args": [0]}, name="hang")])
        env = {"RUNS_FILE": str(runs), "FAIRQUE_WORKER__HEARTBEAT_INTERVAL_SECONDS": "0.5"}
        args = ["--url", server_url, "--queue", queue_name, "worker", "--processes", "2"]
        args += ["--handler", "hanghandlers:registry", "--concurrency", "1"]
        proc = _worker([*args, "--status-every", "0"], tmp_path, env)
        try:
            _wait(lambda: len(lines()) == 1, 30, "the hanging task to start")
            _wait(lambda: len(_children(proc.pid)) == 2, 30, "every child")
            first = int(lines()[0].split()[1])  # the child running it
            command = ["--url", server_url, "--queue", queue_name, "task", "cancel"]
            cancel = subprocess.run(
                [sys.executable, "-m", "fairque_cli", *command, stuck.task_id, "--terminate"],
                env=child_env(),
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
            assert cancel.returncode == 0, cancel.stderr
            asked = time.monotonic()
            _wait(lambda: first not in _children(proc.pid), 10, "the child to end")
            ended = time.monotonic() - asked
            _wait(lambda: len(_children(proc.pid)) == 2, 10, "a new child")
            queue.push(Task.create("acme", payload={"args": [1]}, name="work"))
            _wait(lambda: len(lines()) == 2, 30, "the next task")
            assert queue.get_state(stuck.task_id) is TaskState.CANCELED
        finally:
            proc.send_signal(signal.SIGTERM)
            _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    print(f"the child ended {ended:.2f} s after the cancel returned")
    assert ended < 2.0
    assert "ended for a canceled task" in err
    assert [line.split()[0] for line in lines()] == ["hang", "work"]  # ran once, not retried
    assert int(lines()[1].split()[1]) != first
