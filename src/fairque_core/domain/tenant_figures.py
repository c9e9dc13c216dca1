"""Fairness you can see: per-tenant figures of the fair order, and shares over a window.

One read (``get_tenant_fairness`` on the engines, ``tenant_fairness`` on the port; the script
``tenant_figures.lua`` on Redis, ``memory/figures.py`` in the model) gives, per tenant, what
the queue already keeps: no figure costs the claim path anything. :func:`tenant_fairness`
turns the stored numbers into a :class:`TenantFairness`, the same on every backend.

* **lag**: ``(pass - virtual time of its tier) / stride``, the tenant's own turns it is ahead
  of its tier's virtual time (ADR 4), 0 while it has no ready task or its own limits hold it
  (it re-enters at the virtual time). 0 means next in line;
  right after a turn it is 1. ADR 4's lag bound keeps it in ``[0, 1]`` for every backlogged
  tenant that pinned workers did not serve (:data:`LAG_BOUND`): above it the shared workers
  pass the tenant over for ``lag - 1`` rounds (pinned service beyond its share, or a debt it
  kept while idle).
* **starvation alarm**: a backlogged tenant beyond the lag bound (reason ``"lag"``, read at
  once), or one not served within its newcomer bound over a window (reason ``"unserved"``,
  from two samples, :func:`fairness_window`).
* **limited** (ADR 67): a tenant with ready work that its own limits hold out of its active
  set, with the reason: ``"paused"`` (``pause(tenant)``), ``"cap"`` (at its ``max_running``),
  ``"rate"`` (its rate limit's next start is later than now); ``"queue_paused"`` when only
  the queue's pause holds it. While its own limits hold it a tenant is not owed turns: its lag
  reads 0 and it raises no alarm.
* **shares over a window**: two samples of the per-tenant dispatch counters (``claimed``),
  taken by whoever watches (``fairque stats --tenants --watch``, the metrics plugin), give
  each tenant's dispatches in the window, its share of them, its fair share (weight over the
  compared tenants' weights) and their ratio, and Jain's index over the compared tenants of
  dispatches divided by weight (1.0 is perfectly fair). The compared (servable) tenants are
  those backlogged at both samples and not held by their own limits at any moment between
  them: held at either sample, or a hold began in between (its ``cap_hits``, ``throttles`` or
  ``pauses`` counter rose). Queue-wide holds (the queue's pause, ``max_running``, rate) hold
  every tenant alike and change nobody's share: they exclude nobody.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from fairque_core.domain.errors import TaskValidationError
from fairque_core.domain.scoring import weight_of
from fairque_core.domain.validation import MAX_TENANT_PAGE, validate_id

__all__ = [
    "LAG_BOUND",
    "LIMITED_REASONS",
    "FairnessWindow",
    "TenantFairness",
    "TenantWindow",
    "check_figure_tenants",
    "fairness_window",
    "held_between",
    "jain_index",
    "tenant_fairness",
]

#: ADR 4's lag bound, in the tenant's own turns: ``virtual time <= pass <= virtual time +
#: stride`` for a backlogged tenant (pinned claims aside).
LAG_BOUND = 1.0

#: Reasons of the starvation alarm.
STARVING_LAG = "lag"
STARVING_UNSERVED = "unserved"

#: Reasons a tenant is limited, by precedence (the first that holds it is reported). The
#: first three are the tenant's own holds; ``"queue_paused"`` holds every tenant alike.
LIMITED_PAUSED = "paused"
LIMITED_CAP = "cap"
LIMITED_RATE = "rate"
LIMITED_QUEUE_PAUSED = "queue_paused"
LIMITED_REASONS = (LIMITED_PAUSED, LIMITED_CAP, LIMITED_RATE, LIMITED_QUEUE_PAUSED)
_OWN_HOLDS = frozenset({LIMITED_PAUSED, LIMITED_CAP, LIMITED_RATE})


@attrs.frozen(kw_only=True)
class TenantFairness:
    """One tenant's fairness figures, read at one instant.

    ``ready`` counts its ready tasks (critical and normal), ``running`` the leases it holds,
    ``dispatched`` every claim of its tasks so far (the ``claimed`` counter), ``lag`` its lag
    in turns (see the module docstring), ``oldest_ready_age`` the seconds the longest-waiting
    of its tasks next in line (the head of its critical list and of its normal set) has been
    ready (None without ready tasks). ``starving`` is the alarm, ``starving_reason`` says why
    (``"lag"``; ``""`` when not starving). ``limited`` / ``limited_reason``: it has ready
    work that a limit holds back now (:data:`LIMITED_REASONS`; ``""`` when not limited).
    ``cap_hits``, ``throttles``, ``pauses``: how often its cap, its rate and a pause of its
    own began to hold it (counters, never lowered: two readings tell whether a hold began
    between them).
    """

    tenant: str
    weight: float
    tier: int
    ready: int
    running: int
    lag: float
    dispatched: int
    oldest_ready_age: float | None
    starving: bool = False
    starving_reason: str = ""
    limited: bool = False
    limited_reason: str = ""
    cap_hits: int = 0
    throttles: int = 0
    pauses: int = 0

    @property
    def backlogged(self) -> bool:
        """Whether the tenant has ready work (in its tier's active set unless limited)."""
        return self.ready > 0

    @property
    def held(self) -> bool:
        """Whether its own limits hold it now (:attr:`limited` for a reason other than the
        queue's pause): it is not owed turns."""
        return self.limited_reason in _OWN_HOLDS

    def as_dict(self) -> dict[str, Any]:
        """The figures as a plain dict (JSON, the dashboard's per-tenant lookups)."""
        return attrs.asdict(self)


def _weight(stride: int) -> float:
    """The weight a stored stride stands for, as ``tenant_weights`` reads it back."""
    return weight_of(stride)


def check_figure_tenants(tenants: object) -> list[str] | None:
    """The tenants of a ``tenant_fairness`` read: None (a page of the tenants index), or a
    list or tuple of at most :data:`MAX_TENANT_PAGE` valid ids (a str is refused: it would
    read as one id per character). Checked before any I/O."""
    if tenants is None:
        return None
    if not isinstance(tenants, (list, tuple)):
        raise TaskValidationError("tenants", tenants, "must be None or a list of tenant ids")
    if len(tenants) > MAX_TENANT_PAGE:
        raise TaskValidationError("tenants", len(tenants), f"at most {MAX_TENANT_PAGE} ids")
    return [validate_id(t, "tenants") for t in tenants]


def tenant_fairness(
    tenant: str,
    *,
    stride: int,
    tier: int,
    ready: int,
    running: int,
    dispatched: int,
    pass_ahead: int,
    oldest_ready_ms: int | None,
    paused: bool = False,
    capped: bool = False,
    throttled: bool = False,
    queue_paused: bool = False,
    cap_hits: int = 0,
    throttles: int = 0,
    pauses: int = 0,
) -> TenantFairness:
    """The figures from what a backend stores: ``pass_ahead`` is ``pass - virtual time`` of
    the tenant's tier (taken as 0 while it has no ready task), ``oldest_ready_ms`` the wait of
    its oldest head task in ms (None without one). ``paused`` (its own pause), ``capped`` (at
    its ``max_running``), ``throttled`` (its rate's next start is after now) and
    ``queue_paused`` are its holds now; the three counters as stored."""
    reason = ""
    if ready > 0:
        holds = (paused, capped, throttled, queue_paused)
        reason = next((why for why, on in zip(LIMITED_REASONS, holds, strict=True) if on), "")
    owed = ready > 0 and reason not in _OWN_HOLDS
    lag = pass_ahead / max(1, stride) if owed else 0.0
    starving = owed and lag > LAG_BOUND
    return TenantFairness(
        tenant=tenant,
        weight=_weight(stride),
        tier=tier,
        ready=ready,
        running=running,
        lag=lag,
        dispatched=dispatched,
        oldest_ready_age=None if oldest_ready_ms is None else max(0, oldest_ready_ms) / 1000,
        starving=starving,
        starving_reason=STARVING_LAG if starving else "",
        limited=bool(reason),
        limited_reason=reason,
        cap_hits=cap_hits,
        throttles=throttles,
        pauses=pauses,
    )


def jain_index(values: Iterable[float]) -> float | None:
    """Jain's fairness index ``(sum x)^2 / (n * sum x^2)`` of ``values``: 1.0 when all are
    equal, ``1/n`` when one gets everything; None for no values, 1.0 when all are zero."""
    xs = list(values)
    if not xs:
        return None
    square = sum(x * x for x in xs)
    if square == 0:
        return 1.0
    return sum(xs) ** 2 / (len(xs) * square)


def held_between(previous: TenantFairness | None, current: TenantFairness) -> str:
    """Why the tenant's own limits held it at some moment between two readings (``""``: they
    never did): held at the current reading, else at the previous one, else a hold began in
    between (its ``pauses``, ``cap_hits`` or ``throttles`` counter rose; a hold that began
    and ended between the readings shows only there). Without a previous reading only the
    current one is known."""
    if current.held:
        return current.limited_reason
    if previous is None:
        return ""
    if previous.held:
        return previous.limited_reason
    if current.pauses > previous.pauses:
        return LIMITED_PAUSED
    if current.cap_hits > previous.cap_hits:
        return LIMITED_CAP
    if current.throttles > previous.throttles:
        return LIMITED_RATE
    return ""


@attrs.frozen(kw_only=True)
class TenantWindow:
    """One tenant over a window between two samples.

    ``dispatched``: its claims in the window. ``limited`` / ``limited_reason``: its own limits
    held it at some moment of the window (:func:`held_between`; ``"paused"``, ``"cap"`` or
    ``"rate"``): it got what they allowed and is not compared. ``backlogged``: compared with
    the others (*servable*): ready work at both samples and not limited (with strict tiers:
    and in the highest such tier). ``share``: its part of the dispatches of the compared
    tenants (None when it was not compared or nobody was served). ``fair_share``: its weight
    over theirs. ``share_ratio``: ``share / fair_share`` (1.0 = exactly its weight's share).
    ``starving`` / ``starving_reason``: the alarm, ``"lag"`` from the second sample or
    ``"unserved"``: it was compared and not served although its group had more dispatches
    than compared tenants (the newcomer bound of ADR 4, with pinned dispatches counted too).
    """

    tenant: str
    weight: float
    dispatched: int
    backlogged: bool
    share: float | None
    fair_share: float | None
    share_ratio: float | None
    starving: bool = False
    starving_reason: str = ""
    limited: bool = False
    limited_reason: str = ""


@attrs.frozen(kw_only=True)
class FairnessWindow:
    """Shares over the ``seconds`` between two samples; ``jain`` over the compared (servable)
    tenants (of dispatches divided by weight; None without any), ``dispatched`` in all,
    ``backlogged`` the number of compared tenants, ``limited`` the number of tenants with
    ready work at both samples that their own limits held in the window (not compared)."""

    seconds: float
    dispatched: int
    tenants: Mapping[str, TenantWindow]
    jain: float | None
    backlogged: int
    limited: int = 0


def fairness_window(
    previous: Sequence[TenantFairness],
    current: Sequence[TenantFairness],
    seconds: float,
    *,
    strict_tiers: bool = False,
) -> FairnessWindow:
    """Compare two samples of the same tenants (``current``'s tenants are reported; one
    missing from ``previous`` has no dispatches in the window and is not backlogged).

    Tenants backlogged at both samples and not held by their own limits in the window are
    compared with each other; with ``strict_tiers`` only those of the highest tier among them
    (lower tiers wait by design)."""
    before = {f.tenant: f for f in previous}
    deltas: dict[str, int] = {}
    held: dict[str, str] = {}
    backlogged: dict[str, TenantFairness] = {}
    limited = 0
    for now in current:
        old = before.get(now.tenant)
        deltas[now.tenant] = max(0, now.dispatched - (old.dispatched if old else now.dispatched))
        held[now.tenant] = held_between(old, now)
        if old is not None and old.backlogged and now.backlogged:
            if held[now.tenant]:
                limited += 1
            else:
                backlogged[now.tenant] = now
    if strict_tiers and backlogged:
        top = max(f.tier for f in backlogged.values())
        backlogged = {t: f for t, f in backlogged.items() if f.tier == top}
    served = sum(deltas[t] for t in backlogged)
    weights = sum(f.weight for f in backlogged.values())
    out: dict[str, TenantWindow] = {}
    for now in current:
        compared = now.tenant in backlogged
        share = fair = ratio = None
        if compared:
            fair = now.weight / weights
            if served > 0:
                share = deltas[now.tenant] / served
                ratio = share / fair
        reason = now.starving_reason
        if not reason and compared and deltas[now.tenant] == 0 and served > len(backlogged):
            reason = STARVING_UNSERVED
        out[now.tenant] = TenantWindow(
            tenant=now.tenant,
            weight=now.weight,
            dispatched=deltas[now.tenant],
            backlogged=compared,
            share=share,
            fair_share=fair,
            share_ratio=ratio,
            starving=bool(reason),
            starving_reason=reason,
            limited=bool(held[now.tenant]),
            limited_reason=held[now.tenant],
        )
    jain = jain_index(deltas[t] / f.weight for t, f in backlogged.items()) if served else None
    return FairnessWindow(
        seconds=seconds,
        dispatched=sum(deltas.values()),
        tenants=out,
        jain=jain,
        backlogged=len(backlogged),
        limited=limited,
    )
