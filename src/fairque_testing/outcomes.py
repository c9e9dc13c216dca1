"""How the claimed work ended, per tenant and per tier: :func:`outcome_report` and
:func:`assert_outcomes_fair`.

Fair claim order is half of the promise: a handler that fails every task of one tier serves
that tier in its turn and still lets it down. :func:`fairque_testing.simulate` records how each
run ended (its ``handler`` returned, or raised and the queue retried or dead-lettered the
task); this module adds those records up.

Definitions, per tenant and per tier (a tier's figures are the sums over its tenants):

* **completed**: runs that returned (the task finished); **dead**: runs that raised with no
  retry left (the task is in the dead-letter queue); **retried**: runs that raised and were
  retried (each failed attempt counts once); **unfinished**: tasks pushed that neither completed
  nor died by the end (never claimed, or a retry still waiting when ``max_rounds`` cut the run).
* **settled**: ``completed + dead``, the tasks whose fate is known.
* **success rate**: ``completed / settled`` (NaN with nothing settled).

:func:`assert_outcomes_fair` compares each success rate with the queue's as a whole: a tenant or
a tier that fares worse than the queue by more than ``tolerance`` is unfairly served even when
its claims came in its turn.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Protocol

import attrs

from fairque_testing.simulation import COMPLETED, DEAD, RETRIED, DispatchRecord

__all__ = [
    "DEFAULT_MIN_SETTLED",
    "OutcomeReport",
    "Outcomes",
    "assert_outcomes_fair",
    "outcome_report",
]

#: Tenants and tiers with fewer settled tasks than this are listed but not judged (one failure
#: in three tasks is not a pattern).
DEFAULT_MIN_SETTLED = 10


class _HasRecords(Protocol):
    @property
    def records(self) -> tuple[DispatchRecord, ...]: ...

    @property
    def pushed_by_tenant(self) -> Mapping[str, int]: ...

    @property
    def tiers(self) -> Mapping[str, str]: ...


@attrs.frozen
class Outcomes:
    """The outcomes of one tenant or one tier (``name``); ``errors`` holds the first distinct
    error messages (at most three), to show what went wrong."""

    name: str
    tier: str
    pushed: int
    completed: int
    dead: int
    retried: int
    errors: tuple[str, ...] = ()

    @property
    def settled(self) -> int:
        return self.completed + self.dead

    @property
    def unfinished(self) -> int:
        return max(0, self.pushed - self.settled)

    @property
    def success_rate(self) -> float:
        return self.completed / self.settled if self.settled else math.nan


def _add(outcomes: Iterable[Outcomes], name: str, tier: str) -> Outcomes:
    items = list(outcomes)
    errors: list[str] = []
    for item in items:
        errors += [e for e in item.errors if e not in errors]
    return Outcomes(
        name=name,
        tier=tier,
        pushed=sum(o.pushed for o in items),
        completed=sum(o.completed for o in items),
        dead=sum(o.dead for o in items),
        retried=sum(o.retried for o in items),
        errors=tuple(errors[:3]),
    )


@attrs.frozen
class OutcomeReport:
    """The outcomes of one simulation. ``str(report)`` is a table per tier and per tenant."""

    tenants: Mapping[str, Outcomes]
    tiers: Mapping[str, Outcomes]
    total: Outcomes
    min_settled: int

    def judged(self, outcomes: Outcomes) -> bool:
        """Whether ``outcomes`` has enough settled tasks to be compared."""
        return outcomes.settled >= self.min_settled

    def table(self, rows: Iterable[Outcomes] | None = None, *, label: str = "tenant") -> str:
        """A fixed-width table (all tenants by default)."""
        items = list(self.tenants.values() if rows is None else rows)
        tiered = label != "tier"  # a tier's own row needs no tier column
        header = (label, *(("tier",) if tiered else ()), "pushed", "completed", "dead")
        header += ("retried", "unfinished", "success")
        body = [
            (
                o.name + ("" if self.judged(o) else " (not judged)"),
                *((o.tier,) if tiered else ()),
                str(o.pushed),
                str(o.completed),
                str(o.dead),
                str(o.retried),
                str(o.unfinished),
                "-" if math.isnan(o.success_rate) else f"{o.success_rate:.1%}",
            )
            for o in items
        ]
        widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]
        lines = [
            "  ".join(
                c.ljust(w) if i < (2 if tiered else 1) else c.rjust(w)
                for i, (c, w) in enumerate(zip(r, widths, strict=True))
            )
            for r in [header, *body]
        ]
        return "\n".join(line.rstrip() for line in lines)

    def summary(self) -> str:
        t = self.total
        rate = "-" if math.isnan(t.success_rate) else f"{t.success_rate:.1%}"
        return (
            f"{t.pushed} tasks, {len(self.tenants)} tenants in {len(self.tiers)} tiers: "
            f"{t.completed} completed, {t.dead} dead, {t.retried} retried, "
            f"{t.unfinished} unfinished; success {rate}"
        )

    def __str__(self) -> str:
        tiers = self.table(self.tiers.values(), label="tier")
        return f"{self.summary()}\nper tier:\n{tiers}\nper tenant:\n{self.table()}"


def outcome_report(
    sim: _HasRecords,
    *,
    tiers: Mapping[str, str | int] | None = None,
    min_settled: int = DEFAULT_MIN_SETTLED,
) -> OutcomeReport:
    """The outcomes of a :class:`~fairque_testing.Simulation`, per tenant and per tier.

    ``tiers`` maps tenants to the tier to report them under (a name or a number); by default
    each tenant's tier as the queue had it (``sim.tiers``: the config's tier name, else the
    stored rank). A tenant it does not name is in the tier ``"-"``.
    """
    tier_of = {t: str(v) for t, v in (sim.tiers if tiers is None else tiers).items()}
    counts: dict[str, dict[str, int]] = {}
    errors: dict[str, list[str]] = {}
    for tenant, pushed in sim.pushed_by_tenant.items():
        counts.setdefault(tenant, {"pushed": 0})["pushed"] += pushed
    for rec in sim.records:
        row = counts.setdefault(rec.tenant, {"pushed": 0})
        row[rec.outcome] = row.get(rec.outcome, 0) + 1
        seen = errors.setdefault(rec.tenant, [])
        if rec.error and rec.error not in seen and len(seen) < 3:
            seen.append(rec.error)
    tenants = {
        tenant: Outcomes(
            name=tenant,
            tier=tier_of.get(tenant, "-"),
            pushed=row["pushed"],
            completed=row.get(COMPLETED, 0),
            dead=row.get(DEAD, 0),
            retried=row.get(RETRIED, 0),
            errors=tuple(errors.get(tenant, ())),
        )
        for tenant, row in counts.items()
    }
    by_tier: dict[str, list[Outcomes]] = {}
    for outcome in tenants.values():
        by_tier.setdefault(outcome.tier, []).append(outcome)
    return OutcomeReport(
        tenants=tenants,
        tiers={tier: _add(items, tier, tier) for tier, items in sorted(by_tier.items())},
        total=_add(tenants.values(), "all", "-"),
        min_settled=min_settled,
    )


def assert_outcomes_fair(
    report: OutcomeReport,
    tolerance: float = 0.05,
    *,
    min_success_rate: float | None = None,
    allow_unfinished: bool = False,
) -> None:
    """Raise AssertionError, with the tables, unless the outcomes were fair.

    Checked, for every judged tier and tenant (at least ``min_settled`` settled tasks): its
    success rate is at most ``tolerance`` below the queue's as a whole; when given, at least
    ``min_success_rate``; and every pushed task completed or died (unless
    ``allow_unfinished``).
    """
    for name, value in (("tolerance", tolerance), ("min_success_rate", min_success_rate)):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value)
        ):
            raise ValueError(f"{name} must be a number, got {value!r}")
    if tolerance < 0:
        raise ValueError(f"tolerance must be >= 0, got {tolerance!r}")
    overall = report.total.success_rate
    problems: list[str] = []
    rows = [("tier", o) for o in report.tiers.values()] + [
        ("tenant", o) for o in report.tenants.values()
    ]
    for kind, o in rows:
        if not report.judged(o):
            continue
        what = f"{kind} {o.name!r}" + (f" (tier {o.tier!r})" if kind == "tenant" else "")
        seen = f" (errors: {'; '.join(o.errors)})" if o.errors else ""
        got = f"{o.success_rate:.1%} of its tasks ({o.completed} of {o.settled})"
        if not math.isnan(overall) and o.success_rate < overall - tolerance:
            problems.append(
                f"{what} completed {got}, below the queue's {overall:.1%} by more than "
                f"{tolerance:.1%}{seen}"
            )
        elif min_success_rate is not None and o.success_rate < min_success_rate:
            problems.append(f"{what} completed {got}, below {min_success_rate:.1%}{seen}")
    if not allow_unfinished and report.total.unfinished:
        left = ", ".join(
            f"{o.name!r}: {o.unfinished}" for o in report.tenants.values() if o.unfinished
        )
        problems.append(f"tasks neither completed nor dead at the end: {left}")
    if problems:
        lines = [f"outcome check failed ({report.summary()}):"]
        lines += [f"  - {p}" for p in problems]
        lines.append("per tier:")
        lines += ["  " + r for r in report.table(report.tiers.values(), label="tier").splitlines()]
        lines.append("per tenant:")
        lines += ["  " + r for r in report.table().splitlines()]
        raise AssertionError("\n".join(lines))
