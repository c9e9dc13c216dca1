"""How fair a dispatch order was: :func:`fairness_report` and :func:`assert_fair`.

The input is a *trace*: the order in which tasks were dispatched (claimed), one tenant per
dispatch, and when each tenant's tasks became ready. :func:`fairque_testing.simulate` records a
full trace; a plain list of tenant ids is read as "every tenant had all of its tasks ready from
the start" (a flood by everyone).

Definitions (``k`` counts dispatches from 1, ``w_i`` is tenant ``i``'s weight, 1 when not given):

* **Held**: a tenant is held while a limit of the queue keeps it from being served although it
  has ready tasks: its rate limit makes it wait for its next start, its concurrency cap is
  reached, or it is paused (:class:`Held` and :class:`Unheld` events; :func:`~fairque_testing.
  simulate` records them). A held tenant is owed nothing: the limit, not the scheduler, holds it.
* **Tags and debt** (ADR 4's accounting, recomputed from the trace): each tenant has a *finish
  tag* ``F_i``, in turns per unit of weight: each of its dispatches adds ``1 / w_i``. ``T``,
  the tags' virtual time, moves at each dispatch up to the lowest tag of the tenants that are
  ready and not held (never back). A tenant that becomes ready, or is let go by a limit, with
  ``F_i <= T`` starts at ``F_i = T``; one with ``F_i > T`` carries a *debt*: it was served
  ahead of the others (it came back before they caught up with its last turn, or pinned
  workers served it on top of its share). Going idle does not wipe a debt and idle time earns
  no credit, the queue's own rule.
* **Newcomer**: a tenant is a newcomer when it becomes ready (or is let go by a limit)
  without a debt, or, back with a debt, at the dispatch that brings ``T`` to its ``F_i``: a
  tenant back from an idle spell is a newcomer once the others have caught up with its last
  turn (a weight-1 tenant among others of weight 15: about 15 dispatches after its last one),
  not before. This is ADR 4's "tenant with no debt that becomes active", which the queue serves
  within one dispatch per ready tenant.
* **Backlogged**: tenant ``i`` is backlogged at dispatch ``k`` when, just before it, it had at
  least one ready, undispatched task and was not held (with a debt or without), or was in the
  *tail* of its busy period (the tenant dispatched at ``k`` always is). ``B_k`` is that set and
  ``W_k`` the sum of its weights. A *busy period* starts when the tenant becomes ready (or is
  let go) and ends when it has had no ready task, or been held, for its tail: until its owed
  amount in the period reaches its dispatches in the period, and for at most one own turn
  (``1 / w_i`` of owed service per unit of weight). The scheduler serves a turn at its start;
  the fluid share finishes it one turn later, and the tail is that turn. A tail that runs out
  part of the way through a dispatch takes its part of it, the rest goes to the others.
* **Owed** (fair share, in dispatches): dispatch ``k`` is owed to the backlogged tenants in
  proportion to their weights, ``w_i / W_k`` each (the weighted fair-queuing fluid share).
  ``owed_i`` sums that over the whole trace; the owed amounts of all tenants add up to the
  number of dispatches.
* **Share ratio**: ``dispatches_i / owed_i``. 1.0 is exactly the weighted share while
  backlogged; 0.5 is half of it. Dispatches are whole, so a tenant owed only a few dispatches
  has a noisy ratio (its last dispatch counts whole while it was owed ``w_i / W_k`` of it):
  tenants owed fewer than ``min_owed`` dispatches are reported but not *judged*.
* **Jain index**: Jain's fairness index over the share ratios ``x_i`` of the judged tenants,
  ``(sum x_i)^2 / (n * sum x_i^2)``. Because each ratio is already divided by the tenant's own
  weighted share while backlogged, this is the weight-normalised index over backlogged tenants:
  1.0 is perfectly proportional, ``1/n`` is one tenant getting everything. With no judged
  tenant it is 1.0.
* **Lag** (in dispatches): within a busy period, ``owed - dispatched`` so far. Positive means the
  tenant is behind its fair share. It restarts at 0 with every busy period (idle time earns no
  credit, as in the queue). ``max_lag`` is the largest lag seen just before any dispatch and at
  the end of the trace. Round robin over ``n`` equal tenants keeps it below 1; stride
  scheduling lets a tenant with a large weight among many small ones lag by about half the
  number of tenants.
* **Newcomer wait** (in dispatches): each time a tenant becomes a newcomer (above), the number
  of dispatches to other tenants from then to its next dispatch (a tenant served while it still
  had a debt waited 0). The report keeps the largest over all tenants. A tenant still waiting
  when the trace ends counts with the dispatches so far (and is listed in ``waiting``).
* **Max gap** (in dispatches): the longest run of dispatches to other tenants while the tenant
  was ready and not held (a debt's wait included).
* **Stranded**: ready tasks never dispatched by the end of the trace, per tenant.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol, runtime_checkable

import attrs

from fairque_testing.fluid import Fluid, TenantState

__all__ = [
    "DEFAULT_MIN_OWED",
    "Dispatched",
    "FairnessReport",
    "Held",
    "Ready",
    "TenantFairness",
    "TraceEvent",
    "Unheld",
    "assert_fair",
    "fairness_report",
]

#: Tenants owed fewer dispatches than this are reported but left out of the Jain index and the
#: share-ratio check (one whole dispatch against a small fractional share is mostly noise).
DEFAULT_MIN_OWED = 10.0


@attrs.frozen
class Ready:
    """``count`` tasks of ``tenant`` became ready (claimable)."""

    tenant: str
    count: int = 1


@attrs.frozen
class Dispatched:
    """One task of ``tenant`` was claimed (by ``worker``, when known)."""

    tenant: str
    worker: str = ""


@attrs.frozen
class Held:
    """A limit holds ``tenant`` from now on although it may have ready tasks: ``reason`` is
    ``"rate"`` (waiting for its next start), ``"cap"`` (at its ``max_running``) or
    ``"paused"``. It is owed nothing until :class:`Unheld`."""

    tenant: str
    reason: str = "rate"


@attrs.frozen
class Unheld:
    """The limit that held ``tenant`` lets it go: with ready tasks it is served again."""

    tenant: str


TraceEvent = Ready | Dispatched | Held | Unheld


@runtime_checkable
class _HasTrace(Protocol):
    @property
    def trace(self) -> Sequence[TraceEvent]: ...


@attrs.frozen
class TenantFairness:
    """The figures of one tenant (see the module docstring for the definitions)."""

    tenant: str
    weight: float
    dispatches: int
    owed: float
    share_ratio: float  # dispatches / owed; nan when owed is 0
    share: float  # dispatches / all dispatches
    weight_share: float  # weight / sum of the weights of the report's tenants
    max_lag: float
    newcomer_wait: int
    max_gap: int
    busy_periods: int
    stranded: int
    waiting: bool  # backlogged and not yet served in its last busy period when the trace ended
    judged: bool  # owed at least min_owed dispatches: in the Jain index and the ratio check
    held: int = 0  # times a limit held it (Held events)
    debt_returns: int = 0  # times it became ready (or was let go) with a debt

    @property
    def deviation(self) -> float:
        """``|share_ratio - 1|`` for a judged tenant, else 0."""
        return abs(self.share_ratio - 1.0) if self.judged else 0.0


@attrs.frozen
class FairnessReport:
    """The fairness figures of one trace. ``str(report)`` is a readable table."""

    dispatches: int
    jain: float
    max_lag: float
    max_lag_tenant: str | None
    max_newcomer_wait: int
    max_newcomer_wait_tenant: str | None
    tenants: Mapping[str, TenantFairness]
    min_owed: float

    @property
    def judged(self) -> list[str]:
        """The tenants in the Jain index and the share-ratio check."""
        return [t for t, f in self.tenants.items() if f.judged]

    @property
    def stranded(self) -> dict[str, int]:
        """Ready tasks never dispatched, per tenant (only tenants that have some)."""
        return {t: f.stranded for t, f in self.tenants.items() if f.stranded}

    @property
    def waiting(self) -> list[str]:
        """Tenants backlogged at the end of the trace and not served since they became so."""
        return [t for t, f in self.tenants.items() if f.waiting]

    def worst(self, n: int = 5) -> list[TenantFairness]:
        """The ``n`` tenants furthest from fair: largest ratio deviation, then lag, then wait."""
        ranked = sorted(
            self.tenants.values(),
            key=lambda f: (f.deviation, f.max_lag, f.newcomer_wait, f.stranded),
            reverse=True,
        )
        return ranked[:n]

    def table(self, tenants: Iterable[TenantFairness] | None = None) -> str:
        """A fixed-width table of per-tenant figures (all tenants by default)."""
        rows = list(self.tenants.values() if tenants is None else tenants)
        header = (
            "tenant",
            "weight",
            "dispatches",
            "owed",
            "ratio",
            "max lag",
            "newcomer wait",
            "max gap",
            "stranded",
        )
        body = [
            (
                f.tenant + ("" if f.judged else " (not judged)"),
                f"{f.weight:g}",
                str(f.dispatches),
                f"{f.owed:.1f}",
                "-" if math.isnan(f.share_ratio) else f"{f.share_ratio:.3f}",
                f"{f.max_lag:.2f}",
                str(f.newcomer_wait) + ("+" if f.waiting else ""),
                str(f.max_gap),
                str(f.stranded),
            )
            for f in rows
        ]
        widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]
        lines = [
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w)
                for i, (c, w) in enumerate(zip(r, widths, strict=True))
            )
            for r in [header, *body]
        ]
        return "\n".join(line.rstrip() for line in lines)

    def summary(self) -> str:
        """One line: dispatches, tenants, Jain index, max lag, max newcomer wait."""
        return (
            f"{self.dispatches} dispatches, {len(self.tenants)} tenants "
            f"({len(self.judged)} judged): Jain {self.jain:.4f}, "
            f"max lag {self.max_lag:.2f} ({self.max_lag_tenant or '-'}), "
            f"max newcomer wait {self.max_newcomer_wait} "
            f"({self.max_newcomer_wait_tenant or '-'})"
        )

    def __str__(self) -> str:
        return self.summary() + "\n" + self.table()


def _number(value: object) -> bool:
    """A real number that is not NaN (a NaN bound would make every comparison pass)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and not math.isnan(value)


def _events(dispatches: object, named: Iterable[str]) -> Iterable[TraceEvent]:
    """The trace of ``dispatches``; for a plain list of tenant ids, every tenant of it and of
    ``named`` (the weights' and ``tenants=``'s) is backlogged from the start: one named but
    never dispatched was starved (one ready task that no dispatch took)."""
    if isinstance(dispatches, _HasTrace):
        return dispatches.trace
    if isinstance(dispatches, str | bytes):
        raise TypeError("dispatches must be a sequence of tenant ids, not one string")
    items: list[object] = list(dispatches)  # type: ignore[call-overload]
    names = [item for item in items if isinstance(item, str)]
    if len(names) == len(items):
        totals: dict[str, int] = {}
        for tenant in names:
            totals[tenant] = totals.get(tenant, 0) + 1
        for tenant in named:
            totals.setdefault(tenant, 1)
        ready: list[TraceEvent] = [Ready(t, n) for t, n in totals.items()]
        return [*ready, *(Dispatched(t) for t in names)]
    events: list[TraceEvent] = []
    for item in items:
        if not isinstance(item, Ready | Dispatched | Held | Unheld):
            raise TypeError(f"not a tenant id or a trace event: {item!r}")
        events.append(item)
    return events


def fairness_report(
    dispatches: Sequence[str] | Sequence[TraceEvent] | _HasTrace,
    weights: Mapping[str, float] | None = None,
    *,
    tenants: Iterable[str] | None = None,
    min_owed: float = DEFAULT_MIN_OWED,
) -> FairnessReport:
    """The fairness figures of a dispatch order (definitions in the module docstring).

    ``dispatches`` is a :class:`~fairque_testing.Simulation` (its recorded trace), a list of
    :class:`Ready`/:class:`Dispatched`/:class:`Held`/:class:`Unheld` events, or a plain list
    of tenant ids in dispatch order (then every tenant counts as backlogged from the start
    until its last dispatch; so does a tenant of ``weights`` or ``tenants`` that the list never
    names: it was starved).
    ``weights`` maps tenants to their weights (missing tenants weigh 1, as in the queue).
    ``tenants`` restricts the report to those tenants: dispatches to others are dropped, which
    is how to judge, say, the tenants no pinned worker serves, or one strict tier.
    A dispatch of a tenant with no ready task in the trace counts as one task becoming ready
    just then.
    """
    weights = dict(weights or {})
    for tenant, weight in weights.items():
        if not (isinstance(weight, int | float) and math.isfinite(weight) and weight > 0):
            raise ValueError(f"weight of {tenant!r} must be a positive number, got {weight!r}")
    keep = None if tenants is None else set(tenants)
    fluid = Fluid(weights)
    for event in _events(dispatches, [*weights, *(keep or ())]):
        if keep is not None and event.tenant not in keep:
            continue
        if isinstance(event, Ready):
            fluid.ready(event.tenant, event.count)
        elif isinstance(event, Dispatched):
            fluid.dispatch(event.tenant)
        elif isinstance(event, Held):
            fluid.hold(event.tenant)
        else:
            fluid.unhold(event.tenant)
    waiting = fluid.close()
    return _build(fluid.state, fluid.n, waiting, min_owed)


def _build(
    state: Mapping[str, TenantState], n: int, waiting: set[str], min_owed: float
) -> FairnessReport:
    weight_sum = sum(st.weight for st in state.values()) or 1.0
    figures: dict[str, TenantFairness] = {}
    for tenant, st in state.items():
        ratio = st.dispatches / st.owed if st.owed > 0 else math.nan
        figures[tenant] = TenantFairness(
            tenant=tenant,
            weight=st.weight,
            dispatches=st.dispatches,
            owed=st.owed,
            share_ratio=ratio,
            share=st.dispatches / n if n else 0.0,
            weight_share=st.weight / weight_sum,
            max_lag=st.max_lag,
            newcomer_wait=st.newcomer_wait,
            max_gap=st.max_gap,
            busy_periods=st.period,
            stranded=st.ready,
            waiting=tenant in waiting,
            judged=st.owed >= min_owed,
            held=st.holds,
            debt_returns=st.debt_returns,
        )
    ratios = [f.share_ratio for f in figures.values() if f.judged]
    squares = sum(x * x for x in ratios)
    jain = (sum(ratios) ** 2) / (len(ratios) * squares) if ratios and squares > 0 else 1.0
    lag_top = max(figures.values(), key=lambda f: f.max_lag, default=None)
    wait_top = max(figures.values(), key=lambda f: f.newcomer_wait, default=None)
    return FairnessReport(
        dispatches=n,
        jain=jain,
        max_lag=lag_top.max_lag if lag_top else 0.0,
        max_lag_tenant=lag_top.tenant if lag_top and lag_top.max_lag > 0 else None,
        max_newcomer_wait=wait_top.newcomer_wait if wait_top else 0,
        max_newcomer_wait_tenant=(
            wait_top.tenant if wait_top and wait_top.newcomer_wait > 0 else None
        ),
        tenants=figures,
        min_owed=min_owed,
    )


def assert_fair(
    report: FairnessReport,
    tolerance: float = 0.05,
    *,
    min_jain: float | None = None,
    max_lag: float | None = None,
    max_newcomer_wait: int | None = None,
    allow_stranded: bool = False,
) -> None:
    """Raise AssertionError, naming the worst tenants, unless ``report`` is fair enough.

    Checked: every judged tenant's share ratio is within ``1 ± tolerance``; the Jain index is at
    least ``min_jain`` (default ``1 - tolerance``); when given, ``max_lag`` (dispatches) and
    ``max_newcomer_wait`` (dispatches) bound the report's maxima; and no ready task was left
    undispatched (unless ``allow_stranded``).
    """
    if not _number(tolerance) or tolerance < 0:
        raise ValueError(f"tolerance must be a number >= 0, got {tolerance!r}")
    for name, bound in (
        ("min_jain", min_jain),
        ("max_lag", max_lag),
        ("max_newcomer_wait", max_newcomer_wait),
    ):
        if bound is not None and not _number(bound):
            raise ValueError(f"{name} must be a number, got {bound!r}")  # NaN passes every test
    floor = 1.0 - tolerance if min_jain is None else min_jain
    problems: list[str] = []
    if report.jain < floor:
        problems.append(f"Jain index {report.jain:.4f} is below {floor:.4f}")
    for f in sorted(report.tenants.values(), key=lambda f: f.deviation, reverse=True):
        if f.judged and f.deviation > tolerance:
            problems.append(
                f"tenant {f.tenant!r} (weight {f.weight:g}) got {f.share_ratio:.3f}x its "
                f"weighted share ({f.dispatches} dispatches, owed {f.owed:.1f}; "
                f"allowed 1 ± {tolerance:g})"
            )
    if max_lag is not None and report.max_lag > max_lag:
        problems.append(
            f"max lag {report.max_lag:.2f} dispatches (tenant {report.max_lag_tenant!r}) "
            f"exceeds {max_lag:g}"
        )
    if max_newcomer_wait is not None and report.max_newcomer_wait > max_newcomer_wait:
        problems.append(
            f"newcomer wait {report.max_newcomer_wait} dispatches "
            f"(tenant {report.max_newcomer_wait_tenant!r}) exceeds {max_newcomer_wait}"
        )
    if not allow_stranded and report.stranded:
        stranded = ", ".join(f"{t!r}: {c}" for t, c in sorted(report.stranded.items()))
        problems.append(f"ready tasks never dispatched: {stranded}")
    if not problems:
        return
    lines = [f"fairness check failed ({report.summary()}):"]
    lines += [f"  - {p}" for p in problems]
    lines.append("worst tenants:")
    lines += ["  " + row for row in report.table(report.worst()).splitlines()]
    raise AssertionError("\n".join(lines))
