"""The in-memory model's operator steps: purge waiting work, read tenants' weights and tiers,
the queue registry (this queue only) and the live workers' heartbeat records.

A purge cancels tasks as ``cancel`` does (state CANCELED, reason ``"purged"``, counted in
``canceled``, kept for the result TTL, waiting dependents canceled with them), so every
counter still adds up, in one atomic step. Only QUEUED (those parked by a limit key too, ADR
79) and SCHEDULED tasks are purged: a
leased (STARTED) task runs to its end (finish, fail, release or the reaper), and a DEFERRED
one keeps waiting for its parents (it is canceled when a parent is purged). The Redis scripts
``purge_tenant.lua`` and ``purge_all.lua`` mirror these steps.
"""

from __future__ import annotations

from collections.abc import Sequence

from fairque_core.domain.enums import TaskState
from fairque_core.domain.key_limits import scope_key, scope_tenant
from fairque_core.domain.scoring import static_score, weight_of
from fairque_core.domain.states import TaskEvent
from fairque_core.domain.validation import validate_id
from fairque_core.memory.store import ModelStore, TaskRecord, locked

__all__ = ["PURGE_REASON", "OperatorOps"]

PURGE_REASON = "purged"


class OperatorOps(ModelStore):
    """purge_tenant, purge_all, tenant_weights, list_queues and the workers registry."""

    @locked
    def purge_tenant(self, tenant: str) -> int:
        """Cancel every QUEUED and SCHEDULED task of ``tenant``; how many were purged."""
        validate_id(tenant, "tenant")
        now = self._now()
        purged = self._purge_ready(tenant, now) + self._purge_parked(tenant, now)
        purged += self._purge_scheduled(tenant, now)
        self._recompute_next_due()
        return purged

    @locked
    def purge_all(self) -> int:
        """Cancel every QUEUED and SCHEDULED task of the queue; how many were purged."""
        now = self._now()
        purged = sum(self._purge_ready(tenant_id, now) for tenant_id in list(self._tenants))
        purged += self._purge_parked(None, now)
        purged += self._purge_scheduled(None, now)
        self._recompute_next_due()
        return purged

    @locked
    def tenant_weights(self, tenants: Sequence[str]) -> dict[str, tuple[float, int]]:
        """Each tenant's weight and tier (weight 1.0 and tier 0 when never set)."""
        for tenant in tenants:
            validate_id(tenant, "tenants")
        out: dict[str, tuple[float, int]] = {}
        for tenant in tenants:
            found = self._fair.tenants.get(tenant)
            if found is None:
                out[tenant] = (1.0, 0)
            else:
                out[tenant] = (weight_of(found.stride), found.tier)
        return out

    @locked
    def list_queues(self) -> list[str]:
        """A model holds one queue: its own name."""
        return [self.queue]

    @locked
    def register_worker(self, worker_id: str, record: str) -> None:
        validate_id(worker_id, "worker_id")
        self._workers()[worker_id] = record

    @locked
    def list_workers(self) -> dict[str, str]:
        return dict(self._workers())

    @locked
    def remove_workers(self, worker_ids: Sequence[str]) -> int:
        records = self._workers()
        return sum(records.pop(worker_id, None) is not None for worker_id in worker_ids)

    def _workers(self) -> dict[str, str]:
        # made on first use (as ScheduleOps does), under the model's lock: the callers are locked
        records: dict[str, str] = self.__dict__.setdefault("_worker_records", {})
        return records

    def _purge_ready(self, tenant_id: str, now: int) -> int:
        tenant = self._tenants.get(tenant_id)
        if tenant is None:
            return 0
        # critical FIFO, then the scored tasks by score, ties by member (purge.lua's ZRANGE)
        ranked = sorted(
            (static_score(rec.message.priority, rec.ready_ms, self._horizon_ms), member, task_id)
            for member, task_id in tenant.normal_live.items()
            for rec in (self._records[task_id],)
        )
        ids = [*tenant.critical, *(task_id for _, _, task_id in ranked)]
        return sum(self._purge_one(task_id, now) for task_id in ids)

    def _purge_parked(self, tenant_id: str | None, now: int) -> int:
        """The tasks parked by a limit key (ADR 79) of ``tenant_id`` (None: all): keys in
        order, their scopes in order, each in push order (as ``FQ_KEYLIM.purge``)."""
        parked = self._keylim.parked
        purged = 0
        for key in sorted(self._keylim.limits):
            for scope in sorted(s for s in parked if scope_key(s) == key):
                if tenant_id is not None and scope_tenant(scope) not in (tenant_id, ""):
                    continue
                ids = parked[scope]
                for task_id in sorted(ids, key=lambda i: (ids[i], i)):
                    rec = self._records.get(task_id)
                    if tenant_id is None or (rec is not None and rec.message.tenant == tenant_id):
                        purged += self._purge_one(task_id, now)
        return purged

    def _purge_scheduled(self, tenant_id: str | None, now: int) -> int:
        ids = sorted(self._delayed, key=lambda task_id: (self._delayed[task_id], task_id))
        return sum(
            self._purge_one(task_id, now)
            for task_id in ids
            if tenant_id is None or self._records[task_id].message.tenant == tenant_id
        )

    def _purge_one(self, task_id: str, now: int) -> int:
        rec: TaskRecord | None = self._live(task_id, now)
        if rec is None:
            return 0
        tenant = self._tenant(rec.message.tenant)
        if rec.state is TaskState.QUEUED:
            self._remove_ready(task_id, rec)
        elif rec.state is TaskState.SCHEDULED:
            del self._delayed[task_id]
            tenant.scheduled -= 1
        else:
            return 0
        self._move(rec, TaskEvent.CANCEL)
        rec.reason = PURGE_REASON
        self._bump("canceled", tenant)
        self._tell("canceled", rec, "", rec.reason)
        self._close_record(rec, now)
        self._cancel_dependents(task_id, rec, now)
        return 1
