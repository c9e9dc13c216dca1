"""Scoring and fairness arithmetic, as pure functions on integers.

Everything the Lua scripts and the reference model must agree on exactly is integer
arithmetic here (milliseconds, strides), so both sides compute bit-identical results.

* Static score of a priority 1-5 task: ``ready_ms - p * horizon_ms // 5`` (that is
  ``ready_time - weight(p) * horizon`` in ms). Lowest score is served first; ties by the
  per-queue sequence number. A task is overtaken only by higher-priority tasks that became
  ready less than ``(w_hi - w_lo) * horizon`` after it, so nothing starves.
* Stride of a tenant with weight ``w``: ``round(STRIDE_SCALE / w)``; serving the tenant
  advances its virtual time ("pass") by its stride.
"""

from __future__ import annotations

import math

from fairque_core.domain.enums import Priority
from fairque_core.domain.errors import TaskValidationError
from fairque_core.domain.validation import check_duration

__all__ = [
    "DEFAULT_AGING_HORIZON_SECONDS",
    "MAX_WEIGHT",
    "MIN_WEIGHT",
    "SEQ_WIDTH",
    "STAT_COUNTERS",
    "STRIDE_SCALE",
    "priority_offset_ms",
    "seq_member",
    "static_score",
    "stride_for",
    "to_ms",
    "weight_of",
]

STRIDE_SCALE = 1_000_000
MIN_WEIGHT = 0.001
MAX_WEIGHT = 1_000_000.0
DEFAULT_AGING_HORIZON_SECONDS = 300.0
SEQ_WIDTH = 16

# Counters every backend keeps, per queue and per tenant (gauges are computed on top).
STAT_COUNTERS = (
    "pushed",
    "duplicates",
    "claimed",
    "finished",
    "retried",
    "dead",
    "recovered",
    "released",
    "canceled",
    "dlq_requeued",
    # bytes of the results finish stored (a finished task keeps its result, not its payload)
    "result_bytes",
    # damaged structures a claim skipped and repaired (a tenant's queue or hash deleted or of
    # another type: the tenant deactivated or rebuilt; a task key of another type dropped)
    "repaired",
    # tasks a claim found past their expires_at, never run: in the DLQ as stale (ADR 77)
    "stale",
)


def to_ms(seconds: float) -> int:
    """Seconds to whole milliseconds, rounding down (the one conversion both sides use)."""
    return math.floor(seconds * 1000)


def lease_ms(seconds: object) -> int:
    """A lease's length in whole ms: a number of seconds from 0.001 (1 ms) to the span from
    the epoch to the year 9999 (beyond it a deadline no longer fits the backends' integers and
    the lease was lost at its first heartbeat); TaskValidationError otherwise."""
    return to_ms(check_duration(seconds, "lease_seconds", 0.001))


def priority_offset_ms(priority: Priority, horizon_ms: int) -> int:
    """``weight(p) * horizon`` in whole ms (``p * horizon_ms // 5``)."""
    if priority.is_critical:
        raise ValueError("Critical tasks do not use score calculation")
    return int(priority.value) * horizon_ms // 5


def static_score(priority: Priority, ready_ms: int, horizon_ms: int) -> int:
    """The static score of a priority 1-5 task that became ready at ``ready_ms``."""
    return ready_ms - priority_offset_ms(priority, horizon_ms)


def seq_member(seq: int, task_id: str) -> str:
    """The sorted-set member: zero-padded sequence then id, so equal scores keep push order."""
    return f"{seq:0{SEQ_WIDTH}d}{task_id}"


def stride_for(weight: float) -> int:
    """The integer stride for a tenant weight; TaskValidationError for a bad weight."""
    if isinstance(weight, bool) or not isinstance(weight, (int, float)):
        raise TaskValidationError("weight", weight, "must be a number")
    # an int beyond the float range compares as it is, without a conversion that overflows
    if not (MIN_WEIGHT <= weight <= MAX_WEIGHT and math.isfinite(weight)):
        raise TaskValidationError("weight", weight, f"must be in [{MIN_WEIGHT}, {MAX_WEIGHT:g}]")
    return max(1, round(STRIDE_SCALE / weight))


def weight_of(stride: int) -> float:
    """The weight a stored stride stands for: the number with the fewest significant digits
    whose ``stride_for`` is that stride. A weight is stored as its rounded stride, so
    ``STRIDE_SCALE / stride`` alone reads weight 3 back as 3.000003, and 6 significant
    digits read weight 6 back as 5.99999; every weight with the same stride reads back the
    same (weights closer than the stride's rounding are one weight)."""
    steps = max(1, int(stride))
    exact = STRIDE_SCALE / steps
    for digits in range(1, 17):
        weight = float(f"{exact:.{digits}g}")
        if MIN_WEIGHT <= weight <= MAX_WEIGHT and max(1, round(STRIDE_SCALE / weight)) == steps:
            return weight
    return exact
