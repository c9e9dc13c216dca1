"""Calls about tenants: their weight and tier, their statistics, and the page of tenants the
queue has seen. No I/O."""

from __future__ import annotations

from typing import Any

from fairque_core.domain.errors import TaskValidationError
from fairque_core.domain.limits import LIMIT_COUNTERS
from fairque_core.domain.scoring import STAT_COUNTERS, stride_for
from fairque_core.domain.validation import check_tenant_page, validate_id
from fairque_redis.scripting.calls.base import Call, CallsBase, contract, pairs, to_text

__all__ = ["TenantCalls"]

_TENANT_GAUGES = ("ready", "scheduled", "leased")


class TenantCalls(CallsBase):
    """set_tenant_weight, tenant_stats, list_tenants."""

    def set_tenant_weight(self, tenant: str, weight: float, tier: int) -> Call[None]:
        validate_id(tenant, "tenant")
        stride = stride_for(weight)
        if isinstance(tier, bool) or not isinstance(tier, int) or not 0 <= tier <= 1000:
            raise TaskValidationError("tier", tier, "must be an int in [0, 1000]")
        args = [*self.header(), tenant, stride, tier]
        return Call("set_weight", args, lambda _reply: None)

    def tenant_stats(self, tenant: str) -> Call[dict[str, int]]:
        validate_id(tenant, "tenant")

        def parse(reply: Any) -> dict[str, int]:
            got = pairs("stats", reply)
            out = {name: got.get(name, 0) for name in (*STAT_COUNTERS, *LIMIT_COUNTERS)}
            for name in _TENANT_GAUGES:
                out[name] = got.get(name, 0)
            return out

        return Call("stats", [*self.header(), tenant], parse, writes=False)

    def list_tenants(self, limit: int, offset: int) -> Call[tuple[list[str], int]]:
        page, skip = check_tenant_page(limit, offset)

        def parse(reply: Any) -> tuple[list[str], int]:
            ok = isinstance(reply, list) and bool(reply) and isinstance(reply[0], int)
            contract("tenants", ok and len(reply) - 1 <= page, reply)
            return [to_text(u) for u in reply[1:]], int(reply[0])

        return Call("tenants", [*self.header(), skip, page], parse, writes=False)
