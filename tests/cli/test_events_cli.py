"""``fairque events [--follow] [--since ID] [--type T] [--limit N]`` on Valkey: one JSON line
per event, resumable by id; ``--follow`` in a real child process prints events as they come
and exits 0 on SIGTERM."""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
from typing import Any

import pytest

from fairque_cli.main import main
from fairque_core import Task
from fairque_redis import connect

from .conftest import REPO, child_env

pytestmark = pytest.mark.redis


def cli(*args: str) -> tuple[int, list[dict[str, Any]]]:
    out = io.StringIO()
    code = main(list(args), stdout=out)
    return code, [json.loads(line) for line in out.getvalue().splitlines()]


def _finish(queue: Any, n: int, tenant: str = "acme") -> list[str]:
    queue.push_batch([Task.create(tenant, payload={"k": k}) for k in range(n)])
    tasks = queue.claim_batch(n)
    for task in tasks:
        queue.finish(task, {"secret": "not in events"})
    return [t.task_id for t in tasks]


def test_events_prints_the_log_and_resumes_by_id(server_url: str, queue_name: str) -> None:
    base = ("--url", server_url, "--queue", queue_name)
    with connect(server_url, queue=queue_name) as queue:
        ids = _finish(queue, 3)
        queue.pause("acme")
    code, lines = cli(*base, "events")
    assert code == 0
    assert [(x["type"], x.get("task_id")) for x in lines] == [
        *[("completed", i) for i in ids],
        ("paused", None),
    ]
    assert all(x["tenant"] == "acme" and "secret" not in json.dumps(x) for x in lines)
    code, rest = cli(*base, "events", "--since", lines[0]["id"])
    assert [x["id"] for x in rest] == [x["id"] for x in lines[1:]]
    code, only = cli(*base, "events", "--type", "paused")
    assert [x["type"] for x in only] == ["paused"]
    code, first = cli(*base, "events", "--limit", "1")
    assert first == lines[:1]


def test_a_bad_since_is_one_line_and_exit_1(
    server_url: str, queue_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--url", server_url, "--queue", queue_name, "events", "--since", "x"]
    code = main(args, stdout=io.StringIO())
    err = capsys.readouterr().err
    assert code == 1
    assert len(err.strip().splitlines()) == 1
    assert "since" in err


def test_follow_prints_new_events_until_sigterm(server_url: str, queue_name: str) -> None:
    with connect(server_url, queue=queue_name) as queue:
        _finish(queue, 2)  # before: not shown
        since = queue.backend.events_end()
        child = subprocess.Popen(
            [
                *(sys.executable, "-m", "fairque_cli", "--url", server_url),
                *("--queue", queue_name, "events", "--follow", "--since", since),
                *("--block", "0.2"),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=child_env(),
            cwd=REPO,
        )
        try:
            ids = _finish(queue, 3)
            assert child.stdout is not None
            got = [json.loads(child.stdout.readline()) for _ in ids]
            assert [x["task_id"] for x in got] == ids
            child.send_signal(signal.SIGTERM)
            assert child.wait(timeout=30) == 0
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
