"""R4: a live worker loses its lease, a second worker runs the task, the first cannot undo it.

Worker A claims the task and its handler blocks past the lease while A does not heartbeat: A's
heartbeat interval is set far beyond the lease (on its loop, after construction: a ``WorkerConfig``
asking for that is refused with ConfigurationError; this stands for a control thread that is
stalled; the control thread, not the handler, heartbeats, so a busy handler alone cannot stop it,
see the last test). Worker B's reaper returns the expired lease to the queue, B claims the task,
runs it and finishes it. Then A's handler returns (or raises), and A's finish (a batch
``finish_batch``) reports the lease lost, or A's ``fail`` gets ``LeaseLostError``, or A's late
heartbeat finds the lease gone and drops the outcome. Checked every time: B's result is the stored
one, the task is FINISHED, the ``finished`` counter and the ``finished`` events are exactly 1,
nothing went to the retry set or the DLQ, and every direct call A can still make with its stale
lease (finish, fail, heartbeat, release) raises ``LeaseLostError`` and changes nothing.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from fairque_core import AsyncFairQueue, FairQueue, Task, TaskHandler, TaskState, WorkerConfig
from fairque_core.app.worker.pacing import heartbeat_interval
from fairque_core.app.worker.worker import Worker
from fairque_core.app.worker.worker_async import AsyncWorker
from fairque_core.domain.errors import ConfigurationError, LeaseLostError
from fairque_core.ports.hooks import hookimpl
from fairque_redis import aconnect, connect

pytestmark = [pytest.mark.redis, pytest.mark.timeout(60)]

LEASE = 0.6
REAPER = 0.1
BOUND = LEASE + REAPER + 1.0  # redelivery bound: lease + reaper interval + slack
TASK_ID = "r4-task"
TENANT = "acme"
OUTCOMES = ("finish", "fail", "late-heartbeat")


@pytest.fixture(autouse=True)
def _no_autoload(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAIRQUE_DISABLE_PLUGIN_AUTOLOAD", "1")


class Events:
    """Records every task event one queue emits."""

    fairque_plugin_name = "test.r4.events"

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: list[tuple[str, str]] = []

    @hookimpl
    def fairque_task_event(self, event: str, task: Task) -> None:
        with self.lock:
            self.seen.append((event, task.task_id))

    def count(self, event: str) -> int:
        with self.lock:
            return sum(1 for seen, task_id in self.seen if seen == event and task_id == TASK_ID)


def worker_a_config() -> WorkerConfig:
    """One place, no reaper of its own (its heartbeat: see ``stall_heartbeats``)."""
    return WorkerConfig(
        id="A",
        max_concurrent_tasks=1,
        poll_interval_seconds=0.05,
        reaper_interval_seconds=60.0,
        graceful_shutdown_timeout=5.0,
    )


def stall_heartbeats(worker: Worker | AsyncWorker, outcome: str) -> None:
    """No heartbeat within the lease (or a late one): the interval set on the worker's loop,
    as a control thread stalled that long would behave (the config refuses such a value)."""
    with pytest.raises(ConfigurationError):
        heartbeat_interval(WorkerConfig(heartbeat_interval_seconds=2.5 * LEASE), LEASE)
    worker._loop.heartbeat_interval = 2.5 * LEASE if outcome == "late-heartbeat" else 60.0


def worker_b_config() -> WorkerConfig:
    return WorkerConfig(
        id="B",
        max_concurrent_tasks=2,
        poll_interval_seconds=0.05,
        reaper_interval_seconds=REAPER,
        graceful_shutdown_timeout=5.0,
    )


def wait_until(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


async def await_until(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def check_one_finish(
    url: str,
    name: str,
    outcome: str,
    a_health: dict[str, Any],
    b_health: dict[str, Any],
    a_events: Events,
    b_events: Events,
) -> None:
    """The task finished once, by B; A's late outcome changed nothing."""
    with connect(url, queue=name) as queue:
        assert queue.get_state(TASK_ID) is TaskState.FINISHED
        assert queue.get_result(TASK_ID) == {"by": "B"}
        stats = queue.get_stats()
        assert stats["finished"] == 1
        assert stats["claimed"] == 2  # A's claim and B's, nothing else
        assert stats["recovered"] == 1  # the reaper handed A's expired lease back once
        assert (stats["retried"], stats["dead"], stats["dlq"]) == (0, 0, 0)
        assert (stats["leased"], stats["ready"], stats["scheduled"]) == (0, 0, 0)
        assert queue.get_tenant_stats(TENANT)["finished"] == 1
        assert queue.list_dlq() == []
    assert a_events.count("finished") + b_events.count("finished") == 1
    assert b_events.count("finished") == 1
    for event in ("failed", "retried", "dead"):
        assert a_events.count(event) == b_events.count(event) == 0
    assert a_health["lease_lost"] == 1
    assert a_health["processed"] == 0
    assert (a_health["retried"], a_health["dead"]) == (0, 0)
    assert a_health["failed"] == (1 if outcome == "fail" else 0)
    assert a_health["backend_errors"] == 0, a_health["last_error"]
    assert b_health["processed"] == 1
    assert b_health["lease_lost"] == 0
    assert b_health["backend_errors"] == 0, b_health["last_error"]


def stale_calls_are_refused(queue: FairQueue, stale: Task) -> None:
    """Every write A can still attempt with its old lease raises LeaseLostError."""
    assert stale.lease is not None
    with pytest.raises(LeaseLostError) as lost:
        queue.finish(stale, {"by": "A, late"})
    assert lost.value.task_id == TASK_ID
    with pytest.raises(LeaseLostError):
        queue.fail(stale, RuntimeError("A, late"))
    with pytest.raises(LeaseLostError):
        queue.heartbeat(stale)
    with pytest.raises(LeaseLostError):
        queue.release(stale)
    assert queue.finish_batch([(stale, {"by": "A, late"})]) == [False]


class BlockingHandler(TaskHandler):
    """A's handler: keeps the task (and its lease) and blocks until released."""

    def __init__(self, outcome: str) -> None:
        self.outcome = outcome
        self.started = threading.Event()
        self.release = threading.Event()
        self.started_at = 0.0
        self.task: Task | None = None
        self.runs = 0

    def process_task(self, task: Task) -> object:
        self.runs += 1
        self.task = task
        self.started_at = time.monotonic()
        self.started.set()
        if not self.release.wait(20):
            raise AssertionError("never released")
        if self.outcome == "fail":
            raise RuntimeError("A fails after its lease was lost")
        return {"by": "A"}


class QuickHandler(TaskHandler):
    """B's handler: returns at once."""

    def __init__(self) -> None:
        self.started_at: dict[str, float] = {}

    def process_task(self, task: Task) -> object:
        self.started_at[task.task_id] = time.monotonic()
        return {"by": "B"}


@pytest.mark.parametrize("outcome", OUTCOMES)
def test_thread_worker_that_lost_its_lease_cannot_overwrite(
    valkey_server: Any, outcome: str
) -> None:
    name = f"r4-{uuid.uuid4().hex[:10]}"
    a_events, b_events = Events(), Events()
    queue_a = connect(valkey_server.url, queue=name, lease_seconds=LEASE, plugins=[a_events])
    queue_b = connect(valkey_server.url, queue=name, lease_seconds=LEASE, plugins=[b_events])
    blocking, quick = BlockingHandler(outcome), QuickHandler()
    worker_a = Worker(worker_a_config(), blocking, queue_a)
    stall_heartbeats(worker_a, outcome)
    worker_b = Worker(worker_b_config(), quick, queue_b)
    try:
        queue_a.push(Task.create(TENANT, payload={"n": 1}, task_id=TASK_ID))
        worker_a.start()
        assert blocking.started.wait(5)
        assert queue_a.get_state(TASK_ID) is TaskState.STARTED
        worker_b.start()
        wait_until(lambda: queue_b.get_state(TASK_ID) is TaskState.FINISHED, 5, "B finished")
        redelivered = quick.started_at[TASK_ID] - blocking.started_at
        assert LEASE - 0.1 <= redelivered <= BOUND, redelivered
        assert queue_b.get_result(TASK_ID) == {"by": "B"}
        if outcome == "late-heartbeat":  # A learns of the loss from its heartbeat, handler busy
            wait_until(lambda: worker_a.health()["lease_lost"] == 1, 5, "A's heartbeat")
            assert blocking.runs == 1
            assert not blocking.release.is_set()
        blocking.release.set()
        wait_until(lambda: worker_a.health()["lease_lost"] == 1, 5, "A's outcome refused")
        wait_until(lambda: worker_a.health()["in_flight"] == 0, 5, "A let go of the task")
        assert worker_a.state == worker_b.state == "running"
    finally:
        blocking.release.set()
        assert worker_a.stop(10)
        assert worker_b.stop(10)
    assert blocking.runs == 1  # A ran it once, B once: one duplicate execution, as documented
    assert list(quick.started_at) == [TASK_ID]
    check_one_finish(
        valkey_server.url,
        name,
        outcome,
        worker_a.health(),
        worker_b.health(),
        a_events,
        b_events,
    )
    assert blocking.task is not None
    try:
        stale_calls_are_refused(queue_a, blocking.task)
    finally:
        queue_a.close()
        queue_b.close()
    # the refused calls changed nothing either
    check_one_finish(
        valkey_server.url,
        name,
        outcome,
        worker_a.health(),
        worker_b.health(),
        a_events,
        b_events,
    )


class AsyncBlockingHandler(TaskHandler):
    """A's async handler: keeps the task and awaits its release."""

    def __init__(self, outcome: str) -> None:
        self.outcome = outcome
        self.started: asyncio.Event | None = None
        self.release: asyncio.Event | None = None
        self.started_at = 0.0
        self.task: Task | None = None
        self.runs = 0

    async def process_task(self, task: Task) -> object:
        assert self.started is not None
        assert self.release is not None
        self.runs += 1
        self.task = task
        self.started_at = time.monotonic()
        self.started.set()
        await asyncio.wait_for(self.release.wait(), 20)
        if self.outcome == "fail":
            raise RuntimeError("A fails after its lease was lost")
        return {"by": "A"}


class AsyncQuickHandler(TaskHandler):
    def __init__(self) -> None:
        self.started_at: dict[str, float] = {}

    async def process_task(self, task: Task) -> object:
        self.started_at[task.task_id] = time.monotonic()
        return {"by": "B"}


async def async_stale_calls_are_refused(queue: AsyncFairQueue, stale: Task) -> None:
    with pytest.raises(LeaseLostError):
        await queue.finish(stale, {"by": "A, late"})
    with pytest.raises(LeaseLostError):
        await queue.fail(stale, RuntimeError("A, late"))
    with pytest.raises(LeaseLostError):
        await queue.heartbeat(stale)
    with pytest.raises(LeaseLostError):
        await queue.release(stale)
    assert await queue.finish_batch([(stale, {"by": "A, late"})]) == [False]


@pytest.mark.parametrize("outcome", OUTCOMES)
def test_async_worker_that_lost_its_lease_cannot_overwrite(
    valkey_server: Any, outcome: str
) -> None:
    name = f"r4a-{uuid.uuid4().hex[:10]}"
    a_events, b_events = Events(), Events()
    blocking, quick = AsyncBlockingHandler(outcome), AsyncQuickHandler()

    async def scenario() -> tuple[dict[str, Any], dict[str, Any]]:
        blocking.started, blocking.release = asyncio.Event(), asyncio.Event()
        url = valkey_server.url
        queue_a = await aconnect(url, queue=name, lease_seconds=LEASE, plugins=[a_events])
        queue_b = await aconnect(url, queue=name, lease_seconds=LEASE, plugins=[b_events])
        worker_a = AsyncWorker(worker_a_config(), blocking, queue_a)
        stall_heartbeats(worker_a, outcome)
        worker_b = AsyncWorker(worker_b_config(), quick, queue_b)
        try:
            await queue_a.push(Task.create(TENANT, payload={"n": 1}, task_id=TASK_ID))
            await worker_a.start()
            await asyncio.wait_for(blocking.started.wait(), 5)
            assert await queue_a.get_state(TASK_ID) is TaskState.STARTED
            await worker_b.start()
            await await_until(lambda: TASK_ID in quick.started_at, 5, "B started")
            await await_until(lambda: worker_b.health()["processed"] == 1, 5, "B finished")
            assert await queue_b.get_state(TASK_ID) is TaskState.FINISHED
            redelivered = quick.started_at[TASK_ID] - blocking.started_at
            assert LEASE - 0.1 <= redelivered <= BOUND, redelivered
            if outcome == "late-heartbeat":
                await await_until(lambda: worker_a.health()["lease_lost"] == 1, 5, "A's beat")
                assert blocking.runs == 1
            assert not blocking.release.is_set()
            blocking.release.set()
            await await_until(lambda: worker_a.health()["lease_lost"] == 1, 5, "A refused")
            await await_until(lambda: worker_a.health()["in_flight"] == 0, 5, "A let go")
            assert worker_a.state == worker_b.state == "running"
        finally:
            blocking.release.set()
            assert await worker_a.stop(10)
            assert await worker_b.stop(10)
        try:
            assert blocking.task is not None
            await async_stale_calls_are_refused(queue_a, blocking.task)
        finally:
            await queue_a.close()
            await queue_b.close()
        return worker_a.health(), worker_b.health()

    a_health, b_health = asyncio.run(scenario())
    assert blocking.runs == 1
    assert list(quick.started_at) == [TASK_ID]
    check_one_finish(valkey_server.url, name, outcome, a_health, b_health, a_events, b_events)


def test_a_gil_bound_handler_keeps_its_lease(valkey_server: Any) -> None:
    """The control for the knob above: a handler spinning in pure Python (holding the GIL but
    for the interpreter's switch interval) for 3 leases does NOT lose its lease, because the
    control thread still heartbeats; B, running beside it, never gets the task."""
    name = f"r4g-{uuid.uuid4().hex[:10]}"
    lease, spin = 1.0, 3.0

    class Spinner(TaskHandler):
        def process_task(self, task: Task) -> object:
            end = time.monotonic() + spin
            n = 0
            while time.monotonic() < end:
                n += 1
            return {"by": "A", "spins": n > 0}

    queue_a = connect(valkey_server.url, queue=name, lease_seconds=lease)
    queue_b = connect(valkey_server.url, queue=name, lease_seconds=lease)
    quick = QuickHandler()
    config_a = WorkerConfig(id="A", max_concurrent_tasks=1, poll_interval_seconds=0.05)
    worker_a = Worker(config_a, Spinner(), queue_a)
    worker_b = Worker(worker_b_config(), quick, queue_b)
    try:
        queue_a.push(Task.create(TENANT, task_id=TASK_ID))
        worker_a.start()
        wait_until(lambda: queue_a.get_state(TASK_ID) is TaskState.STARTED, 5, "A claimed")
        worker_b.start()
        wait_until(lambda: queue_a.get_state(TASK_ID) is TaskState.FINISHED, spin + 5, "done")
    finally:
        assert worker_a.stop(10)
        assert worker_b.stop(10)
    try:
        assert queue_a.get_result(TASK_ID) == {"by": "A", "spins": True}
        stats = queue_a.get_stats()
        assert (stats["finished"], stats["claimed"], stats["recovered"]) == (1, 1, 0)
        assert quick.started_at == {}
        assert worker_a.health()["lease_lost"] == 0
        assert worker_a.health()["processed"] == 1
    finally:
        queue_a.close()
        queue_b.close()
