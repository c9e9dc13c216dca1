"""Handlers that misbehave must not freeze a worker, on Valkey, with the thread Worker and the
AsyncWorker (found by an audit of misbehaving handlers; each case froze or stranded work):

- a result over the queue's ``max_payload_bytes``: it passed the worker's check, then its
  acknowledgement failed before any write on every cycle, and the worker sent no other
  acknowledgement, heartbeat or claim again (its peers froze the same way after the reaper);
- an exception whose ``str()`` raises: ``fail`` raised on every try, the same freeze;
- a hook raising a BaseException: it killed the pool thread before the task's end was booked
  (the AsyncWorker's event loop ended);
- an async handler raising ``CancelledError`` itself: taken for the worker's own cancellation,
  the task was stranded until its timeout;
- ``stop()`` from inside a handler: it waited for that handler, ran out the graceful window and
  dropped its result.

Each case checks the task's end, that the tasks around it are finished, and that the worker
goes on to a task pushed afterwards."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from typing import Any

import attrs
import pytest

from fairque_core import (
    AsyncWorker,
    FailureType,
    Task,
    TaskHandler,
    TaskState,
    Worker,
    WorkerConfig,
)
from fairque_redis import aconnect, connect

pytestmark = [pytest.mark.redis, pytest.mark.usefixtures("handoff_on_and_off")]  # ADR 65

LIMIT = 2_000  # max_payload_bytes of these queues
_ENDED = (TaskState.FINISHED, TaskState.FAILED, TaskState.CANCELED)


def attrs_no_retry(task: Task) -> Task:
    """The task with no retries: a failure goes to the DLQ at once."""
    return attrs.evolve(task, max_retries=0)


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("str boom")


class Misbehaving(TaskHandler):
    """Does what the task's payload says."""

    def __init__(self) -> None:
        self.worker: Any = None
        self.stop_answer: object = "not called"

    def _do(self, task: Task) -> object:
        what = task.payload.get("do")
        if what == "big":
            return "x" * (LIMIT * 2)
        if what == "unprintable":
            raise Unprintable()
        if what == "stop":
            self.stop_answer = self.worker.stop(5)
        return {"ok": task.payload.get("n")}

    def process_task(self, task: Task) -> object:
        return self._do(task)

    async def process_task_async(self, task: Task) -> object:
        what = task.payload.get("do")
        if what == "cancelled":
            raise asyncio.CancelledError()
        if what == "stop":
            self.stop_answer = await self.worker.stop(5)
            return {"ok": task.payload.get("n")}
        return self._do(task)

    def on_task_success(self, task: Task, result: object) -> None:
        if task.payload.get("do") == "hook":
            raise SystemExit("hook exit")


def _tasks(bad: str) -> list[Task]:
    tenant = "t-" + uuid.uuid4().hex[:6]
    around = [Task.create(tenant, payload={"n": n}) for n in range(3)]
    return [around[0], Task.create(tenant, payload={"do": bad, "n": 99}), *around[1:]]


def _wait(cond: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def _expected(bad: str) -> tuple[TaskState, FailureType | None, str]:
    """The bad task's end: its state, its DLQ failure type and a word of its reason."""
    return {
        "big": (TaskState.FAILED, FailureType.POISONED, "over the limit"),
        "unprintable": (TaskState.FAILED, FailureType.FAILED, "UnprintableError"),
        "cancelled": (TaskState.FAILED, FailureType.FAILED, "CancelledError"),
        "hook": (TaskState.FINISHED, None, ""),
        "stop": (TaskState.FINISHED, None, ""),
    }[bad]


def _check(queue: Any, tasks: list[Task], bad: str, later: Task | None) -> None:
    state, failure_type, word = _expected(bad)
    bad_task = tasks[1]
    assert queue.get_state(bad_task.task_id) is state
    if failure_type is not None:
        [entry] = [e for e in queue.list_dlq() if e.entry_id == bad_task.task_id]
        assert entry.failure_type is failure_type
        assert word in entry.reason
    for task in [t for t in tasks if t is not bad_task] + ([later] if later else []):
        assert queue.get_state(task.task_id) is TaskState.FINISHED, task.payload


CONFIG = {"max_concurrent_tasks": 4, "poll_interval_seconds": 0.05, "task_timeout_seconds": 30}


@pytest.mark.parametrize("bad", ["big", "unprintable", "hook", "stop"])
def test_the_thread_worker_survives(valkey_server: Any, bad: str) -> None:
    name = "mis-" + uuid.uuid4().hex[:8]
    with connect(valkey_server.url, queue=name, max_payload_bytes=LIMIT) as queue:
        tasks = _tasks(bad)
        queue.push_batch([attrs_no_retry(t) for t in tasks])
        handler = Misbehaving()
        worker = Worker(WorkerConfig(id="mis", **CONFIG), handler, queue)
        handler.worker = worker
        worker.start()
        try:
            _wait(lambda: all(queue.get_state(t.task_id) in _ENDED for t in tasks), "the ends")
            later = None
            if bad != "stop":
                later = Task.create("later")
                queue.push(later)
                _wait(lambda: queue.get_state(later.task_id) in _ENDED, "a later task")
            else:
                assert handler.stop_answer is False  # asked for, not waited for
                _wait(lambda: worker.health()["state"] == "stopped", "the stop")
            _check(queue, tasks, bad, later)
            assert worker.health()["state"] in ("running", "stopped")
        finally:
            assert worker.stop(10)


@pytest.mark.parametrize("bad", ["big", "unprintable", "cancelled", "hook", "stop"])
def test_the_async_worker_survives(valkey_server: Any, bad: str) -> None:
    async def scenario() -> None:
        name = "amis-" + uuid.uuid4().hex[:8]
        queue = await aconnect(valkey_server.url, queue=name, max_payload_bytes=LIMIT)
        try:
            tasks = [attrs_no_retry(t) for t in _tasks(bad)]
            await queue.push_batch(tasks)
            handler = Misbehaving()
            worker = AsyncWorker(WorkerConfig(id="amis", **CONFIG), handler, queue)
            handler.worker = worker
            await worker.start()

            async def ended(task: Task) -> bool:
                return await queue.get_state(task.task_id) in _ENDED

            async def wait(what: str, *watched: Task) -> None:
                deadline = time.monotonic() + 20
                while not all([await ended(t) for t in watched]):
                    assert time.monotonic() < deadline, what
                    await asyncio.sleep(0.05)

            await wait("the ends", *tasks)
            later = None
            if bad != "stop":
                later = Task.create("later")
                await queue.push(later)
                await wait("a later task", later)
            else:
                assert handler.stop_answer is False
            await worker.stop(10)
            sync = connect(valkey_server.url, queue=name)
            try:
                _check(sync, tasks, bad, later)
            finally:
                sync.close()
        finally:
            await queue.close()

    asyncio.run(scenario())
