"""Calls that pause and resume a tenant or the queue (``pause.lua``) and read the flag
(``paused_get.lua``). No I/O."""

from __future__ import annotations

from typing import Any

from fairque_core.domain.validation import validate_id
from fairque_redis.scripting.calls.base import Call, CallsBase, contract

__all__ = ["PauseCalls"]


def _scope(tenant: str | None) -> list[str]:
    if tenant is None:
        return ["q", ""]
    validate_id(tenant, "tenant")
    return ["t", tenant]


class PauseCalls(CallsBase):
    """set_paused, is_paused."""

    def set_paused(self, paused: bool, tenant: str | None = None) -> Call[None]:
        args = [*self.header(), *_scope(tenant), "1" if paused else "0"]
        return Call("pause", args, lambda _reply: None, stores=paused)

    def is_paused(self, tenant: str | None = None) -> Call[bool]:
        def parse(reply: Any) -> bool:
            contract("paused_get", reply in (0, 1), reply)
            return bool(reply)

        return Call("paused_get", [*self.header(), *_scope(tenant)], parse, writes=False)
