"""A worker's buffer starts a light tenant's task ahead of a flood it already holds (ADR 37).

A real ``Worker`` on Valkey with two places and a fixed prefetch of 6. The flood's tasks block
until the test lets one finish, so nothing moves unless the test says so: the checks are on
the order tasks start in and on the worker's counters, never on how long anything took. The
timeouts below only bound a hang.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable

import pytest

from fairque_core import Task, TaskHandler, TaskState, Worker, WorkerConfig
from fairque_redis import connect
from fairque_redis.servers.embedded import EmbeddedValkey

pytestmark = [
    pytest.mark.redis,
    pytest.mark.timeout(60),
    pytest.mark.usefixtures("handoff_on_and_off"),
]  # ADR 65

HANG = 20.0  # only a hung worker takes this long


class Gate(TaskHandler):
    """Records the start order; a flood task waits for a permit, a light one returns."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.permits = threading.Semaphore(0)
        self.open = threading.Event()

    def process_task(self, task: Task) -> object:
        self.started.append(task.task_id)
        if task.tenant == "flood" and not self.open.is_set():
            self.permits.acquire(timeout=HANG)
        return None


def wait_until(cond: Callable[[], bool], what: str, timeout: float = HANG) -> bool:
    """Poll ``cond`` (``what`` names it for the reader) until true or ``timeout``."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def test_a_light_task_starts_before_the_flood_in_the_buffer(
    valkey_server: EmbeddedValkey,
) -> None:
    queue = connect(valkey_server.url, queue=f"turns{uuid.uuid4().hex[:10]}")
    gate = Gate()
    config = WorkerConfig(
        id="turns", max_concurrent_tasks=2, poll_interval_seconds=30.0, reaper_interval_seconds=30.0
    )
    worker = Worker(config, gate, queue, prefetch=6)
    try:
        queue.push_batch([Task.create("flood") for _ in range(50)])
        worker.start()

        def full() -> bool:
            health = worker.health()
            return bool(health["executing"] == 2 and health["buffered"] == 6)

        assert wait_until(full, "two flood tasks running, six in the buffer")
        light = str(queue.push(Task.create("light")))
        # let flood tasks finish one at a time until a claim has brought the light task in;
        # each finished task frees one place, which the buffer refills with a flood task
        for _ in range(20):
            started = len(gate.started)
            gate.permits.release()
            assert wait_until(lambda n=started: len(gate.started) > n, "a place refilled")
            if wait_until(lambda: queue.get_state(light) == TaskState.STARTED, "claimed", 0.5):
                break
        else:
            pytest.fail("the light task was never claimed")
        # the claim's reply reached the worker (its claimed count covers the light task), and
        # both places are taken by flood tasks: the light task waits in the buffer
        dispatched = sum(f.dispatched for f in queue.get_tenant_fairness(["flood", "light"]))
        assert wait_until(lambda: worker.health()["claimed"] == dispatched, "the claim booked")
        assert light not in gate.started
        assert worker.health()["buffered"] >= 2  # flood tasks claimed before it are there too
        before = len(gate.started)
        gate.permits.release()  # one place frees: the light task takes it, not the flood
        assert wait_until(lambda: len(gate.started) > before, "a place refilled")
        assert gate.started[before] == light, f"{gate.started[before]} of the flood started first"
    finally:
        gate.open.set()
        for _ in range(4):
            gate.permits.release()
        assert worker.stop(10)
        queue.close()
