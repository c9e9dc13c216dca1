"""The flow-control methods of the in-memory model's port (rules in ``memory/limits.py``)."""

from __future__ import annotations

from collections.abc import Mapping

from fairque_core.domain.limits import LimitStatus, encode_limits
from fairque_core.memory import limits
from fairque_core.memory.store import ModelStore, locked

__all__ = ["LimitOps"]


class LimitOps(ModelStore):
    """set_limits and limit_status of the port."""

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
