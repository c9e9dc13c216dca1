"""A worker refuses, at construction, parts it could never run with: TypeError for a config,
handler or queue of the wrong kind (they used to fail later with an AttributeError, and an
AsyncWorker on a sync queue looped for ever on a TypeError it logged), ConfigurationError for
a heartbeat interval that is not shorter than the queue's lease (every lease would be lost)."""

from __future__ import annotations

from typing import Any

import pytest

from fairque_core import (
    AsyncFairQueue,
    AsyncWorker,
    ConfigurationError,
    FairQueue,
    InMemoryBackend,
    QueueConfig,
    Task,
    TaskHandler,
    Worker,
    WorkerConfig,
)
from fairque_core.memory.async_model import AsyncInMemoryBackend


class Noop(TaskHandler):
    def process_task(self, task: Task) -> object:
        return None


def queues() -> tuple[FairQueue, AsyncFairQueue]:
    config = QueueConfig(lease_seconds=1.0)
    return FairQueue(InMemoryBackend(config=config)), AsyncFairQueue(
        AsyncInMemoryBackend(config=config)
    )


@pytest.mark.parametrize(
    ("config", "handler", "queue", "needle"),
    [
        (None, Noop(), "sync", "config must be a WorkerConfig"),
        ({"max_concurrent_tasks": 1}, Noop(), "sync", "config must be a WorkerConfig"),
        (WorkerConfig(), None, "sync", "handler must be a TaskHandler"),
        (WorkerConfig(), lambda task: 1, "sync", "handler must be a TaskHandler"),
        (WorkerConfig(), Noop(), None, "queue must be a"),
    ],
)
def test_parts_of_the_wrong_kind_are_type_errors(
    config: Any, handler: Any, queue: Any, needle: str
) -> None:
    sync_queue, async_queue = queues()
    chosen = {"sync": (sync_queue, async_queue), None: (None, None)}[queue]
    with pytest.raises(TypeError, match=needle):
        Worker(config, handler, chosen[0])
    with pytest.raises(TypeError, match=needle):
        AsyncWorker(config, handler, chosen[1])


def test_each_worker_drives_its_own_face_of_the_queue() -> None:
    sync_queue, async_queue = queues()
    with pytest.raises(TypeError, match="AsyncWorker drives a AsyncFairQueue"):
        AsyncWorker(WorkerConfig(), Noop(), sync_queue)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Worker drives a FairQueue"):
        Worker(WorkerConfig(), Noop(), async_queue)  # type: ignore[arg-type]
    assert Worker(WorkerConfig(), Noop(), sync_queue).health()["state"] == "new"
    assert AsyncWorker(WorkerConfig(), Noop(), async_queue).health()["state"] == "new"


@pytest.mark.parametrize("interval", [1.0, 5.0])
def test_a_heartbeat_interval_not_shorter_than_the_lease_is_refused(interval: float) -> None:
    sync_queue, async_queue = queues()  # lease 1 s
    config = WorkerConfig(heartbeat_interval_seconds=interval)
    with pytest.raises(ConfigurationError, match="shorter than the queue's lease") as info:
        Worker(config, Noop(), sync_queue)
    assert info.value.path == "worker.heartbeat_interval_seconds"
    with pytest.raises(ConfigurationError):
        AsyncWorker(config, Noop(), async_queue)
    shorter = WorkerConfig(heartbeat_interval_seconds=0.9)
    assert Worker(shorter, Noop(), sync_queue).health()["state"] == "new"
