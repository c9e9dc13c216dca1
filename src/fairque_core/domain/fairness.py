"""Fair scheduling between tenants: the executable specification (ADR 4).

Stride scheduling with integer arithmetic. Every rule that decides which tenant a claim serves
lives here, as plain data and small functions, with no I/O:

* **Pass and stride.** Each tenant has a *pass* (its virtual finishing time so far) and a
  *stride* (``scoring.stride_for(weight)``: 1,000,000 for weight 1). Serving a tenant adds its
  stride to its pass, so a tenant of weight 2 is served twice as often as one of weight 1.
* **Virtual time.** The queue's virtual time is the pass of the tenant served last
  (:meth:`FairState.serve`). A tenant that becomes active starts at
  ``max(its stored pass, virtual time)`` (:meth:`FairState.activate`): idle time earns no
  credit, and going idle does not wipe a debt.
* **Active sets.** A tenant is *active* while it has ready work. The active tenants of a tier
  are kept by pass (``FairState.active``: tier -> tenant -> pass, the ``active:<tier>`` sorted
  sets on Redis). Without strict tiers every tenant is in tier 0.
* **Pick.** Without groups: the highest tier with an active tenant, then the lowest pass, ties
  by tenant id. With groups (a worker's ``assigned`` list, then its ``steal`` list): the first
  group that has an active tenant, the best of it by (higher tier, lower pass, tenant id).
* **Weights.** :meth:`FairState.set_weight` changes a tenant's stride and tier; an active
  tenant moves to its new tier's set keeping its pass.

The Redis adapter's Lua mirrors this module step for step (``lua/_include/tenant.lua``:
activate, deactivate, the pass and virtual time; ``lua/_include/claim.lua``: pick and serve),
and the in-memory model (:mod:`fairque_core.memory`) calls it. A differential property test runs
the model and Redis on the same operations, so a rule changed here must change there too.

Where the known follow-ups go (issue 11): a virtual time per tier replaces
:meth:`FairState.virtual_time` / :meth:`FairState._advance_virtual_time`; an activation-order
tie-break replaces :meth:`FairState._order_key`; rescaling a tenant's lag on a weight change goes
into :meth:`FairState.set_weight`; a refund of an unstarted turn is the inverse of the pass
step in :meth:`FairState.serve` (``charge`` below).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from operator import itemgetter

import attrs

from fairque_core.domain.scoring import stride_for

__all__ = ["DEFAULT_STRIDE", "FairState", "TenantPass", "charge"]

DEFAULT_STRIDE = stride_for(1.0)
"""The stride of a tenant nobody gave a weight (weight 1)."""

_PASS_THEN_ID: Callable[[tuple[str, int]], tuple[int, str]] = itemgetter(1, 0)


@attrs.define
class TenantPass:
    """One tenant's place in the fair order (the ``pass``/``stride``/``tier`` fields of its hash
    on Redis)."""

    stride: int = DEFAULT_STRIDE
    tier: int = 0
    pass_: int = 0


def charge(tenant: TenantPass) -> int:
    """What one served task costs ``tenant`` in virtual time: its stride."""
    return tenant.stride


@attrs.define
class FairState:
    """The fair-scheduling state of one queue.

    ``strict_tiers`` is the queue's mode (``QueueConfig.strict_tiers``). The caller keeps the
    tenants' ready work and tells this state when a tenant gains ready work
    (:meth:`activate`), loses it without being served (:meth:`deactivate`, e.g. its last ready
    task was canceled) or is served (:meth:`serve`).
    """

    strict_tiers: bool = False
    vtime: int = 0
    tenants: dict[str, TenantPass] = attrs.field(factory=dict)
    active: dict[int, dict[str, int]] = attrs.field(factory=dict)  # tier -> tenant -> pass

    # ------------------------------------------------------------------ reads
    def tenant(self, user_id: str) -> TenantPass:
        """``user_id``'s pass record (created at the defaults on first use)."""
        found = self.tenants.get(user_id)
        if found is None:
            found = self.tenants[user_id] = TenantPass()
        return found

    def tier_of(self, tenant: TenantPass) -> int:
        """The tier whose active set holds ``tenant``: its tier in strict mode, else 0."""
        return tenant.tier if self.strict_tiers else 0

    def is_active(self, user_id: str) -> bool:
        tenant = self.tenants.get(user_id)
        return tenant is not None and user_id in self.active.get(self.tier_of(tenant), {})

    def has_active(self) -> bool:
        """Whether any tenant has ready work."""
        return bool(self.active)

    def active_count(self) -> int:
        return sum(len(members) for members in self.active.values())

    def virtual_time(self, tier: int) -> int:
        """The virtual time a tenant activating in ``tier`` starts from (one for all tiers)."""
        del tier
        return self.vtime

    # ------------------------------------------------------------------ changes
    def activate(self, user_id: str) -> None:
        """``user_id`` has ready work: join its tier's active set, at no less than the virtual
        time (no-op when already active)."""
        tenant = self.tenant(user_id)
        tier = self.tier_of(tenant)
        members = self.active.setdefault(tier, {})
        if user_id not in members:
            tenant.pass_ = max(tenant.pass_, self.virtual_time(tier))
            members[user_id] = tenant.pass_

    def deactivate(self, user_id: str) -> None:
        """``user_id`` has no ready work left: leave the active set (no-op when not in it); an
        emptied tier disappears."""
        tier = self.tier_of(self.tenant(user_id))
        members = self.active.get(tier)
        if members is not None:
            members.pop(user_id, None)
            if not members:
                del self.active[tier]

    def pick(self, groups: Iterable[Sequence[str] | None]) -> str | None:
        """The tenant the next claim serves, or None when no candidate is active.

        ``groups`` is ``[None]`` for an unrestricted claim, else the worker's groups in order
        (``[assigned, steal]``).
        """
        order = self._order_key()
        for group in groups:
            if group is None:
                if not self.active:
                    return None
                members = self.active[max(self.active)]
                user_id, _pass = min(members.items(), key=order)
                return user_id
            best: tuple[int, tuple[int, str]] | None = None
            best_id: str | None = None
            for user_id in group:
                if not self.is_active(user_id):
                    continue
                tenant = self.tenants[user_id]
                key = (-self.tier_of(tenant), order((user_id, tenant.pass_)))
                if best is None or key < best:
                    best, best_id = key, user_id
            if best_id is not None:
                return best_id
        return None

    def serve(self, user_id: str, *, still_ready: bool) -> None:
        """``user_id`` (the tenant :meth:`pick` chose, active) had one task claimed: the virtual
        time moves to its pass, the pass advances by one :func:`charge`, and the tenant stays in
        its active set at the new pass while ``still_ready`` (it has ready work left)."""
        tenant = self.tenants[user_id]
        tier = self.tier_of(tenant)
        self._advance_virtual_time(tier, tenant.pass_)
        tenant.pass_ += charge(tenant)
        if still_ready:
            self.active[tier][user_id] = tenant.pass_
        else:
            self.deactivate(user_id)

    def set_weight(self, user_id: str, stride: int, tier: int) -> None:
        """Give ``user_id`` a new stride and tier; if active, it moves to the new tier's set
        with its pass unchanged."""
        was_active = self.is_active(user_id)
        if was_active:
            self.deactivate(user_id)
        tenant = self.tenant(user_id)
        tenant.stride = stride
        tenant.tier = tier
        if was_active:
            self.active.setdefault(self.tier_of(tenant), {})[user_id] = tenant.pass_

    # ------------------------------------------------------------------ the seams
    def _order_key(self) -> Callable[[tuple[str, int]], tuple[int, str]]:
        """The order inside one tier, as a sort key over ``(tenant id, pass)`` items: lower
        pass first, ties by tenant id (Lua compares the ids byte by byte; Python's code-point
        order agrees for UTF-8)."""
        return _PASS_THEN_ID

    def _advance_virtual_time(self, tier: int, pass_: int) -> None:
        del tier
        self.vtime = pass_
