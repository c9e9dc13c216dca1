"""Fixtures of the dashboard tests: one queue seeded through the public API, on the in-memory
model and on a real Valkey, and a Starlette TestClient of the dashboard over it.

The dashboard reads through an :class:`AsyncFairQueue` that it opens in its lifespan (on the
test client's event loop); the tests write through a :class:`FairQueue` on the same queue.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import pytest
from starlette.testclient import TestClient

from fairque_core import (
    AsyncFairQueue,
    AsyncInMemoryBackend,
    FairQueue,
    FairQueueConfig,
    InMemoryBackend,
    Task,
)
from fairque_core.app.backend_loading import open_async_backend, open_backend
from fairque_dashboard import DashboardSettings, create_app

TOKEN = "operator-secret-token"


@attrs.define
class Env:
    """A queue to seed (``queue``) and a way to build a dashboard over the same queue."""

    kind: str
    queue: FairQueue
    opener: Callable[[], Any]
    url: str

    def client(self, **settings: Any) -> TestClient:
        options: dict[str, Any] = {"sample_interval": 0, "target": self.url}
        options.update(settings)
        app = create_app(self.opener, DashboardSettings(**options))
        return TestClient(app, raise_server_exceptions=False)


def _memory_env() -> Env:
    model = InMemoryBackend(queue=f"dash-{uuid.uuid4().hex[:10]}")

    async def open_memory() -> AsyncFairQueue:
        return AsyncFairQueue(AsyncInMemoryBackend(model=model))

    return Env(kind="memory", queue=FairQueue(model), opener=open_memory, url="memory://")


@pytest.fixture
def memory_env() -> Iterator[Env]:
    """For what does not depend on the backend (input checks, static files)."""
    env = _memory_env()
    yield env
    env.queue.close()


@pytest.fixture(params=["memory", "valkey"])
def env(request: pytest.FixtureRequest) -> Iterator[Env]:
    if request.param == "memory":
        memory = _memory_env()
        yield memory
        memory.queue.close()
        return
    name = f"dash-{uuid.uuid4().hex[:10]}"
    server = request.getfixturevalue("valkey_server")
    config = FairQueueConfig.from_dict(
        {"redis": {"url": str(server.url)}, "queue": {"name": name}}, env={}
    )

    async def open_valkey() -> AsyncFairQueue:
        return AsyncFairQueue(open_async_backend(config))

    queue = FairQueue(open_backend(config))
    yield Env(kind="valkey", queue=queue, opener=open_valkey, url=str(server.url))
    queue.close()


def dead_letter(queue: FairQueue, tenant: str, task_id: str, payload: Any = None) -> None:
    """Push a task with no retries, claim it and fail it: it lands in the DLQ."""
    queue.push(Task.create(tenant, payload=payload or {}, task_id=task_id, max_retries=0))
    claimed = queue.claim([tenant])
    assert claimed is not None
    assert claimed.task_id == task_id
    queue.fail(claimed, RuntimeError(f"boom for {task_id}"))


@pytest.fixture
def seeded(env: Env) -> Env:
    """alice: 3 ready; bob: 1 ready, 1 running; carol: 2 in the DLQ; one task with a script."""
    q = env.queue
    for i in range(3):
        q.push(Task.create("alice", payload={"n": i}, task_id=f"alice-{i}"))
    q.push(Task.create("bob", payload={"n": 0}, task_id="bob-0"))
    q.push(Task.create("bob", payload={"n": 1}, task_id="bob-1"))
    assert q.claim(["bob"]) is not None
    dead_letter(q, "carol", "carol-dead-0")
    dead_letter(q, "carol", "carol-dead-1")
    q.push(
        Task.create(
            "mallory",
            payload={"html": "<script>alert('x')</script>", "zbig": "y" * 20_000},
            task_id="evil",
        )
    )
    return env
