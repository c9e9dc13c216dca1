"""A handler's end booked by the thread that ran it, which starts the next buffered task itself
(ADR 51): ``HandOffSteps.task_ended`` (the hand-off accelerator) on the fake driver of
test_worker_loop.py, and the real drivers on the in-memory backend.

The fake driver here books completions the way the drivers do with the hand-off on: at once,
from the "handler's thread", possibly while the loop's own queue call is out
(``Chained.during``), and starts the task ``task_ended`` gives back without a cycle of the loop.
With the hand-off off it books them with ``task_done``, as the reference drivers do, and the
model test runs the same random event sequences both ways (ADR 65).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairque_core import (
    AsyncFairQueue,
    AsyncInMemoryBackend,
    AsyncWorker,
    FairQueue,
    InMemoryBackend,
    QueueConfig,
    RedisConnectionError,
    Task,
    TaskHandler,
    Worker,
)
from fairque_core.app.worker import actions as wa
from fairque_core.app.worker import pacing as worker_pacing
from fairque_core.app.worker.handoff import HandOffSteps
from fairque_core.settings.accel import Accelerators

from .test_worker_loop import Sim, config


class Chained(Sim):
    """``Sim`` whose handlers book their end with ``task_ended`` (with the hand-off; without,
    ``hand_off=False``: with ``task_done``, as the reference drivers do); ``during`` runs
    inside every queue call of the given action type (handlers that end while the call is
    out)."""

    def __init__(self, *args: Any, hand_off: bool = True, **kwargs: Any) -> None:
        super().__init__(*args, hand_off=hand_off, **kwargs)
        self.wakes: list[bool] = []
        self.chained: list[str] = []  # tasks started by task_ended, in order
        self.during: dict[type[wa.Action], Callable[[], None]] = {}

    def complete(self, task_id: str, ok: bool = True, value: Any = None) -> None:
        if self.hand_off is None:
            super().complete(task_id, ok, value)
            return
        slot = self.running.pop(task_id)
        error = value or RuntimeError("x")
        nxt, wake = self.hand_off.task_ended(slot, ok, value if ok else error, self.run, self.now)
        self.wakes.append(wake)
        if nxt is not None:
            self.running[nxt.task.task_id] = nxt
            self.started.append(nxt.task.task_id)
            self.chained.append(nxt.task.task_id)

    def _call(self, action: wa.Action) -> Any:
        hook = self.during.get(type(action))
        if hook is not None:
            hook()
        return super()._call(action)

    def complete_all(self) -> None:
        for task_id in sorted(self.running):
            if task_id in self.running:
                self.complete(task_id)


def _sleep_of(sim: Sim) -> wa.Sleep:
    action = sim.actions[-1][1]
    assert isinstance(action, wa.Sleep)
    return action


def test_a_freed_place_goes_to_the_next_buffered_task_without_a_cycle() -> None:
    sim = Chained(config(max_concurrent_tasks=2), prefetch=4)
    sim.push(6)
    sim.sleep()  # claims 6, starts t0 and t1, holds 4
    actions = len(sim.actions)
    sim.complete("t0")
    assert sim.chained == ["t2"]  # the buffer's order
    assert len(sim.actions) == actions  # no cycle ran
    health = sim.loop.health(sim.now, 0.0)
    assert (health["executing"], health["buffered"]) == (2, 3)
    [t2] = [s for s in sim.loop.running.values() if s.task.task_id == "t2"]
    assert t2.started_at == sim.now
    for task_id in ("t1", "t2", "t3"):
        sim.complete(task_id)
    assert sim.chained == ["t2", "t3", "t4", "t5"]
    sim.complete("t4")  # nothing left to start: the place stays free
    assert sim.chained == ["t2", "t3", "t4", "t5"]
    assert sim.loop.health(sim.now, 0.0)["executing"] == 1


def test_a_sleeping_loop_is_woken_only_for_what_its_sleep_does_not_cover() -> None:
    sim = Chained(config(max_concurrent_tasks=4), prefetch=8)  # a claim's worth: 12 // 4 = 3
    sim.push(40)
    sim.sleep()  # claims 12, starts 4, holds 8: no room, no acks
    sim.complete("t0")
    assert sim.wakes == [True]  # the first free room: the claim's linger starts in a cycle
    sim.cycle()  # lingers for more room, holds the ack
    assert len(sim.of(wa.Claim)) == 1
    assert _sleep_of(sim).until - sim.now == pytest.approx(worker_pacing.ACK_LINGER_SECONDS)
    sim.complete("t1")  # room 2 of the 3 a claim waits for; its linger and the acks' are timed
    assert sim.wakes == [True, False]
    sim.complete("t2")  # a claim's worth of room: claim now
    assert sim.wakes == [True, False, True]
    sim.cycle()
    assert [a.count for _, a in sim.of(wa.Claim)] == [12, 3]
    assert sim.finished == ["t0", "t1", "t2"]  # carried by that claim


def test_a_failure_wakes_the_loop_and_an_awake_loop_is_not_woken() -> None:
    sim = Chained(config(max_concurrent_tasks=4), prefetch=8)
    sim.push(40)
    sim.sleep()
    sim.complete("t0")
    sim.cycle()
    sim.complete("t1", ok=False)  # a failure is sent at once
    assert sim.wakes == [True, True]
    sim.cycle()
    assert sim.failed == ["t1"]
    # a handler that ends while the loop's claim is out books its end and starts the next
    # task; the loop is awake and sees the change before it sleeps
    sim.during[wa.Claim] = lambda: sim.complete(sorted(sim.running)[0])
    sim.now += 1.0
    sim.cycle()
    assert sim.wakes[-1] is False
    assert _sleep_of(sim).until == sim.now  # room again: the next cycle claims at once


def test_acks_booked_while_an_ack_batch_is_out_are_kept() -> None:
    sim = Chained(config(max_concurrent_tasks=2, reaper_interval_seconds=1.0), prefetch=6)
    sim.push(8)
    sim.sleep()  # claims 8, starts t0 and t1
    sim.complete("t0")
    sim.complete("t1")
    sim.now += 1.5  # the reaper is due: the acks go alone, ahead of it
    sim.during[wa.Ack] = sim.complete_all  # meanwhile t2 and t3 end and t4, t5 start
    sim.cycle()
    assert [t.task_id for t, _ in sim.of(wa.Ack)[0][1].items] == ["t0", "t1"]
    del sim.during[wa.Ack]
    for _ in range(20):
        sim.complete_all()
        sim.now += 0.01
        sim.sleep()
    assert sorted(sim.finished) == [f"t{i}" for i in range(8)]
    assert len(sim.finished) == 8


def test_an_outage_of_a_lone_ack_batch_keeps_it_and_what_was_booked_meanwhile() -> None:
    sim = Chained(config(max_concurrent_tasks=2, reaper_interval_seconds=1.0), prefetch=6)
    sim.push(8)
    sim.sleep()
    sim.complete("t0")
    sim.now += 1.5

    def fail_and_complete() -> None:
        sim.complete("t1")
        sim.errors.append(RedisConnectionError("down"))

    sim.during[wa.Ack] = fail_and_complete
    sim.cycle()
    del sim.during[wa.Ack]
    assert sim.finished == []
    assert [slot.task.task_id for slot, _ in sim.loop._acks] == ["t0", "t1"]
    sim.now += 1.0  # past the backoff
    for _ in range(20):
        sim.complete_all()
        sim.now += 0.01
        sim.sleep()
    assert sorted(sim.finished) == [f"t{i}" for i in range(8)]


def test_after_the_stop_an_end_is_booked_for_the_loop_and_nothing_starts() -> None:
    sim = Chained(config(max_concurrent_tasks=2), prefetch=4)
    sim.push(6)
    sim.sleep()
    sim.stop()
    sim.complete("t0")
    assert sim.chained == []
    assert sim.wakes == [True]
    for _ in range(5):
        sim.complete_all()
        sim.sleep()
    assert sim.stopped
    assert sorted(sim.finished) == ["t0", "t1"]
    assert sorted(sim.released) == ["t2", "t3", "t4", "t5"]


class Model(Chained):
    """``Chained`` with a listener that claims for the idle loop (ADR 38): ``listen`` answers
    the claim the loop handed out from the fake queue; with the hand-off, the listener then
    starts what it brought and takes the next claim (``start_handed``, ``hand_next``, ADR 46),
    as the drivers do. What the loop could not book (brought after its end) is released, as
    the drivers release it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, listener_claims=True, **kwargs)
        self.out = 0  # the claim handed to the listener, not yet answered

    def cycle(self) -> wa.Action:
        action = super().cycle()
        if isinstance(action, wa.Sleep) and action.claim:
            self.out = action.claim
        return action

    def listen(self, made: bool) -> None:
        if not self.out:
            return
        got: list[Task] | None = None
        if made:
            got = [self.ready.popleft() for _ in range(min(self.out, len(self.ready)))]
            self.claimed.extend(t.task_id for t in got)
        self.out = 0
        self.loop.listener_claimed(got)
        if self.hand_off is None:
            return
        for slot in self.hand_off.start_handed(self.now):
            self.running[slot.task.task_id] = slot
            self.started.append(slot.task.task_id)
            self.chained.append(slot.task.task_id)
        handing = self.hand_off.hand_next(self.now)
        if handing is not None:
            self.out = handing.claim

    def wind_down(self) -> None:
        for task in self.loop.listener.unbooked():
            self.released.append(task.task_id)


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("cycle"), st.none()),
        st.tuples(st.just("complete"), st.integers(0, 7)),
        st.tuples(st.just("fail"), st.integers(0, 7)),
        st.tuples(st.just("during"), st.sampled_from(["claim", "ack", "off"])),
        st.tuples(st.just("listen"), st.booleans()),
        st.tuples(st.just("advance"), st.sampled_from([0.001, 0.5, 3.0, 12.0])),
        st.tuples(st.just("outage"), st.integers(1, 3)),
        st.tuples(st.just("lose"), st.integers(0, 3)),
        st.tuples(st.just("push"), st.integers(1, 6)),
        st.tuples(st.just("stop"), st.booleans()),
    ),
    max_size=60,
)


def _play(
    ops: list[tuple[str, Any]], cap: int, prefetch: int | None, run: float, hand_off: bool
) -> Model:
    """``ops`` on a model worker, then the wind-down: the server is back, every handler
    returns, the loop runs until it stops. The invariants that hold at every step are checked
    on the way."""
    sim = Model(
        config(max_concurrent_tasks=cap, task_timeout_seconds=10.0, heartbeat_interval_seconds=2.0),
        prefetch=prefetch,
        trip=0.0005,
        run=run,
        hand_off=hand_off,
    )

    def one_ends() -> None:
        if sim.running:
            sim.complete(sorted(sim.running)[0])

    for op, arg in ops:
        if op == "cycle":
            sim.sleep()
        elif op in ("complete", "fail") and sim.running:
            task_id = sorted(sim.running)[arg % len(sim.running)]
            sim.complete(task_id, ok=op == "complete")
        elif op == "during":
            sim.during.clear()
            if arg != "off":
                sim.during[wa.Claim if arg == "claim" else wa.Ack] = one_ends
        elif op == "listen":
            sim.listen(arg)
        elif op == "advance":
            sim.now += arg
        elif op == "outage":
            sim.errors.extend(RedisConnectionError("down") for _ in range(arg))
        elif op == "lose" and sim.claimed:
            sim.lost.add(sim.claimed[arg % len(sim.claimed)])
        elif op == "push":
            sim.push(arg, tenant=f"u{arg % 3}")
        elif op == "stop":
            sim.stop(force=arg)
        health = sim.loop.health(sim.now, 0.0)
        assert 0 <= health["executing"] <= cap  # never more handlers than places
        # a place is taken from a handler's start until its end is booked (at once with the
        # hand-off, at the next cycle without), or its timeout gave it back (a zombie)
        taking = [*sim.running.values(), *(slot for slot, *_ in sim.loop._inbox)]
        assert health["executing"] == len([s for s in taking if not s.zombie])
        assert health["stuck_threads"] <= cap
        assert len(sim.started) == len(set(sim.started))  # no task starts twice
    sim.errors.clear()
    sim.during.clear()
    sim.stop()
    for _ in range(200):
        sim.complete_all()
        sim.listen(True)
        if sim.stopped:
            break
        sim.sleep()
        sim.now += 0.5
    sim.wind_down()
    return sim


@settings(max_examples=300, deadline=None)
@given(
    ops=OPS,
    cap=st.integers(1, 4),
    prefetch=st.one_of(st.none(), st.integers(0, 4)),
    run=st.sampled_from([1e-5, 0.01, 2.0]),
)
def test_random_event_sequences_keep_the_invariants_with_and_without_the_hand_off(
    ops: list[tuple[str, Any]], cap: int, prefetch: int | None, run: float
) -> None:
    """The model test of the hand-off accelerator (ADR 65): the same random events (handlers
    ending in the middle of the loop's claims and ack batches, listener answers, outages, lost
    leases, pushes, stops) on a worker with the hand-off and on the reference cycle; each keeps
    the reference's invariants: at most ``cap`` handlers, every claimed task finished, failed
    or released exactly once (or its lease lost, or held by a stop cut short), none claimed
    after the stop, and the stop gives back every claimed task that had not started."""
    for hand_off in (True, False):
        sim = _play(ops, cap, prefetch, run, hand_off)
        assert sim.stopped
        assert sim.stop_at is not None
        assert [t for t, _ in sim.of(wa.Claim) if t > sim.stop_at] == []
        run_ids = {s.task.task_id for _, a in sim.of(wa.Run) for s in a.slots}
        assert set(sim.started) == run_ids | set(sim.chained)
        assert not run_ids & set(sim.chained)  # started once: by the loop or by the hand-off
        if not hand_off:
            assert sim.chained == []  # the reference: the loop starts every task
        cut_short = sim.forced or sim.now >= sim.stop_at + 5.0
        gave_up = sim.loop.stats.backend_errors > 0
        held = set(sim.loop.held)
        assert held <= set(sim.claimed)
        for task_id in sim.claimed:
            ends = sum([task_id in sim.finished, task_id in sim.failed, task_id in sim.released])
            assert ends <= 1, task_id
            assert ends == 1 or task_id in sim.lost or task_id in held, task_id
            assert not (task_id in sim.released and task_id in sim.started), task_id
            # graceful stop: a claimed task that never started was given back
            if task_id not in sim.started and task_id not in sim.lost and not gave_up:
                assert task_id in sim.released, task_id
        if held:
            assert cut_short or gave_up
        assert len(sim.claimed) == len(set(sim.claimed))  # the fake queue hands each out once


@settings(max_examples=500, deadline=None)
@given(
    cap=st.integers(1, 1000),
    lease=st.floats(0.001, 3600.0),
    runs=st.lists(st.floats(0.0, 120.0), min_size=1, max_size=5),
    trips=st.lists(st.floats(-1.0, 10.0), min_size=1, max_size=5),
)
def test_the_gauge_gives_the_depth_rule_of_its_averages(
    cap: int, lease: float, runs: list[float], trips: list[float]
) -> None:
    gauge = worker_pacing.PrefetchGauge(cap, lease)
    assert gauge.depth() == 0  # nothing prefetched before a task ran and a claim was timed
    for run in runs:
        gauge.ran(run)
    assert gauge.depth() == 0
    for trip in trips:
        gauge.tripped(trip)
    assert gauge.run is not None
    assert gauge.trip is not None
    assert gauge.depth() == worker_pacing.prefetch_depth(cap, gauge.run, gauge.trip, lease)


# ------------------------------------------------------------------ the drivers


class _Recorder(TaskHandler):
    def __init__(self) -> None:
        self.order: list[str] = []
        self.threads: set[int] = set()

    def process_task(self, task: Task) -> object:
        self.order.append(task.task_id)
        self.threads.add(threading.get_ident())
        return None

    async def process_task_async(self, task: Task) -> object:
        self.order.append(task.task_id)
        return None


@pytest.fixture(autouse=True)
def _no_autoload(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAIRQUE_DISABLE_PLUGIN_AUTOLOAD", "1")


def _count_chained(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    chained = [0]
    inner = HandOffSteps.task_ended

    def counted(self: HandOffSteps, *args: Any) -> tuple[Any, bool]:
        out = inner(self, *args)
        chained[0] += out[0] is not None
        return out

    monkeypatch.setattr(HandOffSteps, "task_ended", counted)
    return chained


def _tasks(n: int) -> list[Task]:
    return [Task.create("u", task_id=f"t{i:02d}") for i in range(n)]


ON_AND_OFF = pytest.mark.parametrize(
    "accel", [Accelerators(), Accelerators(off={"handoff"})], ids=["handoff-on", "handoff-off"]
)


@ON_AND_OFF
def test_the_thread_worker_runs_its_buffer_on_the_threads_that_free_places(
    monkeypatch: pytest.MonkeyPatch, accel: Accelerators
) -> None:
    chained = _count_chained(monkeypatch)
    queue = FairQueue(InMemoryBackend(config=QueueConfig(name="chain", lease_seconds=30.0)))
    queue.push_batch(_tasks(12))
    handler = _Recorder()
    worker = Worker(
        config(max_concurrent_tasks=1, poll_interval_seconds=0.05),
        handler,
        queue,
        prefetch=11,
        accel=accel,
    )
    worker.start()
    deadline = threading.Event()
    for _ in range(500):
        if worker.health()["processed"] == 12:
            break
        deadline.wait(0.01)
    assert worker.stop(5)
    assert handler.order == [f"t{i:02d}" for i in range(12)]  # one tenant: the queue's order
    if accel.on("handoff"):
        assert chained[0] == 11  # one place: every task after the first followed on its thread
        assert len(handler.threads) == 1
    else:
        assert chained[0] == 0  # the reference: the control thread starts every task
    health = worker.health()
    assert (health["processed"], health["executing"], health["buffered"]) == (12, 0, 0)


@ON_AND_OFF
def test_the_async_worker_runs_its_buffer_in_the_tasks_that_free_places(
    monkeypatch: pytest.MonkeyPatch, accel: Accelerators
) -> None:
    chained = _count_chained(monkeypatch)

    async def main() -> dict[str, Any]:
        cfg = QueueConfig(name="chain", lease_seconds=30.0)
        queue = AsyncFairQueue(AsyncInMemoryBackend(queue=cfg.name, config=cfg))
        await queue.push_batch(_tasks(12))
        handler = _Recorder()
        worker = AsyncWorker(
            config(max_concurrent_tasks=1, poll_interval_seconds=0.05),
            handler,
            queue,
            prefetch=11,
            accel=accel,
        )
        await worker.start()
        for _ in range(500):
            if worker.health()["processed"] == 12:
                break
            await asyncio.sleep(0.01)
        assert await worker.stop(5)
        assert handler.order == [f"t{i:02d}" for i in range(12)]
        return worker.health()

    health = asyncio.run(main())
    # every task after the first followed on the asyncio task that freed its place, but for
    # those that ended while the control loop's own queue call was out (started by its cycle)
    assert chained[0] >= 6 if accel.on("handoff") else chained[0] == 0
    assert (health["processed"], health["executing"], health["buffered"]) == (12, 0, 0)
