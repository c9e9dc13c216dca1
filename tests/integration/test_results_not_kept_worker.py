"""Results you don't keep (ADR 78) through a real worker on Valkey: a queue whose config says
``results: none`` drains without leaving a per-task key, through the worker's combined
acknowledgements; a task a producer waited on (armed before its finish) keeps its result, and a
task pushed with ``keep_result=True`` keeps its record."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
import redis

from fairque_core import (
    FairQueue,
    QueueConfig,
    RegistryHandler,
    TaskNotFoundError,
    TaskRegistry,
    TaskState,
    Worker,
    WorkerConfig,
)
from fairque_redis.backends.backend import RedisBackend

pytestmark = pytest.mark.redis

registry = TaskRegistry()
N = 40


@registry.task("double", max_retries=0)
def double(n: int) -> int:
    return n * 2


def test_a_queue_that_keeps_no_results_drains_clean(valkey_server: Any) -> None:
    name = "nokeep-" + uuid.uuid4().hex[:8]
    config = QueueConfig(name=name, results="none")
    backend = RedisBackend.from_url(valkey_server.url, queue=name, config=config)
    client = redis.Redis.from_url(valkey_server.url)
    with FairQueue(backend, config=config) as queue:
        handles = [queue.push(double(f"u{n % 4}", n)) for n in range(N)]
        kept = queue.push(double.create("u0", 100, keep_result=True))
        waited = handles[7]
        assert backend.wait_done(waited.task_id, 0) is False  # armed, as a get() starts
        worker = Worker(
            WorkerConfig(id="w-" + uuid.uuid4().hex[:6], max_concurrent_tasks=8),
            RegistryHandler(registry),
            queue,
        )
        worker.start()
        try:
            assert waited.get(timeout=20) == 14
            deadline = time.monotonic() + 20
            while queue.get_stats()["finished"] < N + 1 and time.monotonic() < deadline:
                time.sleep(0.02)
        finally:
            worker.stop()
        assert queue.get_stats()["finished"] == N + 1
        assert kept.get(timeout=1) == 200
        gone = [h for h in handles if h is not waited]
        assert all(queue.get_state(h.task_id) is None for h in gone)
        with pytest.raises(TaskNotFoundError):
            gone[0].get(timeout=1)
        assert queue.get_state(waited.task_id) is TaskState.FINISHED
        keys = {k.decode() for k in client.scan_iter(match=f"fq:{{{name}}}:task:*")}
        assert keys == {
            f"fq:{{{name}}}:task:{waited.task_id}",
            f"fq:{{{name}}}:task:{kept.task_id}",
        }
        for k in client.scan_iter(match=f"fq:{{{name}}}:*"):
            client.delete(k)
    client.close()
