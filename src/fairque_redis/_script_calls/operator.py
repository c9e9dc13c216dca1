"""Calls for operators: purge waiting work (one tenant's or the whole queue's, ``purge_tenant``
and ``purge_all``) and read tenants' weights and tiers (``tenant_weights``). No I/O."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fairque_core.domain.scoring import weight_of
from fairque_core.domain.validation import validate_id
from fairque_redis._script_calls.base import Call, CallsBase, contract, int_reply

__all__ = ["OperatorCalls"]


class OperatorCalls(CallsBase):
    """purge_tenant, purge_all, tenant_weights."""

    def purge_tenant(self, user_id: str) -> Call[int]:
        validate_id(user_id, "user_id")
        return Call("purge_tenant", [*self.header(), user_id], int_reply("purge_tenant"))

    def purge_all(self) -> Call[int]:
        return Call("purge_all", self.header(), int_reply("purge_all"))

    def tenant_weights(self, user_ids: Sequence[str]) -> Call[dict[str, tuple[float, int]]]:
        ids = list(user_ids)
        for user_id in ids:
            validate_id(user_id, "user_id")

        def parse(reply: Any) -> dict[str, tuple[float, int]]:
            ok = isinstance(reply, list) and len(reply) == 2 * len(ids)
            contract("tenant_weights", ok, reply)
            return {
                user_id: (weight_of(int(reply[2 * k])), int(reply[2 * k + 1]))
                for k, user_id in enumerate(ids)
            }

        return Call("tenant_weights", [*self.header(), *ids], parse, writes=False)
