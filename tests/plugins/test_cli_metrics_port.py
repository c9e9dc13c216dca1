"""``fairque worker --metrics-port N`` serves the OpenTelemetry metrics for Prometheus.

One worker process runs per module; its last scrape is checked for the task counters, the
queue gauges and counters read from ``get_stats()``, the seconds buckets of the histograms,
and for a valid exposition (prometheus_client's parser always, ``promtool check metrics``
when it is installed).
"""

from __future__ import annotations

import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import attrs
import pytest

from fairque_core import FairQueue, QueueConfig, Task
from fairque_redis.backends.backend import RedisBackend

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


def sample_total(text: str, metric: str, *labels: str) -> float:
    """The sum of the samples of ``metric`` (``_total`` optional) having every ``k="v"`` label."""
    total = 0.0
    pattern = re.compile(rf"^{metric}(?:_total)?\{{([^}}]*)\}} ([0-9.e+-]+)$")
    for line in text.splitlines():
        found = pattern.match(line)
        if found and all(label in found.group(1) for label in labels):
            total += float(found.group(2))
    return total


def exposition_problems(text: str) -> list[str]:
    """What a Prometheus scraper would reject or warn about in ``text`` (empty when valid).

    Parses with prometheus_client's parser, then checks what it lets pass: HELP and TYPE on
    every family, counters named ``*_total``, one value per series, histogram buckets that
    grow with ``le``, end in ``+Inf`` and equal ``_count``.
    """
    from prometheus_client.parser import text_string_to_metric_families

    problems = [  # the parser renames counters to *_total itself: check the text
        f"counter {found} does not end in _total"
        for found in re.findall(r"^# TYPE (\S+) counter$", text, re.MULTILINE)
        if not found.endswith("_total")
    ]
    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    for family in text_string_to_metric_families(text):
        if family.type == "unknown" or not family.documentation:
            problems.append(f"{family.name}: no TYPE or HELP")
        buckets: dict[tuple[tuple[str, str], ...], list[tuple[float, float]]] = {}
        counts: dict[tuple[tuple[str, str], ...], float] = {}
        for sample in family.samples:
            key = (sample.name, tuple(sorted(sample.labels.items())))
            if key in seen:
                problems.append(f"duplicate series {key}")
            seen.add(key)
            rest = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "le"))
            if sample.name.endswith("_bucket"):
                buckets.setdefault(rest, []).append((float(sample.labels["le"]), sample.value))
            elif sample.name.endswith("_count") and family.type == "histogram":
                counts[rest] = sample.value
        for series, found in buckets.items():
            bounds = [le for le, _ in found]
            values = [v for _, v in found]
            if bounds != sorted(bounds) or values != sorted(values):
                problems.append(f"{family.name}{series}: buckets not cumulative")
            if not bounds or not math.isinf(bounds[-1]) or values[-1] != counts.get(series):
                problems.append(f"{family.name}{series}: no +Inf bucket equal to _count")
    return problems


@attrs.frozen
class Run:
    """The worker run: its queue, its last scrape, exit code and output."""

    name: str
    text: str
    returncode: int
    out: str
    err: str


@pytest.fixture(scope="module")
def run(valkey_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Run:
    tmp_path: Path = tmp_path_factory.mktemp("metrics-port")
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
            doomed = Task.create("carol", payload={}, execute_after=time.time() + 3600)
            queue.push(doomed)
            assert queue.cancel(doomed.task_id)
        deadline = time.monotonic() + 20
        text = ""
        queue_label = f'queue="{name}"'
        while time.monotonic() < deadline:
            text = scrape(port)
            if (
                sample_total(text, "fairque_tasks_dead_lettered", 'tenant="bob"') >= 1
                and sample_total(text, "fairque_tasks_finished", 'tenant="alice"') >= 3
                and sample_total(text, "fairque_queue_dlq_size", queue_label) >= 1
                and sample_total(text, "fairque_queue_depth", queue_label) == 0
            ):
                break
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return Run(name, text, proc.returncode, out, err)


def test_worker_metrics_port_serves_fairque_counters(run: Run) -> None:
    text = run.text
    assert sample_total(text, "fairque_tasks_finished", 'tenant="alice"') == 3, text
    assert sample_total(text, "fairque_tasks_failed", 'tenant="bob"') == 1, text
    assert sample_total(text, "fairque_tasks_dead_lettered", 'tenant="bob"') == 1, text
    assert (
        sample_total(text, "fairque_tasks_dead_lettered", 'tenant="bob"', 'failure_type="failed"')
        == 1
    ), text
    assert "fairque_task_run_time" in text
    # the fairness gauges of issue 11, per tenant (capped); Jain's index needs backlogged
    # tenants in two readings, which a drained queue does not have
    lag_lines = [line for line in text.splitlines() if line.startswith("fairque_tenant_lag{")]
    assert any('tenant="alice"' in line for line in lag_lines), text
    assert sample_total(text, "fairque_tenant_lag", 'tenant="alice"') == 0, text  # drained
    assert "fairque_queue_starving_tenants" in text
    assert "fairque_task_wait_time" in text
    assert run.returncode == 0, run.err
    assert "processed 3 tasks, 1 failed" in run.out


def test_worker_metrics_port_serves_queue_gauges_and_counters(run: Run) -> None:
    text, queue = run.text, f'queue="{run.name}"'
    for state in ("intake", "ready", "scheduled", "running"):
        assert f'state="{state}"' in text, state
        assert sample_total(text, "fairque_queue_tasks", queue, f'state="{state}"') == 0, state
    assert sample_total(text, "fairque_queue_depth", queue) == 0, text
    assert sample_total(text, "fairque_queue_dlq_size", queue) == 1, text
    assert sample_total(text, "fairque_queue_dead_lettered", queue) == 1, text
    assert sample_total(text, "fairque_queue_canceled", queue) == 1, text
    assert sample_total(text, "fairque_queue_finished", queue) == 3, text
    assert sample_total(text, "fairque_queue_pushed", queue) == 5, text
    assert "fairque_queue_leases_recovered_total{" in text


def test_histograms_have_seconds_buckets(run: Run) -> None:
    for family in ("fairque_task_wait_time_seconds", "fairque_task_run_time_seconds"):
        bounds = set(re.findall(rf'^{family}_bucket\{{.*?le="([^"]+)"', run.text, re.MULTILINE))
        assert {"0.001", "0.25", "1.0", "5.0", "60.0", "3600.0", "+Inf"} <= bounds, family


def test_exposition_parses_and_is_consistent(run: Run) -> None:
    pytest.importorskip("prometheus_client")
    assert exposition_problems(run.text) == []


def test_exposition_passes_promtool(run: Run, tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (it comes with Prometheus)")
    result = subprocess.run(
        [promtool, "check", "metrics"],
        input=run.text,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_exposition_checker_finds_problems() -> None:
    """The checker itself: a counter without _total, a broken histogram, a duplicate."""
    bad = "\n".join(
        [
            "# HELP c A counter",
            "# TYPE c counter",
            'c{a="1"} 1',
            "# HELP h A histogram",
            "# TYPE h histogram",
            'h_bucket{le="1"} 3',
            'h_bucket{le="2"} 2',
            "h_count 2",
            "h_sum 1",
            "# HELP g A gauge",
            "# TYPE g gauge",
            "g 1",
            "g 2",
            "",
        ]
    )
    found = exposition_problems(bad)
    assert any("does not end in _total" in p for p in found), found
    assert any("not cumulative" in p for p in found), found
    assert any("+Inf" in p for p in found), found
    assert any("duplicate series" in p for p in found), found
