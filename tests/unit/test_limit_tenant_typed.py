"""Issue 34: a limit setter's tenant is a tenant id, never the queue scope.

Before: ``set_tenant_limits(None, max_running=1)`` reached the backend's ``set_limits`` with
``tenant=None``, which means the queue-wide limits: it quietly capped the whole queue at one
running task. Now None (or any non-str) is a TaskTypeError, an invalid id a
TaskValidationError, and nothing is stored.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from fairque_core import (
    AsyncFairQueue,
    AsyncInMemoryBackend,
    FairQueue,
    InMemoryBackend,
    TaskTypeError,
    TaskValidationError,
)

BAD = [None, 5, b"alice", ["alice"], "", "a b", "x" * 200]


@pytest.mark.parametrize("tenant", BAD)
def test_sync_limit_calls_refuse_a_bad_tenant(tenant: Any) -> None:
    with FairQueue(InMemoryBackend()) as queue:
        before = queue.backend.limit_status("alice")
        for call in (
            lambda: queue.set_tenant_limits(tenant, max_running=1),
            lambda: queue.clear_tenant_limits(tenant),
            lambda: queue.get_tenant_limits(tenant),
            lambda: queue.set_tenant_weight(tenant, 2.0),
        ):
            with pytest.raises(TaskValidationError) as info:
                call()
            assert info.value.field == "tenant"
            if not isinstance(tenant, str):
                assert isinstance(info.value, TaskTypeError)
        if tenant is not None:
            with pytest.raises(TaskValidationError):
                queue.pause(tenant)
        assert queue.backend.limit_status("alice") == before  # the queue scope is untouched


def test_async_set_tenant_limits_refuses_none() -> None:
    async def scenario() -> None:
        async with AsyncFairQueue(AsyncInMemoryBackend()) as queue:
            with pytest.raises(TaskTypeError):
                await queue.set_tenant_limits(None, max_running=1)  # type: ignore[arg-type]
            status = await queue.get_tenant_limits("alice")
            assert status.effective.max_running is None

    asyncio.run(scenario())
