"""Calls of flow control: change limits (``set_limits``) and read a tenant's standing against
them (``limits_get``). No I/O."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fairque_core.domain.errors import TaskValidationError
from fairque_core.domain.key_limits import (
    KeyLimits,
    KeyLimitStatus,
    check_key_limits,
    decode_key_limits,
    encode_key_limits,
)
from fairque_core.domain.limits import (
    LIMIT_FIELDS,
    Limits,
    LimitStatus,
    check_changes,
    decode_limits,
    gcra_view,
)
from fairque_core.domain.validation import validate_id
from fairque_redis.scripting.calls.base import Call, CallsBase, contract, to_text

__all__ = ["LimitCalls"]

_MAX_TIER = 1000


def _arg(name: str, value: float | None) -> str:
    if value is None:
        return "-"
    return repr(float(value)) if name == "rate" else str(int(value))


class LimitCalls(CallsBase):
    """set_limits, limit_status, set_key_limits, key_limit_status."""

    def set_limits(
        self,
        changes: Mapping[str, float | None],
        *,
        tenant: str | None = None,
        tier: int | None = None,
    ) -> Call[None]:
        checked = check_changes(changes)
        if tenant is not None:
            validate_id(tenant, "tenant")
        if tenant is not None and tier is not None:
            raise TaskValidationError("tier", tier, "give a tenant or a tier, not both")
        if tier is not None and (
            isinstance(tier, bool) or not isinstance(tier, int) or not 0 <= tier <= _MAX_TIER
        ):
            raise TaskValidationError("tier", tier, f"must be an int in [0, {_MAX_TIER}]")
        if tenant is not None:
            scope = ["t", tenant]
        elif tier is not None:
            scope = ["tier", str(tier)]
        else:
            scope = ["q", ""]
        values = [_arg(name, checked[name]) if name in checked else "" for name in LIMIT_FIELDS]
        stores = any(value is not None for value in checked.values())  # not only clears
        return Call(
            "set_limits", [*self.header(), *scope, *values], lambda _reply: None, stores=stores
        )

    def limit_status(self, tenant: str) -> Call[LimitStatus]:
        validate_id(tenant, "tenant")

        def parse(reply: Any) -> LimitStatus:
            contract("limits_get", isinstance(reply, list) and len(reply) == 11, reply)
            now_ms = int(reply[0])
            own = decode_limits(to_text(reply[1]))
            effective: Limits = own.over(decode_limits(to_text(reply[2])))
            next_at, tokens = gcra_view(int(to_text(reply[6])), now_ms, effective)
            return LimitStatus(
                tenant=tenant,
                own=own,
                effective=effective,
                running=int(reply[3]),
                queued=int(reply[4]),
                capped=bool(reply[5]),
                next_start_at=next_at,
                tokens=tokens,
                cap_hits=int(reply[7]),
                throttles=int(reply[8]),
                refusals=int(reply[9]),
                paused=bool(reply[10]),
            )

        return Call("limits_get", [*self.header(), tenant], parse, writes=False)

    def set_key_limits(
        self,
        key: str,
        max_running: int | None = None,
        rate: float | None = None,
        burst: int | None = None,
        per_tenant: bool = True,
    ) -> Call[None]:
        limits = check_key_limits(key, max_running, rate, burst, per_tenant)
        record = "" if limits is None else encode_key_limits(limits)
        return Call(
            "set_key_limits",
            [*self.header(), key, record],
            lambda _reply: None,
            stores=limits is not None,
        )

    def key_limit_status(self, key: str) -> Call[KeyLimitStatus]:
        validate_id(key, "key")

        def parse(reply: Any) -> KeyLimitStatus:
            contract("key_limits_get", isinstance(reply, list) and len(reply) % 2 == 1, reply)
            running: dict[str, int] = {}
            parked: dict[str, int] = {}
            for k in range(1, len(reply), 2):
                field, value = to_text(reply[k]), int(reply[k + 1])
                kind, _, tenant = field.partition("|")
                if value > 0 and kind == "r":
                    running[tenant] = value
                elif value > 0 and kind == "p":
                    parked[tenant] = value
            return KeyLimitStatus(
                key=key,
                limits=decode_key_limits(to_text(reply[0])),
                running=dict(sorted(running.items())),
                parked=dict(sorted(parked.items())),
            )

        return Call("key_limits_get", [*self.header(), key], parse, writes=False)

    def list_key_limits(self) -> Call[dict[str, KeyLimits]]:
        def parse(reply: Any) -> dict[str, KeyLimits]:
            contract("key_limits_get", isinstance(reply, list) and len(reply) % 2 == 0, reply)
            out: dict[str, KeyLimits] = {}
            for k in range(0, len(reply), 2):
                limits = decode_key_limits(to_text(reply[k + 1]))
                if limits is not None:
                    out[to_text(reply[k])] = limits
            return dict(sorted(out.items()))

        return Call("key_limits_get", [*self.header(), ""], parse, writes=False)
