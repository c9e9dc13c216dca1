"""The examples run as a user would run them, against the session's embedded Valkey."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from fairque_core.settings.config import FairQueueConfig
from fairque_redis import connect

from .conftest import REPO, child_env, run_cli_here

pytestmark = pytest.mark.redis

EXAMPLES = REPO / "examples"


def run_example(script: str, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args],
        capture_output=True,
        text=True,
        env=child_env(env),
        cwd=REPO,
        timeout=60,
        check=False,
    )


def test_producer_then_worker(valkey_server: Any) -> None:
    queue = f"ex-{uuid.uuid4().hex[:8]}"
    env = {"FAIRQUE_REDIS_URL": valkey_server.url}
    produced = run_example("producer.py", "--queue", queue, "--per-tenant", "4", env=env)
    assert produced.returncode == 0, produced.stderr
    assert f"pushed 15 tasks to queue {queue}" in produced.stdout
    assert "acme: 5 tasks waiting" in produced.stdout

    worked = run_example("worker.py", "--queue", queue, "--until-empty", "--seconds", "30", env=env)
    assert worked.returncode == 0, worked.stderr
    assert "processed 15 tasks, failed 0" in worked.stdout

    with connect(valkey_server.url, queue=queue) as q:
        stats = q.get_stats()
        assert stats["finished"] == 15
        assert stats["ready"] == stats["leased"] == stats["dlq"] == 0


def test_producer_takes_a_url_argument(valkey_server: Any) -> None:
    queue = f"ex-{uuid.uuid4().hex[:8]}"
    produced = run_example("producer.py", "--url", valkey_server.url, "--queue", queue, env={})
    assert produced.returncode == 0, produced.stderr
    with connect(valkey_server.url, queue=queue) as q:
        assert q.get_stats()["pushed"] == 18


def test_example_config_loads_with_tiers() -> None:
    config = FairQueueConfig.from_yaml(EXAMPLES / "fairque.yaml", env={})
    assert config.queue.lease_seconds == 30.0
    assert config.queue.tiers["enterprise"].weight == 4.0
    assert config.queue.tenant_weight_table()["acme"] == (4.0, 2)
    assert config.worker.id == "worker-001"


def test_cli_worker_with_the_example_config(valkey_server: Any, tmp_path: Path) -> None:
    queue = f"ex-{uuid.uuid4().hex[:8]}"
    env = {"FAIRQUE_REDIS_URL": valkey_server.url}
    produced = run_example("producer.py", "--queue", queue, "--per-tenant", "2", env=env)
    assert produced.returncode == 0, produced.stderr
    proc = run_cli_here(
        [
            "worker",
            "--config",
            "fairque.yaml",
            "--queue",
            queue,
            "--handler",
            "tasks:registry",
            "--burst",
            "--max-seconds",
            "30",
        ],
        env=env,
        cwd=EXAMPLES,
    )
    assert proc.returncode == 0, proc.stderr
    assert "processed 9 tasks, 0 failed" in proc.stdout


def test_producer_then_worker_without_a_url() -> None:
    """Finding 2 of issue 14: two scripts with no URL share the local server."""
    queue = f"ex-{uuid.uuid4().hex[:8]}"
    produced = run_example("producer.py", "--queue", queue, "--per-tenant", "2", env={})
    assert produced.returncode == 0, produced.stderr
    worked = run_example("worker.py", "--queue", queue, "--until-empty", "--seconds", "30", env={})
    assert worked.returncode == 0, worked.stderr
    assert "processed 9 tasks, failed 0" in worked.stdout


def test_the_example_config_runs_on_a_fresh_machine() -> None:
    """Issue 33: `fairque worker --config fairque.yaml` as docs/cli.md gives it, with no server
    named anywhere (a fresh data dir, no $FAIRQUE_REDIS_URL): it uses the shared local server."""
    produced = run_example("producer.py", "--per-tenant", "2", env={})
    assert produced.returncode == 0, produced.stderr
    proc = run_cli_here(
        ["worker", "--config", "fairque.yaml", "--handler", "tasks:registry", "--burst"],
        env={},
        cwd=EXAMPLES,
    )
    assert proc.returncode == 0, proc.stderr
    assert "processed 9 tasks, 0 failed" in proc.stdout
    assert "cannot reach" not in proc.stderr
