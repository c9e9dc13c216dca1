"""A synchronous face over an async backend, so the contract suite runs the async adapters.

:class:`SyncOverAsync` owns one event loop on a daemon thread. The async backend is built
by a coroutine on that loop (so its client and connections belong to it), and every
:class:`~fairque_core.QueueBackend` method blocks on the matching coroutine there with
``run_coroutine_threadsafe(...).result()``: return values and exceptions (same objects, same
types) come back unchanged.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, TypeVar

from fairque_core import QueueBackend
from fairque_core.domain.enums import FailureType, TaskState
from fairque_core.domain.models import Claimed, DLQEntry, Message, QueueSizes
from fairque_core.domain.outcomes import TaskOutcome
from fairque_core.domain.tenant_figures import TenantFairness
from fairque_core.ports import AsyncQueueBackend, FinishItem

__all__ = ["SyncOverAsync"]

T = TypeVar("T")


class SyncOverAsync:
    """``QueueBackend`` over the ``AsyncQueueBackend`` that ``build()`` returns on the loop."""

    def __init__(self, build: Callable[[], AsyncQueueBackend]) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._run_loop, name="contract-async-backend", daemon=True
        )
        self._thread.start()
        self._closed = False

        async def construct() -> AsyncQueueBackend:
            return build()

        try:
            self._backend = self._call(construct())
        except BaseException:
            self._stop_loop()
            raise

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_forever()
        finally:
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            self._loop.close()

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()

    @property
    def wrapped(self) -> AsyncQueueBackend:
        """The async backend underneath (use it only through this facade's loop)."""
        return self._backend

    @property
    def queue(self) -> str:
        return self._backend.queue

    def push(self, message: Message) -> bool:
        return self._call(self._backend.push(message))

    def push_batch(self, messages: Sequence[Message]) -> list[bool]:
        return self._call(self._backend.push_batch(messages))

    def push_batch_detailed(self, messages: Sequence[Message]) -> list[tuple[bool, str]]:
        return self._call(self._backend.push_batch_detailed(messages))

    def claim(
        self,
        *,
        worker_id: str = "",
        assigned: Sequence[str] | None = None,
        steal: Sequence[str] | None = None,
        count: int = 1,
        lease_seconds: float | None = None,
    ) -> list[Claimed]:
        return self._call(
            self._backend.claim(
                worker_id=worker_id,
                assigned=assigned,
                steal=steal,
                count=count,
                lease_seconds=lease_seconds,
            )
        )

    def heartbeat(self, task_id: str, token: str, lease_seconds: float | None = None) -> float:
        return self._call(self._backend.heartbeat(task_id, token, lease_seconds))

    def heartbeat_batch(
        self, items: Sequence[tuple[str, str]], lease_seconds: float | None = None
    ) -> list[float | None]:
        return self._call(self._backend.heartbeat_batch(items, lease_seconds))

    def finish(
        self,
        task_id: str,
        token: str,
        result: bytes | None = None,
        xcom: Mapping[str, bytes] | None = None,
        *,
        keep: bool = True,
    ) -> None:
        self._call(self._backend.finish(task_id, token, result, xcom, keep=keep))

    def finish_batch(self, items: Sequence[FinishItem]) -> list[bool]:
        return self._call(self._backend.finish_batch(items))

    def finish_and_claim(
        self, items: Sequence[FinishItem], **claim: Any
    ) -> tuple[list[bool], list[Claimed]]:
        """The optional ``finish_and_claim`` (ADR 40): AttributeError on a backend without it
        (tests look at ``wrapped`` to tell)."""
        return self._call(self._backend.finish_and_claim(items, **claim))  # type: ignore[attr-defined]

    def fail(
        self,
        task_id: str,
        token: str,
        *,
        retry_delay: float | None,
        failure_type: FailureType = FailureType.FAILED,
        reason: str = "",
        error: str = "",
    ) -> TaskState:
        return self._call(
            self._backend.fail(
                task_id,
                token,
                retry_delay=retry_delay,
                failure_type=failure_type,
                reason=reason,
                error=error,
            )
        )

    def release(self, task_id: str, token: str) -> None:
        self._call(self._backend.release(task_id, token))

    def requeue_expired(self, limit: int = 100) -> int:
        return self._call(self._backend.requeue_expired(limit))

    def cancel(self, task_id: str, terminate: bool = False) -> bool:
        return self._call(self._backend.cancel(task_id, terminate))

    def purge_tenant(self, tenant: str) -> int:
        return self._call(self._backend.purge_tenant(tenant))

    def purge_all(self) -> int:
        return self._call(self._backend.purge_all())

    def tenant_weights(self, tenants: Sequence[str]) -> dict[str, tuple[float, int]]:
        return self._call(self._backend.tenant_weights(tenants))

    def set_limits(
        self, changes: Any, *, tenant: str | None = None, tier: int | None = None
    ) -> None:
        self._call(self._backend.set_limits(changes, tenant=tenant, tier=tier))

    def limit_status(self, tenant: str) -> Any:
        return self._call(self._backend.limit_status(tenant))

    def set_key_limits(self, key: str, **limits: Any) -> None:
        self._call(self._backend.set_key_limits(key, **limits))

    def key_limit_status(self, key: str) -> Any:
        return self._call(self._backend.key_limit_status(key))

    def list_key_limits(self) -> Any:
        return self._call(self._backend.list_key_limits())

    def pause(self, tenant: str | None = None) -> None:
        self._call(self._backend.pause(tenant))

    def resume(self, tenant: str | None = None) -> None:
        self._call(self._backend.resume(tenant))

    def is_paused(self, tenant: str | None = None) -> bool:
        return self._call(self._backend.is_paused(tenant))

    def tenant_fairness(
        self, tenants: Sequence[str] | None = None, *, limit: int = 100, offset: int = 0
    ) -> list[TenantFairness]:
        return self._call(self._backend.tenant_fairness(tenants, limit=limit, offset=offset))

    def list_queues(self) -> list[str]:
        return self._call(self._backend.list_queues())

    def register_worker(self, worker_id: str, record: str) -> None:
        self._call(self._backend.register_worker(worker_id, record))

    def list_workers(self) -> dict[str, str]:
        return self._call(self._backend.list_workers())

    def remove_workers(self, worker_ids: Sequence[str]) -> int:
        return self._call(self._backend.remove_workers(worker_ids))

    def set_progress(self, tenant: str, task_id: str, token: str, body: bytes) -> bool:
        return bool(self._call(self._backend.set_progress(tenant, task_id, token, body)))

    def read_events(self, after: str, *, count: int = 100, timeout: float = 0.0) -> list[Any]:
        return self._call(self._backend.read_events(after, count=count, timeout=timeout))

    def events_end(self) -> str:
        return self._call(self._backend.events_end())

    def get_message(self, task_id: str) -> Message | None:
        return self._call(self._backend.get_message(task_id))

    def get_state(self, task_id: str) -> TaskState | None:
        return self._call(self._backend.get_state(task_id))

    def get_result(self, task_id: str) -> bytes | None:
        return self._call(self._backend.get_result(task_id))

    def get_outcome(self, task_id: str) -> TaskOutcome | None:
        return self._call(self._backend.get_outcome(task_id))

    def get_record(self, task_id: str) -> Any:
        return self._call(self._backend.get_record(task_id))

    def list_tasks(self, **kwargs: Any) -> Any:
        return self._call(self._backend.list_tasks(**kwargs))

    def wait_done(self, task_id: str, timeout: float) -> bool:
        return self._call(self._backend.wait_done(task_id, timeout))

    def xcom_get(self, tenant: str, items: Sequence[tuple[str, str]]) -> list[bytes | None]:
        return self._call(self._backend.xcom_get(tenant, items))

    def queue_sizes(self, tenants: Sequence[str]) -> dict[str, QueueSizes]:
        return self._call(self._backend.queue_sizes(tenants))

    def stats(self) -> dict[str, int]:
        return self._call(self._backend.stats())

    def tenant_stats(self, tenant: str) -> dict[str, int]:
        return self._call(self._backend.tenant_stats(tenant))

    def list_tenants(self, *, limit: int = 100, offset: int = 0) -> tuple[list[str], int]:
        return self._call(self._backend.list_tenants(limit=limit, offset=offset))

    def set_tenant_weight(self, tenant: str, weight: float, *, tier: int = 0) -> None:
        self._call(self._backend.set_tenant_weight(tenant, weight, tier=tier))

    def list_dlq(
        self, *, limit: int = 100, offset: int = 0, failure_type: FailureType | None = None
    ) -> list[DLQEntry]:
        return self._call(
            self._backend.list_dlq(limit=limit, offset=offset, failure_type=failure_type)
        )

    def requeue_dlq(self, entry_ids: Sequence[str] | None = None) -> int:
        return self._call(self._backend.requeue_dlq(entry_ids))

    def purge_dlq(self, entry_ids: Sequence[str] | None = None) -> int:
        return self._call(self._backend.purge_dlq(entry_ids))

    def wait_for_work(self, timeout: float) -> bool:
        return self._call(self._backend.wait_for_work(timeout))

    def close(self) -> None:
        """Close the async backend on its loop, then stop the loop and join its thread."""
        if self._closed:
            return
        self._closed = True
        try:
            self._call(self._backend.close())
        finally:
            self._stop_loop()


_: type[QueueBackend] = SyncOverAsync
