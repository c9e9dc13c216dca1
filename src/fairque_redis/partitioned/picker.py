"""Which partition a claim goes to (ADR 34): per-partition load summaries and the picker.

No I/O here. A partitioned queue's claim asks one partition at a time; :class:`PartitionPicker`
orders the partitions so that, over many claims, each is asked in proportion to the summed
weight of its active (backlogged) tenants in the queue's top tier, which makes every active
tenant's share approach ``weight / total active weight`` as in one partition. The weights come
from :data:`SUMMARY_SOURCE`, one read-only script call per partition that costs O(tiers +
sample) whatever the number of tenants (never a scan), refreshed every ``refresh_claims``
claim calls or ``refresh_seconds`` (and at once when a claim finds its partitions empty).

Between refreshes the picker is a stride scheduler over partitions: each partition has a pass;
the lowest pass with a positive weight is asked first (ties in a rotation from partition 0, or
from one drawn by the ``rng`` a picker is given), and a claim that got ``n`` tasks from
partition ``p`` adds ``n / weight(p)`` to its pass. When a refresh changes a partition's weight,
its standing is rescaled as a tenant's is on a weight change
(:meth:`fairque_core.domain.fairness.FairState.set_weight`): its lag (pass minus the lowest live
pass, never below 0) counts tasks at the old weight, and keeps counting
the same tasks at the new one, ``lag' = lag * old / new``. A partition that (re)joins does so
at no less than the lowest live pass with its stored lag rescaled from the weight it left
with: idle time earns no credit, going idle does not wipe a debt. So every live partition's
pass stays within one claim batch (``batch / weight``) of the lowest, and ADR 34 derives the
two-level bound from that.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from fairque_core.domain.errors import ScriptContractError
from fairque_core.domain.scoring import STRIDE_SCALE
from fairque_redis.scripting.scripts import SOURCES

__all__ = [
    "DEFAULT_REFRESH_CLAIMS",
    "DEFAULT_REFRESH_SECONDS",
    "SUMMARY_SAMPLE",
    "SUMMARY_SOURCE",
    "PartitionLoad",
    "PartitionPicker",
    "TierLoad",
    "parse_summary",
]

#: Claim calls between two refreshes of the partition summaries.
DEFAULT_REFRESH_CLAIMS = 32
#: Seconds a summary is trusted (a claim after that refreshes it first).
DEFAULT_REFRESH_SECONDS = 0.1
#: Active tenants of a tier whose weights a summary reads; above it, a random sample of this
#: many (ZRANDMEMBER) estimates the tier's weight sum as count x sample mean.
SUMMARY_SAMPLE = 64

#: The summary script (``lua/partition_summary.lua``, a registered script: a function of the
#: library, ADR 41). Its keys are one partition's meta, tiers, delayed and parked; the active
#: sets and tenant records are reached through the stems ``KeySpace`` spells (ARGV 2 and 3),
#: so no key family is spelled here.
SUMMARY_SOURCE = SOURCES["partition_summary"]


@attrs.frozen
class TierLoad:
    """The active tenants of one tier of one partition: how many, and their summed weight
    (exact up to :data:`SUMMARY_SAMPLE` tenants, estimated from a random sample above)."""

    tier: int
    active: int
    weight: float


@attrs.frozen
class PartitionLoad:
    """One partition's summary: server time, ready gauge, paused flag, the first due times of
    its scheduled tasks and parked tenants (ms, -1 = none), its active tiers, and the entries
    waiting in its intake (ADR 47)."""

    now_ms: int
    ready: int
    paused: bool
    delayed_head: int
    parked_head: int
    tiers: tuple[TierLoad, ...] = ()
    intake: int = 0

    @property
    def due(self) -> bool:
        """Whether a claim here would move work that is due (a scheduled task or a parked
        tenant) or ingest entries of the intake although no tenant is active yet."""
        heads = (self.delayed_head, self.parked_head)
        return self.intake > 0 or any(0 <= head <= self.now_ms for head in heads)

    def weight(self, tier: int) -> float:
        return sum(t.weight for t in self.tiers if t.tier == tier)

    @property
    def top_tier(self) -> int | None:
        return max((t.tier for t in self.tiers if t.active > 0), default=None)


def _weight_of_stride(stride: int) -> float:
    return STRIDE_SCALE / (stride if stride > 0 else STRIDE_SCALE)


def parse_summary(reply: Any) -> PartitionLoad:
    """The :data:`SUMMARY_SOURCE` reply as a :class:`PartitionLoad`."""
    try:
        now, ready, paused, delayed, parked, count = (int(x) for x in reply[:6])
        tiers: list[TierLoad] = []
        i = 6
        for _ in range(count):
            tier, active, sampled = int(reply[i]), int(reply[i + 1]), int(reply[i + 2])
            strides = [int(s) for s in reply[i + 3 : i + 3 + sampled]]
            if len(strides) != sampled:
                raise ValueError("short reply")
            i += 3 + sampled
            total = sum(_weight_of_stride(s) for s in strides)
            weight = total if sampled >= active else active * total / max(1, sampled)
            tiers.append(TierLoad(tier, active, weight))
        waiting = 0
        if i == len(reply) - 1:  # the intake's length (ADR 47; absent from older summaries)
            waiting = int(reply[i])
            i += 1
        if i != len(reply):
            raise ValueError("long reply")
    except (TypeError, ValueError, IndexError) as exc:
        raise ScriptContractError("partition_summary", reply) from exc
    return PartitionLoad(now, ready, bool(paused), delayed, parked, tuple(tiers), waiting)


class PartitionPicker:
    """Orders a partitioned queue's partitions for the next claim (see the module doc).

    Not thread-safe on its own: the backend that owns it serialises its claims.
    """

    def __init__(
        self,
        partitions: int,
        *,
        refresh_claims: int = DEFAULT_REFRESH_CLAIMS,
        refresh_seconds: float = DEFAULT_REFRESH_SECONDS,
        monotonic: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        if partitions < 1:
            raise ValueError("partitions must be >= 1")
        self.partitions = partitions
        self.refresh_claims = refresh_claims
        self.refresh_seconds = refresh_seconds
        self._monotonic = monotonic
        self.weights: list[float] = [0.0] * partitions
        # the weight each partition last had while live (0 = never live): a rejoin's lag is
        # rescaled from it
        self._left: list[float] = [0.0] * partitions
        self._passes: list[float] = [0.0] * partitions
        # ties of pass go round from partition 0, or from a partition ``rng`` draws: the order
        # of a fresh picker is then fixed (what the contract tests of a partitioned queue read)
        self.rotation = rng.randrange(partitions) if rng is not None else 0
        self._loaded_at: float | None = None
        self._clock_mark: object = None
        self._claims = 0
        self._dirty = True

    # ------------------------------------------------------------------ freshness
    def stale(self, clock_mark: object = None) -> bool:
        """Whether the summaries must be read again before the next claim: never read, made
        dirty (:meth:`touch`), ``refresh_claims`` claim calls or ``refresh_seconds`` old, or
        an injected clock moved (``clock_mark`` differs from the one of the last update)."""
        if self._dirty or self._loaded_at is None:
            return True
        if clock_mark is not None and clock_mark != self._clock_mark:
            return True
        if self._claims >= self.refresh_claims:
            return True
        return self._monotonic() - self._loaded_at >= self.refresh_seconds

    def touch(self) -> None:
        """Something may have made work ready (a push, a release, a wake): refresh first."""
        self._dirty = True

    def update(self, loads: Sequence[PartitionLoad], clock_mark: object = None) -> None:
        """Take fresh summaries (one per partition, in order)."""
        if len(loads) != self.partitions:
            raise ValueError("one load per partition")
        top = max((t for t in (load.top_tier for load in loads) if t is not None), default=None)
        floor = self._floor()
        for p, load in enumerate(loads):
            weight = 0.0 if top is None else load.weight(top)
            if weight <= 0.0 and load.due:
                weight = 1.0  # due work moves only when a claim runs here: give it turns
            if load.paused:  # its claim leases nothing, but still moves due work
                weight = 1.0 if load.due else 0.0
            old = self.weights[p] if self.weights[p] > 0.0 else self._left[p]
            if weight > 0.0 and weight != self.weights[p]:
                self._restate(p, old, weight, floor)
            if weight <= 0.0 < self.weights[p]:
                self._left[p] = self.weights[p]
            self.weights[p] = weight
        self._loaded_at = self._monotonic()
        self._clock_mark = clock_mark
        self._claims = 0
        self._dirty = False

    def _restate(self, p: int, old: float, new: float, floor: float) -> None:
        """Partition ``p`` goes from weight ``old`` (its last live weight when it rejoins; 0 if
        never live) to ``new`` > 0: its lag over ``floor`` (the lowest live pass before the
        refresh), never below 0, is rescaled so it still stands for the same number of tasks
        (none for a partition never live)."""
        lag = max(0.0, self._passes[p] - floor)
        self._passes[p] = floor + (lag * old / new if old > 0.0 else 0.0)

    def _floor(self) -> float:
        live = [self._passes[p] for p in range(self.partitions) if self.weights[p] > 0.0]
        return min(live) if live else max(self._passes)

    # ------------------------------------------------------------------ choosing
    def order(self) -> list[int]:
        """The partitions with work, lowest pass first (ties by index)."""
        live = [p for p in range(self.partitions) if self.weights[p] > 0.0]
        size, rotation = self.partitions, self.rotation
        return sorted(live, key=lambda p: (self._passes[p], (p - rotation) % size))

    def served(self, partition: int, asked: int, got: int) -> None:
        """Account a claim call to ``partition`` that asked for ``asked`` tasks and got
        ``got``: its pass advances by ``got / weight``; a short reply means the partition
        ran dry, so it gets no more turns until the next refresh."""
        self._claims += 1
        weight = self.weights[partition]
        if got > 0 and weight > 0.0:
            self._passes[partition] += got / weight
        if got < asked:
            if weight > 0.0:
                self._left[partition] = weight
            self.weights[partition] = 0.0
