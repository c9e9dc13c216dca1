"""The figures the dashboard shows, one function per figure.

Every figure reads what the public queue API offers and returns ``None`` when the queue (or its
backend) does not offer it yet; the pages show ``None`` as "n/a". A new figure of the queue API
(per-tenant lag, caps, wait percentiles ...) slots in by teaching the matching function where to
find it: a key of ``get_tenant_stats()``/``get_stats()`` or a method found with ``getattr``.

Per-tenant figures are computed from :class:`TenantFacts`, gathered for one page of tenants in
a bounded number of calls (:func:`gather_tenant_facts`): never a scan of every tenant.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import attrs

from fairque_core import AsyncFairQueue
from fairque_core.domain.errors import DamagedKeyError, LuaScriptError

__all__ = [
    "SORT_KEYS",
    "TENANT_COLUMNS",
    "Column",
    "KeyLimitRow",
    "QueueCounts",
    "TenantFacts",
    "TenantRow",
    "feature",
    "gather_tenant_facts",
    "key_limit_rows",
    "limits_reading",
    "queue_counts",
    "sort_rows",
    "tenant_row",
]

log = logging.getLogger("fairque.dashboard")

#: At most this many per-tenant calls are in flight at once (one page of the tenants table).
CONCURRENCY = 16


def _int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return int(value)
    return None


def _float(value: object) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    return None


def _first(mapping: Mapping[str, Any], *keys: str) -> Any:
    for key in keys:
        if key in mapping:
            return mapping[key]
    return None


async def _maybe_call(obj: object, name: str, *args: Any) -> Any:
    """``obj.name(*args)`` (awaited if need be) when the method exists, else None."""
    method = getattr(obj, name, None)
    if method is None or not callable(method):
        return None
    result = method(*args)
    if inspect.isawaitable(result):
        result = await result
    return result


# ---------------------------------------------------------------------- queue-wide figures


@attrs.frozen(kw_only=True)
class QueueCounts:
    """The overview's counts; None where the queue does not report the figure."""

    ready: int | None
    scheduled: int | None
    deferred: int | None
    #: handlers running now: the live workers' busy slots (None without a workers registry)
    running: int | None
    dlq: int | None
    active_tenants: int | None
    counters: Mapping[str, int]
    #: entries in the intake, not yet ingested (ADR 47)
    intake: int | None = None
    #: tasks claimed by a worker (running, buffered or being acknowledged): the server's count
    leased: int | None = None


async def queue_counts(queue: AsyncFairQueue, workers: Any = None) -> QueueCounts:
    """One ``get_stats()`` call turned into the overview's counts; ``running`` is the busy
    slots of ``workers`` (a :class:`~fairque_dashboard.workers.WorkersView`), the server
    knowing only leases."""
    stats = await queue.get_stats()
    counters = {k: v for k, v in stats.items() if isinstance(v, int) and not isinstance(v, bool)}
    return QueueCounts(
        ready=_int(_first(stats, "ready")),
        scheduled=_int(_first(stats, "scheduled")),
        deferred=_int(_first(stats, "deferred")),
        running=None if workers is None else int(workers.busy),
        leased=_int(_first(stats, "leased", "running")),
        dlq=_int(_first(stats, "dlq")),
        active_tenants=_int(_first(stats, "active_tenants")),
        counters=counters,
        intake=_int(_first(stats, "intake")),
    )


# ---------------------------------------------------------------------- per-tenant facts


@attrs.frozen(kw_only=True)
class TenantFacts:
    """What the queue says about one tenant, gathered once per page."""

    tenant: str
    sizes: Mapping[str, int]
    stats: Mapping[str, Any]
    #: The weight the dashboard knows and where it comes from ("queue", "config", "set here").
    weight: float | None = None
    weight_source: str = ""
    #: ``get_tenant_limits(tenant)`` as a mapping (:func:`limits_reading`)
    limits: Mapping[str, Any] | None = None
    fairness: Mapping[str, Any] | None = None
    #: paused (``fairque pause``): claims skip it until resumed
    paused: bool = False
    #: at its ``max_running``: claims skip it until one of its tasks ends
    capped: bool = False
    #: From the dashboard's sampler: share of dispatches and fair share over its window.
    share: float | None = None
    fair_share: float | None = None
    #: From the dashboard's sampler: why its own limits held it in the window ("": they did
    #: not), so it was left out of the Jain index and the fair shares (ADR 67).
    held_in_window: str = ""
    #: Why this tenant's figures could not be read (a damaged key of its own), else "".
    damaged: str = ""


#: What a read of one tenant's figures may raise when one of its keys is damaged: that tenant's
#: row says so, the others are shown (a whole page was a 500).
_DAMAGE = (DamagedKeyError, LuaScriptError)


async def gather_tenant_facts(
    queue: AsyncFairQueue,
    tenants: Sequence[str],
    *,
    known_weights: Mapping[str, float] | None = None,
) -> list[TenantFacts]:
    """Facts for ``tenants`` (one page): one sizes batch, then per-tenant reads, bounded."""
    if not tenants:
        return []
    sizes = await queue.get_queue_sizes_batch(list(tenants))
    stored = await _maybe_call(queue, "get_tenant_weights", list(tenants))
    stored_weights = stored if isinstance(stored, Mapping) else {}
    config_weights = queue.config.tenant_weight_table()
    known = dict(known_weights or {})
    try:
        fairness = await _maybe_call(queue, "get_tenant_fairness", list(tenants))
    except _DAMAGE as exc:  # the page's figures go on without the fairness columns
        log.warning("dashboard: fairness figures unreadable: %s", exc)
        fairness = None
    fairness_by = _fairness_by_tenant(fairness)
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(tenant: str) -> TenantFacts:
        try:
            return await read(tenant)
        except _DAMAGE as exc:
            log.warning("dashboard: tenant %r unreadable: %s", tenant, exc)
            return TenantFacts(
                tenant=tenant, sizes=sizes.get(tenant, {}), stats={}, damaged=str(exc)
            )

    async def read(tenant: str) -> TenantFacts:
        async with gate:
            stats = await queue.get_tenant_stats(tenant)
            limits = limits_reading(await _maybe_call(queue, "get_tenant_limits", tenant))
            weight = _float(await _maybe_call(queue, "get_tenant_weight", tenant))
            # the limits reading says whether it is paused; ask apart only a queue without it
            paused = (
                limits.get("paused")
                if limits is not None and "paused" in limits
                else await _maybe_call(queue, "is_paused", tenant)
            )
        source = "queue" if weight is not None else ""
        if weight is None and tenant in stored_weights:
            weight, source = _float(stored_weights[tenant][0]), "queue"
        if weight is None and _float(stats.get("weight")) is not None:
            weight, source = _float(stats.get("weight")), "queue"
        if weight is None and tenant in known:
            weight, source = known[tenant], "set here"
        if weight is None and tenant in config_weights:
            weight, source = config_weights[tenant][0], "config"
        return TenantFacts(
            tenant=tenant,
            sizes=sizes.get(tenant, {}),
            stats=stats,
            weight=weight,
            weight_source=source,
            limits=limits,
            fairness=fairness_by.get(tenant),
            paused=paused is True,
            capped=limits is not None and limits.get("capped") is True,
        )

    return list(await asyncio.gather(*(one(t) for t in tenants)))


def limits_reading(status: object, now: float | None = None) -> Mapping[str, Any] | None:
    """``get_tenant_limits``'s answer as the mapping the figures read: a mapping as it is, a
    :class:`~fairque_core.LimitStatus` (or any object with its fields) flattened: the limits in
    force (``max_running``, ``rate``, ``burst``, ``max_queued``; None: no such limit), where the
    tenant stands (``running``, ``queued``, ``capped``, ``paused``, ``tokens``,
    ``next_start_in`` seconds from ``now``) and its counters; None when there is no answer."""
    if status is None or isinstance(status, Mapping):
        return status
    effective = getattr(status, "effective", None)
    if effective is None:
        return None
    out: dict[str, Any] = {
        name: getattr(effective, name, None)
        for name in ("max_running", "rate", "burst", "max_queued")
    }
    for name in ("running", "queued", "capped", "paused", "tokens", "next_start_at"):
        out[name] = getattr(status, name, None)
    for name in ("cap_hits", "throttles", "refusals"):
        out[name] = getattr(status, name, None)
    at = _float(out["next_start_at"])
    now = time.time() if now is None else now
    out["next_start_in"] = None if at is None else max(0.0, at - now)
    return out


def _fairness_by_tenant(reading: object) -> dict[str, Mapping[str, Any]]:
    """``get_tenant_fairness`` of one page (values with ``as_dict``, or mappings) by tenant."""
    out: dict[str, Mapping[str, Any]] = {}
    for item in reading if isinstance(reading, (list, tuple)) else ():
        as_dict = getattr(item, "as_dict", None)
        values = as_dict() if callable(as_dict) else item
        if isinstance(values, Mapping) and isinstance(values.get("tenant"), str):
            out[values["tenant"]] = values
    return out


def _lookup(facts: TenantFacts, *keys: str) -> Any:
    """A figure's value from the fairness or limits reading, or the tenant stats."""
    for source in (facts.fairness, facts.limits, facts.stats):
        if source:
            value = _first(source, *keys)
            if value is not None:
                return value
    return None


# One function per per-tenant figure: each returns None when the queue lacks it.


def depth(facts: TenantFacts) -> int | None:
    """Ready tasks (critical + normal)."""
    if "critical" in facts.sizes or "normal" in facts.sizes:
        return int(facts.sizes.get("critical", 0)) + int(facts.sizes.get("normal", 0))
    return _int(facts.stats.get("ready"))


def scheduled(facts: TenantFacts) -> int | None:
    return _int(_first(facts.sizes, "scheduled")) if facts.sizes else None


def running(facts: TenantFacts) -> int | None:
    """Tasks under a lease."""
    value = _first(facts.sizes, "leased") if facts.sizes else None
    return _int(value if value is not None else facts.stats.get("leased"))


def _limit(facts: TenantFacts, name: str, *others: str) -> int | str | None:
    """A limit in force: its value, "-" when the limits reading has no such limit, None (n/a)
    when the queue reports no limits."""
    if facts.limits is not None and name in facts.limits:
        value = _int(facts.limits[name])
        return "-" if value is None else value
    return _int(_lookup(facts, name, *others))


def running_cap(facts: TenantFacts) -> int | str | None:
    """The tenant's concurrency cap in force (``max_running``; "-": none)."""
    return _limit(facts, "max_running", "running_cap", "concurrency_cap")


def rate_limit_state(facts: TenantFacts) -> str | None:
    """Where the tenant stands against its rate: "ok, N now" (starts allowed at once),
    "throttled, next in S s", "-" without a rate; None when the queue reports no limits."""
    reading = facts.limits
    if reading is not None and "rate" in reading and "tokens" in reading:
        if reading["rate"] is None:
            return "-"
        wait = _float(reading.get("next_start_in"))
        if wait is not None:
            return (
                f"throttled, next in {wait:.2f} s"
                if wait < 10
                else f"throttled, next in {wait:.0f} s"
            )
        return f"ok, {reading.get('tokens')} now"
    value = _lookup(facts, "rate_limit_state", "throttled")
    if value is None:
        return None
    if isinstance(value, bool):
        return "throttled" if value else "ok"
    return str(value)


def queued(facts: TenantFacts) -> int | None:
    """Queued work counted against ``max_queued``: ready + scheduled (the limits reading)."""
    return _int(facts.limits.get("queued")) if facts.limits is not None else None


def queued_cap(facts: TenantFacts) -> int | str | None:
    """The tenant's ``max_queued`` in force ("-": none)."""
    return _limit(facts, "max_queued")


def cap_hits(facts: TenantFacts) -> int | None:
    """Times the tenant reached its ``max_running``."""
    return _int(_lookup(facts, "cap_hits"))


def throttles(facts: TenantFacts) -> int | None:
    """Starts after which the tenant had to wait for its rate."""
    return _int(_lookup(facts, "throttles"))


def refusals(facts: TenantFacts) -> int | None:
    """Pushes refused by its ``max_queued``."""
    return _int(_lookup(facts, "refusals"))


def dispatched(facts: TenantFacts) -> int | None:
    """Tasks claimed from this tenant since the queue began counting."""
    return _int(facts.stats.get("claimed"))


def failed(facts: TenantFacts) -> int | None:
    return _int(facts.stats.get("dead"))


def weight(facts: TenantFacts) -> float | None:
    return facts.weight


def share(facts: TenantFacts) -> float | None:
    """Share of dispatches: the queue's figure when it has one, else the sampler's window."""
    value = _float(_lookup(facts, "share", "window_share"))
    return value if value is not None else facts.share


def fair_share(facts: TenantFacts) -> float | None:
    value = _float(_lookup(facts, "fair_share"))
    return value if value is not None else facts.fair_share


def lag(facts: TenantFacts) -> float | None:
    """How far the tenant is behind its fair share, in dispatches (fairness figures)."""
    return _float(_lookup(facts, "lag"))


def oldest_ready_age(facts: TenantFacts) -> float | None:
    """Seconds the oldest ready task has waited (fairness figures)."""
    return _float(_lookup(facts, "oldest_ready_age", "oldest_ready_seconds"))


def starving(facts: TenantFacts) -> str | None:
    """The starvation alarm's reason ("lag"), "-" when not starving (fairness figures)."""
    value = _lookup(facts, "starving_reason")
    return None if value is None else (str(value) or "-")


def limited(facts: TenantFacts) -> str | None:
    """Why a limit holds the tenant's ready work ("cap", "rate", "paused", "queue_paused";
    "-" when none does): held by its own limits in the sampler's window, else at this
    reading (fairness figures; None when the queue does not say)."""
    if facts.held_in_window:
        return facts.held_in_window
    if facts.fairness is None or "limited_reason" not in facts.fairness:
        return None
    return str(facts.fairness["limited_reason"] or "-")


def wait_p99(facts: TenantFacts) -> float | None:
    """Enqueue-to-start wait, 99th percentile, seconds (fairness figures)."""
    return _float(_lookup(facts, "wait_p99", "wait_p99_seconds"))


@attrs.frozen(kw_only=True)
class Column:
    """A column of the tenants table: key (for ?sort=), heading, figure, display format."""

    key: str
    heading: str
    figure: Callable[[TenantFacts], object]
    fmt: str = "int"


#: The tenants table, in order. Sorting is by ``key``; None (n/a) sorts last.
TENANT_COLUMNS: tuple[Column, ...] = (
    Column(key="depth", heading="ready", figure=depth),
    Column(key="scheduled", heading="scheduled", figure=scheduled),
    Column(key="running", heading="running", figure=running),
    Column(key="cap", heading="cap", figure=running_cap),
    Column(key="rate", heading="rate limit", figure=rate_limit_state, fmt="text"),
    Column(key="queued", heading="queued", figure=queued),
    Column(key="qcap", heading="queued cap", figure=queued_cap),
    Column(key="cap_hits", heading="cap hits", figure=cap_hits),
    Column(key="throttles", heading="throttles", figure=throttles),
    Column(key="refusals", heading="refusals", figure=refusals),
    Column(key="dispatched", heading="dispatched", figure=dispatched),
    Column(key="failed", heading="dead", figure=failed),
    Column(key="weight", heading="weight", figure=weight, fmt="float"),
    Column(key="lag", heading="lag", figure=lag, fmt="float"),
    Column(key="oldest", heading="oldest ready", figure=oldest_ready_age, fmt="seconds"),
    Column(key="p99", heading="wait p99", figure=wait_p99, fmt="seconds"),
    Column(key="limited", heading="limited", figure=limited, fmt="text"),
    Column(key="alarm", heading="starving", figure=starving, fmt="text"),
)

SORT_KEYS = frozenset({"tenant", "share"} | {c.key for c in TENANT_COLUMNS})


@attrs.frozen(kw_only=True)
class TenantRow:
    tenant: str
    values: Mapping[str, object]
    share: float | None
    fair_share: float | None
    weight_source: str
    paused: bool = False
    capped: bool = False
    damaged: str = ""


def tenant_row(facts: TenantFacts) -> TenantRow:
    return TenantRow(
        tenant=facts.tenant,
        values={c.key: c.figure(facts) for c in TENANT_COLUMNS},
        share=share(facts),
        fair_share=fair_share(facts),
        weight_source=facts.weight_source,
        paused=facts.paused,
        capped=facts.capped,
        damaged=facts.damaged,
    )


def sort_rows(rows: list[TenantRow], key: str, descending: bool) -> list[TenantRow]:
    """``rows`` sorted by column ``key``; n/a values last whichever the direction."""

    def value(row: TenantRow) -> object:
        if key == "tenant":
            return row.tenant
        if key == "share":
            return row.share
        return row.values.get(key)

    present = [r for r in rows if value(r) is not None]
    missing = [r for r in rows if value(r) is None]
    present.sort(key=lambda r: (_sortable(value(r)), r.tenant), reverse=descending)
    return present + missing


def _sortable(value: object) -> tuple[int, float, str]:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (0, float(value), "")
    return (1, 0.0, str(value))


def feature(queue: AsyncFairQueue, name: str) -> Callable[..., Awaitable[Any]] | None:
    """The queue's (or its backend's) method ``name`` when it exists: feature detection."""
    for owner in (queue, queue.backend):
        method = getattr(owner, name, None)
        if method is not None and callable(method):

            async def call(*args: Any, _m: Any = method, **kwargs: Any) -> Any:
                result = _m(*args, **kwargs)
                return await result if inspect.isawaitable(result) else result

            return call
    return None


@attrs.frozen
class KeyLimitRow:
    """One limit key on the tenants page (ADR 79): its limits, and its tasks running and parked
    over all tenants."""

    key: str
    limits: str
    running: int
    parked: int


async def key_limit_rows(queue: object) -> list[KeyLimitRow]:
    """The limit keys that have limits, each with its counts (none when the queue cannot
    tell: an older engine)."""
    if not hasattr(queue, "list_key_limits"):
        return []
    rows = []
    for key, limits in (await _maybe_call(queue, "list_key_limits")).items():
        status = await _maybe_call(queue, "get_key_limits", key)
        parts = [
            f"max_running {limits.max_running}" if limits.max_running is not None else "",
            f"rate {limits.rate:g}/s" if limits.rate is not None else "",
            f"burst {limits.burst}" if limits.burst is not None else "",
        ]
        text = ", ".join(p for p in parts if p)
        text += " per tenant" if limits.per_tenant else " across all tenants"
        rows.append(
            KeyLimitRow(
                key=key,
                limits=text,
                running=sum(status.running.values()),
                parked=sum(status.parked.values()),
            )
        )
    return rows
