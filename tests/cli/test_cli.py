"""``fairque push|stats|dlq|worker`` against a real Valkey, and the one-line errors."""

from __future__ import annotations

import io
import json
import time
import uuid
from pathlib import Path

import attrs
import pytest

from fairque_cli.main import main
from fairque_core import FailureType, Priority, Task, TaskState
from fairque_redis import connect

from .conftest import REPO, run_cli_here

pytestmark = pytest.mark.redis


def cli(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(args), stdout=out)
    return code, out.getvalue()


def test_push_then_stats_shows_the_task(
    server_url: str, queue_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ("--url", server_url, "--queue", queue_name)
    code, out = cli(
        *base, "push", "--tenant", "alice", "--priority", "high", "--payload", '{"n": 1}'
    )
    assert code == 0
    task_id = out.strip()
    assert len(task_id) == 36
    assert "pushed" in capsys.readouterr().err

    code, out = cli(*base, "stats", "--tenant", "alice,bob")
    assert code == 0
    lines = out.splitlines()
    alice = next(line for line in lines if line.startswith("alice"))
    assert alice.split()[1:6] == ["0", "1", "0", "0", "1"]  # critical normal sched leased total
    assert "dead-letter queue: 0 entries" in out

    code, out = cli(*base, "stats", "--tenant", "alice", "--json")
    data = json.loads(out)
    assert data["queue"] == queue_name
    assert data["stats"]["pushed"] == 1
    assert data["tenants"]["alice"]["sizes"]["total"] == 1

    with connect(server_url, queue=queue_name) as queue:
        task = queue.get_task(task_id)
        assert task is not None
        assert task.priority is Priority.HIGH
        assert dict(task.payload) == {"n": 1}


def test_push_with_delay_and_critical_priority(server_url: str, queue_name: str) -> None:
    base = ("--url", server_url, "--queue", queue_name)
    code, out = cli(*base, "push", "--tenant", "bob", "--delay", "60", "-q", "--name", "later")
    assert code == 0
    code, _out2 = cli(*base, "push", "--tenant", "bob", "--priority", "6", "-q")
    assert code == 0
    with connect(server_url, queue=queue_name) as queue:
        assert queue.get_state(out.strip()) is TaskState.SCHEDULED
        sizes = queue.get_queue_sizes("bob")
        assert sizes["scheduled"] == 1
        assert sizes["critical"] == 1


def test_stats_takes_tenants_from_the_config(
    server_url: str, queue_name: str, tmp_path: Path
) -> None:
    config = tmp_path / "fairque.yaml"
    config.write_text(
        f"redis:\n  url: {server_url}\nqueue:\n  name: {queue_name}\n"
        "  tiers:\n    pro: {weight: 2.0}\n  tenant_tiers:\n    acme: pro\n"
        "worker:\n  assigned_tenants: [zeta]\n"
    )
    code, out = cli("--config", str(config), "stats")
    assert code == 0
    assert any(line.startswith("acme") for line in out.splitlines())
    assert any(line.startswith("zeta") for line in out.splitlines())


def test_stats_lists_the_queue_tenants_when_none_are_named(
    server_url: str, queue_name: str
) -> None:
    # tenants named nowhere (no --tenant, no config): fairque stats finds them in the queue
    depths = {"dyn-a": 1, "dyn-b": 4, "dyn-c": 2, "dyn-d": 0}
    with connect(server_url, queue=queue_name) as queue:
        for user, depth in depths.items():
            tasks = [Task.create(user, Priority.NORMAL, {"n": n}) for n in range(max(depth, 1))]
            queue.push_batch(tasks)
        # dyn-d's only task is finished: nothing ready, still a tenant of the queue
        [claimed] = queue.claim_batch(1, ["dyn-d"])
        queue.finish(claimed, {"ok": True})
    base = ("--url", server_url, "--queue", queue_name)

    code, out = cli(*base, "stats")
    assert code == 0
    rows = [line.split() for line in out.splitlines() if line.startswith("dyn-")]
    assert [r[0] for r in rows] == ["dyn-b", "dyn-c", "dyn-a", "dyn-d"]  # most ready first
    assert [r[2] for r in rows] == ["4", "2", "1", "0"]  # the normal column
    assert "4 tenants in the queue, all shown" in out

    code, out = cli(*base, "stats", "--limit", "2")
    assert code == 0
    assert [line.split()[0] for line in out.splitlines() if line.startswith("dyn-")] == [
        "dyn-b",
        "dyn-c",
    ]
    assert "4 tenants in the queue; showing the 2 with the most ready tasks" in out

    code, out = cli(*base, "stats", "--limit", "3", "--json")
    assert code == 0
    data = json.loads(out)
    assert list(data["tenants"]) == ["dyn-b", "dyn-c", "dyn-a"]
    assert data["tenants"]["dyn-b"]["sizes"]["normal"] == 4
    assert data["tenants"]["dyn-a"]["counters"]["pushed"] == 1
    assert (data["tenants_total"], data["tenants_shown"]) == (4, 3)
    assert data["tenant_source"] == "queue"

    code, out = cli(*base, "stats", "--tenant", "dyn-d", "--json")  # --tenant still wins
    data = json.loads(out)
    assert list(data["tenants"]) == ["dyn-d"]
    assert (data["tenants_total"], data["tenant_source"]) == (4, "user")
    assert data["tenants"]["dyn-d"]["counters"]["finished"] == 1

    proc = run_cli_here([*base, "stats", "--limit", "0"])
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "fairque stats: error: argument --limit: must be >= 1, got 0 (see: fairque stats --help)"
    )


def test_dlq_list_on_an_empty_dlq(server_url: str, queue_name: str) -> None:
    code, out = cli("--url", server_url, "--queue", queue_name, "dlq", "list")
    assert code == 0
    assert "no entries" in out
    code, out = cli("--url", server_url, "--queue", queue_name, "dlq", "list", "--json")
    assert json.loads(out) == []


def _dead_task(server_url: str, queue_name: str, tenant: str) -> str:
    with connect(server_url, queue=queue_name) as queue:
        queue.push(Task.create(tenant, Priority.NORMAL, {"boom": True}, max_retries=0))
        task = queue.claim()
        assert task is not None
        queue.fail(task, RuntimeError("handler exploded"))
        assert queue.get_state(task.task_id) is TaskState.FAILED
        return task.task_id


def test_dlq_list_shows_stale_tasks(server_url: str, queue_name: str) -> None:
    """A task not started by its expiry (ADR 77) is listed by ``dlq list --type stale``."""
    with connect(server_url, queue=queue_name) as queue:
        task = attrs.evolve(Task.create("alice"), expires_at=round(time.time() + 0.05, 3))
        queue.push(task)
        assert task.expires_at is not None
        while time.time() < task.expires_at + 0.002:  # the server's clock is this machine's
            time.sleep(0.01)
        assert queue.claim() is None
        assert queue.get_state(task.task_id) is TaskState.FAILED
    base = ("--url", server_url, "--queue", queue_name)
    code, out = cli(*base, "dlq", "list", "--type", "stale")
    assert code == 0
    assert task.task_id in out
    assert "not started by its expiry" in out
    code, out = cli(*base, "dlq", "list", "--type", "expired")
    assert "no entries of type expired" in out


def test_dlq_list_requeue_purge(
    server_url: str, queue_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ("--url", server_url, "--queue", queue_name)
    first = _dead_task(server_url, queue_name, "alice")
    second = _dead_task(server_url, queue_name, "bob")

    code, out = cli(*base, "dlq", "list", "--type", "failed")
    assert code == 0
    assert first in out
    assert second in out
    assert "handler exploded" in out
    code, out = cli(*base, "dlq", "list", "--type", "poisoned")
    assert "no entries of type poisoned" in out

    code, out = cli(*base, "dlq", "requeue")  # neither ids nor --all: a usage error
    assert code == 2
    assert "--all" in capsys.readouterr().err

    code, out = cli(*base, "dlq", "requeue", "--id", first)
    assert (code, out.strip()) == (0, "requeued 1 entry")
    with connect(server_url, queue=queue_name) as queue:
        assert queue.get_state(first) is TaskState.QUEUED
        assert [e.entry_id for e in queue.list_dlq()] == [second]
        assert queue.list_dlq()[0].failure_type is FailureType.FAILED

    code, out = cli(*base, "dlq", "purge", "--id", first)  # no longer in the DLQ
    assert code == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "not in the dead-letter queue" in err

    code, out = cli(*base, "dlq", "purge", "--all")
    assert (code, out.strip()) == (0, "purged 1 entry")


def test_dlq_list_by_id_finds_an_entry_past_the_first_page_and_conflicts_are_refused(
    server_url: str, queue_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--id`` looks among every entry (it searched one page, and said the entry did not
    exist); ``--all`` with ``--id``/``--type`` (which won silently) and on ``list`` are usage
    errors; an offset beyond what the server can index is a typed one-line error."""
    base = ("--url", server_url, "--queue", queue_name)
    first = _dead_task(server_url, queue_name, "alice")
    second = _dead_task(server_url, queue_name, "bob")
    code, out = cli(*base, "dlq", "list", "--limit", "1", "--id", second)
    assert code == 0
    assert second in out
    code, out = cli(*base, "dlq", "list", "--offset", "2", "--id", first)
    assert code == 0
    assert first in out
    capsys.readouterr()
    for flags in (["purge", "--id", first, "--all"], ["purge", "--all", "--type", "failed"]):
        code, _ = cli(*base, "dlq", *flags)
        assert code == 2
        assert "--all takes every entry" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:  # list has no --all: argparse refuses it
        cli(*base, "dlq", "list", "--all")
    assert info.value.code == 2
    assert "unrecognized arguments: --all" in capsys.readouterr().err
    code, _ = cli(*base, "dlq", "list", "--offset", "99999999999999999999")
    assert code == 1
    err = capsys.readouterr().err
    assert "offset" in err
    assert "internal error" not in err
    with connect(server_url, queue=queue_name) as queue:
        assert {e.entry_id for e in queue.list_dlq()} == {first, second}  # nothing purged


def test_bad_ids_are_one_line_errors(
    server_url: str, queue_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ("--url", server_url, "--queue", queue_name)
    code, _ = cli(*base, "dlq", "requeue", "--id", "no{such}id")
    assert code == 1
    err = capsys.readouterr().err
    assert err.startswith("fairque: error: ")
    assert err.count("\n") == 1
    code, _ = cli(*base, "push", "--tenant", "has space")
    assert code == 1
    assert "invalid tenant" in capsys.readouterr().err
    code, _ = cli(*base, "push", "--tenant", "u", "--payload", "{nope")
    assert code == 1
    assert "--payload is not valid JSON" in capsys.readouterr().err
    for flags in (
        ("push", "--tenant", "u"),
        ("schedule", "add", "s", "* * * * *", "--tenant", "u"),
    ):
        with pytest.raises(SystemExit) as info:  # a bad flag value: a usage error
            cli(*base, *flags, "--priority", "9")
        assert info.value.code == 2
        assert "argument --priority: must be 1-6" in capsys.readouterr().err


def test_unreachable_server_is_one_line_without_traceback() -> None:
    started = time.monotonic()
    proc = run_cli_here(["--url", "redis://127.0.0.1:1", "stats"])
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("fairque: error: cannot reach the server")
    assert time.monotonic() - started < 30


def test_unreachable_server_from_the_environment() -> None:
    proc = run_cli_here(
        ["push", "--tenant", "alice"], env={"FAIRQUE_REDIS_URL": "redis://127.0.0.1:1"}
    )
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("redis: [unclosed\n", "not valid YAML"),
        ("queue:\n  lease_seconds: -1\n", "queue.lease_seconds"),
        ("queue:\n  no_such_field: 1\n", "no_such_field"),
        ("- just\n- a list\n", "mapping"),
    ],
)
def test_bad_config_file_is_a_clear_message(tmp_path: Path, content: str, expected: str) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text(content)
    proc = run_cli_here(["--config", str(config), "stats"])
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("fairque: error: bad configuration")
    assert expected in lines[0]


def test_missing_config_file(tmp_path: Path) -> None:
    proc = run_cli_here(["stats", "--config", str(tmp_path / "nope.yaml")])
    assert proc.returncode == 1
    assert proc.stderr.strip() == f"fairque: error: config file not found: {tmp_path / 'nope.yaml'}"


def test_env_override_of_a_config_key(server_url: str, queue_name: str) -> None:
    proc = run_cli_here(
        ["stats", "--json"],
        env={"FAIRQUE_REDIS_URL": server_url, "FAIRQUE_QUEUE__NAME": queue_name},
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["queue"] == queue_name


def test_worker_runs_a_registry_handler(server_url: str, queue_name: str) -> None:
    for n in range(5):
        code, _ = cli(
            "--url",
            server_url,
            "--queue",
            queue_name,
            "push",
            "--tenant",
            f"t{n % 2}",
            "--name",
            "examples.thumbnail",
            "--payload",
            json.dumps({"args": [f"img-{n}.png"], "kwargs": {}}),
            "-q",
        )
        assert code == 0
    proc = run_cli_here(
        [
            "worker",
            "--url",
            server_url,
            "--queue",
            queue_name,
            "--handler",
            "tasks:registry",
            "--burst",
            "--max-seconds",
            "20",
        ],
        cwd=REPO / "examples",
    )
    assert proc.returncode == 0, proc.stderr
    assert "processed 5 tasks, 0 failed" in proc.stdout
    with connect(server_url, queue=queue_name) as queue:
        assert queue.get_stats()["finished"] == 5


@pytest.mark.parametrize(
    ("handler", "expected"),
    [
        ("no_such_module:x", "cannot import handler module"),
        ("tasks:nothing", "has no attribute"),
        ("tasks:thumbnail", "single @task function"),
        ("tasks:time", "not a TaskHandler"),
    ],
)
def test_worker_bad_handler(server_url: str, handler: str, expected: str) -> None:
    proc = run_cli_here(
        ["worker", "--url", server_url, "--handler", handler], cwd=REPO / "examples"
    )
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert expected in proc.stderr


@pytest.mark.parametrize(
    ("source", "attr", "expected"),
    [
        ("def broken(:\n", "X", "cannot import handler module {m!r}: SyntaxError"),
        ("raise RuntimeError('at import')\n", "X", "cannot import handler module {m!r}: Runtime"),
        ("import sys\nsys.exit(0)\n", "X", "cannot import handler module {m!r}: SystemExit"),
        ("def make():\n    raise KeyError('cfg')\n", "make", "cannot create handler"),
        ("import sys\nexit = sys.exit\n", "exit", "cannot create handler"),
    ],
)
def test_worker_reports_the_handler_modules_own_errors_as_such(
    server_url: str, tmp_path: Path, source: str, attr: str, expected: str
) -> None:
    """An error raised by the user's module or factory (SystemExit included) is a one-line
    error naming the handler, exit 1; it used to be fairque's "internal error", or a silent
    exit 0 for SystemExit."""
    module = "h_" + uuid.uuid4().hex[:10]
    (tmp_path / f"{module}.py").write_text(source, encoding="utf-8")
    proc = run_cli_here(
        ["worker", "--url", server_url, "--handler", f"{module}:{attr}"], cwd=tmp_path
    )
    assert proc.returncode == 1
    assert "internal error" not in proc.stderr
    assert "Traceback" not in proc.stderr
    assert expected.format(m=module) in proc.stderr


def test_a_supervisor_refuses_once_what_every_child_would_refuse(server_url: str) -> None:
    """``--processes N`` checks the handler and the metrics ports before it starts children
    (each child's refusal used to restart it for ever)."""
    started = time.monotonic()
    proc = run_cli_here(
        ["worker", "--url", server_url, "--processes", "2", "--handler", "no_such_module:x"],
        cwd=REPO / "examples",
    )
    assert proc.returncode == 1
    assert "cannot import handler module" in proc.stderr
    proc = run_cli_here(
        [
            *("worker", "--url", server_url, "--processes", "2"),
            *("--handler", "tasks:registry", "--metrics-port", "65535"),
        ],
        cwd=REPO / "examples",
    )
    assert proc.returncode == 1
    assert "ports up to 65536" in proc.stderr
    assert time.monotonic() - started < 30


def test_worker_stops_gracefully_on_sigterm(server_url: str, queue_name: str) -> None:
    import os
    import signal
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("FAIRQUE_")}
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
            "tasks:registry",
            "--status-every",
            "0",
        ],
        cwd=REPO / "examples",
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        banner = proc.stderr.readline()  # written once the worker is about to start
        assert "fairque worker" in banner
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "processed 0 tasks" in out
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "command",
    [("push", "--tenant", "t"), ("stats",), ("worker", "--handler", "no_such_module:f")],
    ids=lambda c: c[0],
)
def test_the_removed_user_flag_is_a_usage_error(
    command: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    """``--user`` (ADR 23's old spelling of ``--tenant``) was removed before the first release."""
    with pytest.raises(SystemExit) as info:
        cli("--url", "memory://", *command, "--user", "old-style")
    assert info.value.code == 2
    assert "unrecognized arguments: --user old-style" in capsys.readouterr().err


def test_dlq_list_json_names_the_tenant_only(server_url: str, queue_name: str) -> None:
    _dead_task(server_url, queue_name, "alice")
    code, out = cli("--url", server_url, "--queue", queue_name, "dlq", "list", "--json")
    assert code == 0
    (entry,) = json.loads(out)
    assert entry["tenant"] == "alice"
    assert "user_id" not in entry


@pytest.mark.parametrize("name", ["", "a b", "x{y}"])
def test_a_bad_queue_name_is_a_usage_error_not_the_default_queue(name: str) -> None:
    """``--queue ""`` (an unset variable) meant the default queue, dangerous with ``purge``."""
    proc = run_cli_here(["--url", "memory://", "--queue", name, "stats"])
    assert proc.returncode == 2
    assert "invalid queue name" in proc.stderr


def test_a_delay_past_the_year_9999_names_the_flag() -> None:
    proc = run_cli_here(["--url", "memory://", "push", "--tenant", "a", "--delay", "1e12"])
    assert proc.returncode == 1
    assert "--delay must end before the year 9999" in proc.stderr
