"""Workers and metrics that add up (issue 31 item 4, ADR 72), with real processes.

One scenario per module (:func:`deployment`): on one Valkey, ``fairque exporter``, a CLI worker
(``fairque worker --metrics-port``, concurrency 2, beating every second) and a worker started
from code in this process (``Worker(...)`` with :func:`fairque_plugins.prometheus.worker_metrics`,
concurrency 2). It checks that both workers are listed, runs blocking tasks (the running count
is the busy slots), then a mix of successes, retries and dead letters (the sum over the two
workers' scrapes is the queue's count), then kills the CLI worker with SIGKILL and times how
long until the registry calls it gone. The scrapes are kept for the exposition checks
(prometheus_client's parser always, ``promtool check metrics`` when installed; .ci/run
installs it).
"""

from __future__ import annotations

import io
import json
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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from fairque_core import FairQueue, QueueConfig, Task, TaskHandler, Worker, WorkerConfig
from fairque_core.app.worker.registry import WorkerRegistry
from fairque_core.ports.workers import gone_after
from fairque_redis.backends.backend import RedisBackend

pytestmark = [pytest.mark.redis, pytest.mark.timeout(90)]

HANDLER = """
import time

from fairque_core import Task, TaskHandler


class Handler(TaskHandler):
    def process_task(self, task: Task) -> object:
        time.sleep(task.payload.get("sleep", 0))
        if task.payload.get("fail"):
            raise RuntimeError("boom")
        return None
"""

#: The beat interval of both workers (seconds): gone after 3 of them.
BEAT = 1.0


class Handler(TaskHandler):
    """The code worker's handler: the same as the CLI worker's."""

    def process_task(self, task: Task) -> object:
        time.sleep(task.payload.get("sleep", 0))
        if task.payload.get("fail"):
            raise RuntimeError("boom")
        return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        body: bytes = response.read()
    return body.decode()


def series(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of an exposition: (sample name, labels) -> value."""
    from prometheus_client.parser import text_string_to_metric_families

    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def total(texts: list[str], name: str, **labels: str) -> float:
    """``sum(name{labels})`` over the scrapes ``texts``, as Prometheus would sum them."""
    want = set(labels.items())
    return sum(
        value
        for text in texts
        for (sample, found), value in series(text).items()
        if sample == name and want <= found
    )


def families(text: str) -> set[str]:
    return set(re.findall(r"^# TYPE (\S+) ", text, re.MULTILINE))


@attrs.frozen
class Deployment:
    """What the scenario saw."""

    name: str
    listed: dict[str, dict[str, Any]]  # worker id -> its record, both live
    busy_scrapes: list[str]  # the two workers' scrapes while 4 blocking tasks ran
    busy_exporter: str
    worker_scrapes: list[str]  # the two workers' scrapes once the queue was drained
    exporter: str
    stats: dict[str, Any]
    killed_gone_after: float  # seconds from SIGKILL until the registry called it gone
    exporter_after_kill: str
    workers_text: str  # `fairque workers` once the CLI worker was gone
    banner: str


def _cli(url: str, name: str, *args: str, cwd: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "fairque_cli", "--url", url, "--queue", name, *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run_cli(*args: str) -> str:
    """``fairque ARGS`` in this process: its standard output (exit status 0 asserted)."""
    from fairque_cli.main import main

    out = io.StringIO()
    assert main(list(args), stdout=out) == 0
    return out.getvalue()


def _until(check: Any, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.fixture(scope="module")
def deployment(
    valkey_server: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    from prometheus_client import generate_latest

    from fairque_plugins.prometheus import worker_metrics

    tmp: Path = tmp_path_factory.mktemp("workers-metrics")
    (tmp / "metrics_tasks.py").write_text(HANDLER)
    (tmp / "fairque.yaml").write_text(f"worker:\n  registry_interval_seconds: {BEAT}\n")
    name = f"wm-{uuid.uuid4().hex[:10]}"
    url = str(valkey_server.url)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAIRQUE_", "OTEL_"))}
    env["FAIRQUE_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    wport, eport = free_port(), free_port()
    cli_worker = _cli(
        url, name, "--config", "fairque.yaml", "worker", "--handler", "metrics_tasks:Handler",
        "--id", "cli-w", "--concurrency", "2", "--metrics-port", str(wport), "--status-every", "0",
        cwd=tmp, env=env,
    )  # fmt: skip
    exporter = _cli(url, name, "exporter", "--port", str(eport), cwd=tmp, env=env)
    config = QueueConfig(name=name)
    plugin, registry = worker_metrics("code-w")
    queue = FairQueue(RedisBackend.from_url(url, queue=name, config=config), plugins=[plugin])
    code_worker = Worker(
        WorkerConfig(id="code-w", max_concurrent_tasks=2, registry_interval_seconds=BEAT),
        Handler(),
        queue,
    )
    plugin.observe_worker(code_worker)
    code_worker.start()
    workers = WorkerRegistry(queue.backend)

    def code_scrape() -> str:
        return generate_latest(registry).decode()

    def scrapes() -> list[str]:
        return [scrape(wport), code_scrape()]

    try:
        assert cli_worker.stderr is not None
        banner = cli_worker.stderr.readline()
        assert exporter.stderr is not None
        assert "/metrics on 127.0.0.1" in exporter.stderr.readline()
        _until(lambda: {w.worker_id for w in workers.list() if not w.stale} == {"cli-w", "code-w"},
               10, "both workers listed")  # fmt: skip
        base = ["--url", url, "--queue", name, "workers"]
        listed = {w["worker_id"]: w for w in json.loads(run_cli(*base, "--json"))}

        # 8 blocking tasks on 4 slots: 4 run, the rest wait (ready, or leased in a buffer)
        queue.push_batch([Task.create("slow", payload={"sleep": 1.5}) for _ in range(8)])
        _until(lambda: total(scrapes(), "fairque_worker_busy_slots") == 4, 10, "4 busy slots")
        busy_scrapes = scrapes()
        busy_exporter = ""

        def exporter_saw_them() -> bool:
            nonlocal busy_exporter
            busy_exporter = scrape(eport)
            waiting = total([busy_exporter], "fairque_queue_tasks", state="ready")
            return waiting + total([busy_exporter], "fairque_queue_tasks", state="leased") == 8

        _until(exporter_saw_them, 5, "the exporter's reading of the 8 tasks")

        # then successes, retries and dead letters, spread over both workers
        queue.push_batch([Task.create("alice", payload={"sleep": 0.02}) for _ in range(30)])
        queue.push_batch(
            [Task.create("bob", payload={"fail": True}, max_retries=1) for _ in range(2)]
        )
        _until(lambda: queue.get_stats()["finished"] == 38 and queue.get_stats()["dead"] == 2,
               30, "the queue drained")  # fmt: skip
        _until(lambda: total(scrapes(), "fairque_tasks_finished_total") == 38, 5, "acks booked")
        stats = dict(queue.get_stats())
        worker_scrapes = scrapes()
        time.sleep(1.05)  # the exporter reads the server at most once a second
        exporter_text = scrape(eport)

        cli_worker.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        cli_worker.wait(timeout=10)
        _until(lambda: any(w.worker_id == "cli-w" and w.stale for w in workers.list()),
               gone_after(BEAT) + BEAT + 2, "the killed worker gone")  # fmt: skip
        killed_gone_after = time.monotonic() - killed
        exporter_after_kill = scrape(eport)
        shown = run_cli(*base)
        yield Deployment(
            name=name,
            listed=listed,
            busy_scrapes=busy_scrapes,
            busy_exporter=busy_exporter,
            worker_scrapes=worker_scrapes,
            exporter=exporter_text,
            stats=stats,
            killed_gone_after=killed_gone_after,
            exporter_after_kill=exporter_after_kill,
            workers_text=shown,
            banner=banner,
        )
    finally:
        code_worker.stop(timeout=10)
        for proc in (cli_worker, exporter):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            try:
                proc.communicate(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
        queue.close()


def test_a_cli_worker_and_a_code_worker_are_both_listed(deployment: Deployment) -> None:
    listed = deployment.listed
    assert set(listed) == {"cli-w", "code-w"}
    for record in listed.values():
        assert record["stale"] is False
        assert record["queue"] == deployment.name
        assert record["concurrency"] == 2
        assert record["host"] == socket.gethostname()
    assert listed["code-w"]["pid"] == os.getpid()
    assert "metrics on 127.0.0.1:" in deployment.banner  # --metrics-host's default


def test_kill_9_marks_the_worker_gone_within_its_stated_time(deployment: Deployment) -> None:
    # live before the kill (the listing above); its last beat was at most one interval before
    # the kill, and a record is gone 3 intervals after its last beat
    assert deployment.killed_gone_after <= gone_after(BEAT) + 0.5, deployment.killed_gone_after
    exporter = deployment.exporter_after_kill
    assert total([exporter], "fairque_workers", state="live") == 1
    assert total([exporter], "fairque_workers", state="gone") == 1
    assert "1 gone: no heartbeat record for 3 s" in deployment.workers_text
    assert re.search(r"^cli-w .* gone ", deployment.workers_text, re.MULTILINE)


def test_sum_over_the_workers_scrapes_gives_the_queues_counts(deployment: Deployment) -> None:
    scrapes, stats = deployment.worker_scrapes, deployment.stats
    finished = [total([text], "fairque_tasks_finished_total") for text in scrapes]
    assert all(n > 0 for n in finished), finished  # both workers took part
    assert sum(finished) == stats["finished"] == 38
    assert total(scrapes, "fairque_tasks_dead_lettered_total") == stats["dead"] == 2
    assert total(scrapes, "fairque_tasks_retried_total") == stats["retried"] == 2
    assert total(scrapes, "fairque_tasks_failed_total") == 4  # 2 tasks x 2 attempts
    assert total(scrapes, "fairque_worker_slots") == 4
    # the exporter's counters are the server's, once
    assert total([deployment.exporter], "fairque_queue_pushed_total") == stats["pushed"] == 40
    assert total([deployment.exporter], "fairque_queue_claimed_total") == stats["claimed"]
    assert total([deployment.exporter], "fairque_queue_depth") == 0
    assert total([deployment.exporter], "fairque_queue_dlq_size") == 2


def test_running_means_running_handlers_not_leases(deployment: Deployment) -> None:
    # 8 tasks, 4 slots: the handlers running are the busy slots, summed over the workers; the
    # server knows leases only (running, buffered, being acknowledged), exported as "leased"
    assert total(deployment.busy_scrapes, "fairque_worker_busy_slots") == 4
    assert total(deployment.busy_scrapes, "fairque_worker_leased_tasks") >= 4
    exporter = deployment.busy_exporter
    assert total([exporter], "fairque_queue_tasks", state="leased") >= 4
    assert 'state="running"' not in exporter


def test_no_family_is_exported_twice(deployment: Deployment) -> None:
    worker = families(deployment.worker_scrapes[0])
    exporter = families(deployment.exporter)
    assert worker & exporter == {"target_info"}, worker & exporter
    code = families(deployment.worker_scrapes[1])
    assert code & exporter == {"target_info"}, code & exporter
    assert not any(f.startswith("fairque_queue_") for f in worker | code), worker | code
    assert not any(f.startswith(("fairque_tasks_", "fairque_task_")) for f in exporter), exporter
    for gone in ("finished", "retried", "dead_lettered", "released"):
        assert f"fairque_queue_{gone}" not in exporter  # the workers count those


def test_series_name_their_service_and_carry_no_empty_scope_labels(deployment: Deployment) -> None:
    for text, service in (
        (deployment.worker_scrapes[0], "fairque-worker"),
        (deployment.worker_scrapes[1], "fairque-worker"),
        (deployment.exporter, "fairque-exporter"),
    ):
        assert "otel_scope" not in text
        assert "unknown_service" not in text
        assert f'service_name="{service}"' in text
    assert 'service_instance_id="cli-w"' in deployment.worker_scrapes[0]


def test_histograms_have_seconds_buckets(deployment: Deployment) -> None:
    text = deployment.worker_scrapes[0]
    for family in ("fairque_task_wait_time_seconds", "fairque_task_run_time_seconds"):
        bounds = set(re.findall(rf'^{family}_bucket\{{.*?le="([^"]+)"', text, re.MULTILINE))
        assert {"0.001", "0.25", "1.0", "5.0", "60.0", "3600.0", "+Inf"} <= bounds, family


def test_expositions_parse_and_are_consistent(deployment: Deployment) -> None:
    for text in (*deployment.worker_scrapes, deployment.exporter, deployment.busy_exporter):
        assert exposition_problems(text) == []


def test_expositions_pass_promtool(deployment: Deployment) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian's prometheus package; .ci/run installs it)")
    for text in (*deployment.worker_scrapes, deployment.exporter):
        result = promtool_check_metrics(promtool, text)
        assert result.returncode == 0, result.stdout + result.stderr


def promtool_check_metrics(promtool: str, text: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool, "check", "metrics"],
        input=text, capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip


def test_promtool_check_fails_on_a_seeded_defect() -> None:
    """The promtool check can fail: a counter without ``_total`` is refused."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian's prometheus package; .ci/run installs it)")
    bad = "# HELP fairque_x A counter\n# TYPE fairque_x counter\nfairque_x 1\n"
    assert promtool_check_metrics(promtool, bad).returncode != 0


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
