"""Run a load through a real queue with a given worker layout and record the dispatch order.

:func:`simulate` works in *rounds*. In round ``r`` it pushes the load's arrivals for ``r``
(one ``push_batch``), then each worker in turn claims up to ``batch`` tasks with
``queue.claim_batch(batch, assigned, steal=steal, worker_id=id)``, exactly as a
:class:`~fairque_core.Worker` with that :class:`~fairque_core.WorkerConfig` does, and finishes
runs them at once: finished, or, when a ``handler`` raises, failed (retried after the queue's
backoff, or dead-lettered). Every claim is recorded, in order, with the tenants that had ready
work at that moment and the limits that held a tenant back (:mod:`fairque_testing.holds`), so
:func:`fairque_testing.fairness_report` can tell a fair order from a lucky one, and with its
outcome, for :func:`fairque_testing.outcome_report`.

Time: with a fake clock (a queue from :func:`fairque_testing.make_queue` or the pytest
fixtures, or ``clock=``), each round moves the clock ``tick`` seconds, and when nothing can be
claimed but something will become claimable (a delayed task or a retry falls due, a tenant's
rate lets it start again) it jumps to that moment. On real time, the simulation sleeps until
then instead.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

import attrs

from fairque_core import FairQueue
from fairque_core.domain.enums import Priority, TaskState
from fairque_core.domain.models import Task
from fairque_core.settings.config import WorkerConfig
from fairque_testing.holds import HoldTracker
from fairque_testing.load import Arrival, Load
from fairque_testing.queues import FakeClock, clock_of
from fairque_testing.report import Dispatched, Held, Ready, TraceEvent, Unheld

__all__ = ["COMPLETED", "DEAD", "RETRIED", "DispatchRecord", "Simulation", "WorkerSpec", "simulate"]

#: The outcome of a claimed task: its handler returned (or there is none) and it was finished.
COMPLETED = "completed"
#: Its handler raised and the queue scheduled a retry (the task is claimed again later).
RETRIED = "retried"
#: Its handler raised and the queue dead-lettered it (no retries left).
DEAD = "dead"

#: How many times in a row the run waits for a queue-wide rate's next start, or probes forward
#: (doubling the step) for a retry later than its policy said, before it gives up.
_QUEUE_RATE_STALLS = 3
_RETRY_PROBES = 30

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
    """One claim: position (from 0), round, worker, tenant, task id, priority, and how its
    run ended: ``outcome`` is :data:`COMPLETED`, :data:`RETRIED` or :data:`DEAD`, ``error``
    the handler's exception (``"Type: message"``, empty when it completed)."""

    index: int
    round: int
    worker: str
    tenant: str
    task_id: str
    priority: Priority
    outcome: str = COMPLETED
    error: str = ""


@attrs.frozen
class Simulation:
    """What :func:`simulate` saw.

    ``dispatches`` is the tenant of every claim in order; ``records`` the same claims in
    detail, with their outcomes; ``trace`` the claims interleaved with the moments tasks
    became ready and limits held or let go a tenant (the input of
    :func:`~fairque_testing.fairness_report`); ``undispatched`` the tasks left unclaimed per
    tenant (tenants no worker serves, a paused tenant, or a run cut short by ``max_rounds``,
    retries still waiting included); ``pushed_by_tenant`` the tasks the load pushed per tenant;
    ``tiers`` each tenant's tier as the queue has it (the name of its ``tenant_tiers`` entry in
    the queue's config, else its stored rank as a string).
    """

    dispatches: tuple[str, ...]
    records: tuple[DispatchRecord, ...]
    trace: tuple[TraceEvent, ...]
    pushed: int
    rounds: int
    undispatched: Mapping[str, int]
    truncated: bool
    pushed_by_tenant: Mapping[str, int] = attrs.field(factory=dict)
    tiers: Mapping[str, str] = attrs.field(factory=dict)

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


def _describe(error: BaseException) -> str:
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _tiers(queue: FairQueue, tenants: Sequence[str]) -> dict[str, str]:
    named = queue.config.tenant_tiers
    ranks = queue.get_tenant_weights([t for t in tenants if t not in named]) if tenants else {}
    return {t: named[t] if t in named else str(ranks[t][1]) for t in tenants}


class _Run:
    """The state of one :func:`simulate` call (see there)."""

    def __init__(
        self,
        queue: FairQueue,
        arrivals: list[Arrival],
        specs: list[WorkerSpec],
        *,
        batch: int,
        clock: FakeClock | None,
        tick: float,
        handler: Callable[[Task], object] | None,
    ) -> None:
        self.queue, self.arrivals, self.specs = queue, arrivals, specs
        self.batch, self.clock, self.tick, self.handler = batch, clock, tick, handler
        self.next_arrival = 0
        self.trace: list[TraceEvent] = []
        self.records: list[DispatchRecord] = []
        self.pending: list[_Pending] = []  # a heap: pushed (or retried), not yet ready
        self.visible: dict[str, int] = {}  # ready by the trace's bookkeeping, not yet claimed
        self.seq = itertools.count()
        self.outstanding: dict[str, int] = {}  # to be claimed (again), per tenant
        self.pushed: dict[str, int] = {}
        self.retrying = 0  # retried tasks not claimed again yet
        self.holds = HoldTracker(queue, dict.fromkeys(a.tenant for a in arrivals))
        for tenant in sorted(self.holds.paused):
            self.trace.append(Held(tenant, "paused"))

    def now(self) -> float:
        return self.clock() if self.clock is not None else time.time()

    def wait_until(self, moment: float) -> None:
        wait = moment - self.now()
        if wait > 0:
            if self.clock is not None:
                self.clock.advance(wait)
            else:
                time.sleep(wait)

    def ready(self, tenant: str, count: int) -> None:
        if count:
            self.trace.append(Ready(tenant, count))
            self.visible[tenant] = self.visible.get(tenant, 0) + count

    def later(self, tenant: str, due: float, count: int) -> None:
        """``count`` tasks of ``tenant`` become ready at ``due`` (queue clock)."""
        margin = _DUE_MARGIN if self.clock is not None else 0.0
        heapq.heappush(self.pending, _Pending(due + margin, next(self.seq), tenant, count))

    def release_due(self) -> None:
        t = self.now()
        while self.pending and self.pending[0].due <= t:
            entry = heapq.heappop(self.pending)
            self.ready(entry.tenant, entry.count)
        for tenant in self.holds.due(t):
            self.trace.append(Unheld(tenant))

    def push(self, rnd: int) -> None:
        tasks: list[Task] = []
        while (
            self.next_arrival < len(self.arrivals) and self.arrivals[self.next_arrival].round <= rnd
        ):
            arrival = self.arrivals[self.next_arrival]
            self.next_arrival += 1
            wall = time.time()
            start = sum(self.pushed.values()) + len(tasks)
            tasks += [
                Task.create(
                    arrival.tenant,
                    arrival.priority,
                    {"sim": start + i},
                    execute_after=wall + arrival.delay if arrival.delay else None,
                )
                for i in range(arrival.count)
            ]
            self.outstanding[arrival.tenant] = (
                self.outstanding.get(arrival.tenant, 0) + arrival.count
            )
            if arrival.delay:
                self.later(arrival.tenant, self.now() + arrival.delay, arrival.count)
            else:
                self.ready(arrival.tenant, arrival.count)
        if tasks:
            self.queue.push_batch(tasks)
            for task in tasks:
                self.pushed[task.tenant] = self.pushed.get(task.tenant, 0) + 1

    def claimed(self, tenant: str) -> None:
        # The backend may count a delayed task ready a moment before the bookkeeping here
        # does (its clock rounds to whole ms): take the task from the earliest pending entry.
        if not self.visible.get(tenant):
            for entry in sorted(self.pending):
                if entry.tenant == tenant and entry.count > 0:
                    entry.count -= 1
                    self.ready(tenant, 1)
                    break
        self.visible[tenant] = self.visible.get(tenant, 0) - 1
        self.outstanding[tenant] -= 1

    def claim(self, spec: WorkerSpec, rnd: int) -> int:
        """One worker's claim, run and acknowledgement; how many tasks it claimed."""
        got = self.queue.claim_batch(
            self.batch,
            list(spec.assigned) or None,
            steal=list(spec.steal) or None,
            worker_id=spec.id,
        )
        if not got:
            return 0
        events: list[TraceEvent] = []
        last: dict[str, int] = {}  # tenant -> position in events of its last dispatch
        for task in got:
            if task.retry_count:
                self.retrying = max(0, self.retrying - 1)
            if self.holds.let_go(task.tenant):  # the queue let it go a moment earlier
                events.append(Unheld(task.tenant))
            self.claimed(task.tenant)
            last[task.tenant] = len(events)
            events.append(Dispatched(task.tenant, spec.id))
        held = {t: r for t in last if (r := self.holds.check(t, self.now())) is not None}
        for tenant in sorted(held, key=last.__getitem__, reverse=True):
            events.insert(last[tenant] + 1, Held(tenant, held[tenant]))
        self.trace += events
        self.run(got, spec.id, rnd)
        self.trace += [Unheld(t) for t in self.holds.after_finish(held)]
        return len(got)

    def run(self, got: list[Task], worker: str, rnd: int) -> None:
        done: list[tuple[Task, object]] = []
        for task in got:
            outcome, error = COMPLETED, ""
            if self.handler is None:
                done.append((task, None))
            else:
                try:
                    done.append((task, self.handler(task)))
                except Exception as exc:  # the handler's failure is the outcome measured
                    outcome, error = self.fail(task, exc)
            self.records.append(
                DispatchRecord(
                    len(self.records),
                    rnd,
                    worker,
                    task.tenant,
                    task.task_id,
                    task.priority,
                    outcome,
                    error,
                )
            )
        if done:
            self.queue.finish_batch(done)

    def fail(self, task: Task, error: Exception) -> tuple[str, str]:
        # the delay the queue's retry policy gives this failure (the call queue.fail makes; a
        # jittered policy may draw another: a late retry is probed for, an early one is taken
        # from the pending entries when it is claimed)
        decision = self.queue.plugins.retry_decide(task, error, task.retry_count + 1)
        delay = getattr(decision, "retry_delay", None) or 0.0
        state = self.queue.fail(task, error)
        if state is not TaskState.SCHEDULED:
            return DEAD, _describe(error)
        self.outstanding[task.tenant] += 1
        self.retrying += 1
        self.later(task.tenant, self.now() + delay, 1)
        return RETRIED, _describe(error)

    def stalled_wake(self) -> float | None:
        """Nothing was claimed: the moment something becomes claimable, if anything will."""
        moments = [self.pending[0].due] if self.pending else []
        waiting = [t for t, c in self.visible.items() if c > 0]
        release = self.holds.next_release(waiting)
        if release is not None:
            moments.append(release)
        return min(moments) if moments else None


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
    handler: Callable[[Task], object] | None = None,
) -> Simulation:
    """Push ``load`` into ``queue`` round by round while the workers claim and run the tasks.

    ``workers`` is a number of unpinned workers (they serve every tenant) or a list of
    :class:`WorkerSpec`/:class:`WorkerConfig`; ``pinned`` adds pinned workers: each a
    :class:`WorkerSpec`, a :class:`WorkerConfig`, a list of assigned tenants, or a mapping of
    worker id to assigned tenants. Workers claim in the order given, unpinned ones first.
    ``batch`` is the number of tasks a worker claims in one call.

    ``handler`` runs each claimed task (``handler(task)``), as your worker's handler would: its
    return value finishes the task (as its result), an exception fails it, and the queue's
    retry policy retries it after its backoff (on the clock: a fake clock jumps there) or
    dead-letters it. Without a handler every task is finished at once. The outcome of every
    run is in the records (:func:`~fairque_testing.outcome_report` sums them up).

    Limits (ADR 28) are honoured as the queue enforces them: a tenant whose rate makes it wait
    is held until its next start (the clock jumps there when nothing else can be claimed), a
    tenant at its cap until the claim's tasks are finished, a paused tenant throughout; the
    trace says so (:class:`~fairque_testing.Held`), so the report owes a held tenant nothing.
    The limits read are those in force when the run starts.

    The run ends when the whole load has been pushed and nothing more can be claimed now or
    later (tasks no worker serves stay ``undispatched``), or after ``max_rounds`` rounds
    (``truncated``). ``queue`` should be empty and used by nothing else meanwhile: the
    readiness bookkeeping of the trace assumes the simulation is the only producer and
    consumer.
    """
    if batch < 1:
        raise ValueError("batch must be >= 1")
    specs = _layout(workers, pinned)
    arrivals = sorted(load, key=lambda a: a.round)  # stable: equal rounds keep load order
    clock = clock if clock is not None else clock_of(queue)
    sim = _Run(queue, arrivals, specs, batch=batch, clock=clock, tick=tick, handler=handler)
    rnd = 0
    truncated = False
    stalls = 0  # claimless rounds in a row with work the bookkeeping calls ready
    while True:
        if rnd >= max_rounds:
            truncated = True
            break
        # 1. this round's arrivals, and what fell due
        sim.push(rnd)
        sim.release_due()
        # 2. every worker claims once, running and acknowledging what it got
        claimed_this_round = sum(sim.claim(spec, rnd) for spec in specs)
        rnd += 1
        # 3. time moves on; stop when nothing more can happen
        if clock is not None and tick:
            clock.advance(tick)
        if claimed_this_round:
            stalls = 0
            continue
        more_arrivals = sim.next_arrival < len(arrivals)
        if more_arrivals and arrivals[sim.next_arrival].round <= rnd:
            continue
        wake = sim.stalled_wake()
        if wake is not None:
            sim.wait_until(wake)
            continue
        if any(c > 0 for c in sim.visible.values()):
            stalls += 1
            if sim.holds.queue_interval and stalls <= _QUEUE_RATE_STALLS:
                sim.wait_until(sim.now() + sim.holds.queue_interval)  # the queue-wide rate
                continue
            if sim.retrying and stalls <= _RETRY_PROBES:  # a retry later than its policy said
                sim.wait_until(sim.now() + max(tick, 0.001) * 2.0**stalls)
                continue
        if more_arrivals:
            skip_to = arrivals[sim.next_arrival].round
            if clock is not None and tick and skip_to > rnd:
                clock.advance(tick * (skip_to - rnd))
            rnd = max(rnd, skip_to)
            continue
        break
    records = tuple(sim.records)
    return Simulation(
        dispatches=tuple(r.tenant for r in records),
        records=records,
        trace=tuple(sim.trace),
        pushed=sum(sim.pushed.values()),
        rounds=rnd,
        undispatched={t: c for t, c in sim.outstanding.items() if c},
        truncated=truncated,
        pushed_by_tenant=dict(sim.pushed),
        tiers=_tiers(queue, list(sim.pushed)),
    )
