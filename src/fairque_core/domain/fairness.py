"""Fair scheduling between tenants: the executable specification (ADR 4).

Stride scheduling with integer arithmetic, with start-time fair queuing's virtual time. Every
rule that decides which tenant a claim serves lives here, as plain data and small functions,
with no I/O:

* **Pass and stride.** Each tenant has a *pass* (its virtual finishing time so far) and a
  *stride* (``scoring.stride_for(weight)``: 1,000,000 for weight 1). Serving a tenant adds its
  stride to its pass (:func:`charge`), so a tenant of weight 2 is served twice as often as one
  of weight 1.
* **Virtual time, one per tier.** When a claim serves a tenant of a tier, the tier's virtual
  time becomes the lowest pass among that tier's active tenants (SFQ: the start tag of the work
  in service). For an unrestricted claim that is the served tenant's own pass; for a pinned
  claim (a worker's ``assigned``/``steal`` lists) it is the lowest of the tier, so pinned
  service never moves the virtual time past the tenants it did not pick. Without strict tiers
  there is one tier (0). A tenant that becomes active starts at ``max(its stored pass,
  virtual time)`` (:meth:`FairState.activate`): idle time earns no credit, and going idle does
  not wipe a debt. Every active tenant's pass is at least its tier's virtual time.
* **Activation order.** Each activation takes the next number of a per-queue sequence; ties of
  pass go to the tenant activated first (never to the tenant id).
* **Active sets.** A tenant is *active* while it has ready work. The active tenants of a tier
  are kept by (pass, activation) (``FairState.active``: tier -> tenant -> (pass, activation),
  the ``active:<tier>`` sorted sets on Redis).
* **Pick.** Without groups: the highest tier with an active tenant, then the lowest (pass,
  activation). With groups (a worker's ``assigned`` list, then its ``steal`` list): the first
  group that has an active tenant, the best of it by (higher tier, lower pass, activation).
* **Weights.** :meth:`FairState.set_weight` changes a tenant's stride and tier and rescales its
  lag (pass - virtual time, never below 0) to the new stride: a debt of k turns stays k turns.
* **Refund.** :meth:`FairState.refund` gives back one stride (never below the virtual time) for
  a claim released unstarted or whose lease expired before it started.

The Redis adapter's Lua mirrors this module step for step (``lua/_include/tenant.lua``:
activate, deactivate, refund, the pass and virtual times; ``lua/_include/claim.lua``: pick and
serve; ``lua/set_weight.lua``: the weight change), and the in-memory model
(:mod:`fairque_core.memory`) calls it. A differential property test runs the model and Redis on
the same operations, so a rule changed here must change there too.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from operator import itemgetter

import attrs

from fairque_core.domain.scoring import stride_for

__all__ = ["DEFAULT_STRIDE", "FairState", "TenantPass", "charge", "rescale_lag"]

DEFAULT_STRIDE = stride_for(1.0)
"""The stride of a tenant nobody gave a weight (weight 1)."""

_PLACE: Callable[[tuple[str, tuple[int, int]]], tuple[int, int]] = itemgetter(1)


@attrs.define
class TenantPass:
    """One tenant's place in the fair order (the ``pass``/``stride``/``tier``/``act`` fields of
    its hash on Redis). ``activation`` is the queue's activation number of its current (or
    last) activation."""

    stride: int = DEFAULT_STRIDE
    tier: int = 0
    pass_: int = 0
    activation: int = 0


def charge(tenant: TenantPass) -> int:
    """What one served task costs ``tenant`` in virtual time: its stride."""
    return tenant.stride


def rescale_lag(lag: int, old_stride: int, new_stride: int) -> int:
    """``lag`` (>= 0) measured in ``old_stride`` turns, expressed in ``new_stride`` turns.

    Computed as ``floor(lag / old * new)`` in IEEE doubles, the same two operations the Lua
    does (exact whenever ``lag`` is a whole number of old strides; Python's int division is
    correctly rounded, like the double division in Lua)."""
    return math.floor(lag / old_stride * new_stride)


@attrs.define
class FairState:
    """The fair-scheduling state of one queue.

    ``strict_tiers`` is the queue's mode (``QueueConfig.strict_tiers``). The caller keeps the
    tenants' ready work and tells this state when a tenant gains ready work
    (:meth:`activate`), loses it without being served (:meth:`deactivate`, e.g. its last ready
    task was canceled), is served (:meth:`serve`) or gets a turn back (:meth:`refund`).

    ``vtime`` is the virtual time without strict tiers (the ``vtime`` field on Redis);
    ``tier_vtimes`` holds one per tier with them (``vtime:<tier>``; a tier not yet served
    starts from ``vtime``, which is how a queue made before per-tier virtual times carries on).
    """

    strict_tiers: bool = False
    vtime: int = 0
    tier_vtimes: dict[int, int] = attrs.field(factory=dict)
    activations: int = 0
    tenants: dict[str, TenantPass] = attrs.field(factory=dict)
    # tier -> tenant -> (pass, activation)
    active: dict[int, dict[str, tuple[int, int]]] = attrs.field(factory=dict)

    # ------------------------------------------------------------------ reads
    def tenant(self, tenant_id: str) -> TenantPass:
        """``tenant_id``'s pass record (created at the defaults on first use)."""
        found = self.tenants.get(tenant_id)
        if found is None:
            found = self.tenants[tenant_id] = TenantPass()
        return found

    def tier_of(self, tenant: TenantPass) -> int:
        """The tier whose active set holds ``tenant``: its tier in strict mode, else 0."""
        return tenant.tier if self.strict_tiers else 0

    def is_active(self, tenant_id: str) -> bool:
        tenant = self.tenants.get(tenant_id)
        return tenant is not None and tenant_id in self.active.get(self.tier_of(tenant), {})

    def has_active(self) -> bool:
        """Whether any tenant has ready work."""
        return bool(self.active)

    def active_count(self) -> int:
        return sum(len(members) for members in self.active.values())

    def virtual_time(self, tier: int) -> int:
        """The virtual time of ``tier`` (the tier of an active set, see :meth:`tier_of`)."""
        if not self.strict_tiers:
            return self.vtime
        return self.tier_vtimes.get(tier, self.vtime)

    def lag(self, tenant_id: str) -> int:
        """How far ``tenant_id``'s pass is ahead of its tier's virtual time (its debt)."""
        tenant = self.tenant(tenant_id)
        return tenant.pass_ - self.virtual_time(self.tier_of(tenant))

    # ------------------------------------------------------------------ changes
    def activate(self, tenant_id: str) -> None:
        """``tenant_id`` has ready work: join its tier's active set, at no less than the virtual
        time and after every tenant activated before it (no-op when already active)."""
        tenant = self.tenant(tenant_id)
        tier = self.tier_of(tenant)
        members = self.active.setdefault(tier, {})
        if tenant_id not in members:
            tenant.pass_ = max(tenant.pass_, self.virtual_time(tier))
            self.activations += 1
            tenant.activation = self.activations
            members[tenant_id] = (tenant.pass_, tenant.activation)

    def deactivate(self, tenant_id: str) -> None:
        """``tenant_id`` has no ready work left: leave the active set (no-op when not in it); an
        emptied tier disappears."""
        tier = self.tier_of(self.tenant(tenant_id))
        members = self.active.get(tier)
        if members is not None:
            members.pop(tenant_id, None)
            if not members:
                del self.active[tier]

    def pick(self, groups: Iterable[Sequence[str] | None]) -> str | None:
        """The tenant the next claim serves, or None when no candidate is active.

        ``groups`` is ``[None]`` for an unrestricted claim, else the worker's groups in order
        (``[assigned, steal]``).
        """
        for group in groups:
            if group is None:
                if not self.active:
                    return None
                members = self.active[max(self.active)]
                tenant_id, _place = min(members.items(), key=_PLACE)
                return tenant_id
            best: tuple[int, int, int] | None = None
            best_id: str | None = None
            for tenant_id in group:
                if not self.is_active(tenant_id):
                    continue
                tenant = self.tenants[tenant_id]
                key = (-self.tier_of(tenant), tenant.pass_, tenant.activation)
                if best is None or key < best:
                    best, best_id = key, tenant_id
            if best_id is not None:
                return best_id
        return None

    def serve(self, tenant_id: str, *, still_ready: bool, pinned: bool = False) -> None:
        """``tenant_id`` (the tenant :meth:`pick` chose, active) had one task claimed.

        The tier's virtual time moves to the lowest pass of the tier (the served tenant's own
        for an unrestricted claim; ``pinned``: the claim named its tenants, so the lowest is
        looked up), the pass advances by one :func:`charge`, and the tenant stays in its active
        set at the new pass while ``still_ready`` (it has ready work left)."""
        tenant = self.tenants[tenant_id]
        tier = self.tier_of(tenant)
        lowest = tenant.pass_
        if pinned:
            lowest = min(place[0] for place in self.active[tier].values())
        self._set_virtual_time(tier, lowest)
        tenant.pass_ += charge(tenant)
        if still_ready:
            self.active[tier][tenant_id] = (tenant.pass_, tenant.activation)
        else:
            self.deactivate(tenant_id)

    def refund(self, tenant_id: str) -> None:
        """Give ``tenant_id`` back the turn of a claim that never started: its pass goes back by
        one :func:`charge`, never below its tier's virtual time (call it before the task is
        made ready again)."""
        tenant = self.tenant(tenant_id)
        tier = self.tier_of(tenant)
        tenant.pass_ = max(tenant.pass_ - charge(tenant), self.virtual_time(tier))
        members = self.active.get(tier)
        if members is not None and tenant_id in members:
            members[tenant_id] = (tenant.pass_, tenant.activation)

    def set_weight(self, tenant_id: str, stride: int, tier: int) -> None:
        """Give ``tenant_id`` a new stride and tier. Its lag (pass - virtual time of its tier,
        never below 0) is rescaled to the new stride and counted from the new tier's virtual
        time; if active, it moves to the new tier's set keeping its activation order."""
        was_active = self.is_active(tenant_id)
        if was_active:
            self.deactivate(tenant_id)
        tenant = self.tenant(tenant_id)
        lag = max(0, tenant.pass_ - self.virtual_time(self.tier_of(tenant)))
        lag = rescale_lag(lag, tenant.stride, stride)
        tenant.stride = stride
        tenant.tier = tier
        new_tier = self.tier_of(tenant)
        tenant.pass_ = self.virtual_time(new_tier) + lag
        if was_active:
            self.active.setdefault(new_tier, {})[tenant_id] = (tenant.pass_, tenant.activation)

    # ------------------------------------------------------------------ the seam
    def _set_virtual_time(self, tier: int, value: int) -> None:
        if self.strict_tiers:
            self.tier_vtimes[tier] = value
        else:
            self.vtime = value
