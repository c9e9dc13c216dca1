"""``fairque worker`` serving several queues (ADR 69): ``--queue NAME[:WEIGHT]`` repeated,
``--queue-order``, the worker section's ``queues``; and the usage errors around them."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from fairque_cli.main import build_parser
from fairque_cli.supervisor import child_args
from fairque_cli.worker_cmd import served_queues
from fairque_core import FairQueueConfig, Task
from fairque_redis import connect

from .conftest import run_cli_here

HANDLER = """
from fairque_core import TaskHandler


class Echo(TaskHandler):
    def process_task(self, task):
        return task.tenant
"""


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


def test_worker_takes_repeated_queues_with_weights() -> None:
    args = parse("--queue", "a:3", "worker", "--handler", "m", "--queue", "b")
    assert args.queues == ["a:3", "b"]
    assert served_queues(args, FairQueueConfig.from_dict({}, env={})) == [("a", 3.0), ("b", 1.0)]
    assert args.queue == "b"  # the name alone, as every command reads it
    assert args.queue_order is None


def test_queue_sources_in_order_of_precedence() -> None:
    config = FairQueueConfig.from_dict(
        {"worker": {"queues": {"x": 2, "y": 1}, "queue_order": "strict"}}, env={}
    )
    assert served_queues(parse("worker", "--handler", "m"), config) == [("x", 2.0), ("y", 1.0)]
    # one --queue replaces the worker section's list
    assert served_queues(parse("--queue", "z", "worker", "--handler", "m"), config) == [("z", 1.0)]
    plain = FairQueueConfig.from_dict({"queue": {"name": "q"}}, env={})
    assert served_queues(parse("worker", "--handler", "m"), plain) == [("q", 1.0)]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--queue", "a:0", "worker", "--handler", "m"], "weight"),
        (["--queue", "a:x", "worker", "--handler", "m"], "weight"),
        (["--queue", "a:b:c", "worker", "--handler", "m"], "weight"),
        (["--queue", "a", "--queue", "a:2", "worker", "--handler", "m"], "given twice"),
        (["--queue", "a", "--queue", "b", "stats"], "--queue given 2 times"),
        (["stats", "--queue", "a:2"], "a weight is for `fairque worker` only"),
        (["worker", "--handler", "m", "--queue-order", "random"], "invalid choice"),
    ],
)
def test_usage_errors(argv: list[str], expected: str) -> None:
    proc = run_cli_here(["--url", "memory://", *argv])
    assert proc.returncode == 2, proc.stderr
    assert expected in proc.stderr


def test_the_supervisor_passes_every_queue_on() -> None:
    args = parse(
        "--queue", "a:3", "--queue", "b", "worker", "--handler", "m", "--queue-order", "strict"
    )
    argv = child_args(args, 0)
    assert argv[argv.index("--queue") :][:4] == ["--queue", "a:3", "--queue", "b"]
    assert argv[argv.index("--queue-order") + 1] == "strict"


def test_a_burst_worker_serves_both_queues(
    server_url: str, queue_name: str, tmp_path: Path
) -> None:
    (tmp_path / "echo_handler.py").write_text(HANDLER, encoding="utf-8")
    names = (f"{queue_name}-a", f"{queue_name}-b")
    for name, count in zip(names, (6, 2), strict=True):
        with connect(server_url, queue=name) as queue:
            queue.push_batch([Task.create(f"t{n % 2}") for n in range(count)])
    proc = run_cli_here(
        [
            *("--url", server_url, "--queue", f"{names[0]}:3"),
            *("worker", "--queue", f"{names[1]}:1", "--handler", "echo_handler:Echo"),
            *("--burst", "--max-seconds", "20", "--log-format", "json"),
        ],
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert "processed 8 tasks, 0 failed" in proc.stdout
    banner = [json.loads(line) for line in proc.stderr.splitlines() if "fairque worker" in line]
    assert f"queues {names[0]} (3), {names[1]} (1) weighted" in banner[0]["message"]
    for name, count in zip(names, (6, 2), strict=True):
        with connect(server_url, queue=name) as queue:
            assert queue.get_stats()["finished"] == count
