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


class _SlowSync(TaskHandler):
    """A sync handler (a thread in both workers) that overruns the timeout on every attempt."""

    def process_task(self, task: Task) -> Any:
        time.sleep(1.5)
        return "late"


@pytest.mark.parametrize("kind", ["thread", "asyncio"])
def test_a_retry_claimed_while_the_timed_out_attempt_runs_on_times_out_too(
    valkey_server: Any, kind: str
) -> None:
    """The first attempt times out at 0.4 s and its thread runs on to 1.5 s; the retry starts
    at about 1.4 s, beside it. The workers kept their books by task id: the first thread's
    late end took the retry's entry, so the thread worker never timed the retry out (it ran
    to its end and the task read FINISHED) and the AsyncWorker counted a stuck thread for
    ever. Both attempts must time out, and no stuck thread is left."""
    name = f"rt-{uuid.uuid4().hex[:8]}"
    config = WorkerConfig(
        id=f"w-{kind}", poll_interval_seconds=0.1, task_timeout_seconds=0.4, max_concurrent_tasks=2
    )
    with connect(valkey_server.url, queue=name) as queue:
        queue.push(Task.create("u", task_id="t1", max_retries=1))
        if kind == "thread":
            worker = Worker(config, _SlowSync(), queue)
            worker.start()
            _wait(lambda: queue.get_state("t1") is TaskState.FAILED, 15, "the DLQ")
            _wait(lambda: worker.health()["stuck_threads"] == 0, 5, "the threads' ends")
            health = worker.health()
            worker.stop(5)
        else:

            async def scenario() -> dict[str, Any]:
                from fairque_redis import aconnect

                aqueue = await aconnect(valkey_server.url, queue=name)
                async with aqueue:
                    aworker = AsyncWorker(config, _SlowSync(), aqueue)
                    await aworker.start()
                    deadline = time.monotonic() + 15
                    while await aqueue.get_state("t1") is not TaskState.FAILED:
                        assert time.monotonic() < deadline, "the retry never timed out"
                        await asyncio.sleep(0.05)
                    while aworker.health()["stuck_threads"]:
                        assert time.monotonic() < deadline + 5, "a stuck thread for ever"
                        await asyncio.sleep(0.05)
                    found = aworker.health()
                    await aworker.stop(5)
                    return found

            health = asyncio.run(scenario())
        assert health["timed_out"] == 2
        assert queue.get_state("t1") is TaskState.FAILED
