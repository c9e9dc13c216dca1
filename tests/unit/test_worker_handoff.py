"""The worker loop hands its idle claim to the driver's listener (ADR 38), on the fake driver of
test_worker_loop.py: the listener's claim is answered by hand (``Handed.answer``)."""

from __future__ import annotations

from typing import Any

import pytest

from fairque_core import RedisConnectionError
from fairque_core.app.worker import actions as wa
from fairque_core.app.worker import pacing as worker_pacing

from .test_worker_loop import Sim, config, hand_off_on_and_off

__all__ = ["Handed", "hand_off_on_and_off"]  # the fixture: every test here runs with and without


class Handed(Sim):
    """``Sim`` with a loop that hands its claims to a listener; the test plays the listener."""

    def __init__(self, cfg: Any = None, **kwargs: Any) -> None:
        super().__init__(cfg or config(), listener_claims=True, **kwargs)

    def answer(self, result: object) -> None:
        """The listener's claim came back with ``result``; tasks leave the fake queue."""
        if isinstance(result, int):
            n = min(result, len(self.ready))
            result = [self.ready.popleft() for _ in range(n)]
            self.claimed.extend(t.task_id for t in result)
        self.loop.listener_claimed(result)

    def claims(self) -> int:
        return len(self.of(wa.Claim))


def _last_sleep(sim: Sim) -> wa.Sleep:
    action = sim.actions[-1][1]
    assert isinstance(action, wa.Sleep)
    return action


def test_an_idle_loop_hands_its_next_claim_to_the_listener() -> None:
    sim = Handed(config(max_concurrent_tasks=4))
    sleep = sim.cycle()  # its own first claim finds nothing: from now on the listener claims
    assert isinstance(sleep, wa.Sleep)
    assert sim.claims() == 1
    assert sleep.listen
    assert sleep.claim == 4
    assert sleep.claim_by == pytest.approx(sim.now + sim.loop.idle_poll.wait)
    # while the claim is out the loop sleeps past the idle poll: the listener stands for it
    assert sleep.until - sim.now > sim.loop.idle_poll.wait
    sim.push(2)
    sim.answer(4)
    sim.cycle()
    assert sim.claims() == 1  # no claim of its own: the listener's tasks started at once
    assert sim.started == ["t0", "t1"]
    assert sim.loop.stats.claimed == 2


def test_no_claim_and_no_second_hand_out_while_one_is_out() -> None:
    sim = Handed(config(reaper_interval_seconds=0.5, poll_interval_seconds=1.0))
    sim.cycle()
    for _ in range(5):  # timers (the reaper) wake the loop; the listener's claim is still out
        sim.now += 0.6
        sleep = sim.cycle()
        assert isinstance(sleep, wa.Sleep)
        assert sleep.claim == 0
        assert sleep.listen
    assert sim.claims() == 1
    assert len(sim.of(wa.Reap)) >= 3


def test_an_empty_answer_hands_the_next_claim_with_a_longer_wait() -> None:
    sim = Handed(config(poll_interval_seconds=1.0))
    first = sim.cycle()
    assert isinstance(first, wa.Sleep)
    waits = []
    for _ in range(12):
        sim.answer([])
        sleep = sim.cycle()
        assert isinstance(sleep, wa.Sleep)
        assert sleep.claim > 0
        waits.append(sleep.claim_by - sim.now)
    assert sim.claims() == 1  # every later claim was the listener's
    assert waits == sorted(waits)
    assert waits[-1] == pytest.approx(1.0)  # the idle poll's cap


def test_an_answer_without_a_claim_makes_the_loop_claim_itself() -> None:
    sim = Handed()
    sim.cycle()
    sim.push(1)
    sim.answer(None)  # the listener gave the claim back unmade
    sim.cycle()
    assert sim.claims() == 2
    assert sim.started == ["t0"]


def test_a_listener_error_is_booked_as_the_claims_and_backs_off() -> None:
    sim = Handed()
    sim.cycle()
    sim.push(1)
    sim.answer(RedisConnectionError("down"))
    sleep = sim.cycle()
    assert isinstance(sleep, wa.Sleep)
    assert sim.loop.health(sim.now, 0.0)["backend_errors"] == 1
    assert sleep.claim == 0  # no claim handed out while backing off
    assert sim.claims() == 1
    sim.now = sleep.until  # the backoff is over: the loop claims itself
    sim.cycle()
    assert sim.claims() == 2
    assert sim.started == ["t0"]


def test_a_full_answer_is_followed_by_a_claim_of_the_loops_own() -> None:
    sim = Handed(config(max_concurrent_tasks=2), prefetch=2)
    sleep = sim.cycle()
    assert isinstance(sleep, wa.Sleep)
    assert sleep.claim == 4
    sim.push(10)
    sim.answer(4)  # as many as asked: the queue may hold more
    sleep = sim.cycle()
    assert isinstance(sleep, wa.Sleep)
    assert sleep.claim == 0
    assert not sleep.listen
    assert sim.started == ["t0", "t1"]
    assert sim.loop.health(sim.now, 0.0)["buffered"] == 2


def test_tasks_a_listener_brings_after_the_stop_are_released() -> None:
    sim = Handed()
    sim.cycle()
    sim.stop()
    sim.push(2)
    sim.answer(4)
    for _ in range(3):
        sim.cycle()
    assert sim.released == ["t0", "t1"]
    assert sim.started == []
    assert sim.stopped


def test_a_stop_does_not_wait_for_the_listeners_claim() -> None:
    sim = Handed()
    sim.cycle()
    sim.stop()
    sim.cycle()
    assert sim.stopped


def test_a_listener_that_never_answers_is_given_up_after_the_grace() -> None:
    cfg = config(poll_interval_seconds=1.0, reaper_interval_seconds=100.0)
    sim = Handed(cfg)
    sim.cycle()
    sim.push(1)
    sim.now += sim.loop.listener.grace + 0.1
    sim.cycle()
    assert sim.claims() == 2
    assert sim.started == ["t0"]


def test_without_a_listener_that_claims_nothing_is_handed_out() -> None:
    sim = Sim(config())
    for _ in range(5):
        sleep = sim.cycle()
        assert isinstance(sleep, wa.Sleep)
        assert sleep.claim == 0
        sim.now = sleep.until
    assert len(sim.of(wa.Claim)) == 5


def test_a_short_answer_hands_the_free_places_at_the_idle_poll_floor() -> None:
    sim = Handed()
    sim.cycle()
    sim.push(1)
    sim.answer(4)
    sleep = sim.cycle()  # one task for four places: it runs, the listener claims for three
    assert isinstance(sleep, wa.Sleep)
    assert sim.started == ["t0"]
    assert sleep.claim == 3
    assert sleep.claim_by - sim.now == pytest.approx(worker_pacing.IDLE_POLL_MIN_SECONDS)
    sim.complete("t0")
    sleep = sim.cycle()  # the ack goes alone; that claim is still out
    assert isinstance(sleep, wa.Sleep)
    assert sim.finished == ["t0"]
    assert sleep.claim == 0
    assert sim.claims() == 1


# ---- health(): tasks the listener brought, claims sent and settled ---------------------------


def _health(sim: Sim) -> dict[str, Any]:
    return sim.loop.health(sim.now, 0.0)


def test_tasks_the_listener_brought_are_in_flight_before_the_loop_books_them() -> None:
    sim = Handed(config(max_concurrent_tasks=4))
    sim.cycle()  # claim 1, its own, finds nothing; claim 2 goes to the listener
    health = _health(sim)
    assert (health["in_flight"], health["claims_sent"], health["claims_settled"]) == (0, 2, 1)
    sim.push(3)
    sim.answer(4)  # the listener has them; the loop's next cycle has not run yet
    health = _health(sim)
    assert health["in_flight"] == 3
    assert (health["executing"], health["buffered"], health["claimed"]) == (0, 0, 0)
    assert health["claims_settled"] == health["claims_sent"] == 2
    sim.cycle()  # booked and started: counted once, not twice
    health = _health(sim)
    assert (health["in_flight"], health["executing"], health["claimed"]) == (3, 3, 3)
    for task_id in ("t0", "t1", "t2"):
        sim.complete(task_id)
    sim.now += 1.0
    sim.cycle()
    assert _health(sim)["in_flight"] == 0
    assert sim.finished == ["t0", "t1", "t2"]


def test_the_loops_own_claim_is_unsettled_until_its_reply_is_booked() -> None:
    sim = Handed(config(max_concurrent_tasks=4))
    sim.push(2)
    action = sim.loop.next_action(sim.now)
    while not isinstance(action, wa.Claim):  # the first cycle's reaper call comes first
        sim.loop.done(sim._call(action))
        action = sim.loop.next_action(sim.now)
    # the server may have run it already: its tasks are in no count, the claim is not settled
    health = _health(sim)
    assert (health["in_flight"], health["claims_sent"], health["claims_settled"]) == (0, 1, 0)
    sim.loop.done([sim.ready.popleft(), sim.ready.popleft()])
    sim.loop.next_action(sim.now)  # the reply is booked (the tasks start)
    health = _health(sim)
    assert (health["in_flight"], health["claims_settled"]) == (2, 1)


def test_a_failed_claim_is_settled_too() -> None:
    sim = Sim(config())  # no listener: every claim is the loop's own
    sleep = sim.cycle()
    assert isinstance(sleep, wa.Sleep)
    sim.now = sleep.until  # the idle poll's next claim; no reaper or heartbeat due
    sim.errors.append(RedisConnectionError("down"))
    sim.cycle()
    assert len(sim.of(wa.Claim)) == 2  # the second one failed
    health = _health(sim)
    assert health["backend_errors"] == 1
    assert health["claims_settled"] == health["claims_sent"] == 2


def test_a_listener_claim_given_up_after_the_grace_counts_as_settled() -> None:
    sim = Handed(config(poll_interval_seconds=1.0, reaper_interval_seconds=100.0))
    sim.cycle()
    assert _health(sim)["claims_settled"] == 1  # claim 2 is out
    sim.now += sim.loop.listener.grace + 0.1
    assert _health(sim)["claims_settled"] == 2
    sim.push(1)
    sim.answer(4)  # a late answer is still booked
    assert _health(sim)["in_flight"] == 1


def test_a_stopped_loop_waits_for_no_claim() -> None:
    sim = Handed()
    sim.cycle()
    sim.stop()
    sim.cycle()
    assert sim.stopped
    health = _health(sim)
    assert health["claims_settled"] == health["claims_sent"] == 2
