"""Run a load through a real queue with a given worker layout and record the dispatch order.

:func:`simulate` works in *rounds*. In round ``r`` it pushes the load's arrivals for ``r``
(one ``push_batch``), then each worker in turn claims up to ``batch`` tasks with
``queue.claim_batch(batch, assigned, steal=steal, worker_id=id)``, exactly as a
:class:`~fairque_core.Worker` with that :class:`~fairque_core.WorkerConfig` does, and finishes
them at once. Every claim is recorded, in order, with the tenants that had ready work at that
moment, so :func:`fairque_testing.fairness_report` can tell a fair order from a lucky one.

Time: with a fake clock (a queue from :func:`fairque_testing.make_queue` or the pytest
fixtures, or ``clock=``), each round moves the clock ``tick`` seconds, and when nothing is ready
but delayed tasks are pending it jumps to the next due time. On real time, the simulation
sleeps until the next task is due instead.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Iterable, Mapping, Sequence

import attrs

from fairque_core import FairQueue
from fairque_core.domain.enums import Priority
from fairque_core.domain.models import Task
from fairque_core.settings.config import WorkerConfig
from fairque_testing.load import Arrival, Load
from fairque_testing.queues import FakeClock, clock_of
from fairque_testing.report import Dispatched, Ready, TraceEvent

__all__ = ["DispatchRecord", "Simulation", "WorkerSpec", "simulate"]

#: Past a due time by this much before a fake clock counts a delayed task as ready (the
#: backends round time to whole milliseconds).
_DUE_MARGIN = 0.002


def _names(value: Iterable[str]) -> tuple[str, ...]:
    if isinstance(value, str):
        raise TypeError(f"a list of tenants, not one string: {value!r}")
    return tuple(value)


@attrs.frozen
class WorkerSpec:
    """One simulated worker: its id and its affinity (as in :class:`WorkerConfig`).

    With neither list the worker serves every tenant fairly. With ``assigned`` it serves
    those tenants first and falls back to ``steal`` when they have nothing ready.
    """

    id: str
    assigned: tuple[str, ...] = attrs.field(default=(), converter=_names)
    steal: tuple[str, ...] = attrs.field(default=(), converter=_names)

    @classmethod
    def from_config(cls, config: WorkerConfig) -> WorkerSpec:
        return cls(config.id, tuple(config.assigned_tenants), tuple(config.steal_targets))

    @property
    def pinned(self) -> bool:
        return bool(self.assigned or self.steal)


@attrs.frozen
class DispatchRecord:
    """One claim: position (from 0), round, worker, tenant, task id and priority."""

    index: int
    round: int
    worker: str
    tenant: str
    task_id: str
    priority: Priority


@attrs.frozen
class Simulation:
    """What :func:`simulate` saw.

    ``dispatches`` is the tenant of every claim in order; ``records`` the same claims in
    detail; ``trace`` the claims interleaved with the moments tasks became ready (the input
    of :func:`~fairque_testing.fairness_report`); ``undispatched`` the tasks left unclaimed per
    tenant (tenants no worker serves, or a run cut short by ``max_rounds``).
    """

    dispatches: tuple[str, ...]
    records: tuple[DispatchRecord, ...]
    trace: tuple[TraceEvent, ...]
    pushed: int
    rounds: int
    undispatched: Mapping[str, int]
    truncated: bool

    def by_worker(self) -> dict[str, list[str]]:
        """The tenants each worker claimed, in order."""
        out: dict[str, list[str]] = {}
        for rec in self.records:
            out.setdefault(rec.worker, []).append(rec.tenant)
        return out


@attrs.define(order=True)
class _Pending:
    due: float
    seq: int
    tenant: str = attrs.field(order=False)
    count: int = attrs.field(order=False)


def _layout(
    workers: int | Sequence[WorkerSpec | WorkerConfig],
    pinned: Sequence[WorkerSpec | WorkerConfig | Sequence[str]] | Mapping[str, Sequence[str]],
) -> list[WorkerSpec]:
    specs: list[WorkerSpec] = []
    if isinstance(workers, int):
        if workers < 0:
            raise ValueError("workers must be >= 0")
        specs += [WorkerSpec(f"worker-{i + 1}") for i in range(workers)]
    else:
        specs += [w if isinstance(w, WorkerSpec) else WorkerSpec.from_config(w) for w in workers]
    items: Iterable[object] = (
        [WorkerSpec(f"pinned-{wid}", tuple(ts)) for wid, ts in pinned.items()]
        if isinstance(pinned, Mapping)
        else pinned
    )
    for i, item in enumerate(items):
        if isinstance(item, WorkerSpec):
            specs.append(item)
        elif isinstance(item, WorkerConfig):
            specs.append(WorkerSpec.from_config(item))
        elif isinstance(item, str):
            raise TypeError(f"a pinned worker is a list of tenants, not one string: {item!r}")
        else:
            specs.append(WorkerSpec(f"pinned-{i + 1}", tuple(item)))  # type: ignore[arg-type]
    if not specs:
        raise ValueError("simulate needs at least one worker")
    ids = [s.id for s in specs]
    if len(set(ids)) != len(ids):
        raise ValueError(f"worker ids must be unique: {ids}")
    return specs


def simulate(
    queue: FairQueue,
    load: Load | Iterable[Arrival],
    *,
    workers: int | Sequence[WorkerSpec | WorkerConfig] = 1,
    pinned: (
        Sequence[WorkerSpec | WorkerConfig | Sequence[str]] | Mapping[str, Sequence[str]]
    ) = (),
    batch: int = 1,
    clock: FakeClock | None = None,
    tick: float = 0.001,
    max_rounds: int = 1_000_000,
) -> Simulation:
    """Push ``load`` into ``queue`` round by round while the workers claim and finish.

    ``workers`` is a number of unpinned workers (they serve every tenant) or a list of
    :class:`WorkerSpec`/:class:`WorkerConfig`; ``pinned`` adds pinned workers: each a
    :class:`WorkerSpec`, a :class:`WorkerConfig`, a list of assigned tenants, or a mapping of
    worker id to assigned tenants. Workers claim in the order given, unpinned ones first.
    ``batch`` is the number of tasks a worker claims in one call. The run ends when the whole
    load has been pushed and nothing more can be claimed (tasks no worker serves stay
    ``undispatched``), or after ``max_rounds`` rounds (``truncated``).

    ``queue`` should be empty and used by nothing else meanwhile: the readiness bookkeeping of
    the trace assumes the simulation is the only producer and consumer.
    """
    if batch < 1:
        raise ValueError("batch must be >= 1")
    specs = _layout(workers, pinned)
    clock = clock if clock is not None else clock_of(queue)
    arrivals = sorted(load, key=lambda a: a.round)  # stable: equal rounds keep load order
    next_arrival = 0
    trace: list[TraceEvent] = []
    records: list[DispatchRecord] = []
    pending: list[_Pending] = []  # a heap: pushed, delayed, not yet ready
    visible: dict[str, int] = {}  # ready by the trace's bookkeeping and not yet claimed
    seq = itertools.count()
    outstanding: dict[str, int] = {}  # pushed and not yet claimed, per tenant
    pushed = 0
    rnd = 0
    truncated = False

    def now() -> float:
        return clock() if clock is not None else time.time()

    def ready(tenant: str, count: int) -> None:
        if count:
            trace.append(Ready(tenant, count))
            visible[tenant] = visible.get(tenant, 0) + count

    def release_due() -> None:
        t = now()
        while pending and pending[0].due <= t:
            entry = heapq.heappop(pending)
            ready(entry.tenant, entry.count)

    def claimed(tenant: str) -> None:
        # The backend may count a delayed task ready a moment before the bookkeeping here
        # does (its clock rounds to whole ms): take the task from the earliest pending entry.
        if not visible.get(tenant):
            for entry in sorted(pending):
                if entry.tenant == tenant and entry.count > 0:
                    entry.count -= 1
                    ready(tenant, 1)
                    break
        visible[tenant] = visible.get(tenant, 0) - 1
        outstanding[tenant] -= 1

    while True:
        if rnd >= max_rounds:
            truncated = True
            break
        # 1. this round's arrivals
        tasks: list[Task] = []
        while next_arrival < len(arrivals) and arrivals[next_arrival].round <= rnd:
            arrival = arrivals[next_arrival]
            next_arrival += 1
            wall = time.time()
            for _ in range(arrival.count):
                tasks.append(
                    Task.create(
                        arrival.tenant,
                        arrival.priority,
                        {"sim": pushed + len(tasks)},
                        execute_after=wall + arrival.delay if arrival.delay else None,
                    )
                )
            outstanding[arrival.tenant] = outstanding.get(arrival.tenant, 0) + arrival.count
            if arrival.delay:
                margin = _DUE_MARGIN if clock is not None else 0.0
                due = now() + arrival.delay + margin
                heapq.heappush(pending, _Pending(due, next(seq), arrival.tenant, arrival.count))
            else:
                ready(arrival.tenant, arrival.count)
        if tasks:
            queue.push_batch(tasks)
            pushed += len(tasks)
        release_due()
        # 2. every worker claims once, finishing what it got
        claimed_this_round = 0
        for spec in specs:
            got = queue.claim_batch(
                batch,
                list(spec.assigned) or None,
                steal=list(spec.steal) or None,
                worker_id=spec.id,
            )
            for task in got:
                claimed(task.tenant)
                trace.append(Dispatched(task.tenant, spec.id))
                records.append(
                    DispatchRecord(
                        len(records), rnd, spec.id, task.tenant, task.task_id, task.priority
                    )
                )
            if got:
                queue.finish_batch([(task, None) for task in got])
            claimed_this_round += len(got)
        rnd += 1
        # 3. time moves on; stop when nothing more can happen
        if clock is not None and tick:
            clock.advance(tick)
        if claimed_this_round:
            continue
        more_arrivals = next_arrival < len(arrivals)
        if pending:
            wait = pending[0].due - now()
            if more_arrivals and arrivals[next_arrival].round <= rnd:
                continue
            if wait > 0:
                if clock is not None:
                    clock.advance(wait)
                else:
                    time.sleep(wait)
            continue
        if more_arrivals:
            skip_to = arrivals[next_arrival].round
            if clock is not None and tick and skip_to > rnd:
                clock.advance(tick * (skip_to - rnd))
            rnd = max(rnd, skip_to)
            continue
        break
    return Simulation(
        dispatches=tuple(r.tenant for r in records),
        records=tuple(records),
        trace=tuple(trace),
        pushed=pushed,
        rounds=rnd,
        undispatched={t: c for t, c in outstanding.items() if c},
        truncated=truncated,
    )
