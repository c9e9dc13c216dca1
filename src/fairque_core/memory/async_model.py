"""AsyncInMemoryBackend: the reference model behind the async port.

Every method runs the matching :class:`~fairque_core.memory.model.InMemoryBackend` method at once
(the model does no I/O, so nothing would be gained by a thread), which makes
:class:`~fairque_core.app.engine_async.AsyncFairQueue` and the async worker usable without Redis.
The one exception is ``wait_for_work``, which blocks, so it waits on a worker thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

from fairque_core.app.config import QueueConfig
from fairque_core.domain.enums import FailureType, TaskState
from fairque_core.domain.limits import LimitStatus
from fairque_core.domain.models import Claimed, DLQEntry, Message, QueueSizes
from fairque_core.domain.outcomes import TaskOutcome
from fairque_core.domain.tenant_figures import TenantFairness
from fairque_core.domain.validation import check_wait_timeout
from fairque_core.memory.model import InMemoryBackend
from fairque_core.memory.schedules import AsyncScheduleOps
from fairque_core.ports import Clock, FinishItem, TokenSource

__all__ = ["AsyncInMemoryBackend"]


class AsyncInMemoryBackend(AsyncScheduleOps):
    """Awaitable methods over one :class:`InMemoryBackend` (given, or built from the args)."""

    def __init__(
        self,
        clock: Clock | None = None,
        *,
        queue: str = "default",
        config: QueueConfig | None = None,
        token_source: TokenSource | None = None,
        model: InMemoryBackend | None = None,
    ) -> None:
        self._model = (
            model
            if model is not None
            else InMemoryBackend(clock, queue=queue, config=config, token_source=token_source)
        )

    @property
    def model(self) -> InMemoryBackend:
        """The synchronous model underneath (shared state)."""
        return self._model

    @property
    def queue(self) -> str:
        return self._model.queue

    @property
    def config(self) -> QueueConfig:
        return self._model.config

    async def push(self, message: Message) -> bool:
        return self._model.push(message)

    async def push_batch(self, messages: Sequence[Message]) -> list[bool]:
        return self._model.push_batch(messages)

    async def push_batch_detailed(self, messages: Sequence[Message]) -> list[tuple[bool, str]]:
        return self._model.push_batch_detailed(messages)

    async def claim(
        self,
        *,
        worker_id: str = "",
        assigned: Sequence[str] | None = None,
        steal: Sequence[str] | None = None,
        count: int = 1,
        lease_seconds: float | None = None,
    ) -> list[Claimed]:
        return self._model.claim(
            worker_id=worker_id,
            assigned=assigned,
            steal=steal,
            count=count,
            lease_seconds=lease_seconds,
        )

    async def heartbeat(
        self, task_id: str, token: str, lease_seconds: float | None = None
    ) -> float:
        return self._model.heartbeat(task_id, token, lease_seconds)

    async def finish(
        self,
        task_id: str,
        token: str,
        result: bytes | None = None,
        xcom: Mapping[str, bytes] | None = None,
    ) -> None:
        self._model.finish(task_id, token, result, xcom)

    async def heartbeat_batch(
        self, items: Sequence[tuple[str, str]], lease_seconds: float | None = None
    ) -> list[float | None]:
        return self._model.heartbeat_batch(items, lease_seconds)

    async def finish_batch(self, items: Sequence[FinishItem]) -> list[bool]:
        return self._model.finish_batch(items)

    async def fail(
        self,
        task_id: str,
        token: str,
        *,
        retry_delay: float | None,
        failure_type: FailureType = FailureType.FAILED,
        reason: str = "",
        error: str = "",
    ) -> TaskState:
        return self._model.fail(
            task_id,
            token,
            retry_delay=retry_delay,
            failure_type=failure_type,
            reason=reason,
            error=error,
        )

    async def release(self, task_id: str, token: str) -> None:
        self._model.release(task_id, token)

    async def requeue_expired(self, limit: int = 100) -> int:
        return self._model.requeue_expired(limit)

    async def cancel(self, task_id: str) -> bool:
        return self._model.cancel(task_id)

    async def get_message(self, task_id: str) -> Message | None:
        return self._model.get_message(task_id)

    async def get_state(self, task_id: str) -> TaskState | None:
        return self._model.get_state(task_id)

    async def get_result(self, task_id: str) -> bytes | None:
        return self._model.get_result(task_id)

    async def get_outcome(self, task_id: str) -> TaskOutcome | None:
        return self._model.get_outcome(task_id)

    async def wait_done(self, task_id: str, timeout: float) -> bool:
        return await asyncio.to_thread(self._model.wait_done, task_id, timeout)

    async def xcom_get(self, tenant: str, items: Sequence[tuple[str, str]]) -> list[bytes | None]:
        return self._model.xcom_get(tenant, items)

    async def queue_sizes(self, user_ids: Sequence[str]) -> dict[str, QueueSizes]:
        return self._model.queue_sizes(user_ids)

    async def stats(self) -> dict[str, int]:
        return self._model.stats()

    async def tenant_stats(self, user_id: str) -> dict[str, int]:
        return self._model.tenant_stats(user_id)

    async def list_tenants(self, *, limit: int = 100, offset: int = 0) -> tuple[list[str], int]:
        return self._model.list_tenants(limit=limit, offset=offset)

    async def set_tenant_weight(self, user_id: str, weight: float, *, tier: int = 0) -> None:
        self._model.set_tenant_weight(user_id, weight, tier=tier)

    async def list_dlq(
        self, *, limit: int = 100, offset: int = 0, failure_type: FailureType | None = None
    ) -> list[DLQEntry]:
        return self._model.list_dlq(limit=limit, offset=offset, failure_type=failure_type)

    async def requeue_dlq(self, entry_ids: Sequence[str] | None = None) -> int:
        return self._model.requeue_dlq(entry_ids)

    async def purge_dlq(self, entry_ids: Sequence[str] | None = None) -> int:
        return self._model.purge_dlq(entry_ids)

    async def purge_tenant(self, user_id: str) -> int:
        return self._model.purge_tenant(user_id)

    async def purge_all(self) -> int:
        return self._model.purge_all()

    async def tenant_weights(self, user_ids: Sequence[str]) -> dict[str, tuple[float, int]]:
        return self._model.tenant_weights(user_ids)

    async def set_limits(
        self,
        changes: Mapping[str, float | None],
        *,
        tenant: str | None = None,
        tier: int | None = None,
    ) -> None:
        self._model.set_limits(changes, tenant=tenant, tier=tier)

    async def limit_status(self, tenant: str) -> LimitStatus:
        return self._model.limit_status(tenant)

    async def pause(self, tenant: str | None = None) -> None:
        self._model.pause(tenant)

    async def resume(self, tenant: str | None = None) -> None:
        self._model.resume(tenant)

    async def is_paused(self, tenant: str | None = None) -> bool:
        return self._model.is_paused(tenant)

    async def tenant_fairness(
        self, user_ids: Sequence[str] | None = None, *, limit: int = 100, offset: int = 0
    ) -> list[TenantFairness]:
        return self._model.tenant_fairness(user_ids, limit=limit, offset=offset)

    async def list_queues(self) -> list[str]:
        return self._model.list_queues()

    async def register_worker(self, worker_id: str, record: str) -> None:
        self._model.register_worker(worker_id, record)

    async def list_workers(self) -> dict[str, str]:
        return self._model.list_workers()

    async def remove_workers(self, worker_ids: Sequence[str]) -> int:
        return self._model.remove_workers(worker_ids)

    async def wait_for_work(self, timeout: float) -> bool:
        if check_wait_timeout(timeout) == 0:
            return self._model.wait_for_work(0)
        return await asyncio.to_thread(self._model.wait_for_work, timeout)

    async def close(self) -> None:
        self._model.close()
