"""The reliability plan's R15: retries under a real worker come when the backoff says, never
before. Tasks that always fail, retry base 0.2 s, factor 2, no jitter, three retries: each
task runs four times, the gaps between its runs are at least 0.2, 0.4 and 0.8 s (the server
holds a retried task in the delayed set until its due time), and at most that plus a loose
bound for the worker's wake-up on this shared machine; then it is in the DLQ as failed. On
Valkey 9 and Redis 7."""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections import defaultdict
from typing import Any

import pytest

from fairque_core import FailureType, Task, TaskHandler, TaskState, Worker, WorkerConfig
from fairque_redis import connect

pytestmark = [pytest.mark.redis]

BASE, FACTOR, RETRIES = 0.2, 2.0, 3
#: how late a retry may start after its due time: the delayed task is moved at the next claim,
#: which an idle worker makes within its poll interval (0.05 s here); the rest is this shared
#: 2-core machine's scheduling
LATE = 3.0


class AlwaysFails(TaskHandler):
    def __init__(self) -> None:
        self.starts: dict[str, list[float]] = defaultdict(list)
        self.lock = threading.Lock()

    def process_task(self, task: Task) -> Any:
        with self.lock:
            self.starts[task.task_id].append(time.monotonic())
        raise RuntimeError("always")


def test_retries_come_no_sooner_than_the_backoff_and_not_much_later(
    valkey_and_redis7_url: str,
) -> None:
    name = f"rt-{uuid.uuid4().hex[:8]}"
    queue = connect(
        valkey_and_redis7_url,
        queue=name,
        retry_base_seconds=BASE,
        retry_factor=FACTOR,
        retry_jitter=0.0,
    )
    handler = AlwaysFails()
    worker = Worker(WorkerConfig(id="rt", poll_interval_seconds=0.05), handler, queue)
    try:
        ids = queue.push_batch(
            [Task.create(f"u{k}", payload={}, max_retries=RETRIES) for k in range(8)]
        )
        worker.start()
        deadline = time.monotonic() + 30
        while not all(queue.get_state(t) is TaskState.FAILED for t in ids):
            assert time.monotonic() < deadline, dict(handler.starts)
            time.sleep(0.05)
    finally:
        worker.stop(10)
    dlq = {e.original_task.task_id: e for e in queue.list_dlq(limit=100)}
    queue.close()
    for task_id in ids:
        starts = handler.starts[task_id]
        assert len(starts) == RETRIES + 1, (task_id, starts)
        gaps = [b - a for a, b in itertools.pairwise(starts)]
        for n, gap in enumerate(gaps):
            ideal = BASE * FACTOR**n
            # never before the due time (the failure is recorded after the start: the gap
            # from start to start is at least the delay)
            assert gap >= ideal - 0.01, (task_id, n, gaps)
            assert gap <= ideal + LATE, (task_id, n, gaps)
        assert dlq[task_id].failure_type is FailureType.FAILED
