"""The README's quick start, followed literally with real processes (issue 33, item 5).

The README's four commands, with ``fairque server stop`` and a new start in the middle while the
worker of terminal 2 keeps running: every task pushed before and after the stop runs, with no
manual step. The restart keeps the server's port, so the worker's retries reach the new server.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from typing import Any

import pytest

from fairque_redis import connect
from fairque_redis.servers import dev_server

from .conftest import REPO, child_env, run_cli

EXAMPLES = REPO / "examples"
PER_RUN = 18  # examples/producer.py: 3 tenants x (5 tasks + 1 urgent one)


def producer() -> subprocess.CompletedProcess[str]:
    """``uv run python examples/producer.py`` (terminal 1)."""
    return subprocess.run(
        [sys.executable, "examples/producer.py"],
        capture_output=True,
        text=True,
        env=child_env(),
        cwd=REPO,
        timeout=60,
        check=False,
    )


def wait_finished(count: int, timeout: float = 60.0) -> dict[str, Any]:
    """The default queue's stats once ``count`` tasks have finished (or at the deadline)."""
    state = dev_server.status()
    assert state is not None, "the local server is not running"
    deadline = time.monotonic() + timeout
    with connect(state.url) as queue:
        stats = queue.get_stats()
        while stats["finished"] < count and time.monotonic() < deadline:
            time.sleep(0.1)
            stats = queue.get_stats()
    return stats


@pytest.mark.slow  # five CLI and example processes and a worker: 20-35 s on a busy machine
def test_quick_start_with_a_server_stop_and_a_new_start() -> None:
    first = producer()
    assert first.returncode == 0, first.stderr
    assert f"pushed {PER_RUN} tasks to queue default" in first.stdout
    port = dev_server.status().port  # type: ignore[union-attr]

    # terminal 2: `cd examples && uv run fairque worker --handler tasks:registry`
    worker = subprocess.Popen(
        [sys.executable, "-m", "fairque_cli", "worker", "--handler", "tasks:registry"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
        cwd=EXAMPLES,
    )
    try:
        assert wait_finished(PER_RUN)["finished"] == PER_RUN

        stats = run_cli(["stats"])  # `uv run fairque stats`
        assert stats.returncode == 0, stats.stderr
        assert "finished 18" in " ".join(stats.stdout.split())

        # `uv run fairque server stop`, the worker still connected and running
        stopped = run_cli(["server", "stop"])
        assert stopped.returncode == 0, stopped.stderr
        assert "stopped the local server" in stopped.stdout
        assert dev_server.status() is None

        # a new start: the next producer starts the server again, on the same port
        second = producer()
        assert second.returncode == 0, second.stderr
        restarted = dev_server.status()
        assert restarted is not None
        assert restarted.port == port, "the restart moved the server to a new port"

        final = wait_finished(2 * PER_RUN)
        assert final["finished"] == 2 * PER_RUN, final
        assert final["ready"] == final["leased"] == final["dlq"] == 0, final
    finally:
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=60)
    assert worker.returncode == 0, err
    assert f"processed {2 * PER_RUN} tasks, 0 failed" in out, out + err
