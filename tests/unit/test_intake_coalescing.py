"""Concurrent ``AsyncFairQueue.push_intake`` calls share intake appends (ADR 35, 47), each
caller keeping what its own call would have given it: its handle (``intake`` True, not a
duplicate), its ``pushed`` event in its own context, its own error, its own cancellation.

On the reference model, with a gate in front of its append that holds the first call in flight
while the test lines the others up, so which pushes share a call is exact. No timed assertion.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Sequence
from typing import Any

import pytest

from fairque_core import (
    AsyncFairQueue,
    AsyncInMemoryBackend,
    Message,
    RedisConnectionError,
    Task,
    TaskValidationError,
)
from fairque_core.app.engine.handles_async import AsyncTaskHandle
from fairque_core.ports.hooks import hookimpl

pytestmark = pytest.mark.timeout(60)


class GatedIntake(AsyncInMemoryBackend):
    """The reference model with a gate before each intake append (open unless a test closes
    it), recording how many messages each append carried; ``refuse`` tenants are refused
    whole, before anything is stored, ``broken`` makes every append a connection error."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.gate.set()
        self.calls: list[int] = []
        self.refuse: set[str] = set()
        self.broken = False

    async def push_intake(self, messages: Sequence[Message]) -> None:
        self.calls.append(len(messages))
        await self.gate.wait()
        if self.broken:
            raise RedisConnectionError("push_intake: the connection is gone")
        if any(m.tenant in self.refuse for m in messages):
            raise TaskValidationError("tenant", "refused", "refused by this backend")
        await super().push_intake(messages)


class Recorder:
    """Notes, per ``pushed`` event, the pusher's context variable and the event's info."""

    def __init__(self, var: contextvars.ContextVar[str]) -> None:
        self.var = var
        self.seen: dict[str, tuple[str, dict[str, Any]]] = {}

    @hookimpl
    def fairque_task_event(self, event: str, task: Task, info: dict[str, Any]) -> None:
        if event == "pushed":
            self.seen[task.task_id] = (self.var.get(""), dict(info))


async def _line_up(queue: AsyncFairQueue, gated: GatedIntake, calls: list[Any]) -> list[Any]:
    """Wait until the first of ``calls`` (futures of push_intake) is in flight and every other
    one waits in the coalescer, then open the gate; answers (or exceptions) in order."""
    while not gated.calls or len(queue._intake_coalescer._waiting) < len(calls) - 1:
        await asyncio.sleep(0)
    gated.gate.set()
    return list(await asyncio.gather(*calls, return_exceptions=True))


def test_grouped_callers_get_intake_handles_and_their_own_events() -> None:
    var: contextvars.ContextVar[str] = contextvars.ContextVar("who")
    recorder = Recorder(var)

    async def scenario() -> None:
        gated = GatedIntake()
        queue = AsyncFairQueue(gated, plugins=[recorder])
        tasks = [Task.create(f"t{i % 3}", payload={"i": i}) for i in range(30)]

        async def push_as(task: Task) -> Any:
            var.set(task.task_id)
            return await queue.push_intake(task)

        gated.gate.clear()
        handles = await _line_up(queue, gated, [asyncio.ensure_future(push_as(t)) for t in tasks])
        assert gated.calls == [1, 29]  # the leader alone, then one append for the others
        assert queue._intake_coalescer.groups == 1
        assert handles == [t.task_id for t in tasks]
        for handle in handles:
            assert type(handle) is AsyncTaskHandle
            assert handle.intake
            assert not handle.duplicate
            assert "intake" in vars(handle)
            assert "duplicate" not in vars(handle)
        assert recorder.seen == {
            t.task_id: (t.task_id, {"duplicate": False, "intake": True}) for t in tasks
        }
        assert await queue.intake_size() == 30
        # intake order is the order the callers arrived in
        got = await queue.claim_batch(30)
        assert sorted(t.task_id for t in got) == sorted(t.task_id for t in tasks)
        for tenant in ("t0", "t1", "t2"):
            mine = [t.task_id for t in tasks if t.tenant == tenant]
            assert [t.task_id for t in got if t.tenant == tenant] == mine

    asyncio.run(scenario())


def test_a_refused_group_is_sent_again_one_by_one() -> None:
    async def scenario() -> None:
        gated = GatedIntake()
        gated.refuse = {"bad"}
        queue = AsyncFairQueue(gated)
        tasks = [Task.create("bad" if i in (2, 5) else "good") for i in range(8)]
        gated.gate.clear()
        answers = await _line_up(
            queue, gated, [asyncio.ensure_future(queue.push_intake(t)) for t in tasks]
        )
        for i, answer in enumerate(answers):
            if i in (2, 5):
                assert isinstance(answer, TaskValidationError)
            else:
                assert answer == tasks[i].task_id
                assert answer.intake
        assert gated.calls == [1, 7, 1, 1, 1, 1, 1, 1, 1]  # the group, then each on its own
        assert await queue.intake_size() == 6

    asyncio.run(scenario())


def test_a_failed_append_is_every_callers_error() -> None:
    async def scenario() -> None:
        gated = GatedIntake()
        queue = AsyncFairQueue(gated)
        gated.broken = True
        gated.gate.clear()
        calls = [asyncio.ensure_future(queue.push_intake(Task.create("u"))) for _ in range(5)]
        answers = await _line_up(queue, gated, calls)
        assert all(isinstance(a, RedisConnectionError) for a in answers), answers
        assert gated.calls == [1, 4]  # no resend: not a refusal

    asyncio.run(scenario())


def test_a_caller_canceled_while_waiting_is_left_out() -> None:
    async def scenario() -> None:
        gated = GatedIntake()
        queue = AsyncFairQueue(gated)
        lead, gone, kept = Task.create("a"), Task.create("b"), Task.create("c")
        gated.gate.clear()
        first = asyncio.ensure_future(queue.push_intake(lead))
        while not gated.calls:
            await asyncio.sleep(0)
        waiting = [asyncio.ensure_future(queue.push_intake(t)) for t in (gone, kept)]
        while len(queue._intake_coalescer._waiting) < 2:
            await asyncio.sleep(0)
        waiting[0].cancel()
        gated.gate.set()
        assert await first == lead.task_id
        assert await waiting[1] == kept.task_id
        with pytest.raises(asyncio.CancelledError):
            await waiting[0]
        assert gated.calls == [1, 1]  # the canceled push was never sent
        got = await queue.claim_batch(5)
        assert sorted(t.task_id for t in got) == sorted([lead.task_id, kept.task_id])

    asyncio.run(scenario())


def test_without_the_intake_grouped_calls_are_pushes() -> None:
    """A backend without ``push_intake``: the coalescer's calls are pushes, whose handles say
    duplicate for a known id and are not marked intake."""

    class NoIntake(AsyncInMemoryBackend):
        def __getattribute__(self, name: str) -> Any:
            if name == "push_intake":
                raise AttributeError(name)
            return super().__getattribute__(name)

    async def scenario() -> None:
        backend = NoIntake()
        queue = AsyncFairQueue(backend)
        assert not queue.takes_intake
        known = Task.create("u")
        await queue.push(known)
        tasks = [known, *(Task.create("u") for _ in range(4))]
        handles = await asyncio.gather(*(queue.push_intake(t) for t in tasks))
        assert handles == [t.task_id for t in tasks]
        assert [h.duplicate for h in handles] == [True, False, False, False, False]
        assert not any(h.intake for h in handles)

    asyncio.run(scenario())
