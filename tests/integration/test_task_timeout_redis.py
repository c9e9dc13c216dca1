"""The reliability plan's R14 on a real server: a task that overruns ``task_timeout_seconds``
fails with TaskTimeoutError (to the DLQ without retries left) and frees its slot, while tasks
that run longer than the lease, but within the timeout, keep their leases by heartbeats: they
finish once, nobody's lease expires, nothing is handed out twice. Sync and asyncio workers, on
Valkey 9."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections import Counter
from typing import Any

import pytest

from fairque_core import AsyncWorker, Task, TaskHandler, TaskState, Worker, WorkerConfig
from fairque_redis import connect

pytestmark = [pytest.mark.redis, pytest.mark.timeout(60)]

LEASE = 1.0
TIMEOUT = 2.5
LONG = 1.8  # longer than the lease, shorter than the timeout
LONG_TASKS = 3


class Handler(TaskHandler):
    def __init__(self) -> None:
        self.runs: Counter[str] = Counter()
        self.lock = threading.Lock()
        self.release = threading.Event()

    def _seconds(self, task: Task) -> float:
        with self.lock:
            self.runs[task.task_id] += 1
        return float(task.payload["seconds"])

    def process_task(self, task: Task) -> Any:
        seconds = self._seconds(task)
        if seconds < 0:
            self.release.wait(30)  # hangs past the timeout
        else:
            time.sleep(seconds)
        return "ok"

    async def process_task_async(self, task: Task) -> Any:
        seconds = self._seconds(task)
        await asyncio.sleep(30 if seconds < 0 else seconds)
        return "ok"


def _wait(cond: Any, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.mark.parametrize("kind", ["thread", "asyncio"])
def test_an_overrun_times_out_while_long_tasks_keep_their_leases(
    valkey_server: Any, kind: str
) -> None:
    queue = connect(valkey_server.url, queue=f"to-{uuid.uuid4().hex[:8]}", lease_seconds=LEASE)
    hang = Task.create("h", payload={"seconds": -1}, max_retries=0)
    long = [Task.create(f"l{k}", payload={"seconds": LONG}) for k in range(LONG_TASKS)]
    queue.push_batch([hang, *long])
    handler = Handler()
    config = WorkerConfig(
        id=f"to-{kind}",
        max_concurrent_tasks=LONG_TASKS + 1,
        task_timeout_seconds=TIMEOUT,
        heartbeat_interval_seconds=0.3,
        poll_interval_seconds=0.05,
    )
    worker: Any
    loop_thread: threading.Thread | None = None
    if kind == "thread":
        worker = Worker(config, handler, queue)
        worker.start()
    else:
        from fairque_redis import aconnect

        loop = asyncio.new_event_loop()
        aqueue = loop.run_until_complete(
            aconnect(valkey_server.url, queue=queue.name, lease_seconds=LEASE)
        )
        worker = AsyncWorker(config, handler, aqueue)
        loop_thread = threading.Thread(target=loop.run_until_complete, args=(worker.run(),))
        loop_thread.start()
    try:
        _wait(lambda: queue.get_state(hang.task_id) is TaskState.FAILED, 15, "the timeout")
        _wait(
            lambda: all(queue.get_state(t.task_id) is TaskState.FINISHED for t in long),
            15,
            "the long tasks",
        )
    finally:
        handler.release.set()
        if loop_thread is None:
            worker.stop(5)
        else:
            loop.call_soon_threadsafe(worker.request_stop)  # from the loop's own thread
            loop_thread.join(15)
            loop.run_until_complete(aqueue.close())
            loop.close()
    [entry] = queue.list_dlq()
    assert entry.original_task.task_id == hang.task_id
    assert "TaskTimeoutError" in entry.reason
    assert all(handler.runs[t.task_id] == 1 for t in long)  # each ran once
    stats = queue.get_stats()
    assert stats["recovered"] == 0  # no lease expired: the heartbeats kept them
    assert stats["finished"] == LONG_TASKS
    queue.close()
