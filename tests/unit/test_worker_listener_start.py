"""The listener starts the tasks its claim brought while the driver sleeps, and the listener's
claim waits at least ``listen_floor`` (ADR 46), on the fake driver of test_worker_loop.py."""

from __future__ import annotations

from typing import Any

import pytest

from fairque_core import RedisConnectionError
from fairque_core.app.worker import actions as wa
from fairque_core.app.worker import pacing as worker_pacing

from .test_worker_handoff import Handed
from .test_worker_loop import config


class Starting(Handed):
    """``Handed`` whose listener answers and then starts what it brought (``start_handed``):
    the hand-off accelerator's part (ADR 46), plugged in."""

    def __init__(self, cfg: Any = None, **kwargs: Any) -> None:
        super().__init__(cfg, hand_off=True, **kwargs)
        assert self.hand_off is not None
        self.steps = self.hand_off

    def bring(self, result: object) -> list[wa.Slot]:
        """The listener's claim came back with ``result`` (an int: that many tasks of the
        fake queue) while the driver sleeps: answered and started on the listener's side."""
        self.answer(result)
        slots = self.steps.start_handed(self.now)
        for slot in slots:
            self.running[slot.task.task_id] = slot
            self.started.append(slot.task.task_id)
        return slots


def test_the_listener_starts_its_tasks_and_the_next_cycle_counts_them_as_its_claim() -> None:
    sim = Starting(config(max_concurrent_tasks=4))
    sleep = sim.cycle()
    assert isinstance(sleep, wa.Sleep)
    assert sleep.claim == 4
    sim.push(2)
    slots = sim.bring(4)
    assert [s.task.task_id for s in slots] == ["t0", "t1"]
    assert all(s.started_at == sim.now for s in slots)
    health = sim.loop.health(sim.now, 0.0)
    assert health["in_flight"] == 2  # booked once: held, no longer unbooked answers
    assert health["executing"] == 2
    assert sim.loop.stats.claimed == 2
    sleep = sim.cycle()  # the driver wakes: nothing to start, no claim of its own
    assert isinstance(sleep, wa.Sleep)
    assert sim.claims() == 1
    assert sim.of(wa.Run) == []  # the loop itself started nothing: the listener did
    assert sleep.claim == 2  # the short answer hands out a claim for the two free places
    sim.complete("t0")
    sim.complete("t1")
    sim.cycle()
    assert sim.finished == ["t0", "t1"]
    assert sim.loop.health(sim.now, 0.0)["in_flight"] == 0


def test_the_next_claim_is_handed_out_before_the_acknowledgement_goes() -> None:
    sim = Starting(config(max_concurrent_tasks=4))
    sim.cycle()
    sim.push(1)
    sim.bring(4)
    sim.complete("t0")  # the task ended before the driver woke
    mark = len(sim.actions)
    sleep = sim.cycle()
    assert isinstance(sleep, wa.Sleep)
    assert sleep.claim == 4  # the listener waits again at once ...
    assert not [a for _, a in sim.actions[mark:] if isinstance(a, wa.Ack)]  # ... no ack first
    assert sleep.until - sim.now == pytest.approx(worker_pacing.ACK_LINGER_SECONDS)
    sim.now = sleep.until
    sleep = sim.cycle()  # the ack goes alone, the listener's claim still out
    assert sim.finished == ["t0"]
    assert isinstance(sleep, wa.Sleep)
    assert sleep.claim == 0
    assert sim.claims() == 1


def test_the_listener_starts_no_more_than_the_free_places() -> None:
    sim = Starting(config(max_concurrent_tasks=2))
    sim.cycle()
    sim.push(3)
    slots = sim.bring(3)  # a claim for more than the places (prefetch): two start
    assert [s.task.task_id for s in slots] == ["t0", "t1"]
    assert sim.loop.health(sim.now, 0.0)["buffered"] == 1
    sim.complete("t0")
    sim.cycle()  # a place is free: the loop starts the buffered one
    assert sim.started == ["t0", "t1", "t2"]
    assert sim.claims() == 1


def test_nothing_starts_while_the_driver_is_not_asleep() -> None:
    sim = Starting(config(max_concurrent_tasks=4, reaper_interval_seconds=0.5))
    sim.cycle()
    sim.push(1)
    sim.now += 0.6
    action = sim.loop.next_action(sim.now)  # the driver woke for the reaper: mid-cycle
    assert isinstance(action, wa.Reap)
    sim.answer(4)
    assert sim.steps.start_handed(sim.now) == []
    assert sim.loop.health(sim.now, 0.0)["in_flight"] == 1  # counted, to be booked by a cycle
    sim.loop.done(sim._call(action))
    sim.cycle()  # that cycle goes on to its sleep
    sim.cycle()  # the next one books and starts it
    assert sim.started == ["t0"]
    assert sim.claims() == 1


@pytest.mark.parametrize("answer", [None, RedisConnectionError("down"), []])
def test_an_error_an_unmade_or_an_empty_claim_is_left_to_the_cycle(answer: Any) -> None:
    sim = Starting()
    sim.cycle()
    assert sim.bring(answer) == []
    assert sim.loop.health(sim.now, 0.0)["backend_errors"] == 0  # not booked yet
    sim.cycle()
    errors = sim.loop.health(sim.now, 0.0)["backend_errors"]
    assert errors == (1 if isinstance(answer, Exception) else 0)
    # an unmade claim makes the loop claim itself, as before
    assert sim.claims() == (2 if answer is None else 1)


def test_a_stopping_loop_starts_nothing_and_releases_what_came() -> None:
    sim = Starting()
    sim.cycle()
    sim.push(1)
    sim.stop()
    assert sim.bring(4) == []
    for _ in range(5):
        if sim.cycle() == wa.STOPPED or sim.stopped:
            break
    assert sim.started == []
    assert sim.released == ["t0"]


def _floored(floor: float, poll: float) -> Handed:
    return Handed(config(poll_interval_seconds=poll), listen_floor=floor)


def test_the_listeners_claim_waits_at_least_the_floor_then_backs_off_as_before() -> None:
    sim = _floored(0.008, 1.0)
    sim.cycle()
    sim.push(1)
    sim.answer(4)
    sleep = sim.cycle()  # work found: the idle poll would wait 0.5 ms, the floor says 8 ms
    assert isinstance(sleep, wa.Sleep)
    assert sleep.claim_by - sim.now == pytest.approx(0.008)
    waits = []
    for _ in range(12):
        sim.answer([])
        sleep = sim.cycle()
        assert isinstance(sleep, wa.Sleep)
        waits.append(sleep.claim_by - sim.now)
    assert min(waits) == pytest.approx(0.008)
    assert waits == sorted(waits)
    assert waits[-1] == pytest.approx(1.0)  # the idle poll's cap, as before


def test_the_floor_is_capped_at_the_poll_interval() -> None:
    sim = _floored(0.008, 0.002)
    sim.cycle()
    sim.push(1)
    sim.answer(4)
    sleep = sim.cycle()
    assert isinstance(sleep, wa.Sleep)
    assert sleep.claim_by - sim.now == pytest.approx(0.002)


def test_the_default_floor_stays_under_the_backends_due_check() -> None:
    from fairque_redis.backends.wake_claim import DUE_CHECK_SECONDS

    # a wait this short is one round trip on the Redis backend (no next_due call first)
    assert 0 < worker_pacing.LISTEN_MIN_WAIT_SECONDS < DUE_CHECK_SECONDS


def test_the_listener_takes_the_next_claim_without_waiting_for_a_cycle() -> None:
    sim = Starting(config(max_concurrent_tasks=4))
    sim.cycle()
    sim.push(1)
    sim.bring(4)
    handing = sim.steps.hand_next(sim.now)
    assert isinstance(handing, wa.Sleep)
    assert handing.claim == 3  # the places still free
    assert handing.claim_by > sim.now
    health = sim.loop.health(sim.now, 0.0)
    assert health["claims_sent"] == 3  # its own first claim, the first hand-out, this one
    assert health["claims_settled"] == 2  # the one just handed is out
    assert sim.steps.hand_next(sim.now) is None  # one out at a time
    sleep = sim.cycle()  # the driver wakes: it hands out none, the listener has it
    assert isinstance(sleep, wa.Sleep)
    assert sleep.claim == 0
    sim.push(1)
    sim.answer(3)  # the listener's claim with that hand-out comes back
    sim.cycle()
    assert sim.started == ["t0", "t1"]
    assert sim.claims() == 1


def test_no_next_claim_while_the_driver_is_awake_or_the_loop_stops() -> None:
    sim = Starting(config(max_concurrent_tasks=4))
    sim.cycle()
    sim.push(1)
    sim.stop()
    assert sim.bring(4) == []
    assert sim.steps.hand_next(sim.now) is None
