"""An AsyncWorker runs sync handlers on a thread pool of its own, as large as its places.

They ran on the event loop's default pool, ``min(32, cpus + 4)`` threads (6 on this 2-core
machine), shared with everything else on the loop: a worker with 10 places peaked at 6
handlers, the other tasks timed out before they started, and threads stuck past their
timeout starved new tasks altogether.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
import uuid
from typing import Any

import pytest

from fairque_core import (
    AsyncWorker,
    RegistryHandler,
    Task,
    TaskHandler,
    TaskRegistry,
    TaskState,
    WorkerConfig,
)
from fairque_redis import aconnect

pytestmark = [
    pytest.mark.redis,
    pytest.mark.timeout(60),
    pytest.mark.usefixtures("handoff_on_and_off"),
]  # ADR 65

PLACES = (os.cpu_count() or 1) + 6  # past the loop's default pool of min(32, cpus + 4)


class _Peak:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now = 0
        self.peak = 0

    def run(self) -> str:
        with self.lock:
            self.now += 1
            self.peak = max(self.peak, self.now)
        time.sleep(0.6)
        with self.lock:
            self.now -= 1
        return "ok"


def _registry_handler(peak: _Peak) -> RegistryHandler:
    registry = TaskRegistry()

    @registry.task("sleepy")
    def sleepy() -> str:
        return peak.run()

    return RegistryHandler(registry)


class _Plain(TaskHandler):
    def __init__(self, peak: _Peak) -> None:
        self.peak = peak

    def process_task(self, task: Task) -> Any:
        return self.peak.run()


@pytest.mark.parametrize("kind", ["registry", "plain"])
def test_every_place_runs_a_sync_handler_at_once(valkey_server: Any, kind: str) -> None:
    peak = _Peak()
    handler = _registry_handler(peak) if kind == "registry" else _Plain(peak)
    config = WorkerConfig(
        id=f"threads-{kind}", max_concurrent_tasks=PLACES, task_timeout_seconds=5.0
    )

    async def scenario() -> None:
        queue = await aconnect(valkey_server.url, queue=f"thr-{uuid.uuid4().hex[:8]}")
        async with queue:
            tasks = [Task.create(f"t{n}", name="sleepy") for n in range(PLACES)]
            handles = await queue.push_batch(tasks)
            worker = AsyncWorker(config, handler, queue)
            await worker.start()
            try:
                for handle in handles:
                    assert await handle.get(timeout=20) == "ok"
            finally:
                await worker.stop(5)
            assert {await queue.get_state(h.task_id) for h in handles} == {TaskState.FINISHED}

    asyncio.run(scenario())
    assert peak.peak == PLACES
