"""The call of ``tenant_figures.lua``: fairness figures of named tenants or of a page of the
tenants index (``tenant_fairness``). No I/O."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fairque_core.domain.tenant_figures import (
    TenantFairness,
    check_figure_tenants,
    tenant_fairness,
)
from fairque_core.domain.validation import check_tenant_page
from fairque_redis.scripting.calls.base import Call, CallsBase, contract, to_text

__all__ = ["FigureCalls"]

# values per tenant in the reply: id, stride, tier, ready, leased, claimed, ahead, waited ms,
# paused, capped, throttled, queue paused (0|1), cap_hits, throttles, pauses
_WIDTH = 15


class FigureCalls(CallsBase):
    """tenant_fairness."""

    def tenant_fairness(
        self, tenants: Sequence[str] | None, limit: int, offset: int
    ) -> Call[list[TenantFairness]]:
        named = check_figure_tenants(tenants)
        page, skip = check_tenant_page(limit, offset)

        def parse(reply: Any) -> list[TenantFairness]:
            ok = isinstance(reply, list) and len(reply) % _WIDTH == 0
            ok = ok and len(reply) // _WIDTH <= (page if named is None else len(named))
            contract("tenant_figures", ok, reply)
            out: list[TenantFairness] = []
            for k in range(0, len(reply), _WIDTH):
                try:
                    stride, tier, ready, leased, claimed, ahead, waited = (
                        int(x) for x in reply[k + 1 : k + 8]
                    )
                    paused, capped, throttled, queue_paused, hits, throttles, pauses = (
                        int(x) for x in reply[k + 8 : k + _WIDTH]
                    )
                except (TypeError, ValueError):
                    contract("tenant_figures", False, reply)
                    raise  # contract raised already; this keeps the checker sure of it
                out.append(
                    tenant_fairness(
                        to_text(reply[k]),
                        stride=stride,
                        tier=tier,
                        ready=ready,
                        running=leased,
                        dispatched=claimed,
                        pass_ahead=ahead,
                        oldest_ready_ms=None if waited < 0 else waited,
                        paused=paused == 1,
                        capped=capped == 1,
                        throttled=throttled == 1,
                        queue_paused=queue_paused == 1,
                        cap_hits=hits,
                        throttles=throttles,
                        pauses=pauses,
                    )
                )
            return out

        args = [*self.header(), skip, page, *(named or ())]
        return Call("tenant_figures", args, parse, writes=False)
