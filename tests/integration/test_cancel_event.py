"""``cancel`` sends a ``canceled`` task event: the event and the ``fairque.tasks.canceled``
counter fed by it were documented, but nothing sent the event (the counter stayed absent
while ``get_stats()["canceled"]`` counted)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from fairque_core import AsyncFairQueue, FairQueue, Task
from fairque_core.ports.hooks import hookimpl
from fairque_redis import aconnect, connect

pytestmark = pytest.mark.redis


class _Events:
    fairque_plugin_name = "test.cancel.events"

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str]] = []

    @hookimpl
    def fairque_task_event(self, event: str, task: Task) -> None:
        self.seen.append((event, task.task_id, task.tenant))


def test_cancel_sends_one_canceled_event_for_the_task_it_canceled(valkey_server: Any) -> None:
    events = _Events()
    name = "cev-" + uuid.uuid4().hex[:8]
    with connect(valkey_server.url, queue=name, plugins=[events]) as queue:
        assert isinstance(queue, FairQueue)
        parent = queue.push(Task.create("acme"))
        child = queue.push(Task.create("acme", depends_on=[parent.task_id]))
        assert queue.cancel(parent.task_id) is True
        assert queue.cancel(parent.task_id) is False  # already canceled: no second event
        assert queue.cancel("no-such-task") is False
        canceled = [e for e in events.seen if e[0] == "canceled"]
        assert canceled == [("canceled", parent.task_id, "acme")]
        assert queue.get_stats()["canceled"] == 2  # the child went with it
        assert queue.get_state(child.task_id) is not None


def test_async_cancel_sends_the_event_too(valkey_server: Any) -> None:
    events = _Events()

    async def scenario() -> None:
        name = "acev-" + uuid.uuid4().hex[:8]
        queue = await aconnect(valkey_server.url, queue=name, plugins=[events])
        async with queue:
            assert isinstance(queue, AsyncFairQueue)
            handle = await queue.push(Task.create("acme"))
            assert await queue.cancel(handle.task_id) is True
        assert [e for e in events.seen if e[0] == "canceled"] == [
            ("canceled", handle.task_id, "acme")
        ]

    asyncio.run(scenario())
