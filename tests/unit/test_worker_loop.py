"""The worker loop state machine (worker_loop.WorkerLoop) with a fake clock and a fake queue.

No threads, no sleeps, no backend: a small simulated driver answers the machine's actions and
moves the clock, so every test is deterministic. The real drivers (Worker, AsyncWorker) are
covered by test_worker_memory.py and the integration tests.
"""

from __future__ import annotations

import itertools
import random
from collections import deque
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairque_core import RedisConnectionError, Task, WorkerConfig
from fairque_core.app.worker import actions as wa
from fairque_core.app.worker import pacing as worker_pacing
from fairque_core.app.worker.buffer import TurnBuffer
from fairque_core.app.worker.handoff import HandOffSteps
from fairque_core.app.worker.loop import WorkerLoop
from fairque_core.domain.errors import LeaseLostError, TaskTimeoutError, UnknownTaskError


def config(**overrides: Any) -> WorkerConfig:
    base: dict[str, Any] = {
        "id": "w",
        "poll_interval_seconds": 1.0,
        "max_concurrent_tasks": 4,
        "task_timeout_seconds": 10.0,
        "graceful_shutdown_timeout": 5.0,
        "reaper_interval_seconds": 7.0,
    }
    base.update(overrides)
    return WorkerConfig(**base)


@pytest.fixture(autouse=True, params=[True, False], ids=["handoff-on", "handoff-off"])
def hand_off_on_and_off(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test of a module that imports this fixture runs with the hand-off accelerator
    plugged into its sims' loops and without (ADR 65): the reference cycle's outcomes hold
    either way."""
    monkeypatch.setattr(Sim, "hand_off_default", request.param)


class Sim:
    """A fake driver: a fake clock, a fake queue, and a record of every action.

    ``hand_off``: plug the hand-off accelerator into the loop (``self.hand_off``; None: the
    reference cycle alone); by default as ``hand_off_default`` says."""

    hand_off_default = True

    def __init__(
        self,
        cfg: WorkerConfig,
        *,
        prefetch: int | None = 0,
        lease: float = 30.0,
        trip: float = 0.0,
        run: float = 0.01,
        listener_claims: bool = False,
        listen_floor: float = 0.0,
        hand_off: bool | None = None,
    ) -> None:
        self.loop = WorkerLoop(
            cfg,
            lease_seconds=lease,
            prefetch=prefetch,
            rng=random.Random(1),
            listener_claims=listener_claims,
            listen_floor=listen_floor,
        )
        on = self.hand_off_default if hand_off is None else hand_off
        self.hand_off = HandOffSteps.plug(self.loop) if on else None
        self.loop.start()
        self.trip = trip  # how long a claim takes on the fake clock
        self.run = run  # the run time handlers report
        self.now = 0.0
        self.ready: deque[Task] = deque()
        self.actions: list[tuple[float, wa.Action]] = []
        self.running: dict[str, wa.Slot] = {}
        self.errors: deque[BaseException] = deque()  # raised by the next queue calls
        self.lost: set[str] = set()  # leases the queue no longer honours
        self.finished: list[str] = []
        self.failed: list[str] = []
        self.released: list[str] = []
        self.claimed: list[str] = []
        self.started: list[str] = []  # in the order the loop started them
        self.started_before: dict[str, int] = {}  # task -> tasks started before its claim
        self.stop_at: float | None = None
        self.forced = False
        self.reaped: deque[int] = deque()  # what the next reaper calls report
        self.stopped = False

    def push(self, n: int, prefix: str = "t", *, tenant: str = "u", first: bool = False) -> None:
        """``first``: the queue hands these out before what it holds (a fair queue does so for
        a tenant that just became backlogged while another one floods)."""
        start = len(self.ready) + len(self.claimed)
        tasks = [Task.create(tenant, task_id=f"{prefix}{start + i}") for i in range(n)]
        if first:
            self.ready.extendleft(reversed(tasks))
        else:
            self.ready.extend(tasks)

    def _call(self, action: wa.Action) -> Any:
        if self.errors:
            raise self.errors.popleft()
        if isinstance(action, wa.Claim):
            tasks = [self.ready.popleft() for _ in range(min(action.count, len(self.ready)))]
            self.claimed.extend(t.task_id for t in tasks)
            self.started_before.update((t.task_id, len(self.started)) for t in tasks)
            return tasks
        if isinstance(action, wa.Ack):
            flags = [t.task_id not in self.lost for t, _ in action.items]
            self.finished.extend(t.task_id for t, _ in action.items if t.task_id not in self.lost)
            return flags
        if isinstance(action, wa.Fail):
            if action.slot.task.task_id in self.lost:
                raise LeaseLostError("lost")
            self.failed.append(action.slot.task.task_id)
            return "failed"
        if isinstance(action, wa.Release):
            if action.slot.task.task_id in self.lost:
                raise LeaseLostError("lost")
            self.released.append(action.slot.task.task_id)
            return None
        if isinstance(action, wa.Heartbeat):
            return [None if t.task_id in self.lost else t for t in action.tasks]
        if isinstance(action, wa.Reap):
            return self.reaped.popleft() if self.reaped else 0
        raise AssertionError(action)

    def cycle(self) -> wa.Action:
        """Carry out actions until the loop sleeps or stops; returns that last action."""
        while True:
            action = self.loop.next_action(self.now)
            self.actions.append((self.now, action))
            if isinstance(action, (wa.Sleep, wa.Stopped)):
                self.stopped = isinstance(action, wa.Stopped)
                return action
            if isinstance(action, wa.Run):
                for slot in action.slots:
                    self.running[slot.task.task_id] = slot
                    self.started.append(slot.task.task_id)
            elif isinstance(action, wa.Expire):
                pass
            elif isinstance(action, wa.Claim) and action.acks is not None:
                self.now += self.trip
                parts = []
                for part in (wa.Claim(action.count), action.acks):
                    try:
                        parts.append(self._call(part))
                    except Exception as exc:
                        parts.append(exc)
                self.loop.done(tuple(parts))
            else:
                if isinstance(action, wa.Claim):
                    self.now += self.trip
                try:
                    self.loop.done(self._call(action))
                except Exception as exc:
                    self.loop.failed(exc)

    def sleep(self) -> float:
        """One cycle, then the clock jumps to the end of its sleep; returns the sleep length."""
        action = self.cycle()
        if isinstance(action, wa.Sleep):
            slept = max(0.0, action.until - self.now)
            self.now = max(self.now, action.until)
            return slept
        return 0.0

    def complete(self, task_id: str, ok: bool = True, value: Any = None) -> None:
        slot = self.running.pop(task_id)
        self.loop.task_done(slot, ok, value if ok else (value or RuntimeError("x")), self.run)

    def stop(self, force: bool = False) -> None:
        if self.stop_at is None:
            self.stop_at = self.now
        self.forced = self.forced or force
        self.loop.stop(self.now, force=force)

    def of(self, kind: type[wa.Action]) -> list[tuple[float, Any]]:
        return [(t, a) for t, a in self.actions if isinstance(a, kind)]


# ------------------------------------------------------------------ claims


def test_claims_exactly_the_free_places_plus_prefetch() -> None:
    sim = Sim(config(max_concurrent_tasks=4), prefetch=2)
    sim.push(20)
    sim.cycle()
    [(_, claim)] = sim.of(wa.Claim)
    assert claim.count == 6
    [(_, run)] = sim.of(wa.Run)
    assert len(run.slots) == 4  # the cap; two wait in the buffer
    assert sim.loop.health(sim.now, 0.0)["buffered"] == 2


def test_claim_batch_size_caps_a_claim() -> None:
    sim = Sim(config(max_concurrent_tasks=8, claim_batch_size=3))
    sim.push(20)
    sim.cycle()
    assert [a.count for _, a in sim.of(wa.Claim)] == [3]


def test_one_free_place_lingers_before_claiming() -> None:
    sim = Sim(config(max_concurrent_tasks=8))
    sim.push(40)
    sim.sleep()  # claims 8, runs 8
    sim.complete("t0")
    sim.cycle()  # one place free, 7 running: below a quarter, so it waits
    assert len(sim.of(wa.Claim)) == 1
    assert sim.finished == []  # the ack waits for the claim to carry it
    sleep = sim.actions[-1][1]
    assert isinstance(sleep, wa.Sleep)
    assert sleep.until - sim.now == pytest.approx(worker_pacing.CLAIM_LINGER_SECONDS)
    sim.now = sleep.until
    sim.cycle()  # the linger is over: it claims for the one place, carrying the ack
    assert [a.count for _, a in sim.of(wa.Claim)] == [8, 1]
    assert sim.of(wa.Claim)[-1][1].acks is not None
    assert sim.finished == ["t0"]
    assert not sim.of(wa.Ack)


def test_acks_ride_with_the_claim_when_nothing_else_is_due() -> None:
    sim = Sim(config(max_concurrent_tasks=2))
    sim.push(10)
    sim.sleep()
    for task_id in list(sim.running):
        sim.complete(task_id)
    sim.cycle()
    claim = sim.of(wa.Claim)[-1][1]
    assert claim.acks is not None
    assert sorted(t.task_id for t, _ in claim.acks.items) == ["t0", "t1"]
    assert sim.finished == ["t0", "t1"]
    assert not sim.of(wa.Ack)  # no separate ack call


# ------------------------------------------------------------------ adaptive prefetch (ADR 30)


def drain(sim: Sim, cycles: int) -> list[int]:
    """Run ``cycles`` cycles completing every running task each time; the buffer sizes seen."""
    seen = []
    for _ in range(cycles):
        for task_id in sorted(sim.running):
            sim.complete(task_id)
        sim.sleep()
        seen.append(sim.loop.health(sim.now, 0.0)["buffered"])
    return seen


def test_prefetch_depth_rule() -> None:
    depth = worker_pacing.prefetch_depth
    # fast tasks: as deep as allowed; slow ones: none; in between, two round trips' worth
    assert depth(10, 1e-5, 0.001, 30.0) == worker_pacing.PREFETCH_MAX
    assert depth(10, 1.0, 0.001, 30.0) == 0
    assert depth(10, 0.001, 0.001, 30.0) == 20
    assert depth(4, 0.01, 0.1, 1.0) == 40 == worker_pacing.prefetch_bound(4, 0.01, 1.0)


@settings(max_examples=300, deadline=None)
@given(
    cap=st.integers(1, 200),
    run=st.floats(0.0, 600.0),
    trip=st.floats(0.0, 5.0),
    lease=st.floats(0.1, 3600.0),
)
def test_prefetch_never_exceeds_what_starts_within_the_lease_fraction(
    cap: int, run: float, trip: float, lease: float
) -> None:
    depth = worker_pacing.prefetch_depth(cap, run, trip, lease)
    assert 0 <= depth <= worker_pacing.PREFETCH_MAX
    # with every place busy, the last of them starts within the lease fraction
    run = max(run, worker_pacing.MIN_RUN_SECONDS)
    assert depth * run / cap <= worker_pacing.PREFETCH_LEASE_FRACTION * lease * (1 + 1e-9)


def test_default_prefetch_adapts_deep_for_fast_tasks() -> None:
    sim = Sim(config(max_concurrent_tasks=4), prefetch=None, trip=0.001, run=1e-5)
    sim.push(1000)
    sim.sleep()
    assert [a.count for _, a in sim.of(wa.Claim)] == [4]  # nothing run yet: no prefetch
    drain(sim, 10)
    assert sim.loop.prefetch == worker_pacing.PREFETCH_MAX
    assert max(a.count for _, a in sim.of(wa.Claim)) == 4 + worker_pacing.PREFETCH_MAX
    # a full buffer is refilled only once a quarter of the places are free (one claim for many)
    counts = [a.count for _, a in sim.of(wa.Claim)][2:]
    assert min(counts) >= (4 + worker_pacing.PREFETCH_MAX) // 4


def test_default_prefetch_stays_off_for_slow_tasks() -> None:
    sim = Sim(config(max_concurrent_tasks=4), prefetch=None, trip=0.001, run=2.0)
    sim.push(100)
    seen = drain(sim, 20)
    assert sim.loop.prefetch == 0
    assert max(seen) == 0
    assert all(a.count <= 4 for _, a in sim.of(wa.Claim))


def test_default_prefetch_follows_the_run_time_down() -> None:
    sim = Sim(config(max_concurrent_tasks=4), prefetch=None, trip=0.001, run=1e-5)
    sim.push(2000)
    drain(sim, 10)
    assert sim.loop.prefetch == worker_pacing.PREFETCH_MAX
    sim.run = 1.0  # the tasks became slow
    drain(sim, 40)
    assert sim.loop.prefetch == 0


def test_unstarted_tasks_never_exceed_the_lease_bound() -> None:
    cap, lease, run = 4, 1.0, 0.01
    sim = Sim(config(max_concurrent_tasks=cap), prefetch=None, lease=lease, trip=0.1, run=run)
    sim.push(2000)
    seen = drain(sim, 60)
    bound = worker_pacing.prefetch_bound(cap, run, lease)
    assert bound == 40 < worker_pacing.PREFETCH_MAX  # the lease bound is what binds here
    assert max(seen) == bound  # reached, never passed
    assert all(a.count <= cap + bound for _, a in sim.of(wa.Claim))


def test_acks_wait_for_the_claim_at_most_the_ack_linger() -> None:
    # tasks of 10 ms, claims of 0.5 ms: no prefetch, and one free place is not worth a claim
    sim = Sim(config(max_concurrent_tasks=8), prefetch=None, trip=0.0005, run=0.01)
    sim.push(40)
    sim.sleep()  # claims 8, runs 8
    sim.complete("t0")
    sleep = sim.cycle()
    assert sim.finished == []
    assert not sim.of(wa.Ack)
    assert isinstance(sleep, wa.Sleep)
    assert sleep.until - sim.now <= worker_pacing.ACK_LINGER_SECONDS + 1e-12
    sim.now = sleep.until
    sim.cycle()
    assert sim.finished == ["t0"]  # sent by then, with the claim that was due


def test_the_last_ack_goes_at_once_when_nothing_else_runs() -> None:
    sim = Sim(config(max_concurrent_tasks=8), prefetch=None)
    sim.push(1)
    sim.sleep()
    sim.complete("t0")
    sim.cycle()
    assert sim.finished == ["t0"]


def test_idle_poll_grows_while_empty_and_resets_on_work() -> None:
    sim = Sim(config(poll_interval_seconds=1.0))
    waits = [sim.sleep() for _ in range(14)]
    # every empty claim doubles the wait, from twice the minimum up to the poll interval
    assert waits[0] == pytest.approx(worker_pacing.IDLE_POLL_MIN_SECONDS * 2)
    assert all(b == pytest.approx(min(1.0, 2 * a)) for a, b in itertools.pairwise(waits))
    assert waits[-1] == 1.0
    assert sim.loop.listening  # short claims: listening for the wake signal
    sim.push(1)
    assert sim.sleep() == pytest.approx(worker_pacing.IDLE_POLL_MIN_SECONDS)  # work: back to min


def test_a_full_claim_stops_listening_for_the_wake_signal() -> None:
    sim = Sim(config(max_concurrent_tasks=2))
    sim.sleep()
    assert sim.loop.listening
    sim.push(5)
    action = sim.cycle()
    assert isinstance(action, wa.Sleep)
    assert not action.listen  # no room: the signal is left to idle workers
    assert not sim.loop.health(sim.now, 0.0)["waiting_for_work"]


# ------------------------------------------------------------------ heartbeats and reaper


def test_heartbeats_are_due_at_the_interval() -> None:
    sim = Sim(
        config(max_concurrent_tasks=1, heartbeat_interval_seconds=3.0, task_timeout_seconds=99)
    )
    sim.push(1)
    while sim.now < 20:
        sim.sleep()
    beats = [t for t, a in sim.of(wa.Heartbeat)]
    # the first cycle holds nothing (no call); then one call per interval, never early
    assert beats
    assert all(b - a >= 3.0 for a, b in itertools.pairwise(beats))
    assert all(b - a < 3.0 + 1e-9 for a, b in itertools.pairwise(beats))
    assert len(beats) >= 6


def test_default_heartbeat_is_a_third_of_the_lease() -> None:
    assert WorkerLoop(config(), lease_seconds=30.0).heartbeat_interval == 10.0


def test_reaper_runs_at_its_interval_and_repeats_full_batches() -> None:
    sim = Sim(config(reaper_interval_seconds=7.0))
    sim.reaped.extend([100, 100, 3])
    sim.sleep()
    assert len(sim.of(wa.Reap)) == 3  # two full batches, then a short one
    while sim.now < 20:
        sim.sleep()
    times = sorted({t for t, _ in sim.of(wa.Reap)})
    assert times[:3] == [0.0, pytest.approx(7.0), pytest.approx(14.0)]


def test_a_lost_lease_drops_the_unstarted_task_and_the_running_outcome() -> None:
    sim = Sim(config(max_concurrent_tasks=1, heartbeat_interval_seconds=1.0), prefetch=1)
    sim.push(2)
    sim.sleep()
    assert set(sim.running) == {"t0"}
    sim.lost |= {"t0", "t1"}
    sim.now = 1.0
    sim.sleep()  # the heartbeat finds both lost
    health = sim.loop.health(sim.now, 0.0)
    assert health["lease_lost"] == 2
    assert health["buffered"] == 0
    assert health["in_flight"] == 1  # the running one until its handler returns
    sim.complete("t0")
    sim.sleep()
    assert sim.loop.health(sim.now, 0.0)["in_flight"] == 0
    assert sim.finished == []
    assert sim.released == []


# ------------------------------------------------------------------ timeouts


def test_a_timed_out_task_is_failed_and_its_place_given_back() -> None:
    sim = Sim(config(max_concurrent_tasks=1, task_timeout_seconds=2.0))
    sim.push(1)
    sim.sleep()
    assert sim.running
    while not sim.of(wa.Expire):
        sim.sleep()
    [(at, expire)] = sim.of(wa.Expire)
    assert at == pytest.approx(2.0)  # the sleep ended at the deadline, not at a poll
    assert [s.task.task_id for s in expire.slots] == ["t0"]
    assert sim.failed == ["t0"]
    health = sim.loop.health(sim.now, 0.0)
    assert health["timed_out"] == 1
    assert health["stuck_threads"] == 1
    assert health["executing"] == 0  # the place is free again
    sim.complete("t0")  # the late outcome is dropped
    sim.sleep()
    assert sim.finished == []
    assert sim.loop.health(sim.now, 0.0)["stuck_threads"] == 0


def test_stuck_limit_keeps_the_place_once_reached() -> None:
    sim = Sim(config(max_concurrent_tasks=1, task_timeout_seconds=2.0))
    sim.push(3)
    while len(sim.of(wa.Expire)) < 2:
        sim.sleep()
    health = sim.loop.health(sim.now, 0.0)
    assert health["stuck_threads"] == 1  # t0 is stuck, at the limit (1)
    assert health["executing"] == 1  # t1 timed out too but keeps its place
    before = len(sim.claimed)
    for _ in range(5):
        sim.sleep()
    assert len(sim.claimed) == before  # no room: nothing more is claimed
    sim.complete("t1")
    sim.sleep()
    assert len(sim.claimed) == before + 1


def test_timeout_error_is_what_the_queue_is_told() -> None:
    sim = Sim(config(max_concurrent_tasks=1, task_timeout_seconds=1.0))
    sim.push(1)
    while not sim.of(wa.Fail):
        sim.sleep()
    [(_, fail)] = sim.of(wa.Fail)
    assert isinstance(fail.error, TaskTimeoutError)


# ------------------------------------------------------------------ outages


def test_backoff_grows_with_each_error_and_resets_after_success() -> None:
    sim = Sim(config())
    sim.sleep()
    sim.errors.extend(RedisConnectionError("down") for _ in range(5))
    waits = [sim.sleep() for _ in range(5)]
    assert all(b > a * 1.2 for a, b in itertools.pairwise(waits)), waits
    assert all(w <= worker_pacing.BACKOFF_CAP_SECONDS for w in waits)
    health = sim.loop.health(sim.now, 100.0)
    assert health["backend_errors"] == 5
    assert health["backing_off"]
    assert "down" in health["last_error"]
    sim.sleep()  # the next call goes through
    assert not sim.loop.health(sim.now, 100.0)["backing_off"]
    assert sim.loop.backoff.failures == 0


def test_an_outage_keeps_the_acks_for_the_next_flush() -> None:
    sim = Sim(config(max_concurrent_tasks=2))
    sim.push(2)
    sim.sleep()
    sim.complete("t0")
    sim.complete("t1")
    sim.errors.extend([RedisConnectionError("down"), RedisConnectionError("down")])
    sim.sleep()
    assert sim.finished == []
    while sim.finished != ["t0", "t1"]:
        sim.sleep()
    assert sim.loop.health(sim.now, 0.0)["processed"] == 2


def test_poisoned_and_failed_are_counted() -> None:
    sim = Sim(config(max_concurrent_tasks=2))
    sim.push(2)
    sim.sleep()
    sim.complete("t0", ok=False, value=UnknownTaskError("nope"))
    sim.complete("t1", ok=False)
    sim.sleep()
    health = sim.loop.health(sim.now, 0.0)
    assert (health["failed"], health["poisoned"], health["dead"]) == (2, 1, 2)


# ------------------------------------------------------------------ shutdown


def test_stop_releases_unstarted_claims_and_claims_nothing_more() -> None:
    sim = Sim(config(max_concurrent_tasks=2), prefetch=3)
    sim.push(10)
    sim.sleep()
    sim.stop()
    assert sim.loop.state == "stopping"
    claims_before = len(sim.of(wa.Claim))
    sim.sleep()
    assert sorted(sim.released) == ["t2", "t3", "t4"]
    for task_id in list(sim.running):
        sim.complete(task_id)
    for _ in range(5):
        if sim.stopped:
            break
        sim.sleep()
    assert sim.stopped
    assert len(sim.of(wa.Claim)) == claims_before
    assert sorted(sim.finished) == ["t0", "t1"]


def test_graceful_deadline_is_respected() -> None:
    sim = Sim(config(max_concurrent_tasks=1, graceful_shutdown_timeout=5.0))
    sim.push(1)
    sim.sleep()
    sim.now = 1.0
    sim.stop()
    while not sim.stopped:
        assert sim.now <= 6.0 + 1e-9
        sim.sleep()
    assert sim.now == pytest.approx(6.0)  # not a moment before the deadline, nor after
    assert sim.finished == []
    assert sim.released == []


def test_a_task_that_ends_as_the_stop_begins_ends_the_stop_at_once() -> None:
    """The last running task completes just before the stop: its ack is sent and the loop
    stops in the same instant, not at the graceful deadline (it once slept until then)."""
    sim = Sim(config(max_concurrent_tasks=1, graceful_shutdown_timeout=5.0))
    sim.push(1)
    sim.sleep()
    sim.now = 1.0
    sim.complete("t0")
    sim.stop()
    while not sim.stopped:
        sim.sleep()
        assert sim.now < 5.0
    assert sim.now == pytest.approx(1.0)
    assert sim.finished == ["t0"]


def test_force_stop_skips_the_wait() -> None:
    sim = Sim(config(max_concurrent_tasks=1))
    sim.push(1)
    sim.sleep()
    stopped_at = sim.now
    sim.stop()
    assert isinstance(sim.cycle(), wa.Sleep)  # waiting for the running task
    sim.stop(force=True)
    sim.cycle()
    assert sim.stopped
    assert sim.now == stopped_at


def test_a_claim_answered_after_the_stop_is_released() -> None:
    loop = WorkerLoop(config(), lease_seconds=30.0)
    loop.start()
    while not isinstance(action := loop.next_action(0.0), wa.Claim):
        loop.done(0 if isinstance(action, wa.Reap) else [])
    loop.stop(0.0)
    loop.done([Task.create("u", task_id="late")])
    action = loop.next_action(0.0)
    assert isinstance(action, wa.Sleep)
    assert action.until == 0.0
    action = loop.next_action(0.0)
    assert isinstance(action, wa.Release)
    assert action.slot.task.task_id == "late"


def test_an_unstarted_worker_stops_at_once() -> None:
    loop = WorkerLoop(config(), lease_seconds=30.0)
    loop.stop(0.0)
    assert loop.state == "stopped"
    assert isinstance(loop.next_action(0.0), wa.Stopped)


# ------------------------------------------------------------------ turns in the buffer (ADR 37)


def test_a_light_tenant_starts_ahead_of_the_flood_in_the_buffer() -> None:
    # defaults on no-op tasks: the buffer fills with a flooding tenant's tasks; a light
    # tenant's task, claimed later, starts after at most one of them, not behind all of them
    sim = Sim(config(max_concurrent_tasks=10), prefetch=None, trip=0.001, run=1e-5)
    sim.push(3000, "f", tenant="flood")
    drain(sim, 10)
    assert sim.loop.prefetch == worker_pacing.PREFETCH_MAX
    sim.push(1, "light", tenant="light", first=True)  # the fair queue hands it out next
    depth_at_claim = None
    for _ in range(10):
        drain(sim, 1)
        if depth_at_claim is None and "light3000" in sim.claimed:
            depth_at_claim = sim.loop.health(sim.now, 0.0)["buffered"]
        if "light3000" in sim.started:
            break
    assert depth_at_claim is not None
    assert depth_at_claim > 50  # it was claimed into a deep buffer of the flood's tasks
    ahead = sim.started.index("light3000") - sim.started_before["light3000"]
    assert ahead <= 1  # one buffered task of each other tenant at most


def _slot(tenant: str, task_id: str) -> wa.Slot:
    return wa.Slot(task=Task.create(tenant, task_id=task_id), claimed_at=0.0)


def test_the_buffer_serves_tenants_in_turns_each_in_its_own_order() -> None:
    buffer = TurnBuffer()
    for tenant, n in (("a", 4), ("b", 2), ("c", 1)):
        for i in range(n):
            buffer.append(_slot(tenant, f"{tenant}{i}"))
    assert [s.task.task_id for s in buffer] == ["a0", "b0", "c0", "a1", "b1", "a2", "a3"]
    assert buffer.popleft().task.task_id == "a0"
    buffer.append(_slot("a", "a4"))  # after its last buffered task
    buffer.append(_slot("d", "d0"))  # nothing in hand: joins the turn being served
    order = [buffer.popleft().task.task_id for _ in range(len(buffer))]
    assert order == ["b0", "c0", "d0", "a1", "b1", "a2", "a3", "a4"]
    assert not buffer


@settings(max_examples=300, deadline=None)
@given(
    ops=st.lists(
        st.one_of(
            st.tuples(st.just("add"), st.integers(0, 3)),
            st.tuples(st.just("pop"), st.just(0)),
            st.tuples(st.just("lose"), st.integers(0, 50)),
        ),
        max_size=120,
    )
)
def test_turns_keep_each_tenants_order_and_bound_a_newcomers_wait(
    ops: list[tuple[str, int]],
) -> None:
    buffer = TurnBuffer()
    held: dict[str, wa.Slot] = {}  # what the buffer should hold
    added: dict[str, list[str]] = {}  # per tenant, in append order
    popped: list[str] = []
    # for a task appended while its tenant had nothing buffered: what was buffered then, and
    # how many tasks had been popped
    newcomer: dict[str, tuple[set[str], int]] = {}
    for n, (op, arg) in enumerate(ops):
        if op == "add":
            tenant = f"u{arg}"
            slot = _slot(tenant, f"{tenant}-{n}")
            if not any(s.task.tenant == tenant for s in held.values()):
                newcomer[slot.task.task_id] = (set(held), len(popped))
            buffer.append(slot)
            held[slot.task.task_id] = slot
            added.setdefault(tenant, []).append(slot.task.task_id)
        elif op == "pop" and held:
            slot = buffer.popleft()
            assert slot.task.task_id in held
            del held[slot.task.task_id]
            popped.append(slot.task.task_id)
        elif op == "lose" and held:
            victim = sorted(held)[arg % len(held)]
            held[victim].lost = True
            buffer.discard(lambda s: s.lost)
            del held[victim]
        assert len(buffer) == len(held)
        assert {s.task.task_id for s in buffer} == set(held)
    rest = list(buffer)
    popped += [buffer.popleft().task.task_id for _ in range(len(buffer))]
    assert popped[len(popped) - len(rest) :] == [s.task.task_id for s in rest]  # iter order
    for ids in added.values():
        kept = [i for i in ids if i in popped]
        assert kept == [i for i in popped if i in set(ids)]  # each tenant's own order
    for task_id, (there, before) in newcomer.items():
        if task_id not in popped:
            continue  # lost
        ahead = popped[before : popped.index(task_id)]
        assert set(ahead) <= there  # nothing that came later
        tenants = [i.split("-")[0] for i in ahead]
        assert len(tenants) == len(set(tenants))  # at most one of each other tenant


# ------------------------------------------------------------------ random event sequences

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("cycle"), st.integers(0, 3)),
        st.tuples(st.just("complete"), st.integers(0, 3)),
        st.tuples(st.just("fail"), st.integers(0, 3)),
        st.tuples(st.just("advance"), st.sampled_from([0.001, 0.5, 3.0, 12.0])),
        st.tuples(st.just("outage"), st.integers(1, 3)),
        st.tuples(st.just("lose"), st.integers(0, 3)),
        st.tuples(st.just("push"), st.integers(1, 6)),
        st.tuples(st.just("stop"), st.booleans()),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(
    ops=OPS,
    cap=st.integers(1, 4),
    prefetch=st.one_of(st.none(), st.integers(0, 3)),
    run=st.sampled_from([1e-5, 0.01, 2.0]),
)
def test_random_event_sequences_keep_the_invariants(
    ops: list[tuple[str, Any]], cap: int, prefetch: int | None, run: float
) -> None:
    sim = Sim(
        config(max_concurrent_tasks=cap, task_timeout_seconds=10.0, heartbeat_interval_seconds=2.0),
        prefetch=prefetch,
        trip=0.0005,
        run=run,
    )
    for op, arg in ops:
        if op == "cycle":
            sim.sleep()
        elif op in ("complete", "fail") and sim.running:
            task_id = sorted(sim.running)[arg % len(sim.running)]
            sim.complete(task_id, ok=op == "complete")
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
        assert 0 <= health["executing"] <= cap
        assert health["stuck_threads"] <= cap
    # wind down: the server is back, every handler returns, the loop runs until it stops
    sim.errors.clear()
    sim.stop()
    for _ in range(200):
        for task_id in sorted(sim.running):
            sim.complete(task_id)
        if sim.stopped:
            break
        sim.sleep()
        sim.now += 0.5
    assert sim.stopped
    assert sim.loop.state == "stopped"
    assert sim.stop_at is not None
    assert [t for t, _ in sim.of(wa.Claim) if t > sim.stop_at] == []  # none after the stop
    # every claimed task was acknowledged (finished or failed) or released, exactly once, or
    # its lease was lost, or the worker stopped still holding it: a forced or overdue stop left
    # it running, or the last flush met an outage (the reaper redelivers it); a released task
    # never ran
    cut_short = sim.forced or sim.now >= sim.stop_at + 5.0
    gave_up = sim.loop.stats.backend_errors > 0
    run_ids = {s.task.task_id for _, a in sim.of(wa.Run) for s in a.slots}
    held = set(sim.loop.held)
    for task_id in sim.claimed:
        ends = sum([task_id in sim.finished, task_id in sim.failed, task_id in sim.released])
        assert ends <= 1, task_id
        assert ends == 1 or task_id in sim.lost or task_id in held, task_id
        assert not (task_id in sim.released and task_id in run_ids), task_id
    if held:
        assert cut_short or gave_up
    assert held <= set(sim.claimed)
