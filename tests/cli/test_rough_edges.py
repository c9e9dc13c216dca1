"""The CLI rough edges of issue 31 (item 5), each pinned by a test that fails on 03fdfb0.

Each test names what 03fdfb0 did; they were run against a copy of 03fdfb0's ``src`` (on
``PYTHONPATH``) and failed there, except where the docstring says why that could not be run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fairque_core import DLQEntryNotFoundError, FailureType, Task, TaskState
from fairque_core.memory import InMemoryBackend
from fairque_redis import connect

from .conftest import run_cli, run_cli_here

pytestmark = pytest.mark.redis


def _usage_error(proc: Any, prog: str) -> str:
    """The one line of a usage error: exit 2, ``PROG: error: ... (see: PROG --help)``."""
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    [line] = proc.stderr.splitlines()
    assert line.startswith(f"{prog}: error: "), line
    assert line.endswith(f"(see: {prog} --help)"), line
    return line


def _dead_task(server_url: str, queue_name: str) -> str:
    with connect(server_url, queue=queue_name) as queue:
        queue.push(Task.create("alice", payload={"boom": True}, max_retries=0))
        task = queue.claim()
        assert task is not None
        queue.fail(task, RuntimeError("handler exploded"))
        assert queue.get_state(task.task_id) is TaskState.FAILED
        return task.task_id


def test_flag_mistakes_of_limits_and_tenant_are_usage_errors(
    server_url: str, queue_name: str
) -> None:
    """docs/cli.md: a missing argument or a bad flag value is a usage error, exit 2.
    03fdfb0 exited 1 for ``limits set acme`` (no flag) and ``tenant set-weight acme 0``."""
    base = ("--url", server_url, "--queue", queue_name)
    line = _usage_error(run_cli_here([*base, "limits", "set", "acme"]), "fairque limits")
    assert "needs at least one of --max-running" in line
    line = _usage_error(
        run_cli_here([*base, "tenant", "set-weight", "acme", "0"]), "fairque tenant"
    )
    assert "WEIGHT must be in" in line
    _usage_error(run_cli_here([*base, "tenant", "set-tier", "acme", "x"]), "fairque tenant")
    _usage_error(run_cli_here([*base, "tenant", "set-weight", "acme"]), "fairque tenant")
    _usage_error(run_cli_here([*base, "purge"]), "fairque purge")
    _usage_error(run_cli_here([*base, "dlq", "requeue"]), "fairque dlq requeue")
    with connect(server_url, queue=queue_name) as queue:  # nothing was written
        assert queue.get_tenant_weights(["acme"])["acme"] == (1.0, 0)


def test_dlq_requeue_help_is_its_own(server_url: str) -> None:
    """``dlq requeue --help`` printed the whole ``dlq`` help on 03fdfb0 (usage ``fairque
    dlq [-h] ... {list,requeue,purge}``, with list's --limit/--offset/--full)."""
    proc = run_cli(["dlq", "requeue", "--help"])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: fairque dlq requeue ")
    assert "--all" in proc.stdout
    assert "--limit" not in proc.stdout  # list's options are list's
    assert "{list,requeue,purge}" not in proc.stdout
    listed = run_cli(["dlq", "list", "--help"]).stdout
    assert listed.startswith("usage: fairque dlq list ")
    assert "--all" not in listed
    top = run_cli(["dlq", "--help"]).stdout
    assert all(action in top for action in ("list", "requeue", "purge"))


def test_tenants_help_describes_the_limits_column() -> None:
    """03fdfb0's ``tenants --help`` said the limits column shows '-' "until per-tenant flow
    control exists"; it exists (``fairque limits``) and the column shows a tenant's own."""
    proc = run_cli_here(["tenants", "--help"])
    assert proc.returncode == 0
    text = " ".join(proc.stdout.split())
    assert "until per-tenant flow control exists" not in text
    assert "(max_running, rate, burst, max_queued;" in text


def test_only_connection_problems_say_cannot_reach(server_url: str, queue_name: str) -> None:
    """A wrong password reaches the server, which refuses the login: 03fdfb0 printed
    ``cannot reach the server: ... AuthenticationError ...``. A refused connection still
    says ``cannot reach the server``."""
    host = server_url.split("://", 1)[1]
    proc = run_cli_here(["--url", f"redis://nobody:wrong@{host}", "--queue", queue_name, "stats"])
    assert proc.returncode == 1
    [line] = proc.stderr.splitlines()
    assert "cannot reach the server" not in line
    assert line.startswith("fairque: error: the server refused the login"), line
    proc = run_cli_here(["--url", "redis://127.0.0.1:1", "stats"])
    assert proc.returncode == 1
    assert proc.stderr.startswith("fairque: error: cannot reach the server: "), proc.stderr


def test_removed_config_keys_warn_on_stderr(tmp_path: Path) -> None:
    """examples/fairque.yaml promises a warning for the seed's removed keys; 03fdfb0 exited 0
    with an empty stderr (the loader's DeprecationWarning is hidden outside ``__main__``).
    A child process: the warning filters are those a user's shell has, not pytest's."""
    path = tmp_path / "old.yaml"
    path.write_text("queue:\n  name: q1\n  stats_prefix: old\n", encoding="utf-8")
    proc = run_cli(["--url", "memory://", "--config", str(path), "stats"])
    assert proc.returncode == 0, proc.stderr
    [line] = proc.stderr.splitlines()
    assert line.startswith("fairque: warning: queue.stats_prefix was removed"), line
    assert "Delete it." in line


def test_dlq_requeue_of_an_unknown_id_is_a_typed_error(server_url: str, queue_name: str) -> None:
    """03fdfb0's ``queue.requeue_dlq(['nope'])`` returned 0 silently (and ``purge_dlq``
    likewise) while ``fairque dlq requeue --id nope`` refused: the API now raises
    DLQEntryNotFoundError naming the ids, before changing anything, on the Redis backend and
    the in-memory model alike; the CLI's line is unchanged."""
    dead = _dead_task(server_url, queue_name)
    with connect(server_url, queue=queue_name) as queue:
        for call in (queue.requeue_dlq, queue.purge_dlq):
            with pytest.raises(DLQEntryNotFoundError) as info:
                call([dead, "nope"])
            assert info.value.entry_ids == ["nope"]
            assert "not in the dead-letter queue: nope" in str(info.value)
        assert [e.entry_id for e in queue.list_dlq()] == [dead]  # nothing changed
        assert queue.requeue_dlq([dead]) == 1
    from fairque_core import FairQueue

    with FairQueue(InMemoryBackend()) as memory:
        with pytest.raises(DLQEntryNotFoundError):
            memory.requeue_dlq(["nope"])
        assert memory.requeue_dlq() == 0  # None still means every entry (none here)
    proc = run_cli_here(["--url", server_url, "--queue", queue_name, "dlq", "purge", "--id", "x"])
    assert proc.returncode == 1
    assert proc.stderr == "fairque: error: not in the dead-letter queue: x (nothing was changed)\n"


def test_a_configuration_error_never_shows_a_private_class(tmp_path: Path) -> None:
    """A handler module whose import builds a bad configuration: 03fdfb0 printed
    ``cannot import handler module 'badcfg': _FieldError: invalid queue.lease_seconds ...``
    (the settings' private class); the line names the public ConfigurationError."""
    (tmp_path / "badcfg.py").write_text(
        "from fairque_core import FairQueueConfig\n"
        "FairQueueConfig.from_dict({'queue': {'lease_seconds': -1}})\n",
        encoding="utf-8",
    )
    proc = run_cli_here(["--url", "memory://", "worker", "--handler", "badcfg"], cwd=tmp_path)
    assert proc.returncode == 1
    [line] = proc.stderr.splitlines()
    assert "_FieldError" not in line
    assert "ConfigurationError: invalid queue.lease_seconds" in line, line


def test_repeated_queue_is_a_usage_error(server_url: str, queue_name: str) -> None:
    """Issue 30: repeating ``--queue`` is a usage error (exit 2) on every command but
    ``worker`` (which serves each queue given, ADR 69: tests/cli/test_worker_queues.py);
    03fdfb0's ``fairque --queue q1 --queue q2 stats`` silently showed q2. A child process, as a
    user's shell runs it."""
    proc = run_cli(
        [*("--url", server_url, "--queue", f"{queue_name}-1", "--queue", queue_name, "stats")],
        timeout=30,
    )
    line = _usage_error(proc, "fairque")
    assert "--queue given 2 times" in line
    line = _usage_error(run_cli_here(["--url", server_url, "--queue", "q1:3", "stats"]), "fairque")
    assert "a weight is for `fairque worker` only" in line
    for args in (
        ["--queue", "q1", "stats", "--queue", "q2"],
        ["stats", "--queue", "q1", "--queue", "q2"],
        ["--queue", "q1", "dlq", "list", "--queue", "q2"],
        ["--queue", "q1", "schedule", "ls", "--queue", "q2"],
    ):
        assert run_cli_here(["--url", server_url, *args]).returncode == 2, args
    assert run_cli_here(["--url", server_url, "--queue", queue_name, "stats"]).returncode == 0


def test_failure_type_names_are_unchanged() -> None:
    """The dlq subcommands still take every failure type (they moved into each action)."""
    proc = run_cli_here(["dlq", "purge", "--help"])
    assert all(t.value in proc.stdout for t in FailureType)
