"""Flow control in the in-memory model: concurrency caps, rate limits, queue caps (ADR 28).

The rules are in :mod:`fairque_core.domain.limits`; this module applies them to the model's
state, step for step as ``lua/_include/limits.lua`` does on Redis:

* :func:`admit` is how a tenant with ready work enters its active set: not while it is capped,
  parked until later while its rate holds it, else ``FairState.activate`` (a newcomer's entry);
* :func:`after_start` runs after each claimed task: the GCRA step, then the cap check; a
  tenant held by either leaves its active set (parked by time when only the rate holds it);
* :func:`lease_ended` runs when a lease ends: a capped tenant back under its cap is admitted;
* :func:`unpark_due` is the claim's due-move step for parked tenants (and the queue's rate);
* :func:`check_push` refuses a push over a tenant's ``max_queued`` before anything is stored.

Everything is skipped until a limit was first set on the queue (``LimitState.on``, the
``lim`` field of ``meta`` on Redis), so a queue without limits pays nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import attrs

from fairque_core.domain.errors import TaskValidationError
from fairque_core.domain.fairness import FairState
from fairque_core.domain.key_limits import KEY_PARK_PREFIX
from fairque_core.domain.limits import (
    QUEUE_PARK_MEMBER,
    Limits,
    LimitStatus,
    TenantQueueFullError,
    check_changes,
    gcra_start,
    gcra_view,
)
from fairque_core.domain.models import Message
from fairque_core.domain.validation import validate_id
from fairque_core.memory import key_limits
from fairque_core.memory.records import TaskRecord, TenantQueues
from fairque_core.memory.wake import WakeSignal
from fairque_core.settings.config import QueueConfig


class ModelStore(Protocol):
    """What the limits steps use of the model's store (:class:`~fairque_core.memory.store.
    ModelStore`), declared here so that this module never imports the store that imports it."""

    _config: QueueConfig
    _fair: FairState
    _leases: dict[str, int]
    _limits: LimitState
    _paused: set[str]
    _tenants: dict[str, TenantQueues]
    _wake: WakeSignal

    def _now(self) -> int: ...

    def _bump(self, name: str, tenant: TenantQueues, by: int = 1) -> None: ...

    def _tenant(self, tenant: str) -> TenantQueues: ...

    def _live(self, task_id: str, now: int) -> TaskRecord | None: ...

    def _recompute_next_due(self) -> None: ...


__all__ = [
    "LimitState",
    "admit",
    "after_start",
    "check_push",
    "lease_ended",
    "limit_status",
    "queue_may_start",
    "queue_started",
    "set_limits",
    "unpark_due",
]

_NONE = Limits()
_MAX_TIER = 1000


@attrs.define
class LimitState:
    """The model's limits and their state (the tenant hashes' ``lim``, ``tat``, ``hold``,
    ``capd`` fields, ``meta``'s ``lim``/``lim:q``/``lim:<tier>``/``qtat``/``qhold`` and the
    ``parked`` sorted set on Redis)."""

    on: bool = False
    own: dict[str, Limits] = attrs.field(factory=dict)
    tiers: dict[int, Limits] = attrs.field(factory=dict)
    queue: Limits = _NONE
    tat: dict[str, int] = attrs.field(factory=dict)  # tenant -> GCRA tat (us)
    hold: dict[str, int] = attrs.field(factory=dict)  # tenant -> no start before (ms)
    capped: set[str] = attrs.field(factory=set)
    parked: dict[str, int] = attrs.field(factory=dict)  # member -> back at (ms)
    queue_tat: int = 0
    queue_hold: int = 0


def _ceil_ms(us: int) -> int:
    return -(-us // 1000)


def effective(store: ModelStore, tenant_id: str) -> Limits:
    """``tenant_id``'s limits in force: its own, else its tier's defaults, per field."""
    st = store._limits
    own = st.own.get(tenant_id, _NONE)
    return own.over(st.tiers.get(store._fair.tenant(tenant_id).tier, _NONE))


def _park(store: ModelStore, member: str, until_ms: int) -> None:
    store._limits.parked[member] = until_ms
    store._wake.lower_next_due(until_ms)


def admit(store: ModelStore, tenant_id: str, now: int) -> None:
    """``tenant_id`` has ready work: into its active set unless a limit holds it (or it is
    paused: memory/pause.py, which holds it out as a cap does)."""
    st = store._limits
    if tenant_id in st.capped or tenant_id in store._paused:
        return
    hold = st.hold.get(tenant_id, 0)
    if hold > now:
        if tenant_id not in st.parked:
            _park(store, tenant_id, hold)
        return
    store._fair.activate(tenant_id)


def after_start(store: ModelStore, tenant_id: str, now: int) -> None:
    """``tenant_id`` just had a task claimed (its lease counted): charge its rate, check its
    cap, and take it out of its active set when either holds it."""
    st = store._limits
    lim = effective(store, tenant_id)
    tenant = store._tenant(tenant_id)
    if lim.rate is not None:
        tat, next_us = gcra_start(st.tat.get(tenant_id, 0), now * 1000, lim.rate, lim.burst)
        st.tat[tenant_id] = tat
        if next_us > now * 1000:
            st.hold[tenant_id] = _ceil_ms(next_us)
            store._bump("throttles", tenant)
    if (
        lim.max_running is not None
        and tenant.leased >= lim.max_running
        and tenant_id not in st.capped
    ):
        st.capped.add(tenant_id)
        store._bump("cap_hits", tenant)
    held = tenant_id in st.capped or st.hold.get(tenant_id, 0) > now
    if held and store._fair.is_active(tenant_id):
        store._fair.deactivate(tenant_id)
        admit(store, tenant_id, now)  # parks it when only its rate holds it


def lease_ended(store: ModelStore, tenant_id: str, now: int) -> None:
    """A lease of ``tenant_id`` ended (its count already lowered)."""
    st = store._limits
    if tenant_id in st.capped:
        cap = effective(store, tenant_id).max_running
        tenant = store._tenant(tenant_id)
        if cap is None or tenant.leased < cap:
            st.capped.discard(tenant_id)
            if tenant.has_ready():
                admit(store, tenant_id, now)
                store._wake.signal()
    if st.queue.max_running is not None:
        store._wake.signal()


def queue_may_start(store: ModelStore, now: int) -> bool:
    """Whether the queue-wide limits allow one more start now."""
    st = store._limits
    cap = st.queue.max_running
    if cap is not None and len(store._leases) >= cap:
        return False
    return st.queue_hold <= now


def queue_started(store: ModelStore, now: int) -> None:
    """A start under the queue-wide rate."""
    st = store._limits
    rate = st.queue.rate
    if rate is None:
        return
    st.queue_tat, next_us = gcra_start(st.queue_tat, now * 1000, rate, st.queue.burst)
    if next_us > now * 1000:
        st.queue_hold = _ceil_ms(next_us)
        _park(store, QUEUE_PARK_MEMBER, st.queue_hold)


def unpark_due(store: ModelStore, now: int) -> None:
    """The claim's due-move step for parked members: those due leave the parked set (at most
    the move limit, by time then member) and a tenant with ready work is admitted."""
    st = store._limits
    due = sorted((ms, member) for member, ms in st.parked.items() if ms <= now)
    for _ms, member in due[: store._config.delayed_move_limit]:
        del st.parked[member]
        if member == QUEUE_PARK_MEMBER:
            continue
        if member.startswith(KEY_PARK_PREFIX):  # a limit key's scope (ADR 79)
            key_limits.rate_due(store, member, now)  # type: ignore[arg-type]
            continue
        st.hold.pop(member, None)
        if store._tenant(member).has_ready():
            admit(store, member, now)
    if due:
        store._recompute_next_due()


def check_push(store: ModelStore, messages: Sequence[Message], now: int) -> None:
    """Refuse the batch (TenantQueueFullError, nothing stored) when its new tasks would take a
    tenant over its ``max_queued``: the first such tenant in batch order, counted refused."""
    adding: dict[str, int] = {}
    seen: set[str] = set()
    for message in messages:
        if message.task_id in seen or store._live(message.task_id, now) is not None:
            continue
        seen.add(message.task_id)
        adding[message.tenant] = adding.get(message.tenant, 0) + 1
    for tenant_id, count in adding.items():
        cap = effective(store, tenant_id).max_queued
        if cap is None:
            continue
        tenant = store._tenant(tenant_id)
        queued = len(tenant.critical) + len(tenant.normal_live) + tenant.scheduled
        if queued + count > cap:
            store._bump("refusals", tenant)
            raise TenantQueueFullError(tenant_id, cap)


def _scope_tier(tier: object) -> int:
    if isinstance(tier, bool) or not isinstance(tier, int) or not 0 <= tier <= _MAX_TIER:
        raise TaskValidationError("tier", tier, f"must be an int in [0, {_MAX_TIER}]")
    return tier


def set_limits(
    store: ModelStore,
    changes: Mapping[str, float | None],
    *,
    tenant: str | None = None,
    tier: int | None = None,
) -> None:
    """Apply ``changes`` (field -> value, None clears) to a tenant's own limits, a tier's
    defaults, or (neither given) the queue's. A tenant's new limits take effect at once (it is
    capped, let in, or unparked as they say); a tier's or the queue's at the next start or
    lease end of each tenant."""
    checked = check_changes(changes)
    if tenant is not None:
        validate_id(tenant, "tenant")
    if tenant is not None and tier is not None:
        raise TaskValidationError("tier", tier, "give a tenant or a tier, not both")
    st = store._limits
    now = store._now()
    st.on = True
    if tier is not None:
        key = _scope_tier(tier)
        st.tiers[key] = st.tiers.get(key, _NONE).updated(checked)
        return
    if tenant is None:
        st.queue = st.queue.updated(checked)
        if st.queue.rate is None:
            st.queue_hold = 0
            st.parked.pop(QUEUE_PARK_MEMBER, None)
        return
    st.own[tenant] = st.own.get(tenant, _NONE).updated(checked)
    _settle(store, tenant, now)


def _settle(store: ModelStore, tenant_id: str, now: int) -> None:
    """Bring ``tenant_id``'s held/active state in line with its limits after a change."""
    st = store._limits
    lim = effective(store, tenant_id)
    tenant = store._tenant(tenant_id)
    if lim.rate is None and tenant_id in st.hold:
        del st.hold[tenant_id]
        st.parked.pop(tenant_id, None)
    over = lim.max_running is not None and tenant.leased >= lim.max_running
    if tenant_id in st.capped and not over:
        st.capped.discard(tenant_id)
    elif over and tenant_id not in st.capped:
        st.capped.add(tenant_id)
        store._bump("cap_hits", tenant)
        store._fair.deactivate(tenant_id)
    if tenant.has_ready() and not store._fair.is_active(tenant_id):
        admit(store, tenant_id, now)
    store._recompute_next_due()


def limit_status(store: ModelStore, tenant_id: str) -> LimitStatus:
    """Where ``tenant_id`` stands against its limits."""
    validate_id(tenant_id, "tenant")
    st = store._limits
    now = store._now()
    lim = effective(store, tenant_id)
    tenant = store._tenants.get(tenant_id)
    running = queued = 0
    counters = {"cap_hits": 0, "throttles": 0, "refusals": 0}
    if tenant is not None:
        running = tenant.leased
        queued = len(tenant.critical) + len(tenant.normal_live) + tenant.scheduled
        counters = {name: tenant.counters[name] for name in counters}
    next_at, tokens = gcra_view(st.tat.get(tenant_id, 0), now, lim)
    return LimitStatus(
        tenant=tenant_id,
        own=st.own.get(tenant_id, _NONE),
        effective=lim,
        running=running,
        queued=queued,
        capped=tenant_id in st.capped,
        next_start_at=next_at,
        tokens=tokens,
        **counters,
        paused=tenant_id in store._paused,
    )
