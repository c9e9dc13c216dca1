"""The references :func:`fairque_testing.fairness_report` measures a trace against, fed one
event at a time (the definitions are in the docstring of :mod:`fairque_testing.report`): the
fluid share (owed per unit of weight: owed, lag, busy periods and their tails) and the tags
(ADR 4's finish tags and their virtual time: debts and newcomers)."""

from __future__ import annotations

import heapq
from collections.abc import Mapping

import attrs

__all__ = ["Fluid", "TenantState"]

#: Slack of the debt comparison ``F_i <= T`` (sums of ``1 / w`` in floating point).
_EPS = 1e-9


@attrs.define
class TenantState:
    """One tenant's running figures in :class:`Fluid`."""

    weight: float
    ready: int = 0
    held: bool = False
    finish: float = 0.0  # F_i, the finish tag (see fairque_testing.report)
    newcomer_at: int | None = None  # dispatch count when it became a newcomer (None: in debt)
    served_active: int = 0  # dispatches since it last became ready (or was let go)
    mark: int = 0  # dispatch count at the last own dispatch, or when it became ready
    dispatches: int = 0
    owed: float = 0.0
    # the current busy period (of the fluid reference)
    v_start: float = 0.0
    served_in_period: int = 0
    period: int = 0
    tail: int = 0  # seq of its current tail entry
    # maxima and counts over the trace
    max_lag: float = 0.0
    newcomer_wait: int = 0
    max_gap: int = 0
    holds: int = 0
    debt_returns: int = 0


class Fluid:
    """The references of the module docstring, fed one trace event at a time: the fluid share
    (owed per unit of weight ``v``: owed, lag, busy periods and their tails) and the tags
    (``T``: debts and newcomers)."""

    def __init__(self, weights: Mapping[str, float]) -> None:
        self.weights = weights
        self.state: dict[str, TenantState] = {}
        self.backlogged: dict[str, float] = {}  # tenant -> weight, in activation order
        self.total_weight = 0.0
        self.v = 0.0  # owed per unit of weight, summed over the dispatches so far
        self.t = 0.0  # T: the tags' virtual time
        self.n = 0  # dispatches so far
        self.active: set[str] = set()  # ready and not held
        self.seq = 0
        # heaps, stale entries skipped: (F_i, seq, i) of the active tenants, of those in debt,
        # and (end of the tail in v, seq, i) of the tenants in a tail
        self.tags: list[tuple[float, int, str]] = []
        self.debts: list[tuple[float, int, str]] = []
        self.tails: list[tuple[float, int, str]] = []

    def tenant(self, name: str) -> TenantState:
        found = self.state.get(name)
        if found is None:
            found = self.state[name] = TenantState(weight=float(self.weights.get(name, 1.0)))
        return found

    def ready(self, name: str, count: int) -> None:
        st = self.tenant(name)
        before = st.ready
        st.ready += count
        if before == 0 and count > 0 and not st.held:
            self._activate(name, st)

    def hold(self, name: str) -> None:
        st = self.tenant(name)
        if not st.held:
            st.held = True
            st.holds += 1
            if name in self.active:
                self._deactivate(name, st)

    def unhold(self, name: str) -> None:
        st = self.tenant(name)
        if st.held:
            st.held = False
            if st.ready > 0:
                self._activate(name, st)

    def dispatch(self, name: str) -> None:
        st = self.tenant(name)
        self.unhold(name)  # a limit let it go a moment before the trace said so
        if st.ready == 0:
            self.ready(name, 1)
        # T moves to the lowest tag of the active tenants (the work now in service, when the
        # lowest is served): the debts that pays are settled, those tenants newcomers now
        self.t = max(self.t, self._lowest_tag())
        while self.debts and self.debts[0][0] <= self.t + _EPS:
            _tag, _seq, other = heapq.heappop(self.debts)
            settled = self.state[other]
            if other in self.active and settled.newcomer_at is None:
                settled.newcomer_at = self.n
        # lag just before this dispatch (after the previous one), then this dispatch's shares
        st.max_lag = max(st.max_lag, st.weight * (self.v - st.v_start) - st.served_in_period)
        self._share_out()
        st.max_gap = max(st.max_gap, self.n - st.mark)
        if st.served_active == 0 and st.newcomer_at is not None:
            st.newcomer_wait = max(st.newcomer_wait, self.n - st.newcomer_at)
        st.newcomer_at = st.newcomer_at if st.newcomer_at is not None else self.n
        self.n += 1
        st.mark = self.n
        st.dispatches += 1
        st.served_active += 1
        st.served_in_period += 1
        st.finish += 1.0 / st.weight
        st.ready -= 1
        if st.ready == 0:
            self._deactivate(name, st)
        else:
            self._tag(name, st)

    def _share_out(self) -> None:
        """One dispatch shared out among the backlogged tenants by weight, exactly: a tail
        that runs out part of the way takes its part, and the rest goes to the others."""
        work = 1.0
        while self.tails:
            end, seq, name = self.tails[0]
            st = self.state[name]
            if name in self.active or name not in self.backlogged or st.tail != seq:
                heapq.heappop(self.tails)  # stale: ready again since, or already ended
                continue
            needed = (end - self.v) * self.total_weight
            if needed >= work - _EPS:
                break
            heapq.heappop(self.tails)
            work -= max(0.0, needed)
            self.v = max(self.v, end)
            self._end(name, st)
        self.v += work / self.total_weight

    def close(self) -> set[str]:
        """End of the trace: settle the open busy periods; the tenants still waiting."""
        waiting: set[str] = set()
        for name in list(self.backlogged):
            st = self.state[name]
            st.max_lag = max(st.max_lag, st.weight * (self.v - st.v_start) - st.served_in_period)
            if name in self.active:
                st.max_gap = max(st.max_gap, self.n - st.mark)
                if st.served_active == 0 and st.newcomer_at is not None:
                    st.newcomer_wait = max(st.newcomer_wait, self.n - st.newcomer_at)
                    waiting.add(name)
            self._end(name, st)
        return waiting

    def _tag(self, name: str, st: TenantState) -> None:
        self.seq += 1
        heapq.heappush(self.tags, (st.finish, self.seq, name))

    def _lowest_tag(self) -> float:
        while self.tags:
            tag, _seq, name = self.tags[0]
            if name in self.active and self.state[name].finish == tag:
                return tag
            heapq.heappop(self.tags)  # stale: served since, or no longer active
        return self.t

    def _activate(self, name: str, st: TenantState) -> None:
        """Ready and not held: backlogged (a new busy period unless in the tail of one), and
        a newcomer now or once ``T`` reaches its finish tag."""
        self.active.add(name)
        st.served_active, st.mark = 0, self.n
        if name not in self.backlogged:
            st.v_start, st.served_in_period = self.v, 0
            st.period += 1
            self.backlogged[name] = st.weight
            self.total_weight += st.weight
        if st.finish <= self.t + _EPS:
            st.finish, st.newcomer_at = self.t, self.n
        else:
            st.newcomer_at = None
            st.debt_returns += 1
            self.seq += 1
            heapq.heappush(self.debts, (st.finish, self.seq, name))
        self._tag(name, st)

    def _deactivate(self, name: str, st: TenantState) -> None:
        """No ready task left, or held: still owed its share for the tail of its busy period,
        until the fluid reference has served what it got, and for at most one own turn."""
        self.active.discard(name)
        st.max_gap = max(st.max_gap, self.n - st.mark)
        if st.served_active == 0 and st.newcomer_at is not None:  # held before its turn
            st.newcomer_wait = max(st.newcomer_wait, self.n - st.newcomer_at)
        caught_up = st.v_start + st.served_in_period / st.weight
        end = min(caught_up, self.v + 1.0 / st.weight)
        if end <= self.v + _EPS:
            self._end(name, st)
            return
        self.seq += 1
        st.tail = self.seq
        heapq.heappush(self.tails, (end, self.seq, name))

    def _end(self, name: str, st: TenantState) -> None:
        st.owed += st.weight * (self.v - st.v_start)
        del self.backlogged[name]
        self.total_weight = sum(self.backlogged.values()) if self.backlogged else 0.0
