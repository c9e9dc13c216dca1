"""Issue 32 item 2, end to end on Valkey: a handler reports its progress 10 times
(``current_task_context().set_progress``), from a thread handler and from an async one; a
second process (``fairque events``) reads the 10 values back in order; the API
(``get_task``, ``handle.progress()``), ``fairque task show`` and the dashboard's task page
show the last one."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from typing import Any

import pytest
from starlette.testclient import TestClient

from fairque_core import (
    AsyncFairQueue,
    AsyncWorker,
    FairQueueConfig,
    Task,
    TaskHandler,
    TaskSerializationError,
    TaskState,
    Worker,
    WorkerConfig,
    current_task_context,
)
from fairque_core.app.backend_loading import open_async_backend
from fairque_dashboard import DashboardSettings, create_app
from fairque_redis import aconnect, connect

from .conftest import run_cli

pytestmark = pytest.mark.redis


class Reports(TaskHandler):
    """Reports steps 1..10, then returns; remembers what set_progress refused."""

    def __init__(self) -> None:
        self.refused: list[str] = []
        self.done = threading.Event()

    def process_task(self, task: Task) -> Any:
        ctx = current_task_context()
        for step in range(1, 11):
            ctx.set_progress({"step": step, "of": 10})
        try:
            ctx.set_progress({"blob": "x" * 2000})
        except TaskSerializationError as exc:
            self.refused.append(str(exc))
        self.done.set()
        return "ok"

    async def process_task_async(self, task: Task) -> Any:
        ctx = current_task_context()
        for step in range(1, 11):
            await ctx.set_progress({"step": step, "of": 10})
        self.done.set()
        return "ok"


def _events(url: str, name: str) -> list[dict[str, Any]]:
    done = run_cli(["--url", url, "--queue", name, "events", "--since", "0", "--type", "progress"])
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def test_a_thread_handlers_progress_read_back_in_order_everywhere(valkey_server: Any) -> None:
    url, name = str(valkey_server.url), f"prog-{uuid.uuid4().hex[:8]}"
    handler = Reports()
    with connect(url, queue=name) as queue:
        handle = queue.push(Task.create("acme", task_id="job-1", name="export"))
        worker = Worker(WorkerConfig(id="w1", poll_interval_seconds=0.02), handler, queue)
        worker.start()
        try:
            assert handler.done.wait(30)
            deadline = time.monotonic() + 30
            while queue.get_state("job-1") is not TaskState.FINISHED:
                assert time.monotonic() < deadline
                time.sleep(0.02)
        finally:
            worker.stop(10)
        # a value over the bound is refused in the handler, typed
        assert handler.refused
        assert "over 1024" in handler.refused[0]
        # the API
        assert queue.get_task("job-1").progress == {"step": 10, "of": 10}
        assert handle.progress() == {"step": 10, "of": 10}
    # a second process: the 10 values, in order, each naming the task and its tenant
    events = _events(url, name)
    assert [e["progress"] for e in events] == [{"step": n, "of": 10} for n in range(1, 11)]
    assert {(e["task_id"], e["tenant"]) for e in events} == {("job-1", "acme")}
    # the CLI's story
    shown = run_cli(["--url", url, "--queue", name, "task", "show", "job-1"])
    assert shown.returncode == 0, shown.stderr
    assert '{"step": 10, "of": 10}' in shown.stdout
    # the dashboard's task page
    config = FairQueueConfig.from_dict({"redis": {"url": url}, "queue": {"name": name}}, env={})

    async def opener() -> AsyncFairQueue:
        return AsyncFairQueue(open_async_backend(config))

    with TestClient(create_app(opener, DashboardSettings(sample_interval=0))) as client:
        page = client.get("/tasks/job-1")
        assert page.status_code == 200
        assert 'id="task-progress"' in page.text
        assert "&#34;step&#34;: 10" in page.text or '"step": 10' in page.text


def test_an_async_handler_awaits_its_progress(valkey_server: Any) -> None:
    url, name = str(valkey_server.url), f"prog-{uuid.uuid4().hex[:8]}"
    handler = Reports()

    async def scenario() -> Any:
        queue = await aconnect(url, queue=name)
        try:
            await queue.push(Task.create("acme", task_id="job-2"))
            worker = AsyncWorker(WorkerConfig(id="w2", poll_interval_seconds=0.02), handler, queue)
            await worker.start()
            try:
                for _ in range(1500):
                    if await queue.get_state("job-2") is TaskState.FINISHED:
                        break
                    await asyncio.sleep(0.02)
            finally:
                await worker.stop(10)
            record = await queue.get_task("job-2")
            return None if record is None else record.progress
        finally:
            await queue.close()

    assert asyncio.run(scenario()) == {"step": 10, "of": 10}
    assert [e["progress"]["step"] for e in _events(url, name)] == list(range(1, 11))
