"""AsyncReadMixin: the engine's reads (one task, sizes, statistics, tenants), the DLQ and the
limits by key (ADR 79).

Part of :class:`~fairque_core.app.engine.queue_async.AsyncFairQueue`, kept apart to keep modules
short; it uses the engine's backend and plugin host.
"""

# reads.py (ReadMixin) is generated from this file  # unasync: remove
# by tools/gen_sync.py: edit here, then run it.  # unasync: remove

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from fairque_core.app.engine.arguments import check_entry_ids, check_failure_type, check_tenants
from fairque_core.app.engine.messages import decode_result
from fairque_core.app.engine.records import decode_record, decode_summary
from fairque_core.domain.enums import FailureType, TaskState
from fairque_core.domain.errors import DLQEntryNotFoundError
from fairque_core.domain.key_limits import KeyLimits, KeyLimitStatus, check_key_limits
from fairque_core.domain.models import DLQEntry
from fairque_core.domain.task_records import (
    StoredRecord,
    TaskPage,
    TaskRecord,
    check_list_args,
)
from fairque_core.domain.tenant_figures import TenantFairness, check_figure_tenants
from fairque_core.domain.validation import check_tenant_page, validate_id

if TYPE_CHECKING:  # the engine's members used here (MixinHost), a base for mypy only
    from fairque_core.app.engine.host_async import MixinHost
else:
    MixinHost = object

__all__ = ["AsyncReadMixin"]


class AsyncReadMixin(MixinHost):
    """Reads of the queue's state and the dead-letter queue (see the engine)."""

    # ------------------------------------------------------------------ reads
    async def get_task(self, task_id: str) -> TaskRecord | None:
        """The task's story (:class:`~fairque_core.domain.task_records.TaskRecord`): tenant,
        name, priority, payload (or its size and a preview), times, attempts (worker, times,
        outcome, traceback), result; None for an unknown or expired task
        (TaskSerializationError if the payload of a task not yet finished is undecodable)."""
        getter = getattr(self._backend, "get_record", None)
        if getter is not None:
            stored = await getter(task_id)
        else:  # a third-party backend without the record: what its message and state say
            message = await self._backend.get_message(task_id)
            state = None if message is None else await self._backend.get_state(task_id)
            stored = None
            if message is not None and state is not None:
                stored = StoredRecord(message=message, state=state)
        return None if stored is None else decode_record(stored, self._plugins, self._build)

    async def list_tasks(
        self,
        *,
        state: TaskState | str | None = None,
        tenant: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> TaskPage:
        """A page of the tasks that ended (``state`` finished, failed or canceled; None: all
        three), of one ``tenant`` or all, newest first; pass the page's ``cursor`` for the next
        one (None when it is the last). ``limit`` at most 1000 (ADR 70)."""
        wanted, limit = check_list_args(state, tenant, limit)
        items, after = await self._backend.list_tasks(
            state=wanted, tenant=tenant, limit=limit, cursor=cursor
        )
        return TaskPage(items=tuple(decode_summary(s) for s in items), cursor=after)

    async def get_state(self, task_id: str) -> TaskState | None:
        return await self._backend.get_state(task_id)

    async def get_result(self, task_id: str) -> Any:
        """The finished task's result (decoded JSON), or None."""
        return decode_result(await self._backend.get_result(task_id))

    async def get_queue_sizes(self, tenant: str) -> dict[str, int]:
        sizes = await self._backend.queue_sizes([tenant])
        return sizes[tenant].as_dict()

    async def get_queue_sizes_batch(self, tenants: Sequence[str]) -> dict[str, dict[str, int]]:
        sizes = await self._backend.queue_sizes(check_tenants(tenants))
        return {tenant: s.as_dict() for tenant, s in sizes.items()}

    async def get_stats(self) -> dict[str, Any]:
        return dict(await self._backend.stats())

    async def get_tenant_stats(self, tenant: str) -> dict[str, int]:
        return dict(await self._backend.tenant_stats(tenant))

    async def list_tenants(self, *, limit: int = 100, offset: int = 0) -> tuple[list[str], int]:
        """A page of the tenants the queue has seen (first-push order) and their total
        (``list_tenants`` of the port); ``limit`` at most 1000."""
        limit, offset = check_tenant_page(limit, offset)
        return await self._backend.list_tenants(limit=limit, offset=offset)

    async def set_key_limits(
        self,
        key: str,
        *,
        max_running: int | None = None,
        rate: float | None = None,
        burst: int | None = None,
        per_tenant: bool = True,
    ) -> None:
        """Limits by key (ADR 79): at most ``max_running`` leases at once and ``rate`` starts
        per second (``burst`` at once) of the tasks whose ``limit_key`` is ``key``: per tenant
        (``per_tenant=True``) or across all tenants. Replaces the key's limits; all None
        clears them (as :meth:`clear_key_limits`). Typed errors name a bad value."""
        check_key_limits(key, max_running, rate, burst, per_tenant)
        await self._backend.set_key_limits(
            key, max_running=max_running, rate=rate, burst=burst, per_tenant=per_tenant
        )

    async def get_key_limits(self, key: str) -> KeyLimitStatus:
        """``key``'s limits (``limits`` None: none set) and, per tenant ("" for a global key),
        its running leases and parked tasks."""
        return await self._backend.key_limit_status(validate_id(key, "key"))

    async def list_key_limits(self) -> dict[str, KeyLimits]:
        """Every limit key that has limits, with them, in key order."""
        return dict(await self._backend.list_key_limits())

    async def clear_key_limits(self, key: str) -> None:
        """Drop ``key``'s limits; its parked tasks go back to their queues."""
        await self._backend.set_key_limits(validate_id(key, "key"))

    async def get_tenant_weights(self, tenants: Sequence[str]) -> dict[str, tuple[float, int]]:
        """Each tenant's stored ``(weight, tier)``; ``(1.0, 0)`` when never set."""
        return await self._backend.tenant_weights(check_tenants(tenants))

    async def get_tenant_fairness(
        self, tenants: Sequence[str] | str | None = None, *, limit: int = 100, offset: int = 0
    ) -> list[TenantFairness]:
        """Per-tenant fairness figures (:class:`~fairque_core.domain.tenant_figures.
        TenantFairness`: weight, tier, ready, running, lag in turns, dispatches, oldest ready
        age, starvation alarm), in one read-only call that costs the claim path nothing.

        ``tenants``: those tenants in order (one str is one tenant; at most 1000), or None:
        the page ``offset``/``limit`` (at most 1000) of :meth:`list_tenants`. Shares over a
        window come from two readings (``domain.tenant_figures.fairness_window``)."""
        if isinstance(tenants, str):
            tenants = [tenants]
        named = check_figure_tenants(tenants)
        limit, offset = check_tenant_page(limit, offset)
        return await self._backend.tenant_fairness(named, limit=limit, offset=offset)

    # ------------------------------------------------------------------ DLQ
    async def list_dlq(
        self, *, limit: int = 100, offset: int = 0, failure_type: FailureType | None = None
    ) -> list[DLQEntry]:
        wanted = check_failure_type(failure_type)
        return await self._backend.list_dlq(limit=limit, offset=offset, failure_type=wanted)

    async def requeue_dlq(self, entry_ids: Sequence[str] | None = None) -> int:
        """Put DLQ entries (all with None) back in their tenant's queue with a fresh retry
        budget; returns how many were requeued.

        Named ids are checked first: one that is not in the DLQ raises
        :class:`~fairque_core.domain.errors.DLQEntryNotFoundError` (naming them) and nothing
        is requeued. An entry another client requeues or purges between the check and the
        requeue is skipped (the count tells)."""
        ids = check_entry_ids(entry_ids)
        await self._check_in_dlq(ids)
        return await self._backend.requeue_dlq(ids)

    async def purge_dlq(self, entry_ids: Sequence[str] | None = None) -> int:
        """Delete DLQ entries (all with None); returns how many were deleted. Named ids are
        checked first, as by :meth:`requeue_dlq` (DLQEntryNotFoundError, nothing purged)."""
        ids = check_entry_ids(entry_ids)
        await self._check_in_dlq(ids)
        return await self._backend.purge_dlq(ids)

    async def _check_in_dlq(self, ids: list[str] | None) -> None:
        """DLQEntryNotFoundError unless every id is a DLQ entry (a task in state FAILED)."""
        missing = [i for i in ids or () if await self._backend.get_state(i) is not TaskState.FAILED]
        if missing:
            raise DLQEntryNotFoundError(missing)
