"""The worker loop as a state machine with no I/O: events in, actions out (ADR 20).

:class:`WorkerLoop` makes every decision of a worker's control loop: what to claim and when,
when to acknowledge, heartbeat and reap, how long to sleep, when a task has timed out, how to
back off after a backend error and how to shut down. It never calls the queue, never starts a
thread and never reads a clock: the driver (:class:`~fairque_core.app.worker.worker.Worker` on
threads, :class:`~fairque_core.app.worker.worker_async.AsyncWorker` on asyncio) asks it for the next
action with the current time, carries the action out and reports the outcome::

    action = loop.next_action(now)     # Claim, Ack, Fail, Release, Heartbeat, Reap,
    ...carry it out...                 # Run, Expire, Sleep or Stopped
    loop.done(result) / loop.failed(error)   # for the actions that call the queue

Events that are not answers to an action: :meth:`WorkerLoop.task_done` (a handler returned,
from any point of the loop; booked at the next cycle), :meth:`WorkerLoop.listener_claimed` (the
listener's claim came back, ADR 38) and :meth:`WorkerLoop.stop`.

One pass of the loop (a *cycle*, :meth:`WorkerLoop._cycle`) is written below as a generator that
yields the actions in the order ADR 14 lists: collect completions, expire overdue tasks, start
what the buffer holds, then the queue calls (releases, the ack batch, failures, heartbeats, the
reaper, the claim), the dispatch, and a sleep. Prefetch depth, claim size and the ack batch
adapt to how fast tasks finish (ADR 30); the buffer of claimed, unstarted tasks starts them in
turns across tenants (ADR 37). The steps about the leases it holds (acknowledgements, failures,
releases, heartbeats, the reaper) and the booking of a failed queue call are its base class
:class:`~fairque_core.app.worker.leases.LeaseSteps`; those about its places (handlers' ends
booked, timeouts, starts) are :class:`~fairque_core.app.worker.places.PlaceSteps`.

That cycle is the reference path: every task starts from it. An accelerator joins it only
through :class:`CycleHooks` (ADR 65), whose defaults add nothing; the hand-off
(``fairque_core.app.worker.handoff``, ADR 46 and 51, plugged in by the worker drivers) starts
tasks from handlers' threads and from the listener between cycles.
"""

from __future__ import annotations

import contextlib
import logging
import math
import random
from collections.abc import Generator, Iterator
from typing import Any

import attrs

from fairque_core.app.worker import actions as act
from fairque_core.app.worker.actions import Action, Slot, Stats, safe_callback
from fairque_core.app.worker.buffer import TurnBuffer
from fairque_core.app.worker.leases import LeaseSteps, Outage, Steps, refused
from fairque_core.app.worker.pacing import (
    ACK_LINGER_SECONDS,
    CLAIM_LINGER_SECONDS,
    Backoff,
    IdlePoll,
    PrefetchGauge,
    check_worker_config,
    heartbeat_interval,
)
from fairque_core.app.worker.places import PlaceSteps
from fairque_core.domain.models import Task
from fairque_core.settings.config import WorkerConfig

__all__ = ["Stats", "WorkerLoop", "check_worker_config", "safe_callback"]

logger = logging.getLogger("fairque.worker")


# ---------------------------------------------------------------------------- the machine
class CycleHooks:
    """Where an accelerator joins the cycle (ADR 65). These defaults are the reference cycle's:
    they add nothing. The hand-off (``app/worker/handoff.py``) is the one that overrides them."""

    def acted(self, action: Action) -> None:
        """The loop is returning ``action`` to its driver."""

    def claimed_between_cycles(self) -> bool | None:
        """Tasks booked between two cycles that stand for this cycle's claim: whether that
        claim came back short; None when there are none (taken: the next call gives None)."""
        return None

    def holds_acks(self, now: float) -> bool:
        """Whether the acknowledgements wait beyond ADR 30's rule (within the ack linger)."""
        return False


class WorkerLoop(PlaceSteps, LeaseSteps):
    """The decisions of one worker, fed by its driver (see the module docstring).

    ``prefetch`` claims that many tasks beyond the free places, to hide claim latency; None (the
    default) adapts it to the measured run time and claim round trip (ADR 30). A task
    that times out gives its place back at once while fewer than ``stuck_limit`` (by default
    ``max_concurrent_tasks``) timed-out handlers are still running; past that its place is freed
    only when its handler returns. ``rng`` makes the backoff jitter reproducible.
    ``listener_claims``: the loop hands its claims to the listener while it listens (ADR 38);
    ``listen_floor``: such a claim waits at least this long (at most the poll interval), for a
    listener whose wait blocks on the queue's wake signal (ADR 46; 0: the idle poll's wait).
    """

    def __init__(
        self,
        config: WorkerConfig,
        *,
        lease_seconds: float,
        prefetch: int | None = None,
        stuck_limit: int | None = None,
        rng: random.Random | None = None,
        listener_claims: bool = False,
        listen_floor: float = 0.0,
    ) -> None:
        check_worker_config(config)
        if prefetch is not None and prefetch < 0:
            raise ValueError("prefetch must be >= 0")
        self.config = config
        self.cap = config.max_concurrent_tasks
        self.adaptive = prefetch is None
        self.prefetch = prefetch or 0
        self.gauge = PrefetchGauge(self.cap, lease_seconds)
        self.stuck_limit = self.cap if stuck_limit is None else stuck_limit
        self.heartbeat_interval = heartbeat_interval(config, lease_seconds)
        self.timeout = float(config.task_timeout_seconds)
        self.stats = Stats()
        self.backoff = Backoff(rng=rng)
        self.idle_poll = IdlePoll(config.poll_interval_seconds)
        self.listen_floor = min(float(config.poll_interval_seconds), listen_floor)
        self.listener = act.ListenerClaims(listener_claims, 2 * config.poll_interval_seconds + 10.0)
        self.claims_sent = 0  # claims sent or handed to the listener, numbered 1, 2, ...
        self._claim_out = 0  # the number of the loop's own claim waiting for its reply; 0: none
        self.state = "new"  # running, stopping, stopped
        self.listening = False  # the last claim came back short and there is room
        self.shutdown_at: float | None = None
        self.held: dict[str, Slot] = {}  # every lease this worker holds
        self.buffer = TurnBuffer()  # claimed, not started; served in turns across tenants
        self.running: dict[int, Slot] = {}  # started, handler not returned; by id(slot)
        self.executing = 0  # places taken by running handlers
        self.stuck = 0  # timed-out handlers still running whose place was given back
        self.heartbeat_due = 0.0
        self.reap_due = 0.0
        self._room_since: float | None = None
        self._acks_since = 0.0  # when the oldest waiting acknowledgement was booked
        self._inbox: list[tuple[Slot, bool, Any, float]] = []
        self._acks: list[tuple[Slot, object]] = []
        self._fails: list[tuple[Slot, BaseException]] = []
        self._releases: list[Slot] = []
        self._now = 0.0
        self._steps: Steps | None = None
        self.hooks = CycleHooks()  # the reference cycle's: none (see CycleHooks)
        self._reply: Any = None
        self._error: BaseException | None = None

    # ------------------------------------------------------------------ events in
    def start(self) -> None:
        if self.state == "new":
            self.state = "running"

    def task_done(self, slot: Slot, ok: bool, value: Any, run_seconds: float) -> None:
        """A handler returned: ``value`` is its result (``ok``) or the exception it raised."""
        self._inbox.append((slot, ok, value, run_seconds))

    def listener_claimed(self, result: object) -> None:
        """The listener's claim came back: its tasks, its exception, or None (not made)."""
        self.listener.answer(result)

    def _claim_by(self, now: float) -> float:
        """When a claim handed to the listener now stops waiting."""
        return now + max(self.idle_poll.wait, self.listen_floor)

    def stop(self, now: float, *, force: bool = False) -> None:
        """Begin the graceful stop: claiming stops, unstarted claims are released, running tasks
        get ``graceful_shutdown_timeout``; ``force`` ends that wait now."""
        if self.state == "new":
            self.state = "stopped"
        if self.state in ("stopped", "stopping") and not force:
            return
        if self.state == "running":
            self.state = "stopping"
            self.listening = False
            self.shutdown_at = now + self.config.graceful_shutdown_timeout
            self._releases.extend(self.buffer)
            self.buffer.clear()
        if force and self.shutdown_at is not None:
            self.shutdown_at = min(self.shutdown_at, now)

    def crashed(self, error: BaseException | None, now: float) -> None:
        """The driver's loop ended outside the machine: a bug (``error``, booked) or a
        cancellation (None). The loop is over."""
        if error is not None:
            self._note_error(error, now)
        self.state = "stopped"
        self.listening = False
        self._steps = None

    def done(self, result: Any) -> None:
        """The last action's queue call returned ``result``."""
        self._reply = result

    def failed(self, error: BaseException) -> None:
        """The last action's queue call raised ``error``."""
        self._error = error

    # ------------------------------------------------------------------ actions out
    def next_action(self, now: float) -> Action:
        """The next thing to do, ``now`` being the driver's monotonic clock."""
        action = self._next(now)
        self.hooks.acted(action)
        return action

    def _next(self, now: float) -> Action:
        self._now = now
        while True:
            if self._steps is None:
                if self.state in ("new", "stopped"):
                    return act.STOPPED
                self._steps = self._cycle(now)
                self._reply = self._error = None
            reply, error = self._reply, self._error
            self._reply = self._error = None
            try:
                if error is not None:
                    return self._steps.throw(error)
                return self._steps.send(reply)
            except StopIteration:
                self._steps = None

    # ------------------------------------------------------------------ queries
    @property
    def drained(self) -> bool:
        return not (self.executing or self._acks or self._fails or self._releases)

    def health(self, now: float, wall: float) -> dict[str, Any]:
        """What ``health()`` reports; ``now``/``wall``: the monotonic and the wall clock.

        ``in_flight``: the tasks this worker holds a lease on, booked or not: those its
        listener's claims brought count from the answer on, before the loop's next cycle books
        them. ``claims_sent``: the claims it has sent (its own and those handed to its listener,
        numbered from 1); ``claims_settled``: the highest number up to which every claim has
        been answered. A task a claim took on the server while its reply was still on its way
        is in no count yet, but that claim is not settled: once ``claims_settled`` has reached
        the ``claims_sent`` seen after some moment, every task those claims took is in
        ``in_flight`` or was finished (what ``fairque worker --burst`` stops on)."""
        out = attrs.asdict(self.stats)
        for key in ("last_error_at", "last_claim_at"):
            if out[key] is not None:
                out[key] = wall - (now - out[key])
        out.update(
            state=self.state,
            in_flight=len(self.held) + self.listener.unbooked_count(),
            executing=self.executing,
            buffered=len(self.buffer),
            stuck_threads=self.stuck,
            backing_off=self.backoff.failures > 0,
            prefetch=self.prefetch,
            waiting_for_work=self.listening and self.state == "running",
            claims_sent=self.claims_sent,
            claims_settled=self._claims_settled(now),
        )
        return out

    def _claims_settled(self, now: float) -> int:
        # a claim still out once the loop has stopped is the driver's to release: not waited for
        out = [n for n in (self._claim_out, self.listener.unanswered(now)) if n]
        if not out or self.state == "stopped":
            return self.claims_sent
        return min(out) - 1

    # ------------------------------------------------------------------ one cycle
    def _cycle(self, now: float) -> Steps:
        """One pass, in the order ADR 14 lists (each step's own docstring says how)."""
        handed = self._claims_in_hand()
        if self.state == "stopping":
            assert self.shutdown_at is not None
            if self.drained or now >= self.shutdown_at:
                yield from self._final_flush()
                self.state = "stopped"
                self.listening = False
                return
        # 1. collect finished handlers; 2. expire tasks past their timeout
        self._collect()
        expired = self._expire(now)
        if expired:
            yield act.Expire(expired)
        # start what is in hand first: those tasks run while the queue calls below are out
        if self.buffer and self.executing < self.cap:
            yield act.Run(self._dispatch(now))
        # 3. flush (releases, acks, failures); 4. heartbeats; 5. the reaper; 6. the claim
        idle, acks_held = yield from self._queue_calls(now, handed)
        # 7. dispatch claimed tasks to free places
        if self.buffer and self.executing < self.cap:
            yield act.Run(self._dispatch(self._now))
        # then sleep, handing the next claim to the listener while it listens (ADR 38)
        now = self._now
        handing = self._hand_out(now)
        until = now + self._next_wait(now, idle=idle, acks_held=acks_held)
        yield act.Sleep(until, self.listening, handing, self._claim_by(now))

    def _claims_in_hand(self) -> bool | None:
        """The claims made for this cycle outside it: the listener's answers (ADR 38), or the
        tasks an accelerator booked between cycles (``CycleHooks``). Whether the last came
        back short; None when none brought tasks (the cycle claims itself)."""
        handed = self._take_handed()
        early = self.hooks.claimed_between_cycles()
        return early if handed is None else handed

    def _queue_calls(
        self, now: float, handed: bool | None
    ) -> Generator[Action, Any, tuple[bool, bool]]:
        """Steps 3 to 6 of the cycle, unless it backs off: the flush, the heartbeats and the
        reaper when due, and the claim for the free places, unless the listener's claims stand
        for it. A claim carries the ack batch when nothing else is due (ADR 40). An outage ends
        them (booked, backs off). Returns (whether the queue came back short, whether the
        acknowledgements were held for a later claim)."""
        idle = True if handed is None else handed
        acks_held = False
        if self.backoff.waiting(now) > 0:
            return idle, acks_held
        try:
            delegated = handed is not None or self.listener.out(now)
            claim = self.state == "running" and not delegated and self._worth_claiming(now)
            if claim and self._acks and now < self.heartbeat_due and now < self.reap_due:
                idle = yield from self._flush_and_claim()
            else:
                acks_held = not claim and self._acks_can_wait(now)
                yield from self._flush(hold_acks=acks_held)
                if now >= self.heartbeat_due:
                    yield from self._heartbeat(now)
                if now >= self.reap_due:
                    yield from self._reap(now)
                idle = (yield from self._claim()) if claim else delegated and idle
            if not claim and not delegated:
                self.listening = False  # no room: leave the signal to idle workers
            self.backoff.ok()
        except Outage:
            pass
        return idle, acks_held

    def _hand_out(self, now: float) -> int:
        """The claim to hand the listener now (ADR 38): the free places while it listens and
        none is out; 0: none. Counted as sent."""
        ready = self.listening and self.state == "running" and self.backoff.waiting(now) <= 0
        handing = self.listener.offer(self._claim_size() if ready else 0, now, self.claims_sent + 1)
        if handing:
            self.claims_sent += 1
        return handing

    def _final_flush(self) -> Steps:
        self._collect()
        self.backoff.ok()  # one last try, the process may be about to exit
        try:
            yield from self._flush()
        except Outage:
            logger.warning(
                "worker %s: stopped with %d unacknowledged tasks (server unreachable); "
                "their leases will expire and the reaper will redeliver them",
                self.config.id,
                len(self._acks) + len(self._fails) + len(self._releases),
            )

    def _acks_can_wait(self, now: float) -> bool:
        """Hold the acknowledgements for the next claim to carry? Yes while tasks are running or
        buffered (a claim will follow as places free up), fewer than a claim's worth are
        waiting and the oldest has waited less than ``ACK_LINGER_SECONDS``; also while an
        accelerator holds them (``CycleHooks.holds_acks``), within that linger."""
        if self.state != "running" or now - self._acks_since >= ACK_LINGER_SECONDS:
            return False
        if self.hooks.holds_acks(now):
            return True
        return (self.executing > 0 or bool(self.buffer)) and len(
            self._acks
        ) < self._claim_threshold()

    def _flush_and_claim(self) -> Generator[Action, Any, bool]:
        """Releases and failures, then one claim that carries the ack batch with it."""
        if self._releases:
            yield from self._flush_releases()
        if self._fails:
            yield from self._flush_fails()
        acks, self._acks = self._acks, []
        ack = act.Ack(acks)
        self._room_since = None
        count = self._claim_size()
        sent = self._now
        with self._numbered_claim():
            tasks, flags = yield act.Claim(count, ack)
        self.gauge.tripped(self._now - sent)
        outage: Outage | None = None
        short = True
        # a finish refused (see ``refused``): sent again task by task, not an outage
        refusal = isinstance(flags, Exception) and refused(flags)
        if refusal and tasks is flags:
            short = False  # the one call (ADR 40) was refused for its finish: claim again
        elif isinstance(tasks, BaseException):
            try:
                self._outage(tasks)
            except Outage as exc:
                outage = exc
        else:
            short = self._claimed(tasks, count)
        if refusal:
            yield from self._ack_each(acks, flags)
        elif isinstance(flags, BaseException):
            self._acks[:0] = acks  # kept for the next flush, as in _flush
            if flags is not tasks:  # one failed finish_and_claim (ADR 40) is booked once
                self._outage(flags)
        else:
            self._settle(ack, flags)
        if outage is not None:
            raise outage
        return short

    def _claim_size(self) -> int:
        room = self._room()
        batch = self.config.claim_batch_size
        return min(room, batch) if batch > 0 else room

    def _worth_claiming(self, now: float) -> bool:
        """Claim now, or linger a moment so that one claim fills several places?

        While tasks are running (or wait in the buffer), places free up one by one; claiming for
        each alone would cost a round trip per task. A claim waits until a quarter of the places
        are free, or at most ``CLAIM_LINGER_SECONDS``, whichever comes first."""
        room = self._room()
        if room <= 0:
            self._room_since = None
            return False
        if room >= self._claim_threshold() or not (self.executing or self.buffer):
            self._room_since = None
            return True
        if self._room_since is None:
            self._room_since = now
        return now - self._room_since >= CLAIM_LINGER_SECONDS

    def _claim(self) -> Generator[Action, Any, bool]:
        """Claim for the free places; True when the queue had fewer tasks than asked."""
        self._room_since = None
        if self.state != "running":
            return False
        count = self._claim_size()
        sent = self._now
        with self._numbered_claim():
            tasks = yield from self._call(act.Claim(count))
        self.gauge.tripped(self._now - sent)
        return self._claimed(tasks, count)

    @contextlib.contextmanager
    def _numbered_claim(self) -> Iterator[None]:
        """Around the yield of one of the loop's own claims: it is claim number
        ``claims_sent`` (counted on), out until its reply comes."""
        self.claims_sent += 1
        self._claim_out = self.claims_sent
        try:
            yield
        finally:
            self._claim_out = 0

    def _take_handed(self) -> bool | None:
        """Book the listener's claims, which stand for the cycle's claim: was the last short?
        None when none brought tasks (an error, or no claim made): the loop claims itself."""
        asked, answers = self.listener.take()
        for error in (got for got in answers if isinstance(got, BaseException)):
            with contextlib.suppress(Outage):
                self._outage(error)  # the error of the loop's own claim: booked, backs off
        shorts = [self._claimed(got, asked) for got in answers if isinstance(got, list)]
        return shorts[-1] if shorts else None

    def _claimed(self, tasks: list[Task], asked: int) -> bool:
        now = self._now
        self.stats.last_claim_at = now
        self.stats.claimed += len(tasks)
        running = self.state == "running"
        for task in tasks:
            slot = Slot(task=task, claimed_at=now)
            self.held[task.task_id] = slot
            if running:
                self.buffer.append(slot)
            else:  # the stop came while the claim was on its way: give them straight back
                self._releases.append(slot)
        if tasks:
            self.idle_poll.found()
        else:
            self.idle_poll.empty()
        # listen only while claims come back short: a worker whose claims are full has no use
        # for the wake signal and must leave it to idle workers (ADR 16)
        short = len(tasks) < asked
        self.listening = short and running
        return short

    def _next_wait(self, now: float, *, idle: bool, acks_held: bool = False) -> float:
        stopping = self.state != "running"
        backoff = self.backoff.waiting(now)
        if self._inbox:
            return 0.0
        if stopping and self.drained:
            return 0.0  # nothing left to wait for: the next cycle ends the stop
        if backoff > 0:
            deadline = now + backoff
        else:
            if self._fails or self._releases:
                return 0.0
            # acknowledgements waiting for a claim to carry them (see _acks_can_wait)
            acks_at = self._acks_since + ACK_LINGER_SECONDS if self._acks else math.inf
            if self._acks and not (acks_held or self._acks_can_wait(now)):
                return 0.0
            if self._room() > 0 and not idle and not stopping:
                if self._room_since is None:
                    return 0.0  # the queue had work and there is room: claim again at once
                # lingering for more room (woken early by completions)
                return max(0.0, min(self._room_since + CLAIM_LINGER_SECONDS, acks_at) - now)
            # the queue had less than asked: poll again soon after work was found, backing
            # off to poll_interval_seconds while it stays empty (woken early by completions)
            poll = self.idle_poll.wait if idle else self.config.poll_interval_seconds
            if self.listener.out(now):
                poll = math.inf  # the listener claims at the poll time
            deadline = min(self.heartbeat_due, self.reap_due, now + poll, acks_at)
        for slot in self.running.values():
            if not slot.timed_out and slot.started_at is not None:
                deadline = min(deadline, slot.started_at + self.timeout)
        if self.shutdown_at is not None:
            deadline = min(deadline, self.shutdown_at)
        return max(0.0, deadline - now)
