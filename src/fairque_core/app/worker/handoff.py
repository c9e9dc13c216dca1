"""The worker's hand-off accelerator (ADR 46, 51, 65): tasks start outside the loop's cycle.

The reference cycle (ADR 14, :class:`~fairque_core.app.worker.loop.WorkerLoop`) starts every
task itself: a handler's end waits in the loop's inbox for the next cycle, and the tasks a
listener's claim brought wait for the loop to wake, book them and dispatch them. The hand-off
lets the thread (or asyncio task) at hand start them instead, so that no thread hand-off and no
loop cycle stands between a free place and its next task:

- :meth:`HandOffSteps.task_ended`: a handler's thread books its end at once and gets the next
  buffered task to run itself (ADR 51); the loop is woken only when its sleep does not cover
  what changed (:meth:`HandOffSteps._wants_cycle`).
- :meth:`HandOffSteps.start_handed`: while the driver sleeps, the listener books the tasks its
  claim brought and starts them on its own side; the next cycle counts them as its claim
  (ADR 46). :meth:`HandOffSteps.hand_next` gives the listener its next claim at once.
- While a cycle is about to hand the listener its claim, the acknowledgements wait (at most
  the ack linger) so that the listener waits again before the finish goes (ADR 46).

Its state is its own: whether the driver is asleep in the loop's last ``Sleep`` (and whether
acknowledgements waited then), and the listener's answer booked between cycles. It joins the
loop through :class:`~fairque_core.app.worker.loop.CycleHooks` (:meth:`HandOffSteps.plug`); the
composition root (the worker drivers' constructor) plugs it in unless
``Accelerators.on("handoff")`` says it is off (``FAIRQUE_ACCEL_OFF=handoff``), and then the
worker runs the reference cycle with the same outcomes. No I/O, no clock; the drivers make the
calls under their guard.
"""

from __future__ import annotations

from typing import Any

from fairque_core.app.worker import actions as act
from fairque_core.app.worker.actions import Action, Slot
from fairque_core.app.worker.loop import CycleHooks, WorkerLoop
from fairque_core.app.worker.pacing import CLAIM_LINGER_SECONDS

__all__ = ["YIELD_SECONDS", "HandOffSteps"]

#: Longest wait of a thread ``Worker``'s handler thread for the control thread it woke, before
#: it starts the next task (ADR 51): a thread that runs task after task holds the GIL until the
#: interpreter's switch interval forces it out, and the woken loop's claim would wait that long.
YIELD_SECONDS = 0.005


class HandOffSteps(CycleHooks):
    """The hand-off's steps and state for one :class:`WorkerLoop` (see the module docstring).

    Plug it in before the loop starts: ``hand_off = HandOffSteps.plug(loop)``."""

    #: See :data:`YIELD_SECONDS` (the thread driver reads it here).
    yield_seconds = YIELD_SECONDS

    def __init__(self, loop: WorkerLoop) -> None:
        self.loop = loop
        self.parked = False  # the loop's last action was a Sleep: the driver is asleep in it
        self.acks_parked = False  # ... with acknowledgements waiting (see _wants_cycle)
        self.early: bool | None = None  # the listener's answer booked by start_handed: short?

    @classmethod
    def plug(cls, loop: WorkerLoop) -> HandOffSteps:
        """A hand-off for ``loop``, plugged into its cycle."""
        steps = cls(loop)
        loop.hooks = steps
        return steps

    # ------------------------------------------------------------------ the loop's hooks
    def acted(self, action: Action) -> None:
        self.parked = isinstance(action, act.Sleep)
        self.acks_parked = bool(self.loop._acks)  # their linger is in the sleep's deadline

    def claimed_between_cycles(self) -> bool | None:
        early, self.early = self.early, None
        return early

    def holds_acks(self, now: float) -> bool:
        """Whether this cycle ends by handing the listener a claim (see ``WorkerLoop._cycle``):
        the listener waits again first and the acknowledgements go in the next cycle, instead
        of delaying the hand-out by their round trip (a task the listener started has often
        ended by then)."""
        loop = self.loop
        return (
            loop.listener.enabled
            and loop.listening
            and loop.backoff.waiting(now) <= 0
            and not loop.listener.out(now)
            and loop._claim_size() > 0
        )

    # ------------------------------------------------------------------ a handler's end
    def task_ended(
        self, slot: Slot, ok: bool, value: Any, run_seconds: float, now: float
    ) -> tuple[Slot | None, bool]:
        """``WorkerLoop.task_done``, booked at once by the thread that ran the handler (under
        the driver's guard): the place it frees goes to the next buffered task, which that
        thread starts, so that places do not wait for a cycle of the loop to hand them work
        (ADR 51). Returns that task (None: none buffered, no place, or the loop is not
        running) and whether the driver must wake the loop: a sleeping loop is not woken for
        what its sleep already covers (see :meth:`_wants_cycle`)."""
        loop = self.loop
        if loop.state != "running":
            loop.task_done(slot, ok, value, run_seconds)
            return None, True
        loop._now = now
        if loop._inbox:
            loop._collect()  # ends reported by task_done before this one: booked first
        if not loop._acks:
            loop._acks_since = now
        loop._book(slot, ok, value, run_seconds)
        if loop.adaptive:
            loop.prefetch = loop.gauge.depth()
        started = loop._dispatch(now, most=1)
        return (started[0] if started else None), self.parked and self._wants_cycle(now)

    def _wants_cycle(self, now: float) -> bool:
        """After :meth:`task_ended`: does the driver's sleep need cutting short? Never while
        it is awake (the cycle under way reads the new state before it sleeps); asleep, when a
        cycle would now act where the sleep's deadline does not: a failure or release to send,
        a place and a buffered task, room to start a claim's linger or to claim (ADR 30), the
        first acknowledgement since it fell asleep, or a claim's worth of them."""
        loop = self.loop
        if not self.parked:
            return False
        if loop._fails or loop._releases:
            return True
        if loop.buffer and loop.executing < loop.cap:
            return True
        room = loop._room()
        if room > 0:
            since = loop._room_since
            if since is None or now - since >= CLAIM_LINGER_SECONDS:
                return True
            if room >= loop._claim_threshold():
                return True
        acks = len(loop._acks)
        return acks > 0 and (not self.acks_parked or acks >= loop._claim_threshold())

    # ------------------------------------------------------------------ the listener's claim
    def start_handed(self, now: float) -> list[Slot]:
        """The tasks the listener's answers brought, to start NOW, on the listener's side,
        while the driver sleeps (the loop's last action was a ``Sleep``): booked as the next
        cycle would book them (that cycle counts them as its claim) and dispatched, so the
        first handler starts without waiting for the driver to wake and run a cycle. Empty
        when the driver is not asleep, the loop is not running, or an answer is an error or
        an unmade claim (the cycle books those, as the reference does)."""
        loop = self.loop
        if not self.parked or loop.state != "running" or not loop.listener.brought_tasks():
            return []
        loop._now = now
        self.early = loop._take_handed()
        if loop.buffer and loop.executing < loop.cap:
            return loop._dispatch(now)
        return []

    def hand_next(self, now: float) -> act.Sleep | None:
        """After :meth:`start_handed`, while the driver still sleeps: the claim to hand the
        listener at once, as the next cycle's end would hand it (a ``Sleep`` carrying it), so
        that the listener waits again without waiting for that cycle (ADR 46). The cycle then
        hands out none (one is out). None when there is none to hand."""
        loop = self.loop
        if not self.parked or loop.state != "running":
            return None
        handing = loop._hand_out(now)
        if not handing:
            return None
        return act.Sleep(now, True, handing, loop._claim_by(now))
