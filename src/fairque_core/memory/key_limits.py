"""Limits by key in the in-memory model (ADR 79; rules in :mod:`fairque_core.domain.key_limits`).

Step for step as ``lua/_include/keylimits.lua`` does on Redis:

* :func:`admit` runs in the claim on the task the fair pick chose (after its expiry check):
  the task starts, counted in its scope (the lease's ``key_scope``, ``lc`` on Redis), or is
  parked (False: the claim refunds its tenant's turn and picks again);
* :func:`lease_ended` runs when a lease counted in a scope ends: the scope's count goes down
  and :func:`settle` may put one parked task back;
* :func:`settle` puts one parked task of a scope back at the head of its tenant's queue when
  the scope has room now, or waits for the scope's rate hold in the queue's parked set
  (member ``|k|<scope>``, moved by the claim's due step: :func:`rate_due`);
* :func:`set_key_limits` sets or clears a key's limits and puts every parked task of the key
  back.

A scope's parked tasks go back in push order (their sequence number), whatever order they
were parked in: a task put back and parked again keeps its place.
"""

from __future__ import annotations

from typing import Protocol

import attrs

from fairque_core.domain.enums import TaskState
from fairque_core.domain.key_limits import (
    KEY_PARK_PREFIX,
    KeyLimits,
    KeyLimitStatus,
    check_key_limits,
    key_scope,
    scope_key,
    scope_tenant,
)
from fairque_core.domain.limits import gcra_start
from fairque_core.domain.validation import validate_id
from fairque_core.memory.records import TaskRecord
from fairque_core.memory.wake import WakeSignal

__all__ = [
    "KeyLimitState",
    "admit",
    "forget_parked",
    "key_status",
    "lease_ended",
    "rate_due",
    "set_key_limits",
    "settle",
]


@attrs.define
class KeyLimitState:
    """The model's key limits and their state per scope (the ``keylim`` hash, the ``ks:<key>``
    hashes' ``r|``/``t|``/``h|``/``p|`` fields and the ``kp:<scope>`` sorted sets on Redis)."""

    limits: dict[str, KeyLimits] = attrs.field(factory=dict)
    running: dict[str, int] = attrs.field(factory=dict)  # scope -> leases counted
    tat: dict[str, int] = attrs.field(factory=dict)  # scope -> GCRA tat (us)
    hold: dict[str, int] = attrs.field(factory=dict)  # scope -> no start before (ms)
    parked: dict[str, dict[str, int]] = attrs.field(factory=dict)  # scope -> id -> seq
    nparked: dict[str, int] = attrs.field(factory=dict)  # scope -> tasks parked


class _ParkedSet(Protocol):
    """The queue's parked set of the tenant limits (``LimitState.parked``)."""

    parked: dict[str, int]


class ModelStore(Protocol):
    """What these steps use of the model's store, declared here so that this module never
    imports the store that imports it (as ``memory/limits.py`` does)."""

    _keylim: KeyLimitState
    _wake: WakeSignal

    @property
    def _limits(self) -> _ParkedSet: ...

    def _now(self) -> int: ...

    def _live(self, task_id: str, now: int) -> TaskRecord | None: ...

    def _make_ready(
        self, task_id: str, rec: TaskRecord, ready_ms: int, *, head: bool = False
    ) -> None: ...

    def _recompute_next_due(self) -> None: ...


def _ceil_ms(us: int) -> int:
    return -(-us // 1000)


def _full(st: KeyLimitState, scope: str, lim: KeyLimits | None) -> bool:
    return (
        lim is not None
        and lim.max_running is not None
        and st.running.get(scope, 0) >= lim.max_running
    )


def _add(counts: dict[str, int], scope: str, by: int) -> None:
    value = counts.get(scope, 0) + by
    if value > 0:
        counts[scope] = value
    else:
        counts.pop(scope, None)


def admit(store: ModelStore, task_id: str, rec: TaskRecord, now: int) -> bool:
    """The claim's check of a popped task with a limit key: True when it may start (counted
    in its scope, the scope's rate charged), False when it was parked."""
    st = store._keylim
    key = rec.message.limit_key
    lim = st.limits.get(key)
    if lim is None:
        return True
    scope = key_scope(key, rec.message.tenant, lim.per_tenant)
    if _full(st, scope, lim) or st.hold.get(scope, 0) > now:
        rec.parked_scope = scope
        st.parked.setdefault(scope, {})[task_id] = rec.seq
        _add(st.nparked, scope, 1)
        settle(store, scope, now)  # (a scope held by its rate waits in the parked set)
        return False
    _add(st.running, scope, 1)
    rec.key_scope = scope
    if lim.rate is not None:
        tat, next_us = gcra_start(st.tat.get(scope, 0), now * 1000, lim.rate, lim.burst)
        st.tat[scope] = tat
        if next_us > now * 1000:
            st.hold[scope] = _ceil_ms(next_us)
    return True


def settle(store: ModelStore, scope: str, now: int) -> None:
    """One parked task of ``scope`` back to its tenant's queue when the scope has room now;
    when only its rate holds it, the scope waits in the parked set until the hold ends."""
    st = store._keylim
    if not st.nparked.get(scope):
        return
    if _full(st, scope, st.limits.get(scope_key(scope))):
        return  # a lease end of the scope comes
    hold = st.hold.get(scope, 0)
    if hold > now:
        member = KEY_PARK_PREFIX + scope
        store._limits.parked[member] = hold
        store._wake.lower_next_due(hold)
        return
    _release(store, scope, now)


def _release(store: ModelStore, scope: str, now: int) -> bool:
    """The first task parked in ``scope`` (push order) back at the head of its tenant's queue,
    its old place; False when none is left."""
    st = store._keylim
    ids = st.parked.get(scope)
    while ids:
        task_id = min(ids, key=lambda i: (ids[i], i))
        del ids[task_id]
        if not ids:
            del st.parked[scope]
        rec = store._live(task_id, now)
        if rec is None or rec.state is not TaskState.QUEUED or rec.parked_scope != scope:
            continue  # (a record gone behind the model's back: the Lua skips it too)
        rec.parked_scope = ""
        _add(st.nparked, scope, -1)
        store._make_ready(task_id, rec, rec.ready_ms, head=True)
        return True
    return False


def lease_ended(store: ModelStore, rec: TaskRecord, now: int) -> None:
    """A lease counted in a scope ended (finish, fail, release, cancel, expiry)."""
    scope = rec.key_scope
    rec.key_scope = ""
    _add(store._keylim.running, scope, -1)
    settle(store, scope, now)


def rate_due(store: ModelStore, member: str, now: int) -> None:
    """The claim's due step met a scope's parked-set member: its rate hold has ended."""
    settle(store, member[len(KEY_PARK_PREFIX) :], now)


def forget_parked(store: ModelStore, task_id: str, rec: TaskRecord) -> None:
    """A parked task leaves (canceled, purged)."""
    st = store._keylim
    scope = rec.parked_scope
    ids = st.parked.get(scope)
    if ids is not None:
        ids.pop(task_id, None)
        if not ids:
            del st.parked[scope]
    _add(st.nparked, scope, -1)
    rec.parked_scope = ""


def _scopes_of(st: KeyLimitState, key: str) -> list[str]:
    prefix = key + "|"
    seen = {*st.running, *st.nparked, *st.hold, *st.tat}
    return sorted(scope for scope in seen if scope.startswith(prefix))


def set_key_limits(
    store: ModelStore,
    key: str,
    *,
    max_running: int | None,
    rate: float | None,
    burst: int | None,
    per_tenant: bool,
) -> KeyLimits | None:
    """Set (or, every number None, clear) ``key``'s limits; every task parked under the key
    goes back to its tenant's queue (in scope order, then FIFO), to be checked again by the
    next claim. Returns the limits now in force."""
    limits = check_key_limits(key, max_running, rate, burst, per_tenant)
    st = store._keylim
    now = store._now()
    if limits is None:
        st.limits.pop(key, None)
    else:
        st.limits[key] = limits
    for scope in _scopes_of(st, key):
        store._limits.parked.pop(KEY_PARK_PREFIX + scope, None)
        while _release(store, scope, now):
            pass
    store._recompute_next_due()
    return limits


def key_status(store: ModelStore, key: str) -> KeyLimitStatus:
    """``key``'s limits and, per tenant, its leases counted and tasks parked."""
    validate_id(key, "key")
    st = store._keylim
    scopes = _scopes_of(st, key)
    return KeyLimitStatus(
        key=key,
        limits=st.limits.get(key),
        running={scope_tenant(s): st.running[s] for s in scopes if st.running.get(s)},
        parked={scope_tenant(s): st.nparked[s] for s in scopes if st.nparked.get(s)},
    )
