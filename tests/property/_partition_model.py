"""A reference model of a partitioned queue's two-level fair pick (ADR 34), pure Python.

Level 1 chooses a partition: a stride scheduler over partitions weighted by their active
weight, written here from ADR 34's rule, independently of
:class:`~fairque_redis.partitioned.picker.PartitionPicker` (the tests check that the two make
the same picks). Level 2 chooses a tenant inside the partition: the single-queue scheduler's
executable specification (:class:`~fairque_core.domain.fairness.FairState`), which the Lua of
every partition mirrors (the differential test checks that).

:class:`TwoLevel` keeps the tenants of P partitions, K workers' level-1 pickers, and for every
tenant its deficit: the fluid share it was owed (``w_i / W`` of every claimed task while it was
active, W the active weight of the whole queue) minus the tasks it got. :func:`bound` is the
bound ADR 34 derives for that deficit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import attrs

from fairque_core.domain.fairness import FairState
from fairque_core.domain.scoring import STRIDE_SCALE, stride_for


def effective_weight(weight: float) -> float:
    """The weight the partition summary reports for a tenant of ``weight`` (from its stride)."""
    return STRIDE_SCALE / stride_for(weight)


def bound(
    *, share: float, partition_share: float, live: int, tenants: int, batch: int, workers: int = 1
) -> float:
    """ADR 34's deficit bound for one tenant over a span with fixed active sets.

    ``share`` is ``w_i / W_p`` (the tenant's share of its partition), ``partition_share`` is
    ``W_p / W``, ``live`` the partitions with active tenants (m), ``tenants`` the active
    tenants of its partition (n_p), ``batch`` the claim size (k), ``workers`` the pickers (K):

        K k y (1 - x + (m - 1) x)  +  (1 - y + (n_p - 1) y)

    the first term the partition's lag at level 1 (a stride scheduler with steps of up to k
    tasks) passed down in proportion y = w_i / W_p, the second the tenant's lag at level 2 (a
    stride scheduler with steps of one task), x = W_p / W.
    """
    x, y = partition_share, share
    level1 = workers * batch * y * (1.0 - x + (live - 1) * x)
    level2 = 1.0 - y + (tenants - 1) * y
    return level1 + level2


@attrs.define
class ModelPicker:
    """Level 1 as ADR 34 states it: lowest pass first (ties from ``rotation`` round), a claim
    that got n tasks from p adds n / W_p, a short reply takes p out until the next refresh; a
    refresh that changes W_p restates p's lag over the lowest live pass, max(0, pass - floor),
    as the same number of tasks at the new weight (from the weight p left with on a rejoin;
    no lag for a partition never live)."""

    partitions: int
    rotation: int = 0
    weights: list[float] = attrs.field(init=False)
    passes: list[float] = attrs.field(init=False)
    left: list[float] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.weights = [0.0] * self.partitions
        self.passes = [0.0] * self.partitions
        self.left = [0.0] * self.partitions

    def refresh(self, weights: Sequence[float]) -> None:
        live = [self.passes[p] for p in range(self.partitions) if self.weights[p] > 0.0]
        floor = min(live) if live else max(self.passes)
        for p, new in enumerate(weights):
            was = self.weights[p]
            if new > 0.0 and new != was:
                old = was if was > 0.0 else self.left[p]
                lag = max(0.0, self.passes[p] - floor)
                self.passes[p] = floor + (lag * old / new if old > 0.0 else 0.0)
            if was > 0.0 and new <= 0.0:
                self.left[p] = was
            self.weights[p] = new

    def order(self) -> list[int]:
        live = [p for p in range(self.partitions) if self.weights[p] > 0.0]
        return sorted(live, key=lambda p: (self.passes[p], (p - self.rotation) % self.partitions))

    def served(self, p: int, asked: int, got: int) -> None:
        weight = self.weights[p]
        if got > 0 and weight > 0.0:
            self.passes[p] += got / weight
        if got < asked:
            if weight > 0.0:
                self.left[p] = weight
            self.weights[p] = 0.0


class Picker(Protocol):
    """What :class:`TwoLevel` needs of a level-1 picker (the model's, or a pair of it and the
    real one)."""

    def refresh(self, weights: Sequence[float]) -> None: ...
    def order(self) -> list[int]: ...
    def served(self, p: int, asked: int, got: int) -> None: ...


@attrs.define
class TwoLevel:
    """P partitions of tenants (level 2: one FairState each) and K workers' level-1 pickers.

    ``backlog[t]`` is tenant t's ready tasks (``None``: never runs dry). ``refresh(w)`` is
    called with the model's exact partition weights whenever a worker's picker must refresh
    (after every change the test makes, and after ``refresh_claims`` claims of that worker).
    """

    partitions: int
    pickers: Sequence[Picker]
    refresh_claims: int = 32
    states: list[FairState] = attrs.field(init=False)
    home: dict[str, int] = attrs.field(factory=dict)
    weight: dict[str, float] = attrs.field(factory=dict)
    backlog: dict[str, int | None] = attrs.field(factory=dict)
    fluid: dict[str, float] = attrs.field(factory=dict)
    got: dict[str, int] = attrs.field(factory=dict)
    worst: dict[str, float] = attrs.field(factory=dict)
    claims: list[int] = attrs.field(init=False)
    dirty: list[bool] = attrs.field(init=False)
    _weights: list[float] | None = None
    max_worst: float = 0.0
    max_bound: float = 0.0

    def __attrs_post_init__(self) -> None:
        self.states = [FairState() for _ in range(self.partitions)]
        self.claims = [0] * len(self.pickers)
        self.dirty = [True] * len(self.pickers)

    # ------------------------------------------------------------------ changes
    def add(self, tenant: str, partition: int, weight: float, backlog: int | None) -> None:
        """``tenant`` (of ``partition``) gets work, at ``weight``; its deficit starts at 0."""
        state = self.states[partition]
        self.home[tenant] = partition
        if self.weight.get(tenant) != weight:
            state.set_weight(tenant, stride_for(weight), 0)
        self.weight[tenant] = weight
        self.backlog[tenant] = backlog
        state.activate(tenant)
        self.fluid[tenant] = 0.0
        self.got[tenant] = 0
        self.worst[tenant] = 0.0
        self._touch()

    def start_span(self) -> None:
        """Start counting every active tenant's deficit afresh (a new span of fixed sets)."""
        for tenant in self.active():
            self.fluid[tenant] = 0.0
            self.got[tenant] = 0
            self.worst[tenant] = 0.0

    def remove(self, tenant: str) -> None:
        """``tenant``'s work is gone (a purge): it leaves its partition's active set."""
        self.states[self.home[tenant]].deactivate(tenant)
        self.backlog[tenant] = 0
        self._touch()

    def set_weight(self, tenant: str, weight: float) -> None:
        self.states[self.home[tenant]].set_weight(tenant, stride_for(weight), 0)
        self.weight[tenant] = weight
        self._touch()

    def _touch(self) -> None:
        self.dirty = [True] * len(self.pickers)
        self._weights = None

    # ------------------------------------------------------------------ reads
    def active(self, partition: int | None = None) -> list[str]:
        parts = range(self.partitions) if partition is None else [partition]
        return [t for p in parts for t in self.states[p].active.get(0, {})]

    def partition_weights(self) -> list[float]:
        """Each partition's active weight as its summary reports it."""
        if self._weights is None:
            self._weights = [
                sum(effective_weight(self.weight[t]) for t in self.states[p].active.get(0, {}))
                for p in range(self.partitions)
            ]
        return self._weights

    def bound_of(self, tenant: str, batch: int) -> float:
        weights = self.partition_weights()
        p = self.home[tenant]
        total = sum(weights)
        return bound(
            share=effective_weight(self.weight[tenant]) / weights[p],
            partition_share=weights[p] / total,
            live=sum(1 for w in weights if w > 0.0),
            tenants=len(self.active(p)),
            batch=batch,
            workers=len(self.pickers),
        )

    def deficit(self, tenant: str) -> float:
        return self.fluid[tenant] - self.got[tenant]

    # ------------------------------------------------------------------ claims
    def claim(self, worker: int, count: int) -> list[str]:
        """One claim call of ``worker`` for ``count`` tasks: partitions in its picker's order,
        falling through while short, each partition's tasks by its own FairState. Returns the
        tenants served, in order, and accrues every active tenant's fluid share."""
        level1 = self.pickers[worker]
        if self.dirty[worker] or self.claims[worker] >= self.refresh_claims:
            level1.refresh(self.partition_weights())
            self.dirty[worker] = False
            self.claims[worker] = 0
        self.claims[worker] += 1
        total = sum(self.partition_weights())
        before = {t: effective_weight(self.weight[t]) / total for t in self.active()}
        out: list[str] = []
        for p in level1.order():
            want = count - len(out)
            got = 0
            state = self.states[p]
            while got < want:
                tenant = state.pick([None])
                if tenant is None:
                    break
                left = self.backlog[tenant]
                if left is not None:
                    left -= 1
                    self.backlog[tenant] = left
                state.serve(tenant, still_ready=left is None or left > 0)
                if left == 0:
                    self._weights = None  # ran dry: its partition's weight changed
                self.got[tenant] += 1
                out.append(tenant)
                got += 1
            level1.served(p, want, got)
            if len(out) >= count:
                break
        for tenant, share in before.items():
            self.fluid[tenant] += share * len(out)
            self.worst[tenant] = max(self.worst[tenant], self.deficit(tenant))
        return out
