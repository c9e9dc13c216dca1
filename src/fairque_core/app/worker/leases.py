"""The lease side of the worker loop (ADR 14, 20): the queue calls about the leases a worker
holds (acknowledgements, failures, releases, heartbeats, the reaper) and how a failed queue
call is booked (the backoff, the error in ``health()``).

:class:`LeaseSteps` is a base class of :class:`~fairque_core.app.worker.loop.WorkerLoop` and
keeps no state of its own: the loop's attributes it works on are declared below. Its steps are
generators that yield the loop's actions, as the loop's own cycle does. No I/O, no clock.
"""

from __future__ import annotations

import logging
from collections.abc import Generator, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from fairque_core.app.worker import actions as act
from fairque_core.app.worker.actions import Action, Slot, Stats
from fairque_core.app.worker.buffer import TurnBuffer
from fairque_core.app.worker.pacing import Backoff
from fairque_core.domain.errors import (
    BackendError,
    LeaseLostError,
    LuaScriptError,
    QueueClosedError,
    ScriptContractError,
    TaskSerializationError,
    TaskValidationError,
    UnknownTaskError,
)
from fairque_core.domain.models import Task
from fairque_core.domain.outcomes import LEASE_TERMINATE
from fairque_core.settings.config import WorkerConfig

__all__ = [
    "HEARTBEAT_BATCH",
    "POISON_ERRORS",
    "REAPER_LIMIT",
    "REAPER_ROUNDS",
    "LeaseSteps",
    "Outage",
    "Steps",
    "refused",
]

logger = logging.getLogger("fairque.worker")

#: Handler errors that dead-letter a task as POISONED (counted apart in ``health()``).
POISON_ERRORS = (UnknownTaskError, TaskSerializationError)
#: Most leases one heartbeat call extends (a worker holding more sends several calls).
HEARTBEAT_BATCH = 500
#: How many reaper batches one reaper tick may run when every batch comes back full.
REAPER_ROUNDS = 10
REAPER_LIMIT = 100


class Outage(Exception):
    """A queue call failed: the rest of this cycle's queue work is skipped."""


def refused(exc: BaseException) -> bool:
    """Whether ``exc``, raised by a finish or a fail, refuses a value the call carried (one
    the client cannot encode, the engine refuses, or a script refuses) rather than the queue
    or the connection as a whole (those are retried after a backoff): a refused finish is sent
    again task by task (issue 34: one bad value never blocks the other tasks)."""
    return isinstance(exc, (TaskValidationError, TaskSerializationError, UnicodeError)) or (
        isinstance(exc, LuaScriptError) and not isinstance(exc, ScriptContractError)
    )


Steps = Generator[Action, Any, None]


class LeaseSteps:
    """The loop's steps about the leases it holds (see the module docstring)."""

    config: WorkerConfig
    stats: Stats
    backoff: Backoff
    held: dict[str, Slot]  # every lease the worker holds
    buffer: TurnBuffer
    heartbeat_interval: float
    heartbeat_due: float
    reap_due: float
    _now: float
    _acks: list[tuple[Slot, object]]
    _fails: list[tuple[Slot, BaseException]]
    _releases: list[Slot]

    def _call(
        self, action: Action, *, lease: bool = False, refusal: bool = False
    ) -> Generator[Action, Any, Any]:
        """Yield a queue call; an error books an outage and aborts the cycle (``Outage``),
        except a lost lease (``lease``) or a refusal (``refusal``, see :func:`refused`)
        where the caller handles it."""
        try:
            return (yield action)
        except Exception as exc:
            if lease and isinstance(exc, LeaseLostError):
                raise
            if refusal and refused(exc):
                raise
            self._outage(exc)

    if TYPE_CHECKING:  # WorkerLoop's, declared for the type checker (no runtime stand-in)

        def stop(self, now: float, *, force: bool = False) -> None: ...

    def _outage(self, exc: BaseException) -> NoReturn:
        self._note_error(exc, self._now)
        delay = self.backoff.fail(self._now)
        if isinstance(exc, QueueClosedError):
            # its queue was closed under it: no call can succeed again, so it stops (a
            # backoff would retry for ever); the leases it holds expire for the reaper
            logger.error("worker %s: %s; stopping", self.config.id, exc)
            self.stop(self._now, force=True)
        elif isinstance(exc, (BackendError, OSError)):
            logger.warning(
                "worker %s: backend error (%s); retrying in %.2f s", self.config.id, exc, delay
            )
        else:  # a bug or a plugin error, not an outage: report it loudly, back off all the same
            logger.error("worker %s: control loop error", self.config.id, exc_info=exc)
        raise Outage from exc

    def _note_error(self, exc: BaseException, now: float) -> None:
        self.stats.backend_errors += 1
        self.stats.last_error = f"{type(exc).__name__}: {exc}"
        self.stats.last_error_at = now

    def _flush(self, *, hold_acks: bool = False) -> Steps:
        if self._releases:
            yield from self._flush_releases()
        if self._acks and not hold_acks:
            # taken before the call: a handler's thread may book more meanwhile (ADR 51)
            acks, self._acks = self._acks, []
            ack = act.Ack(acks)
            try:
                flags = yield ack
            except Exception as exc:
                if not refused(exc):
                    self._acks[:0] = acks  # kept for the next flush
                    self._outage(exc)
                yield from self._ack_each(acks, exc)
            except BaseException:
                self._acks[:0] = acks  # kept for the next flush
                raise
            else:
                self._settle(ack, flags)
        if self._fails:
            yield from self._flush_fails()

    def _ack_each(self, acks: list[tuple[Slot, object]], error: Exception) -> Steps:
        """The finish of ``acks`` was refused (``error``): each task's finish alone, and a
        task whose own finish is refused is failed with that refusal (retried or
        dead-lettered as its policy says), so the others finish. When the server refused
        every one of several, the refusal is the queue's, not a task's: they are kept and the
        worker backs off, as after an outage."""
        refusals: list[tuple[Slot, Exception]] = []
        if len(acks) == 1:
            refusals.append((acks[0][0], error))
        for index, item in enumerate(acks if len(acks) > 1 else ()):
            ack = act.Ack([item])
            try:
                flags = yield ack
            except BaseException as exc:
                if isinstance(exc, Exception) and refused(exc):
                    refusals.append((item[0], exc))
                    continue
                # kept for the next flush: the refused ones and those not sent yet
                held = {id(slot) for slot, _ in refusals}
                self._acks[:0] = [a for a in acks[:index] if id(a[0]) in held] + acks[index:]
                if isinstance(exc, Exception):
                    self._outage(exc)
                raise
            self._settle(ack, flags)
        server = [why for _, why in refusals if isinstance(why, BackendError)]
        if len(acks) > 1 and len(server) == len(acks):
            self._acks[:0] = acks
            self._outage(error)
        for slot, why in refusals:
            logger.error(
                "worker %s: the queue refused the finish of task %s (%s: %s); failing it",
                self.config.id,
                slot.task.task_id,
                type(why).__name__,
                why,
            )
            self._fails.append((slot, why))

    def _settle(self, ack: act.Ack, flags: Sequence[bool]) -> None:
        for slot, ok in zip(ack.slots, flags, strict=True):
            self.held.pop(slot.task.task_id, None)
            if ok:
                self.stats.processed += 1
            else:
                self.stats.lease_lost += 1
                logger.warning(
                    "worker %s: lease on %s lost before finish; its result is dropped",
                    self.config.id,
                    slot.task.task_id,
                )

    def _flush_releases(self) -> Steps:
        while self._releases:
            slot = self._releases[0]
            try:
                yield from self._call(act.Release(slot), lease=True)
                self.stats.released += 1
            except LeaseLostError:
                self.stats.lease_lost += 1
            self._releases.pop(0)
            self.held.pop(slot.task.task_id, None)

    def _flush_fails(self) -> Steps:
        while self._fails:
            slot, error = self._fails[0]
            try:
                state = yield from self._call(act.Fail(slot, error), lease=True, refusal=True)
            except LeaseLostError:
                self.stats.lease_lost += 1
            except Outage:  # not a refusal: the fail stays queued, the cycle backs off
                raise
            except Exception as exc:  # refused: dropped, its lease expires for the reaper
                self._note_error(exc, self._now)
                logger.error(
                    "worker %s: the queue refused the failure of task %s (%s: %s); its lease "
                    "will expire and the reaper will redeliver it",
                    self.config.id,
                    slot.task.task_id,
                    type(exc).__name__,
                    exc,
                )
            else:
                if str(state) == "scheduled":
                    self.stats.retried += 1
                else:
                    self.stats.dead += 1
            self.stats.failed += 1
            if isinstance(error, POISON_ERRORS):
                self.stats.poisoned += 1
            self._fails.pop(0)
            self.held.pop(slot.task.task_id, None)

    def _heartbeat(self, now: float) -> Steps:
        if now < self.heartbeat_due:
            return
        self.heartbeat_due = now + self.heartbeat_interval
        live = [s for s in self.held.values() if not (s.lost or s.timed_out)]
        stop: dict[bool, list[Slot]] = {}  # terminate -> canceled tasks that run
        for start in range(0, len(live), HEARTBEAT_BATCH):
            chunk = live[start : start + HEARTBEAT_BATCH]
            renewed = yield from self._call(act.Heartbeat([slot.task for slot in chunk]))
            for slot, task in zip(chunk, renewed, strict=True):
                if isinstance(task, Task):
                    slot.task = task
                elif task is None:
                    self._lease_lost(slot)
                elif self._lease_canceled(slot):
                    stop.setdefault(task == LEASE_TERMINATE, []).append(slot)
        self.buffer.discard(lambda slot: slot.lost)
        for terminate, slots in stop.items():
            yield act.CancelRunning(slots, terminate)

    def _lease_canceled(self, slot: Slot) -> bool:
        """A heartbeat found the task canceled (ADR 76): its lease is gone as when lost, no
        outcome is sent for it; whether it runs (its handler is then told to stop)."""
        slot.lost = slot.canceled = True
        self.stats.canceled += 1
        logger.info("worker %s: task %s canceled", self.config.id, slot.task.task_id)
        if slot.started_at is None:
            self.held.pop(slot.task.task_id, None)
            if slot in self._releases:
                self._releases.remove(slot)
            return False
        return True

    def _lease_lost(self, slot: Slot) -> None:
        """A heartbeat found the lease lost: a running task's outcome will be dropped; an
        unstarted one is forgotten now."""
        slot.lost = True
        self.stats.lease_lost += 1
        logger.warning("worker %s: lease on %s lost", self.config.id, slot.task.task_id)
        if slot.started_at is None:
            self.held.pop(slot.task.task_id, None)
            if slot in self._releases:
                self._releases.remove(slot)

    def _reap(self, now: float) -> Steps:
        if now < self.reap_due:
            return
        self.reap_due = now + self.config.reaper_interval_seconds
        for _ in range(REAPER_ROUNDS):
            handled = yield from self._call(act.Reap(REAPER_LIMIT))
            if handled < REAPER_LIMIT:
                break
