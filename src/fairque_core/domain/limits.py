"""Flow control per tenant and per queue: the executable specification (ADR 28).

Three limits, each optional, set per tenant, as a default per tier (the tenant's weight tier,
``set_tenant_weight(..., tier=)``) and for the whole queue:

* ``max_running``: at most this many leases at once (counted per lease, so across every
  worker process). A tenant that reaches it leaves its active set (*capped*): the claim never
  looks at it. The end of one of its leases (finish, fail, release, cancel, expiry) that
  brings it back under the cap lets it in again.
* ``rate`` (starts per second) with ``burst``: a GCRA on the server's clock. Each start moves
  the tenant's *theoretical arrival time* ``tat`` to ``max(tat, now) + interval``; the next
  start is allowed once ``now >= tat - tolerance`` (``tolerance = (burst - 1) * interval``).
  A start after which the next one is not yet allowed *parks* the tenant until that time (the
  ``parked`` set, scored by time, which the claim's due-move step empties like the scheduled
  tasks); idle workers wake at that time. Throttled work waits; it is never dropped.
* ``max_queued``: a push that would take a tenant's queued work (ready + scheduled) over the
  cap is refused whole with :class:`TenantQueueFullError` and stores nothing.

A tenant let in again (under its cap, or its park time reached) re-enters its active set like
a newcomer (``FairState.activate``): its pass is ``max(pass, virtual time)`` and it takes a new
activation number, so it neither saved credit while held nor lost its place for good.

Limits resolve per field: the tenant's own value, else its tier's default, else none. The
queue-wide ``max_running`` and ``rate``/``burst`` hold for all tenants together (the queue is
parked under the member :data:`QUEUE_PARK_MEMBER`, outside the id grammar).

This module holds the values, their checks and the GCRA arithmetic (integers: microseconds);
the model (:mod:`fairque_core.memory.limits`) and the Lua (``lua/_include/limits.lua``) apply
them, and the differential test runs both on the same operations.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import attrs

from fairque_core.domain.errors import FairQueueError, TaskValidationError

__all__ = [
    "LIMIT_COUNTERS",
    "LIMIT_FIELDS",
    "MAX_LIMIT",
    "MIN_RATE",
    "QUEUE_PARK_MEMBER",
    "LimitStatus",
    "Limits",
    "TenantQueueFullError",
    "check_changes",
    "decode_limits",
    "encode_limits",
    "gcra_start",
    "gcra_view",
    "interval_us",
    "tolerance_us",
]

#: The counters limits add to ``stats()`` and ``tenant_stats()``: a tenant capped (it reached
#: its ``max_running``), a tenant throttled (parked after a start by its rate), a push refused
#: (``max_queued``).
LIMIT_COUNTERS = ("cap_hits", "throttles", "refusals")

LIMIT_FIELDS = ("max_running", "rate", "burst", "max_queued")

#: The largest value any limit may take (a rate of one start per microsecond).
MAX_LIMIT = 1_000_000
#: The smallest ``rate`` (starts per second): one start in about 32 years. Below about 1e-12
#: the interval between starts no longer fits the backends' microsecond arithmetic.
MIN_RATE = 1e-9

#: The parked-set member standing for the queue-wide rate (``|`` is outside the id grammar).
QUEUE_PARK_MEMBER = "|queue"

_US_PER_S = 1_000_000


class TenantQueueFullError(FairQueueError):
    """A push would take ``tenant``'s queued work (ready + scheduled) over its ``max_queued``
    cap (``cap``); nothing of the push was stored (a batch is refused whole)."""

    def __init__(self, tenant: str, cap: int) -> None:
        self.tenant = tenant
        self.cap = cap
        super().__init__(f"tenant {tenant} is at its max_queued cap of {cap}: push refused")


@attrs.frozen
class Limits:
    """One limit record (a tenant's own, a tier's default or the queue's); None = no limit."""

    max_running: int | None = None
    rate: float | None = None
    burst: int | None = None
    max_queued: int | None = None

    def is_empty(self) -> bool:
        return all(getattr(self, name) is None for name in LIMIT_FIELDS)

    def over(self, fallback: Limits) -> Limits:
        """This record with each missing field taken from ``fallback``."""
        values = {name: getattr(self, name) for name in LIMIT_FIELDS}
        for name, value in values.items():
            if value is None:
                values[name] = getattr(fallback, name)
        return Limits(**values)

    def updated(self, changes: Mapping[str, float | None]) -> Limits:
        """This record with ``changes`` applied (a value sets, None clears the field)."""
        values = {name: getattr(self, name) for name in LIMIT_FIELDS}
        values.update(changes)
        return Limits(**values)

    def as_dict(self) -> dict[str, float | None]:
        return {name: getattr(self, name) for name in LIMIT_FIELDS}


@attrs.frozen
class LimitStatus:
    """What ``get_tenant_limits`` reports: the tenant's own limits, the ones in force (own,
    else tier default), and where it stands against them."""

    tenant: str
    own: Limits
    effective: Limits
    running: int
    queued: int
    capped: bool
    #: epoch seconds from which the next start is allowed (None: now, or no rate)
    next_start_at: float | None
    #: starts it may make at once right now (None: no rate)
    tokens: int | None
    cap_hits: int
    throttles: int
    refusals: int
    #: paused with ``pause(tenant)`` (its own flag, not the queue's): held out like a capped
    #: tenant until resumed
    paused: bool = False


def _check_int(field: str, value: object, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TaskValidationError(field, value, "must be an int")
    if not 1 <= value <= high:
        raise TaskValidationError(field, value, f"must be in [1, {high}]")
    return value


def check_changes(changes: Mapping[str, object]) -> dict[str, float | None]:
    """Check the fields of a limits change (None = clear that field); typed errors name the
    field. ``max_running``, ``burst``, ``max_queued`` are ints >= 1; ``rate`` a finite number
    > 0 (starts per second); none above :data:`MAX_LIMIT` (``max_queued``: 1000 x that)."""
    out: dict[str, float | None] = {}
    for name, value in changes.items():
        if name not in LIMIT_FIELDS:
            raise TaskValidationError(
                name, value, "is not a limit (" + ", ".join(LIMIT_FIELDS) + ")"
            )
        if value is None:
            out[name] = None
        elif name == "rate":
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TaskValidationError(name, value, "must be a number")
            # compared before isfinite: an int beyond the float range would overflow there
            if not (MIN_RATE <= value <= MAX_LIMIT and math.isfinite(value)):
                raise TaskValidationError(name, value, f"must be in [{MIN_RATE:g}, {MAX_LIMIT}]")
            out[name] = float(value)
        else:
            high = MAX_LIMIT * 1000 if name == "max_queued" else MAX_LIMIT
            out[name] = _check_int(name, value, high)
    return out


def interval_us(rate: float) -> int:
    """Microseconds between starts at ``rate`` starts per second (at least 1)."""
    return max(1, math.floor(_US_PER_S / rate + 0.5))


def tolerance_us(rate: float, burst: int | None) -> int:
    """How far ahead of now the GCRA's ``tat`` may run: ``(burst - 1)`` intervals."""
    return (max(1, burst or 1) - 1) * interval_us(rate)


def gcra_start(tat_us: int, now_us: int, rate: float, burst: int | None) -> tuple[int, int]:
    """A start at ``now_us``: the new ``tat`` and the first time (us) the next start is
    allowed (``<= now_us``: at once)."""
    tat = max(tat_us, now_us) + interval_us(rate)
    return tat, tat - tolerance_us(rate, burst)


def encode_limits(limits: Limits) -> str:
    """The stored form: ``max_running,rate,burst,max_queued``, an empty part for none (the Lua
    reads it with ``fq_limits_decode``); the rate with repr's round-trip digits."""
    parts = []
    for name in LIMIT_FIELDS:
        value = getattr(limits, name)
        parts.append(
            "" if value is None else (repr(float(value)) if name == "rate" else str(value))
        )
    return ",".join(parts)


def decode_limits(text: str) -> Limits:
    """The inverse of :func:`encode_limits` (an empty text is no limits)."""
    if not text:
        return Limits()
    parts = [*text.split(","), "", "", "", ""][:4]
    mr, rate, burst, mq = parts
    return Limits(
        max_running=int(mr) if mr else None,
        rate=float(rate) if rate else None,
        burst=int(burst) if burst else None,
        max_queued=int(mq) if mq else None,
    )


def gcra_view(tat_us: int, now_ms: int, lim: Limits) -> tuple[float | None, int | None]:
    """(first time in epoch seconds the next start is allowed, or None when now; starts
    allowed at once), from a stored ``tat``; (None, None) without a rate."""
    if lim.rate is None:
        return None, None
    now_us = now_ms * 1000
    step = interval_us(lim.rate)
    tol = tolerance_us(lim.rate, lim.burst)
    base = max(tat_us, now_us)
    tokens = max(0, (now_us + tol - base) // step + 1)
    first = tat_us - tol
    return (first / 1_000_000 if first > now_us else None), int(tokens)
