"""Worker and AsyncWorker over the in-memory reference backend (real threads, real time)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from fairque_core import (
    FailureType,
    FairQueue,
    InMemoryBackend,
    QueueConfig,
    RedisConnectionError,
    Task,
    TaskState,
    WorkerConfig,
)
from fairque_core.app.engine.queue_async import AsyncFairQueue
from fairque_core.app.worker.handlers import RegistryHandler, TaskHandler, TaskRegistry
from fairque_core.app.worker.worker import Worker
from fairque_core.app.worker.worker_async import AsyncWorker
from fairque_core.memory.async_model import AsyncInMemoryBackend

pytestmark = [pytest.mark.timeout(30), pytest.mark.usefixtures("handoff_on_and_off")]  # ADR 65


def wait_until(cond: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.005)


async def async_wait_until(cond: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.005)


def queue_config(**overrides: Any) -> QueueConfig:
    base: dict[str, Any] = {
        "lease_seconds": 5.0,
        "retry_base_seconds": 0.0,
        "retry_cap_seconds": 0.0,
    }
    base.update(overrides)
    return QueueConfig(**base)


def worker_config(**overrides: Any) -> WorkerConfig:
    base: dict[str, Any] = {
        "id": "w1",
        "poll_interval_seconds": 0.05,
        "max_concurrent_tasks": 4,
        "task_timeout_seconds": 5.0,
        "graceful_shutdown_timeout": 5.0,
        "reaper_interval_seconds": 0.2,
    }
    base.update(overrides)
    return WorkerConfig(**base)


@pytest.fixture(autouse=True)
def _no_autoload(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAIRQUE_DISABLE_PLUGIN_AUTOLOAD", "1")


@pytest.fixture
def queue() -> Iterator[FairQueue]:
    with FairQueue(InMemoryBackend(config=queue_config())) as q:
        yield q


def make_registry(log: list[tuple[str, Any]] | None = None) -> TaskRegistry:
    registry = TaskRegistry()
    lock = threading.Lock()

    @registry.task("add")
    def add(a: int, b: int) -> int:
        return a + b

    @registry.task("boom", max_retries=2)
    def boom() -> None:
        raise RuntimeError("boom")

    @registry.task("aadd")
    async def aadd(a: int, b: int) -> int:
        await asyncio.sleep(0)
        return a + b

    @registry.task("note", bind=True)
    def note(task: Task, value: str) -> str:
        if log is not None:
            with lock:
                log.append((task.task_id, value))
        return value

    return registry


# ------------------------------------------------------------------ registry and handlers


def test_task_decorator_builds_tasks_and_validates_args() -> None:
    registry = make_registry()
    add = registry.get("add")
    t1 = add("alice", 1, b=2)
    t2 = add.create("alice", 1, 2, task_id="fixed", priority=5)
    assert t1.name == "add"
    assert t1.payload == {"args": [1], "kwargs": {"b": 2}}
    assert t1.task_id != add("alice", 1, 2).task_id
    assert t2.task_id == "fixed"
    assert int(t2.priority) == 5
    assert add.call(2, 3) == 5
    with pytest.raises(ValueError, match="do not fit"):
        add("alice", 1, 2, 3)
    assert "add" in registry
    assert len(registry) == 4


def test_registry_handler_dispatches_only_registered_names() -> None:
    from fairque_core import UnknownTaskError

    handler = RegistryHandler(make_registry())
    assert handler.process_task(Task.create("u", payload={"args": [1, 2]}, name="add")) == 3
    assert handler.process_task(Task.create("u", payload={"args": [1, 2]}, name="aadd")) == 3
    with pytest.raises(UnknownTaskError):
        handler.process_task(Task.create("u", name="os.system"))


# ------------------------------------------------------------------ thread worker


def test_worker_runs_registered_tasks_and_counts(queue: FairQueue) -> None:
    registry = make_registry()
    tasks = [registry.get("add")(f"u{i % 3}", i, 1) for i in range(30)]
    tasks.append(registry.get("aadd")("u0", 5, 5))
    queue.push_batch(tasks)
    worker = Worker(worker_config(), RegistryHandler(registry), queue)
    worker.start()
    wait_until(lambda: worker.health()["processed"] == 31)
    assert worker.stop(5)
    health = worker.health()
    assert health["state"] == "stopped"
    assert health["in_flight"] == 0
    assert health["failed"] == 0
    assert health["last_claim_at"] is not None
    assert health["last_error"] is None
    assert queue.get_result(tasks[7].task_id) == 8
    assert queue.get_result(tasks[-1].task_id) == 10


def test_retries_then_dlq_and_poison(queue: FairQueue) -> None:
    registry = make_registry()
    queue.push(registry.get("boom")("alice", task_id="b1"))
    queue.push(Task.create("alice", task_id="unknown", name="no.such.task"))
    worker = Worker(worker_config(), RegistryHandler(registry), queue)
    worker.start()
    wait_until(lambda: queue.get_stats()["dlq"] == 2)
    worker.stop(5)
    health = worker.health()
    assert health["failed"] == 4  # three attempts of b1, one of the unknown name
    assert health["retried"] == 2
    assert health["dead"] == 2
    assert health["poisoned"] == 1
    kinds = {e.entry_id: e.failure_type for e in queue.list_dlq()}
    assert kinds == {"b1": FailureType.FAILED, "unknown": FailureType.POISONED}


class _Concurrency(TaskHandler):
    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.lock = threading.Lock()
        self.now = 0
        self.peak = 0
        self.done = 0

    def process_task(self, task: Task) -> object:
        with self.lock:
            self.now += 1
            self.peak = max(self.peak, self.now)
        time.sleep(self.delay)
        with self.lock:
            self.now -= 1
            self.done += 1
        return None


def test_concurrency_cap_is_never_exceeded(queue: FairQueue) -> None:
    queue.push_batch([Task.create(f"u{i % 5}") for i in range(60)])
    handler = _Concurrency(0.01)
    worker = Worker(worker_config(max_concurrent_tasks=4), handler, queue, prefetch=3)
    worker.start()
    peak_in_flight = 0
    deadline = time.monotonic() + 10
    while worker.health()["processed"] < 60 and time.monotonic() < deadline:
        peak_in_flight = max(peak_in_flight, worker.health()["executing"])
        time.sleep(0.001)
    worker.stop(5)
    assert handler.done == 60
    assert handler.peak <= 4
    assert handler.peak >= 2  # it did run tasks side by side
    assert peak_in_flight <= 4


class _Blocking(TaskHandler):
    def __init__(self) -> None:
        self.release = threading.Event()
        self.started: list[str] = []
        self.finished: list[str] = []
        self.timeouts: list[str] = []
        self.lock = threading.Lock()

    def process_task(self, task: Task) -> object:
        with self.lock:
            self.started.append(task.task_id)
        if task.payload.get("block", True):
            self.release.wait(10)
        with self.lock:
            self.finished.append(task.task_id)
        return "done"

    def on_task_timeout(self, task: Task) -> None:
        self.timeouts.append(task.task_id)


def test_sync_timeout_fails_the_task_and_frees_the_slot() -> None:
    config = queue_config()
    with FairQueue(InMemoryBackend(config=config)) as queue:
        queue.push(Task.create("alice", task_id="slow", max_retries=0))
        handler = _Blocking()
        worker = Worker(
            worker_config(task_timeout_seconds=0.3, max_concurrent_tasks=1), handler, queue
        )
        started = time.monotonic()
        worker.start()
        wait_until(lambda: queue.get_state("slow") is TaskState.FAILED)
        elapsed = time.monotonic() - started
        assert elapsed < 1.2
        [entry] = queue.list_dlq()
        assert "TaskTimeoutError" in entry.reason
        assert handler.timeouts == ["slow"]
        # the slot is free again although the thread still runs: another task gets through
        queue.push(Task.create("alice", task_id="quick", payload={"block": False}))
        wait_until(lambda: queue.get_state("quick") is TaskState.FINISHED)
        health = worker.health()
        assert health["timed_out"] == 1
        assert health["stuck_threads"] == 1
        handler.release.set()
        wait_until(lambda: worker.health()["stuck_threads"] == 0)
        worker.stop(5)
        assert queue.get_state("slow") is TaskState.FAILED  # the late result was dropped


def test_graceful_stop_releases_unstarted_claims(queue: FairQueue) -> None:
    ids = [f"t{i}" for i in range(7)]
    queue.push_batch([Task.create("alice", task_id=i) for i in ids])
    handler = _Blocking()
    worker = Worker(worker_config(max_concurrent_tasks=2), handler, queue, prefetch=5)
    worker.start()
    wait_until(lambda: len(handler.started) == 2 and worker.health()["in_flight"] == 7)
    stopper = threading.Thread(target=worker.stop, args=(10,))
    stopper.start()
    unstarted = [i for i in ids if i not in handler.started]
    wait_until(lambda: all(queue.get_state(i) is TaskState.QUEUED for i in unstarted), 1.0)
    assert all(queue.get_state(i) is TaskState.STARTED for i in handler.started)
    assert worker.state == "stopping"
    handler.release.set()
    stopper.join(10)
    assert worker.state == "stopped"
    assert all(queue.get_state(i) is TaskState.FINISHED for i in handler.started)
    health = worker.health()
    assert health["released"] == 5
    assert health["processed"] == 2
    assert queue.get_stats()["claimed"] == 7  # nothing was run twice or lost


def test_lease_lost_on_finish_is_counted_not_fatal(queue: FairQueue) -> None:
    handler = _Blocking()
    queue.push(Task.create("alice", task_id="gone"))
    queue.push(Task.create("alice", task_id="after", payload={"block": False}))
    worker = Worker(worker_config(max_concurrent_tasks=1), handler, queue)
    worker.start()
    wait_until(lambda: handler.started == ["gone"])
    assert queue.cancel("gone")  # drops the lease under the worker's feet
    handler.release.set()
    wait_until(lambda: queue.get_state("after") is TaskState.FINISHED)
    worker.stop(5)
    assert worker.health()["lease_lost"] == 1
    assert queue.get_state("gone") is TaskState.CANCELED


class _Flaky(InMemoryBackend):
    """Claims fail with a connection error for a while, as during a server restart."""

    def __init__(self, failures: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.failures = failures

    def claim(self, **kwargs: Any) -> Any:  # type: ignore[override]
        if self.failures > 0:
            self.failures -= 1
            raise RedisConnectionError("connection refused")
        return super().claim(**kwargs)


def test_backend_outage_is_survived_with_backoff() -> None:
    backend = _Flaky(4, config=queue_config())
    with FairQueue(backend) as queue:
        queue.push(Task.create("alice", task_id="t"))
        worker = Worker(worker_config(), _Blocking(), queue)
        worker.handler.release.set()  # type: ignore[attr-defined]
        worker.start()
        wait_until(lambda: queue.get_state("t") is TaskState.FINISHED)
        health = worker.health()
        worker.stop(5)
    assert health["backend_errors"] == 4
    assert "connection refused" in health["last_error"]
    assert not health["backing_off"]


def test_heartbeats_keep_long_tasks_leased() -> None:
    with FairQueue(InMemoryBackend(config=queue_config(lease_seconds=0.3))) as queue:
        queue.push(Task.create("alice", task_id="long"))
        handler = _Blocking()
        worker = Worker(worker_config(reaper_interval_seconds=0.05), handler, queue)
        worker.start()
        wait_until(lambda: handler.started == ["long"])
        time.sleep(1.0)  # three leases long; the reaper runs all the time
        handler.release.set()
        wait_until(lambda: queue.get_state("long") is TaskState.FINISHED)
        worker.stop(5)
        assert handler.started == ["long"]  # never redelivered
        assert queue.get_stats()["recovered"] == 0


def test_run_returns_after_stop_from_another_thread(queue: FairQueue) -> None:
    worker = Worker(worker_config(), _Blocking(), queue)
    timer = threading.Timer(0.2, worker.request_stop)
    timer.start()
    worker.run()
    assert worker.state == "stopped"


# ------------------------------------------------------------------ asyncio worker


class _AsyncSleeper(TaskHandler):
    def __init__(self) -> None:
        self.cancelled: list[str] = []

    async def process_task(self, task: Task) -> object:
        try:
            await asyncio.sleep(float(task.payload.get("sleep", 0)))
        except asyncio.CancelledError:
            self.cancelled.append(task.task_id)
            raise
        return task.payload.get("sleep")


def test_async_timeout_cancels_the_task() -> None:
    async def scenario() -> tuple[AsyncWorker, _AsyncSleeper, AsyncFairQueue, float]:
        queue = AsyncFairQueue(AsyncInMemoryBackend(config=queue_config()))
        await queue.push(Task.create("a", payload={"sleep": 10}, task_id="slow", max_retries=0))
        await queue.push(Task.create("a", payload={"sleep": 0}, task_id="fast"))
        handler = _AsyncSleeper()
        worker = AsyncWorker(worker_config(task_timeout_seconds=0.3), handler, queue)
        started = time.monotonic()
        await worker.start()
        await async_wait_until(lambda: worker.health()["dead"] == 1)
        elapsed = time.monotonic() - started
        assert await worker.stop(5)
        return worker, handler, queue, elapsed

    worker, handler, queue, elapsed = asyncio.run(scenario())
    assert elapsed < 1.2
    assert handler.cancelled == ["slow"]
    health = worker.health()
    assert health["timed_out"] == 1
    assert health["processed"] == 1
    model = queue.backend.model  # type: ignore[attr-defined]
    assert model.get_state("slow") is TaskState.FAILED
    assert "TaskTimeoutError" in model.list_dlq()[0].reason


def test_async_concurrency_cap_and_graceful_stop() -> None:
    async def scenario() -> tuple[dict[str, Any], int, dict[str, TaskState | None]]:
        queue = AsyncFairQueue(AsyncInMemoryBackend(config=queue_config()))
        await queue.push_batch(
            [Task.create("a", payload={"sleep": 0.5}, task_id=f"t{i}") for i in range(6)]
        )
        peak = 0
        worker = AsyncWorker(
            worker_config(max_concurrent_tasks=2), _AsyncSleeper(), queue, prefetch=4
        )
        await worker.start()
        await async_wait_until(lambda: worker.health()["in_flight"] == 6)
        peak = max(peak, worker.health()["executing"])
        stopping = asyncio.create_task(worker.stop(5))
        await asyncio.sleep(0.1)
        states = {f"t{i}": await queue.get_state(f"t{i}") for i in range(6)}
        await stopping
        return worker.health(), peak, states

    health, peak, states = asyncio.run(scenario())
    assert peak == 2
    assert sorted(s.value for s in states.values() if s) == ["queued"] * 4 + ["started"] * 2
    assert health["released"] == 4
    assert health["processed"] == 2


def _outcomes_sync(tasks: list[Task], registry: TaskRegistry) -> dict[str, Any]:
    with FairQueue(InMemoryBackend(config=queue_config())) as queue:
        queue.push_batch(tasks)
        worker = Worker(worker_config(), RegistryHandler(registry), queue)
        worker.start()
        wait_until(
            lambda: all(
                queue.get_state(t.task_id) in (TaskState.FINISHED, TaskState.FAILED) for t in tasks
            )
        )
        worker.stop(5)
        return {
            t.task_id: (queue.get_state(t.task_id), queue.get_result(t.task_id)) for t in tasks
        } | {"health": _comparable(worker.health())}


def _outcomes_async(tasks: list[Task], registry: TaskRegistry) -> dict[str, Any]:
    async def scenario() -> dict[str, Any]:
        queue = AsyncFairQueue(AsyncInMemoryBackend(config=queue_config()))
        await queue.push_batch(tasks)
        worker = AsyncWorker(worker_config(), RegistryHandler(registry), queue)
        await worker.start()

        def done() -> bool:
            model = queue.backend.model  # type: ignore[attr-defined]
            return all(
                model.get_state(t.task_id) in (TaskState.FINISHED, TaskState.FAILED) for t in tasks
            )

        await async_wait_until(done)
        await worker.stop(5)
        out: dict[str, Any] = {
            t.task_id: (await queue.get_state(t.task_id), await queue.get_result(t.task_id))
            for t in tasks
        }
        out["health"] = _comparable(worker.health())
        return out

    return asyncio.run(scenario())


def _comparable(health: dict[str, Any]) -> dict[str, Any]:
    keys = ("processed", "failed", "retried", "dead", "poisoned", "lease_lost", "in_flight")
    return {k: health[k] for k in keys}


def test_sync_and_async_workers_agree() -> None:
    log: list[tuple[str, Any]] = []
    registry = make_registry(log)
    tasks = [
        registry.get("add")("u1", 1, 2, task_id="add"),
        registry.get("aadd")("u2", 3, 4, task_id="aadd"),
        registry.get("boom")("u1", task_id="boom"),
        registry.get("note")("u3", "hello", task_id="note"),
        Task.create("u2", task_id="unknown", name="nope"),
        Task.create("u2", task_id="badargs", name="add", payload={"args": "x"}),
    ]
    sync = _outcomes_sync(tasks, registry)
    asynchronous = _outcomes_async(tasks, registry)
    assert sync == asynchronous
    assert sync["add"] == (TaskState.FINISHED, 3)
    assert sync["note"] == (TaskState.FINISHED, "hello")
    assert sync["boom"][0] is TaskState.FAILED
    assert sync["health"]["poisoned"] == 2
    assert log == [("note", "hello"), ("note", "hello")]
