"""Issue 31's acceptance for the task record (ADR 70): a task run by a real worker that failed
twice and then finished, and one that was dead-lettered, show every attempt's traceback, worker
and times in the API (``get_task``, ``list_dlq``'s ``retry_history``), the CLI (``fairque task
show``, ``fairque tasks``) and the dashboard (its task and Tasks pages, over HTTP); and the
Tasks page's bulk actions need the operator token."""

from __future__ import annotations

import io
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from fairque_cli.main import main
from fairque_core import (
    AsyncFairQueue,
    FairQueueConfig,
    Task,
    TaskHandler,
    TaskState,
    Worker,
    WorkerConfig,
)
from fairque_core.app.backend_loading import open_async_backend
from fairque_dashboard import DashboardSettings, create_app
from fairque_redis import connect

pytestmark = pytest.mark.redis

TOKEN = "story-operator-token"


class FailsTwice(TaskHandler):
    """Fails the first two attempts of every task (the dead one always), with a message that
    names the attempt, from a function whose name shows in the traceback."""

    def __init__(self) -> None:
        self.runs: dict[str, int] = {}

    def process_task(self, task: Task) -> Any:
        n = self.runs[task.task_id] = self.runs.get(task.task_id, 0) + 1
        if n <= 2 or task.payload.get("always"):
            explode_in_the_handler(f"failure {n} of {task.task_id}")
        return {"done": n}


def explode_in_the_handler(text: str) -> None:
    raise ValueError(text)


@pytest.fixture
def story(valkey_server: Any) -> Iterator[tuple[str, str, Any]]:
    url, name = str(valkey_server.url), f"story-{uuid.uuid4().hex[:8]}"
    queue = connect(url, queue=name, retry_base_seconds=0.01, retry_jitter=0.0)
    worker = Worker(
        WorkerConfig(id="story-worker", poll_interval_seconds=0.02), FailsTwice(), queue
    )
    queue.push(Task.create("acme", payload={"n": 1}, task_id="ok", name="twice", max_retries=3))
    queue.push(Task.create("acme", payload={"always": True}, task_id="dead", max_retries=1))
    worker.start()
    try:
        deadline = time.monotonic() + 30
        while (queue.get_state("ok"), queue.get_state("dead")) != (
            TaskState.FINISHED,
            TaskState.FAILED,
        ):
            assert time.monotonic() < deadline
            time.sleep(0.02)
    finally:
        worker.stop(10)
    yield url, name, queue
    queue.close()


def _cli(*args: str) -> str:
    out = io.StringIO()
    code = main(list(args), stdout=out)
    assert code == 0, out.getvalue()
    return out.getvalue()


def test_the_story_in_the_api_the_cli_and_the_dashboard(story: tuple[str, str, Any]) -> None:
    url, name, queue = story
    # the API
    rec = queue.get_task("ok")
    assert rec is not None
    assert (rec.state, rec.tenant, rec.name, rec.payload) == (
        TaskState.FINISHED,
        "acme",
        "twice",
        {"n": 1},
    )
    assert rec.result == {"done": 3}
    assert [a.outcome for a in rec.attempts] == ["retried", "retried", "finished"]
    assert {a.worker_id for a in rec.attempts} == {"story-worker"}
    for n, attempt in enumerate(rec.attempts[:2], start=1):
        assert attempt.error_type == "ValueError"
        assert f"failure {n} of ok" in attempt.traceback
        assert "explode_in_the_handler" in attempt.traceback
        assert attempt.started_at <= attempt.ended_at
    assert rec.attempts[0].ended_at <= rec.attempts[1].started_at <= rec.attempts[2].started_at
    assert rec.created_at <= rec.attempts[0].started_at
    assert rec.ended_at == rec.attempts[2].ended_at
    dead = queue.get_task("dead")
    assert dead is not None
    assert [a.outcome for a in dead.attempts] == ["retried", "failed"]
    [entry] = queue.list_dlq()
    assert [h["outcome"] for h in entry.retry_history] == ["retried", "failed"]
    assert "failure 2 of dead" in entry.retry_history[1]["traceback"]
    assert entry.retry_history[0]["worker_id"] == "story-worker"
    # the CLI
    text = _cli("--url", url, "--queue", name, "task", "show", "ok")
    assert "attempt 1: retried on worker story-worker" in text
    assert "attempt 3: finished on worker story-worker" in text
    assert "ValueError: failure 1 of ok" in text
    assert "ValueError: failure 2 of ok" in text
    assert "explode_in_the_handler" in text
    shown = json.loads(_cli("--url", url, "--queue", name, "task", "show", "dead", "--json"))
    assert [a["outcome"] for a in shown["attempts"]] == ["retried", "failed"]
    assert "failure 1 of dead" in shown["attempts"][0]["traceback"]
    listed = _cli("--url", url, "--queue", name, "tasks", "--state", "failed", "--tenant", "acme")
    assert "dead" in listed
    assert " ok " not in listed
    page = json.loads(_cli("--url", url, "--queue", name, "tasks", "--json"))
    assert sorted(item["task_id"] for item in page["items"]) == ["dead", "ok"]
    ended = [item["ended_at"] for item in page["items"]]
    assert ended == sorted(ended, reverse=True)  # newest first
    # the dashboard, over HTTP
    config = FairQueueConfig.from_dict({"redis": {"url": url}, "queue": {"name": name}}, env={})

    async def opener() -> AsyncFairQueue:
        return AsyncFairQueue(open_async_backend(config))

    app = create_app(opener, DashboardSettings(sample_interval=0, target=url, token=TOKEN))
    with TestClient(app, raise_server_exceptions=False) as client:
        html = client.get("/tasks/ok").text
        assert html.count('class="attempt"') == 3
        assert "failure 1 of ok" in html
        assert "failure 2 of ok" in html
        assert "explode_in_the_handler" in html
        assert "story-worker" in html
        html = client.get("/tasks/dead").text
        assert "failure 2 of dead" in html
        assert html.count('class="attempt"') == 2
        listing = client.get("/tasks", params={"state": "failed", "tenant": "acme"})
        assert listing.status_code == 200
        assert 'data-task="dead"' in listing.text
        assert 'data-task="ok"' not in listing.text
        # bulk actions need the token; with it, a requeue of the selection
        refused = client.post("/tasks/bulk", data={"action": "requeue", "task": "dead"})
        assert refused.status_code == 403
        done = client.post(
            "/tasks/bulk",
            data={"action": "requeue", "task": ["dead", "ok"], "token": TOKEN},
            follow_redirects=False,
        )
        assert done.status_code == 303
        assert "n=1" in done.headers["location"]
    assert queue.get_state("dead") is TaskState.QUEUED
    assert queue.list_tasks(state=TaskState.FAILED).items == ()
