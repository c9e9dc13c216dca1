"""Every worker registers itself (ADR 72): ``Worker`` and ``AsyncWorker`` started from code
write their record to the queue's workers registry from ``start()`` on, rewrite it every
``registry_interval_seconds``, and delete it on a clean stop; 0 keeps no record."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import threading
import time

from fairque_core import (
    AsyncFairQueue,
    AsyncInMemoryBackend,
    AsyncWorker,
    FairQueue,
    InMemoryBackend,
    QueueConfig,
    Task,
    TaskHandler,
    Worker,
    WorkerConfig,
)
from fairque_core.app.worker.registry import WorkerRegistry


class Blocking(TaskHandler):
    """Runs until released, so that a record can be read while a slot is busy."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()

    def process_task(self, task: Task) -> object:
        self.started.set()
        assert self.release.wait(10)
        return None


def _until(check: object, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_a_worker_started_from_code_registers_and_removes_itself() -> None:
    model = InMemoryBackend(config=QueueConfig(name="reg"))
    queue = FairQueue(model)
    handler = Blocking()
    config = WorkerConfig(id="code-1", max_concurrent_tasks=3, registry_interval_seconds=0.05)
    worker = Worker(config, handler, queue)
    assert model.list_workers() == {}
    worker.start()
    try:
        queue.push(Task.create("acme"))
        assert handler.started.wait(5)
        _until(lambda: json.loads(model.list_workers().get("code-1", "{}")).get("busy") == 1)
        record = json.loads(model.list_workers()["code-1"])
        assert record["host"] == socket.gethostname()
        assert record["pid"] == os.getpid()
        assert record["queue"] == queue.name
        assert record["concurrency"] == 3
        assert record["state"] == "running"
        assert record["leased"] >= 1
        (info,) = WorkerRegistry(queue.backend).list()
        assert (info.worker_id, info.running, info.stale) == ("code-1", 1, False)
    finally:
        handler.release.set()
        assert worker.stop(timeout=10)
    assert model.list_workers() == {}  # a clean stop deletes the record at once


def test_registry_interval_zero_keeps_no_record() -> None:
    model = InMemoryBackend(config=QueueConfig(name="reg0"))
    worker = Worker(
        WorkerConfig(id="quiet", registry_interval_seconds=0), Blocking(), FairQueue(model)
    )
    worker.start()
    try:
        time.sleep(0.1)
        assert model.list_workers() == {}
    finally:
        assert worker.stop(timeout=10)


def test_an_async_worker_registers_and_removes_itself() -> None:
    model = InMemoryBackend(config=QueueConfig(name="areg"))

    async def scenario() -> None:
        queue = AsyncFairQueue(AsyncInMemoryBackend(model=model))
        config = WorkerConfig(id="async-1", max_concurrent_tasks=2, registry_interval_seconds=0.05)
        worker = AsyncWorker(config, Blocking(), queue)
        await worker.start()
        deadline = time.monotonic() + 5
        while "async-1" not in model.list_workers():
            assert time.monotonic() < deadline, "no record"
            await asyncio.sleep(0.01)
        record = json.loads(model.list_workers()["async-1"])
        assert (record["concurrency"], record["state"]) == (2, "running")
        first = record["last_seen"]
        while json.loads(model.list_workers()["async-1"])["last_seen"] == first:
            assert time.monotonic() < deadline, "the record was not rewritten"
            await asyncio.sleep(0.01)
        assert await worker.stop(timeout=10)

    asyncio.run(scenario())
    assert model.list_workers() == {}


def test_metrics_host_defaults_to_loopback_and_reaches_the_supervised_children() -> None:
    """``fairque worker --metrics-host`` (issue 31): 127.0.0.1 unless told otherwise, and each
    child of ``--processes`` binds the same host on its own port."""
    from fairque_cli.main import build_parser
    from fairque_cli.supervisor import child_args

    parser = build_parser()
    args = parser.parse_args(["worker", "--handler", "m:H", "--metrics-port", "9100"])
    assert args.metrics_host == "127.0.0.1"
    args = parser.parse_args(
        ["worker", "--handler", "m:H", "--metrics-port", "9100", "--metrics-host", "0.0.0.0"]
    )
    child = child_args(args, 2)
    assert child[child.index("--metrics-port") + 1] == "9102"
    assert child[child.index("--metrics-host") + 1] == "0.0.0.0"
