"""``fairque worker --metrics-port N`` serves the OpenTelemetry metrics for Prometheus."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest

from fairque_core import FairQueue, QueueConfig, Task
from fairque_redis.backend import RedisBackend

pytestmark = [pytest.mark.redis, pytest.mark.timeout(60)]

HANDLER = """
from fairque_core import Task, TaskHandler


class Handler(TaskHandler):
    def process_task(self, task: Task) -> object:
        if task.payload.get("fail"):
            raise RuntimeError("boom")
        return None
"""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        body: bytes = response.read()
    return body.decode()


def sample_total(text: str, metric: str, tenant: str) -> float:
    """The sum of the samples of ``metric`` (any suffix-less name match) for ``tenant``."""
    total = 0.0
    pattern = re.compile(rf"^{metric}(?:_total)?\{{([^}}]*)\}} ([0-9.e+-]+)$")
    for line in text.splitlines():
        found = pattern.match(line)
        if found and f'tenant="{tenant}"' in found.group(1):
            total += float(found.group(2))
    return total


def test_worker_metrics_port_serves_fairque_counters(valkey_server: Any, tmp_path: Path) -> None:
    (tmp_path / "metrics_tasks.py").write_text(HANDLER)
    name = f"cli-metrics-{uuid.uuid4().hex[:10]}"
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAIRQUE_", "OTEL_"))}
    env["FAIRQUE_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fairque_cli",
            "--url",
            valkey_server.url,
            "--queue",
            name,
            "worker",
            "--handler",
            "metrics_tasks:Handler",
            "--metrics-port",
            str(port),
            "--status-every",
            "0",
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        banner = proc.stderr.readline()
        assert f"metrics on :{port}" in banner, banner
        config = QueueConfig(name=name)
        backend = RedisBackend.from_url(valkey_server.url, queue=name, config=config)
        with FairQueue(backend, config=config) as queue:
            queue.push_batch([Task.create("alice", payload={"n": n}) for n in range(3)])
            queue.push(Task.create("bob", payload={"fail": True}, max_retries=0))
        deadline = time.monotonic() + 20
        text = ""
        while time.monotonic() < deadline:
            text = scrape(port)
            if sample_total(text, "fairque_tasks_dead_lettered", "bob") >= 1 and (
                sample_total(text, "fairque_tasks_finished", "alice") >= 3
            ):
                break
            time.sleep(0.1)
        assert sample_total(text, "fairque_tasks_finished", "alice") == 3, text
        assert sample_total(text, "fairque_tasks_failed", "bob") == 1, text
        assert sample_total(text, "fairque_tasks_dead_lettered", "bob") == 1, text
        assert "fairque_task_run_time" in text
        assert "fairque_task_wait_time" in text
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert "processed 3 tasks, 1 failed" in out
