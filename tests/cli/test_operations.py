"""Issue 14: the shared local server, worker logs, read-only commands, bad values, burst."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis

from fairque_cli.main import build_parser, main
from fairque_cli.worker_cmd import default_worker_id
from fairque_core import Priority, Task
from fairque_redis import connect
from fairque_redis.servers import dev_server

from .conftest import REPO, child_env, run_cli, run_cli_here

pytestmark = pytest.mark.redis

EXAMPLES = REPO / "examples"

HANDLERS = """
import time

from fairque_core.app.worker.handlers import TaskRegistry, task

registry = TaskRegistry()


@task("boom", registry=registry)
def boom() -> None:
    raise ValueError("bad input: " + "x" * 100 + " end-of-reason")


@task("slow", registry=registry)
def slow() -> str:
    time.sleep(2.0)
    return "done"
"""


@pytest.fixture
def handlers(tmp_path: Path) -> Path:
    (tmp_path / "ophandlers.py").write_text(textwrap.dedent(HANDLERS), encoding="utf-8")
    return tmp_path


def _snapshot(url: str, queue: str) -> dict[str, Any]:
    """Every key of ``queue`` with its type and content (what "changes nothing" compares)."""
    client: redis.Redis = redis.Redis.from_url(url)
    out: dict[str, Any] = {}
    try:
        for key in client.scan_iter(match=f"*{queue}*", count=1000):
            raw_kind: Any = client.type(key)
            kind = raw_kind.decode()
            if kind == "string":
                value: Any = client.get(key)
            elif kind == "hash":
                value = client.hgetall(key)
            elif kind == "zset":
                value = client.zrange(key, 0, -1, withscores=True)
            elif kind == "list":
                value = client.lrange(key, 0, -1)
            elif kind == "set":
                value = sorted(client.smembers(key))
            else:
                value = kind
            out[bytes(key).decode()] = (kind, value)
    finally:
        client.close()
    return out


# ---- the shared local server ----------------------------------------------------------------


def test_server_start_status_stop(data_dir: Path) -> None:
    proc = run_cli_here(["server", "status"])
    assert proc.returncode == 3
    assert "not running" in proc.stdout
    started = run_cli_here(["server", "start"])
    assert started.returncode == 0, started.stderr
    assert started.stdout.startswith("started redis://127.0.0.1:")
    again = run_cli_here(["server", "start"])
    assert again.stdout.startswith("already running: ")
    status = run_cli_here(["server", "status", "--json"])
    assert status.returncode == 0
    data = json.loads(status.stdout)
    assert data["running"] is True
    assert data["data_dir"] == str(data_dir)
    assert run_cli_here(["server", "url"]).stdout.strip() == data["url"]
    assert (data_dir / "valkey" / "appendonly").is_dir()  # durable: an AOF directory
    stopped = run_cli_here(["server", "stop"])
    assert stopped.returncode == 0
    assert f"pid {data['pid']}" in stopped.stdout
    assert run_cli_here(["server", "status"]).returncode == 3
    assert "not running" in run_cli_here(["server", "stop"]).stdout


def test_the_foreground_server_while_the_daemon_runs_says_so(data_dir: Path) -> None:
    """Issue 33: `fairque server` while `fairque server start`'s daemon runs."""
    started = run_cli_here(["server", "start"])
    assert started.returncode == 0, started.stderr
    url = dev_server.status().url  # type: ignore[union-attr]
    busy = run_cli_here(["server"])
    assert busy.returncode == 1
    assert f"already runs as a daemon at {url}" in busy.stderr
    assert "fairque server stop" in busy.stderr
    assert "cannot reach" not in busy.stderr
    assert dev_server.status() is not None  # left running


def test_a_restart_keeps_the_port_while_a_client_is_connected(data_dir: Path) -> None:
    """Issue 33: a stop with a client connected leaves the port's connections in TIME_WAIT /
    FIN_WAIT_2; the next start still takes the same port, so the client's retries reach it."""
    first, _ = dev_server.ensure_running()
    client: Any = redis.Redis.from_url(first.url)
    assert client.ping()
    dev_server.stop()
    second, started = dev_server.ensure_running()
    assert started
    assert second.port == first.port
    assert client.ping()  # the same client, reconnected by itself
    client.close()


def test_a_stale_state_file_is_replaced(data_dir: Path) -> None:
    (data_dir / "server.json").write_text(
        json.dumps({"url": "redis://127.0.0.1:1", "pid": 999_999_999, "port": 1}),
        encoding="utf-8",
    )
    assert dev_server.status() is None
    state, started = dev_server.ensure_running()
    assert started
    assert state.pid != 999_999_999
    assert dev_server.status() == state


def test_concurrent_first_use_starts_one_server(data_dir: Path) -> None:
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "fairque_cli", "server", "start"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=child_env(),
            cwd=REPO,
        )
        for _ in range(4)
    ]
    outs = [p.communicate(timeout=60)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert sum(o.startswith("started ") for o in outs) == 1, outs
    state = dev_server.status()
    assert state is not None
    assert all(f"pid {state.pid}" in o for o in outs)


def test_producer_and_worker_share_the_local_server_across_a_restart(data_dir: Path) -> None:
    """The README flow with no URL anywhere: a producer, a server restart, then a worker."""
    produced = subprocess.run(
        [sys.executable, str(EXAMPLES / "producer.py"), "--per-tenant", "5"],
        capture_output=True,
        text=True,
        env=child_env(),
        cwd=REPO,
        timeout=60,
        check=False,
    )
    assert produced.returncode == 0, produced.stderr
    assert "pushed 18 tasks to queue default" in produced.stdout
    assert run_cli_here(["server", "stop"]).returncode == 0
    assert run_cli_here(["server", "start"]).returncode == 0
    with connect() as queue:
        assert queue.get_stats()["ready"] == 18  # still there after the restart
    worked = run_cli_here(
        ["worker", "--handler", "tasks:registry", "--burst", "--max-seconds", "30"],
        cwd=EXAMPLES,
    )
    assert worked.returncode == 0, worked.stderr
    assert "processed 18 tasks, 0 failed" in worked.stdout
    with connect() as queue:
        stats = queue.get_stats()
        assert stats["finished"] == 18
        assert stats["ready"] == stats["leased"] == 0


def test_foreground_server_prints_its_url_and_stops_on_sigint(data_dir: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "fairque_cli", "server"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
        cwd=REPO,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("fairque local server at redis://127.0.0.1:")
        state = dev_server.status()
        assert state is not None
        assert state.foreground
        busy = run_cli_here(["server"])
        assert busy.returncode == 1
        assert "already runs in the foreground of another terminal at" in busy.stderr
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert dev_server.status() is None
    assert not (data_dir / "server.json").exists()


# ---- worker logs, dlq reasons ---------------------------------------------------------------


def test_a_failing_task_is_logged_with_its_traceback(
    server_url: str, queue_name: str, handlers: Path
) -> None:
    base = ["--url", server_url, "--queue", queue_name]
    with connect(server_url, queue=queue_name) as queue:
        task_id = queue.push(Task.create("alice", name="boom", max_retries=0))
    proc = run_cli_here(
        [*base, "worker", "--handler", "ophandlers:registry", "--burst", "--log-format", "json"],
        cwd=handlers,
    )
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in proc.stderr.splitlines() if line.startswith("{")]
    banner = records[0]["message"]
    assert queue_name in banner
    assert "concurrency 10" in banner
    failed = [r for r in records if r["level"] == "error"]
    assert len(failed) == 1
    record = failed[0]
    assert record["task_id"] == task_id
    assert record["tenant"] == "alice"
    assert record["attempt"] == 1
    assert record["exc_type"] == "ValueError"
    assert "end-of-reason" in record["exc_message"]
    assert "Traceback (most recent call last)" in record["traceback"]
    assert 'raise ValueError("bad input: "' in record["traceback"]
    assert any("dead-letter queue" in r["message"] for r in records)

    listed = run_cli_here([*base, "dlq", "list"])
    assert "end-of-reason" not in listed.stdout  # the table cuts long reasons
    for flags in (["--id", task_id], ["--full"]):
        shown = run_cli_here([*base, "dlq", "list", *flags])
        assert shown.returncode == 0
        assert "end-of-reason" in shown.stdout


def test_text_logs_and_the_shutdown_countdown(
    server_url: str, queue_name: str, handlers: Path
) -> None:
    with connect(server_url, queue=queue_name) as queue:
        queue.push(Task.create("bob", name="slow"))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fairque_cli",
            "--url",
            server_url,
            "--queue",
            queue_name,
            "worker",
            "--handler",
            "ophandlers:registry",
            "--log-level",
            "debug",
            "--status-every",
            "0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
        cwd=handlers,
    )
    try:
        deadline = time.monotonic() + 20
        with connect(server_url, queue=queue_name) as queue:
            while queue.get_stats()["leased"] == 0 and time.monotonic() < deadline:
                time.sleep(0.05)
        time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "waiting for 1 running task to finish" in err
    assert "s left" in err
    assert "started" in err  # debug: each task's start
    assert "processed 1 tasks, 0 failed" in out


# ---- read-only commands never write ---------------------------------------------------------


def test_stats_with_a_stale_config_changes_nothing(
    server_url: str, queue_name: str, tmp_path: Path
) -> None:
    with connect(server_url, queue=queue_name) as queue:
        queue.set_tenant_weight("acme", 5.0)  # what the operator set on the server
        queue.push(Task.create("acme", Priority.HIGH, {}))
    stale = tmp_path / "stale.yaml"
    stale.write_text(
        f"queue:\n  name: {queue_name}\n  tenant_weights:\n    acme: 1.0\n    other: 2.0\n",
        encoding="utf-8",
    )
    before = _snapshot(server_url, queue_name)
    for command in (["stats"], ["stats", "--json"], ["dlq", "list"]):
        proc = run_cli_here(["--url", server_url, "--config", str(stale), *command])
        assert proc.returncode == 0, proc.stderr
    assert _snapshot(server_url, queue_name) == before


# ---- worker ids, burst ----------------------------------------------------------------------


def test_default_worker_ids_are_unique() -> None:
    first, second = default_worker_id(), default_worker_id()
    assert first != second
    host, pid, rand = first.rsplit("-", 2)
    assert host
    assert pid == str(os.getpid())
    assert len(rand) == 6


def test_burst_exits_when_only_far_future_tasks_are_left(
    server_url: str, queue_name: str, handlers: Path
) -> None:
    with connect(server_url, queue=queue_name) as queue:
        queue.push(Task.create("carol", name="slow", execute_after=time.time() + 3600))
    started = time.monotonic()
    proc = run_cli_here(
        [
            "--url",
            server_url,
            "--queue",
            queue_name,
            "worker",
            "--handler",
            "ophandlers:registry",
            "--burst",
        ],
        cwd=handlers,
    )
    assert proc.returncode == 0, proc.stderr
    assert time.monotonic() - started < 20
    assert "processed 0 tasks" in proc.stdout
    assert "burst: no task is ready" in proc.stderr


# ---- cluster, bad values --------------------------------------------------------------------


def test_cli_on_a_cluster_node_needs_the_cluster_flag(valkey_cluster: Any) -> None:
    node = valkey_cluster.nodes[0].url
    queue = f"cl-{uuid.uuid4().hex[:8]}"
    proc = run_cli_here(["--url", node, "--queue", queue, "stats"])
    assert proc.returncode == 1
    assert len(proc.stderr.strip().splitlines()) == 1
    assert "--cluster" in proc.stderr
    ok = run_cli_here(["--url", node, "--queue", queue, "--cluster", "stats", "--json"])
    assert ok.returncode == 0, ok.stderr
    ok = run_cli_here(["--url", node, "--queue", queue, "stats", "--cluster", "--json"])
    assert ok.returncode == 0, ok.stderr


def test_cluster_with_a_memory_url_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """``--cluster`` on ``memory://`` was silently ignored: the run looked like a cluster's."""
    code = main(["--url", "memory://", "--cluster", "stats"])
    stderr = capsys.readouterr().err
    assert code == 1
    assert stderr.strip().splitlines() == [
        "fairque: error: --cluster needs a Redis or Valkey URL; memory:// has no cluster"
    ]
    assert main(["--url", "memory://", "stats", "--json"]) == 0


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--url", "redis://localhost:99999", "stats"], "bad port"),
        (["--url", "redis://localhost:abc", "stats"], "bad port"),
        (["--url", "redis://localhost:6379/abc", "stats"], "bad database"),
        (["--url", "http://localhost", "stats"], "unknown URL scheme"),
        (["worker", "--handler", "x:y", "--metrics-port", "99999"], "port number"),
        (["worker", "--handler", "x:y", "--status-every", "-1"], "must be >= 0"),
        (["worker", "--handler", "x:y", "--concurrency", "0"], "must be >= 1"),
        (["worker", "--handler", "x:y", "--max-seconds", "nan"], "finite"),
        (["worker", "--handler", "x:y", "--log-format", "xml"], "invalid choice"),
        (["stats", "--watch", "-1"], "must be > 0"),
        (["stats", "--watch", "0"], "must be > 0"),
        (["push", "--tenant", "a", "--delay", "-2"], "must be >= 0"),
        (["dlq", "list", "--offset", "-1"], "must be >= 0"),
        (["push", "--tenant", "a", "--priority", "9"], "must be 1-6"),
        (["push", "--tenant", "a", "--priority", "urgent"], "must be 1-6 or one of"),
        (["tenants", "--limit", "1001"], "at most 1000"),
        (["schedule", "add", "s", "* * * * *", "--tenant", "a", "--jitter", "-1"], ">= 0"),
        (["schedule", "add", "s", "* * * * *", "--tenant", "a", "--jitter", "nan"], "finite"),
        (["schedule", "add", "s", "* * * * *", "--tenant", "a", "--max-retries", "-1"], ">= 0"),
    ],
)
def test_bad_values_are_one_line_errors(
    args: list[str],
    needle: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # in this process (a child costs a second of imports per case): the same main() the
    # console script runs, with the environment a child gets (no FAIRQUE_ settings but the
    # data dir); test_a_bad_url_in_the_environment_is_one_line covers the child process
    for key in [k for k in os.environ if k.startswith("FAIRQUE_") and k != "FAIRQUE_DATA_DIR"]:
        monkeypatch.delenv(key)
    try:
        code = main(args)
    except SystemExit as exc:  # argparse refuses a value with exit status 2
        code = exc.code
    stderr = capsys.readouterr().err
    assert code == 2
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert needle in lines[0]
    assert "internal error" not in lines[0]
    assert not (Path(os.environ["FAIRQUE_DATA_DIR"]) / "server.json").exists()


def test_a_bad_url_in_the_environment_is_one_line() -> None:
    proc = run_cli(["stats"], env={"FAIRQUE_REDIS_URL": "redis://localhost:99999"})
    assert proc.returncode == 1
    assert proc.stderr.strip().startswith("fairque: error: $FAIRQUE_REDIS_URL: bad port")


# ---- docs -----------------------------------------------------------------------------------


def _flags(parser: Any, prefix: str = "") -> set[tuple[str, str]]:
    import argparse

    found: set[tuple[str, str]] = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                found |= _flags(child, f"{prefix} {name}".strip())
        for option in action.option_strings:
            if option.startswith("--") and option not in ("--help", "--version"):
                found.add((prefix, option))
    return found


#: Options every subcommand accepts, documented once under "Where the settings come from".
COMMON = ("--url", "--queue", "--config", "--cluster")

#: The commands this test holds docs/cli.md to (each section is checked for its own flags).
DOCUMENTED = (
    "demo",
    "server",
    "worker",
    "push",
    "stats",
    "dlq",
    "queues",
    "tenants",
    "tenant",
    "limits",
    "pause",
    "resume",
    "purge",
    "task",
    "workers",
    "doctor",
)


def _section(doc: str, command: str) -> str:
    start = doc.index(f"## `fairque {command}")
    end = doc.find("\n## ", start + 1)
    return doc[start : end if end != -1 else len(doc)]


def test_docs_cli_mentions_every_flag() -> None:
    doc = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    missing = sorted(
        f"{command or 'fairque'} {flag}"
        for command, flag in _flags(build_parser())
        if command.split(" ")[0] in (*DOCUMENTED, "")
        and not (command and flag in COMMON)
        and flag not in (_section(doc, command.split(" ")[0]) if command else doc)
    )
    assert not missing, f"docs/cli.md does not mention: {missing}"
    assert "exit status 2" in doc
    assert "exit 3" in _section(doc, "server")


LATE_REPLY = """
import time

from fairque_core.app.engine.queue import FairQueue
from fairque_core.app.worker.handlers import TaskRegistry, task

registry = TaskRegistry()
_claim = FairQueue.claim_batch
_late: list[bool] = []


def _late_claim(self, *args, **kwargs):
    # the first claim that brings tasks: the server has run it (its tasks are no longer
    # ready) and its reply reaches the worker a second later, five status checks on
    got = _claim(self, *args, **kwargs)
    if got and not _late:
        _late.append(True)
        time.sleep(1.0)
    return got


FairQueue.claim_batch = _late_claim


@task("note", registry=registry)
def note() -> str:
    return "ran"
"""


def test_burst_runs_every_task_pushed_before_start_even_when_a_claim_reply_is_late(
    server_url: str, queue_name: str, tmp_path: Path
) -> None:
    """While the reply of a claim the server has run is on its way, no task is ready and none
    is in the worker's hands: a burst that stopped on that sight released the tasks unrun. The
    handler module delays the worker's first reply that brings tasks by a second."""
    (tmp_path / "latereply.py").write_text(textwrap.dedent(LATE_REPLY), encoding="utf-8")
    with connect(server_url, queue=queue_name) as queue:
        queue.push_batch([Task.create("dora", name="note") for _ in range(3)])
    proc = run_cli(
        [
            *("--url", server_url, "--queue", queue_name),
            *("worker", "--handler", "latereply:registry", "--burst", "--max-seconds", "30"),
        ],
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert "processed 3 tasks, 0 failed" in proc.stdout, proc.stderr
    assert "burst: no task is ready" in proc.stderr  # it stopped on --burst, not on the clock
    with connect(server_url, queue=queue_name) as queue:
        stats = queue.get_stats()
        assert stats["finished"] == 3
        assert stats["ready"] == stats["leased"] == 0


def test_burst_stops_once_the_claims_sent_when_nothing_was_ready_are_settled() -> None:
    from fairque_cli.worker_cmd import _BurstWatch

    class Ready:
        def __init__(self, ready: int) -> None:
            self.ready = ready
            self.reads = 0

        def get_stats(self) -> dict[str, int]:
            self.reads += 1
            return {"ready": self.ready}

    def health(in_flight: int, sent: int, settled: int) -> dict[str, int]:
        return {"in_flight": in_flight, "claims_sent": sent, "claims_settled": settled}

    looks: list[dict[str, int]] = []
    queue = Ready(3)
    watch = _BurstWatch(lambda: looks.pop(0), queue)  # type: ignore[arg-type]
    assert not watch.done()  # tasks are ready
    queue.ready = 0
    looks[:] = [health(0, 4, 3), health(0, 4, 3)]  # claim 4 is out: its reply may hold tasks
    assert not watch.done()
    looks[:] = [health(1, 5, 4)]  # it brought one: the worker is busy again
    assert not watch.done()
    reads = queue.reads
    looks[:] = [health(0, 6, 5), health(0, 6, 5)]  # done; the ready count is read afresh
    assert not watch.done()
    assert queue.reads == reads + 1
    looks[:] = [health(0, 7, 6)]  # claim 6 (sent before that count) came back empty
    assert watch.done()
    assert queue.reads == reads + 1  # the count read at the mark stands
    idle = _BurstWatch(lambda: health(0, 2, 2), Ready(0))  # type: ignore[arg-type]
    assert idle.done()  # no claim out, nothing held, nothing ready: at once
