"""The flow-control methods of the in-memory model's port (rules in ``memory/limits.py``)."""

from __future__ import annotations

from collections.abc import Mapping

from fairque_core.domain.key_limits import KeyLimits, KeyLimitStatus
from fairque_core.domain.limits import LimitStatus, encode_limits
from fairque_core.memory import key_limits, limits
from fairque_core.memory.store import ModelStore, locked

__all__ = ["LimitOps"]


class LimitOps(ModelStore):
    """set_limits, limit_status and the limits by key of the port."""

    @locked
    def set_limits(
        self,
        changes: Mapping[str, float | None],
        *,
        tenant: str | None = None,
        tier: int | None = None,
    ) -> None:
        limits.set_limits(self, changes, tenant=tenant, tier=tier)
        st = self._limits  # the new record, told in the event log (ADR 71)
        if tier is not None:
            record = encode_limits(st.tiers[tier])
            self._events.add(self._now(), "limits_changed", tier=str(tier), lim=record)
        elif tenant is None:
            self._events.add(self._now(), "limits_changed", lim=encode_limits(st.queue))
        else:
            record = encode_limits(st.own[tenant])
            self._events.add(self._now(), "limits_changed", u=tenant, lim=record)

    @locked
    def limit_status(self, tenant: str) -> LimitStatus:
        return limits.limit_status(self, tenant)

    @locked
    def set_key_limits(
        self,
        key: str,
        *,
        max_running: int | None = None,
        rate: float | None = None,
        burst: int | None = None,
        per_tenant: bool = True,
    ) -> None:
        key_limits.set_key_limits(
            self, key, max_running=max_running, rate=rate, burst=burst, per_tenant=per_tenant
        )

    @locked
    def key_limit_status(self, key: str) -> KeyLimitStatus:
        return key_limits.key_status(self, key)

    @locked
    def list_key_limits(self) -> dict[str, KeyLimits]:
        return dict(sorted(self._keylim.limits.items()))
