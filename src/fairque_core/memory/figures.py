"""The in-memory model's fairness figures (``tenant_fairness``), read-only.

Mirrors ``lua/tenant_figures.lua`` step for step: per tenant its stride and tier, ready
depth, leases held, ``claimed`` counter, ``pass - virtual time`` of its tier while it has
ready work, the wait of its oldest head task (the critical FIFO's first, the scored set's
first), its holds now (paused, capped, its rate's ``hold`` after now, the queue's pause) and
its ``cap_hits``, ``throttles`` and ``pauses`` counters;
:func:`fairque_core.domain.tenant_figures.tenant_fairness` makes the value.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from fairque_core.domain.fairness import DEFAULT_STRIDE
from fairque_core.domain.tenant_figures import (
    TenantFairness,
    check_figure_tenants,
    tenant_fairness,
)
from fairque_core.domain.validation import check_tenant_page
from fairque_core.memory.store import ModelStore, TenantQueues, locked

__all__ = ["FigureOps"]


class FigureOps(ModelStore):
    """tenant_fairness: the fairness figures of named tenants or of a page of the index."""

    @locked
    def tenant_fairness(
        self, tenants: Sequence[str] | None = None, *, limit: int = 100, offset: int = 0
    ) -> list[TenantFairness]:
        """Figures of ``tenants`` in order, or (None) of the page ``offset``/``limit`` of the
        tenants the queue has seen, in ``list_tenants`` order."""
        named = check_figure_tenants(tenants)
        limit, offset = check_tenant_page(limit, offset)
        if named is None:
            seen = sorted(self._first_push, key=lambda u: (self._first_push[u], u))
            named = seen[offset : offset + limit]
        now = self._now()
        return [self._figures(tenant, now) for tenant in named]

    def _figures(self, tenant_id: str, now: int) -> TenantFairness:
        tenant = self._tenants.get(tenant_id)
        fair = self._fair.tenants.get(tenant_id)
        stride = DEFAULT_STRIDE if fair is None else fair.stride
        tier = 0 if fair is None else fair.tier
        if tenant is None:
            ready = leased = claimed = cap_hits = throttles = 0
        else:
            ready = len(tenant.critical) + len(tenant.normal_live)
            leased = tenant.leased
            claimed = tenant.counters["claimed"]
            cap_hits, throttles = tenant.counters["cap_hits"], tenant.counters["throttles"]
        ahead = self._fair.lag(tenant_id) if ready and fair is not None else 0
        oldest = None if tenant is None else self._oldest_head_ms(tenant)
        return tenant_fairness(
            tenant_id,
            stride=stride,
            tier=tier,
            ready=ready,
            running=leased,
            dispatched=claimed,
            pass_ahead=ahead,
            oldest_ready_ms=None if oldest is None else now - oldest,
            paused=tenant_id in self._paused,
            capped=tenant_id in self._limits.capped,
            throttled=self._limits.hold.get(tenant_id, 0) > now,
            queue_paused=self._queue_paused,
            cap_hits=cap_hits,
            throttles=throttles,
            pauses=self._pauses.get(tenant_id, 0),
        )

    def _oldest_head_ms(self, tenant: TenantQueues) -> int | None:
        """The earliest ready time of the tenant's head tasks, None without ready tasks."""
        heads: list[int] = []
        if tenant.critical:
            heads.append(self._records[tenant.critical[0]].ready_ms)
        while tenant.normal and tenant.normal[0][1] not in tenant.normal_live:
            heapq.heappop(tenant.normal)  # drop entries of tasks no longer ready (lazy heap)
        if tenant.normal:
            heads.append(self._records[tenant.normal_live[tenant.normal[0][1]]].ready_ms)
        return min(heads) if heads else None
