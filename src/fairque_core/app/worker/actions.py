"""What the worker loop and its drivers exchange (ADR 20): the :class:`Slot` of each held task
and the actions :meth:`~fairque_core.app.worker.loop.WorkerLoop.next_action` returns.

Those that call the queue expect the driver to report the call's outcome with
:meth:`~fairque_core.app.worker.loop.WorkerLoop.done` (the value) or
:meth:`~fairque_core.app.worker.loop.WorkerLoop.failed` (the exception it raised).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import attrs

from fairque_core.domain.models import Task

__all__ = [
    "STOPPED",
    "Ack",
    "Action",
    "CancelRunning",
    "Claim",
    "Expire",
    "Fail",
    "Heartbeat",
    "ListenerClaims",
    "Reap",
    "Release",
    "Run",
    "Sleep",
    "Slot",
    "Stats",
    "Stopped",
    "safe_callback",
]

logger = logging.getLogger("fairque.worker")


def safe_callback(name: str, call: Any, *args: Any) -> None:
    """Run a handler callback; its exceptions are logged, never propagated: BaseExceptions
    too (SystemExit, KeyboardInterrupt, CancelledError raised by the callback itself), which
    killed the pool thread between a task's end and its booking, or ended an AsyncWorker's
    event loop. A worker is stopped by ``stop()`` and signals, not by a hook."""
    try:
        call(*args)
    except BaseException:
        logger.exception("handler callback %s raised", name)


@attrs.define
class Stats:
    """The counters ``health()`` reports (times are the driver's monotonic clock)."""

    processed: int = 0
    failed: int = 0
    retried: int = 0
    dead: int = 0
    poisoned: int = 0
    timed_out: int = 0
    lease_lost: int = 0
    canceled: int = 0  # running tasks canceled under this worker (ADR 76)
    released: int = 0
    claimed: int = 0
    backend_errors: int = 0
    last_error: str | None = None
    last_error_at: float | None = None
    last_claim_at: float | None = None


@attrs.define(eq=False)
class Slot:
    """One task this worker holds a lease on, from claim until acknowledged or released."""

    task: Task
    claimed_at: float
    started_at: float | None = None
    timed_out: bool = False
    zombie: bool = False  # timed out, its handler still running, its place already given back
    lost: bool = False  # lease lost: the outcome is dropped
    canceled: bool = False  # canceled while running (ADR 76): lost too, its handler told
    run_seconds: float = 0.0


class Action:
    """Something the driver must do; those that call the queue expect ``done``/``failed``."""

    __slots__ = ()


class Claim(Action):
    """``claim_batch(count, ...)`` and report the list of tasks. With ``acks`` (an :class:`Ack`),
    send that batch with it (one ``finish_and_claim`` call where the queue makes it one, ADR
    40; else the two calls at once, their round trips overlapping) and report ``(tasks or
    error, flags or error)``: each part may be the exception it raised."""

    __slots__ = ("acks", "count")

    def __init__(self, count: int, acks: Ack | None = None) -> None:
        self.count = count
        self.acks = acks


class Ack(Action):
    """``finish_batch(items, run_seconds=run_seconds)``; report its list of flags."""

    __slots__ = ("items", "run_seconds", "slots")

    def __init__(self, acks: Sequence[tuple[Slot, object]]) -> None:
        self.slots = [slot for slot, _ in acks]
        self.items = [(slot.task, value) for slot, value in acks]
        self.run_seconds = [slot.run_seconds for slot in self.slots]


class Fail(Action):
    """``fail(slot.task, error, run_seconds=slot.run_seconds)``; report the state it left."""

    __slots__ = ("error", "slot")

    def __init__(self, slot: Slot, error: BaseException) -> None:
        self.slot = slot
        self.error = error


class Release(Action):
    """``release(slot.task)`` (a claimed task that never started); report None."""

    __slots__ = ("slot",)

    def __init__(self, slot: Slot) -> None:
        self.slot = slot


class CancelRunning(Action):
    """These running tasks were canceled (ADR 76): tell each handler (``ctx.cancelled``),
    cancel an async one's coroutine; with ``terminate``, end this process when it runs
    under ``fairque worker --processes``. No queue call: report nothing."""

    __slots__ = ("slots", "terminate")

    def __init__(self, slots: list[Slot], terminate: bool) -> None:
        self.slots = slots
        self.terminate = terminate


class Heartbeat(Action):
    """``heartbeat_leases(tasks)``; report its list (a renewed task, None for a lost lease,
    ``LEASE_CANCELED`` or ``LEASE_TERMINATE`` for a canceled task's, ADR 76)."""

    __slots__ = ("tasks",)

    def __init__(self, tasks: list[Task]) -> None:
        self.tasks = tasks


class Reap(Action):
    """``requeue_expired(limit)``; report how many it handled."""

    __slots__ = ("limit",)

    def __init__(self, limit: int) -> None:
        self.limit = limit


class Run(Action):
    """Start these tasks' handlers; each reports :meth:`WorkerLoop.task_done` when it returns."""

    __slots__ = ("slots",)

    def __init__(self, slots: list[Slot]) -> None:
        self.slots = slots


class Expire(Action):
    """These running tasks passed their timeout: call ``on_task_timeout`` and cancel them where
    the runtime can (a thread cannot be). Their failure is already booked; they still report
    :meth:`WorkerLoop.task_done` when their handler returns."""

    __slots__ = ("slots",)

    def __init__(self, slots: list[Slot]) -> None:
        self.slots = slots


class Sleep(Action):
    """Wait until ``until`` (the driver's clock) or a wake-up (a completion, a stop, the wake
    signal, a listener's claim), whichever comes first. ``listen``: whether the driver should
    wait on the queue's wake signal meanwhile (ADR 16).

    ``claim`` > 0 hands the loop's next claim to the driver's listener (ADR 38): it waits for
    work and claims up to ``claim`` tasks in one go (``claim_when_ready``, its wait ending by
    ``claim_by`` at the latest), and reports what came back with
    :meth:`WorkerLoop.listener_claimed` (the tasks, the exception, or None when it did not
    claim). Until then the loop claims nothing itself. A driver without a listener must not
    build its loop with ``listener_claims``."""

    __slots__ = ("claim", "claim_by", "listen", "until")

    def __init__(self, until: float, listen: bool, claim: int = 0, claim_by: float = 0.0) -> None:
        self.until = until
        self.listen = listen
        self.claim = claim
        self.claim_by = claim_by


class ListenerClaims:
    """The claim a loop hands to its driver's listener (see :class:`Sleep`): at most one out at
    a time. ``grace``: after that long without an answer the loop stops waiting for one (a
    listener that hangs must not stop the worker claiming); a late answer is still booked.

    Each claim handed out carries the loop's number for it (``offer``'s ``number``), which
    :meth:`unanswered` gives until its answer comes; the tasks answers bring count in the
    worker's ``in_flight`` from then on (:meth:`unbooked_count`), before the loop books them."""

    __slots__ = ("_answers", "_last", "_number", "asked", "enabled", "grace", "since")

    def __init__(self, enabled: bool, grace: float) -> None:
        self.enabled = enabled
        self.grace = grace
        self.asked = 0  # tasks the claim out asks for; 0 when none is out
        self.since = 0.0
        self._last = 0
        self._number = 0  # the number of the claim out with no answer yet; 0: none
        self._answers: list[object] = []

    def offer(self, count: int, now: float, number: int = 0) -> int:
        """Hand out a claim of ``count`` tasks unless one is out (or ``count`` < 1); how many.
        ``number``: the loop's number for this claim (:meth:`unanswered`)."""
        if not self.enabled or count < 1 or self.out(now):
            return 0
        self.asked = self._last = count
        self.since = now
        self._number = number
        return count

    def out(self, now: float) -> bool:
        if self.asked and now - self.since > self.grace:
            self.asked = self._number = 0
        return self.asked > 0

    def unanswered(self, now: float) -> int:
        """The number of the claim out that has no answer yet; 0: none (one past the grace
        counts as answered, as :meth:`out` gives it up). Changes nothing."""
        return self._number if self._number and now - self.since <= self.grace else 0

    def answer(self, result: object) -> None:
        self._answers.append(result)
        self._number = 0

    def brought_tasks(self) -> bool:
        """Whether the answers not yet taken brought tasks, and are all task lists (no error,
        no unmade claim)."""
        answers = self._answers
        return bool(answers) and all(isinstance(got, list) for got in answers) and any(answers)

    def unbooked_count(self) -> int:
        """How many tasks the answers not yet taken brought."""
        return sum(len(got) for got in self._answers if isinstance(got, list))

    def unbooked(self) -> list[Task]:
        """Tasks brought after the loop stopped (never booked: the driver releases them)."""
        return [t for got in self.take()[1] if isinstance(got, list) for t in got]

    def take(self) -> tuple[int, list[object]]:
        """What the listener brought since the last call, and how many tasks it was asked for."""
        answers, self._answers = self._answers, []
        if answers:
            self.asked = 0
        return self._last, answers


class Stopped(Action):
    """The loop has ended; nothing more to do."""

    __slots__ = ()


STOPPED = Stopped()
