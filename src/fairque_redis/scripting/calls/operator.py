"""Calls for operators: purge waiting work (one tenant's or the whole queue's, ``purge_tenant``
and ``purge_all``) and read tenants' weights and tiers (``tenant_weights``). No I/O."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fairque_core.domain.scoring import weight_of
from fairque_core.domain.validation import validate_id
from fairque_redis.scripting.calls.base import Call, CallsBase, contract, int_reply

__all__ = ["OperatorCalls"]


class OperatorCalls(CallsBase):
    """purge_tenant, purge_all, tenant_weights."""

    def purge_tenant(self, tenant: str) -> Call[int]:
        validate_id(tenant, "tenant")
        return Call("purge_tenant", [*self.header(), tenant], int_reply("purge_tenant"))

    def purge_all(self) -> Call[int]:
        return Call("purge_all", self.header(), int_reply("purge_all"))

    def tenant_weights(self, tenants: Sequence[str]) -> Call[dict[str, tuple[float, int]]]:
        ids = list(tenants)
        for tenant in ids:
            validate_id(tenant, "tenants")

        def parse(reply: Any) -> dict[str, tuple[float, int]]:
            ok = isinstance(reply, list) and len(reply) == 2 * len(ids)
            contract("tenant_weights", ok, reply)
            return {
                tenant: (weight_of(int(reply[2 * k])), int(reply[2 * k + 1]))
                for k, tenant in enumerate(ids)
            }

        return Call("tenant_weights", [*self.header(), *ids], parse, writes=False)
