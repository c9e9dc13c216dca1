"""ADR 23: the old spellings still work, warn at the caller's line, and equal the new names."""

from __future__ import annotations

import asyncio
import warnings

import pytest

from fairque_core import AsyncFairQueue, AsyncInMemoryBackend, FairQueue, InMemoryBackend, Task


def _queue() -> FairQueue:
    return FairQueue(InMemoryBackend())


def _one_warning(caught: list[warnings.WarningMessage], new: str) -> warnings.WarningMessage:
    deprecations = [w for w in caught if issubclass(w.category, DeprecationWarning)]
    assert len(deprecations) == 1, [str(w.message) for w in caught]
    (warning,) = deprecations
    assert new in str(warning.message)
    assert warning.filename == __file__  # points at the caller, not at fairque
    return warning


def test_pop_and_pop_batch_warn_and_claim() -> None:
    queue = _queue()
    queue.push_batch([Task.create("a", payload={"n": n}, task_id=f"t{n}") for n in range(3)])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = queue.pop()
    _one_warning(caught, "claim")
    assert first is not None
    assert first.task_id == "t0"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rest = queue.pop_batch(5, ["a"])
    _one_warning(caught, "claim_batch")
    assert [t.task_id for t in rest] == ["t1", "t2"]
    assert queue.claim() is None


def test_finish_many_and_heartbeat_many_warn_and_delegate() -> None:
    queue = _queue()
    queue.push(Task.create("a", payload={}, task_id="x"))
    task = queue.claim()
    assert task is not None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        renewed = queue.heartbeat_many([task])
    _one_warning(caught, "heartbeat_batch")
    assert renewed[0] is not None
    assert renewed[0].task_id == "x"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert queue.finish_many([(task, {"ok": 1})]) == [True]
    _one_warning(caught, "finish_batch")
    assert queue.get_result("x") == {"ok": 1}


def test_user_id_keyword_is_renamed_tenant() -> None:
    queue = _queue()
    queue.push(Task.create("a", payload={}))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sizes = queue.get_queue_sizes(user_id="a")
    _one_warning(caught, "tenant=")
    assert sizes == queue.get_queue_sizes(tenant="a")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        batch = queue.get_queue_sizes_batch(user_ids=["a"])
    _one_warning(caught, "tenants=")
    assert batch == queue.get_queue_sizes_batch(tenants=["a"])
    with pytest.warns(DeprecationWarning, match="tenant="):
        queue.set_tenant_weight(user_id="a", weight=2.0)
    with pytest.raises(TypeError, match="both"):
        queue.get_tenant_stats(user_id="a", tenant="a")


def test_async_aliases_stay_awaitable_and_warn() -> None:
    async def run() -> None:
        queue = AsyncFairQueue(AsyncInMemoryBackend())
        await queue.push(Task.create("a", payload={}, task_id="y"))
        with pytest.warns(DeprecationWarning, match="claim_batch"):
            got = await queue.pop_batch(1)
        assert [t.task_id for t in got] == ["y"]
        with pytest.warns(DeprecationWarning, match="finish_batch"):
            assert await queue.finish_many([(got[0], None)]) == [True]
        with pytest.warns(DeprecationWarning, match="tenant="):
            await queue.get_tenant_stats(user_id="a")

    asyncio.run(run())
