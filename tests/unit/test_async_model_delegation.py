"""AsyncInMemoryBackend's methods made from the model's (``_at_once``): the same public methods
and parameters as InMemoryBackend, each a coroutine function that runs the model's method at
once on the shared model and returns or raises what it does."""

from __future__ import annotations

import asyncio
import inspect

import pytest

from fairque_core import Message, Priority
from fairque_core.memory import AsyncInMemoryBackend, InMemoryBackend
from fairque_core.ports import AsyncQueueBackend


def test_the_made_methods_are_coroutine_functions_with_the_models_parameters() -> None:
    made = {
        name: member
        for name, member in vars(AsyncInMemoryBackend).items()
        if inspect.isfunction(member) and hasattr(member, "__wrapped__")
    }
    assert {"push", "claim", "fail", "finish_batch", "close"} <= made.keys()
    for name, member in made.items():
        model_method = getattr(InMemoryBackend, name)
        assert member.__wrapped__ is model_method, name
        assert inspect.iscoroutinefunction(member), name
        assert inspect.signature(member) == inspect.signature(model_method), name
        assert member.__qualname__ == f"AsyncInMemoryBackend.{name}"


def test_every_port_method_is_a_coroutine_function() -> None:
    port = [
        name
        for name, member in vars(AsyncQueueBackend).items()
        if not name.startswith("_") and inspect.isfunction(member)
    ]
    assert port
    for name in port:
        assert inspect.iscoroutinefunction(getattr(AsyncInMemoryBackend, name)), name


def test_a_delegated_call_runs_on_the_shared_model() -> None:
    async def main() -> None:
        backend = AsyncInMemoryBackend()
        message = Message(task_id="t1", tenant="u1", priority=Priority.NORMAL, body=b"")
        assert await backend.push(message) is True
        assert backend.model.get_message("t1") == message  # the same model underneath
        claimed = await backend.claim(worker_id="w1", count=5)
        assert [c.message.task_id for c in claimed] == ["t1"]
        assert await backend.stats() == backend.model.stats()
        with pytest.raises(TypeError):
            await backend.requeue_expired(5, 6)  # type: ignore[call-arg]

    asyncio.run(main())
