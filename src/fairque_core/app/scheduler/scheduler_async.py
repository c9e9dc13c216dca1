"""AsyncScheduler: the cron ticker. It fires the queue's schedules, one task per tick.

Any number of schedulers may run against one queue; two mechanisms make each tick fire once:

1. **The lock.** Only the holder of the store's scheduler lock fires. The lock is a lease with
   a random token: taken when free (``SET NX PX``), renewed on every round while held, and
   released on ``stop``. A scheduler that dies stops renewing; another takes over once the
   lease runs out (``lock_seconds``). Recording a fired tick is fenced by the token, so a
   scheduler that lost the lock cannot move a schedule's progress.
2. **The task id.** Each tick is pushed with the id ``cron:<name>:<tick>``
   (:func:`~fairque_core.domain.schedules.tick_task_id`) and push is idempotent by id, so
   even two schedulers that both believe they hold the lock (a paused process whose lease
   ran out) store the tick once.

A round (:meth:`run_once`): take or renew the lock; for each schedule, ask
:func:`~fairque_core.domain.schedules.due_ticks` what is due since its last fired tick (or
since it was added) per its misfire policy; push those ticks (``execute_after`` = the tick plus
its deterministic jitter); record the last tick handled. The push comes before the record, so
a crash in between re-pushes the same ids next round: nothing is lost, nothing doubled.
"""

# scheduler.py (Scheduler) is generated from this file  # unasync: remove
# by tools/gen_sync.py: edit here, then run it.  # unasync: remove

from __future__ import annotations

import asyncio
import logging
import math
import time

from fairque_core.app.engine.queue_async import AsyncFairQueue
from fairque_core.domain.errors import (
    DomainError,
    FairQueueError,
    TaskIdConflictError,
    TaskSerializationError,
    TaskValidationError,
)
from fairque_core.domain.schedules import (
    SCHEDULE_HEADER,
    TICK_HEADER,
    decode_schedule,
    due_ticks,
    next_tick,
    tick_task,
)
from fairque_core.domain.validation import check_count, check_duration
from fairque_core.ports import Clock, random_token
from fairque_core.ports.schedules import AsyncScheduleStore

__all__ = ["SCHEDULE_HEADER", "TICK_HEADER", "AsyncScheduler", "tick_task"]

log = logging.getLogger("fairque.scheduler")

#: What a schedule's own tasks can raise at the push, and no other schedule's would: that
#: schedule is skipped (logged) and the round goes on with the others. A backend error ends
#: the round as before (the next one tries again).
_SCHEDULE_FAULTS = (DomainError, TaskSerializationError, TaskIdConflictError)

# How often a sleeping scheduler looks at its stop flag (seconds).
_STOP_CHECK = 0.05


def _positive(value: float, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise TaskValidationError(field, value, "must be a number > 0")
    if not math.isfinite(value):
        raise TaskValidationError(field, value, "must be finite")
    return float(value)


class AsyncScheduler:
    """Fires ``queue``'s cron schedules (``store`` defaults to ``queue.schedules``).

    ``lock_seconds`` is the lock's lease (a standby takes over at most that long after the
    holder died); ``poll_seconds`` bounds the sleep between rounds and must be shorter than
    the lease; ``misfire_grace`` is how late a tick may be and still count as on time (see
    :class:`~fairque_core.domain.schedules.Misfire`); ``max_per_round`` caps the ticks one
    schedule fires per round (a ``catch_up`` after a long outage spreads over rounds).
    ``clock`` gives the scheduler's "now" (epoch seconds; tests only).
    """

    def __init__(
        self,
        queue: AsyncFairQueue,
        store: AsyncScheduleStore | None = None,
        *,
        lock_seconds: float = 10.0,
        poll_seconds: float = 1.0,
        misfire_grace: float = 30.0,
        max_per_round: int = 1000,
        clock: Clock | None = None,
        token: str | None = None,
    ) -> None:
        self._queue = queue
        self._store = store if store is not None else queue.schedules
        self._lock_seconds = _positive(lock_seconds, "lock_seconds")
        self._poll = _positive(poll_seconds, "poll_seconds")
        if self._poll >= self._lock_seconds:
            raise TaskValidationError(
                "poll_seconds", poll_seconds, f"must be shorter than lock_seconds ({lock_seconds})"
            )
        self._grace = check_duration(misfire_grace, "misfire_grace")
        self._max_per_round = check_count(max_per_round, "max_per_round", 1)
        self._clock: Clock = clock if clock is not None else time.time
        self._token = token if token is not None else random_token()
        self._held = False
        self._stopping = False
        self._next_at: float | None = None
        self.fired = 0  # ticks pushed by this scheduler (duplicates of a split brain included)
        self.skipped = 0  # rounds in which a schedule's tick could not be pushed (logged)

    @property
    def token(self) -> str:
        return self._token

    @property
    def holds_lock(self) -> bool:
        """True after a round that held (took or renewed) the lock."""
        return self._held

    # ------------------------------------------------------------------ one round
    async def _lock(self) -> bool:
        if self._held:
            self._held = await self._store.renew_lock(self._token, self._lock_seconds)
            if not self._held:
                log.warning("scheduler %s lost the lock", self._token)
        if not self._held:
            self._held = await self._store.acquire_lock(self._token, self._lock_seconds)
            if self._held:
                log.info("scheduler %s took the lock", self._token)
        return self._held

    async def run_once(self, now: float | None = None) -> list[str]:
        """One round at ``now`` (default: the clock); the task ids pushed (none without the
        lock)."""
        now = self._clock() if now is None else now
        self._next_at = None
        if not await self._lock():
            return []
        pushed: list[str] = []
        for record in await self._store.list():
            try:
                schedule, added_at = decode_schedule(record.definition)
            except TaskValidationError as exc:
                log.error("schedule %r is unreadable, skipped: %s", record.name, exc)
                continue
            start = record.last_fired if record.last_fired is not None else added_at
            due = due_ticks(
                schedule, start=start, now=now, grace=self._grace, limit=self._max_per_round
            )
            try:
                for tick in due.fire:
                    task = tick_task(schedule, tick)
                    await self._queue.push(task)
                    pushed.append(task.task_id)
                    self.fired += 1
            except _SCHEDULE_FAULTS as exc:
                # its tasks cannot be pushed (a schedule stored before add_schedule checked
                # them, or a queue with a smaller payload limit): the others still fire
                log.error("schedule %r cannot push its tick, skipped: %s", schedule.name, exc)
                self.skipped += 1
                continue
            if due.advance_to is not None:
                marked = await self._store.mark_fired(schedule.name, due.advance_to, self._token)
                if not marked and await self._store.lock_holder() != self._token:
                    log.warning("scheduler %s lost the lock mid-round", self._token)
                    self._held = False
                    return pushed
                start = max(start, due.advance_to)
            upcoming = next_tick(schedule, max(start, now))
            if upcoming is not None and (self._next_at is None or upcoming.at < self._next_at):
                self._next_at = upcoming.at
        return pushed

    def seconds_to_next_round(self, now: float) -> float:
        """How long ``run`` sleeps after a round that ended at ``now``."""
        wait = self._poll
        if self._held and self._next_at is not None:
            wait = min(wait, max(0.0, self._next_at - now))
        return wait

    # ------------------------------------------------------------------ the loop
    async def run(self) -> None:
        """Rounds until :meth:`stop`; releases the lock on the way out."""
        self._stopping = False
        try:
            while not self._stopping:
                try:
                    await self.run_once()
                except FairQueueError as exc:  # the backend is away: keep trying
                    log.warning("scheduler round failed: %s", exc)
                    self._held = False
                await self._sleep(self.seconds_to_next_round(self._clock()))
        finally:
            await self.release()

    async def _sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not self._stopping:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            await asyncio.sleep(min(left, _STOP_CHECK))

    def stop(self) -> None:
        """Ask :meth:`run` to finish its round and return (safe from another thread)."""
        self._stopping = True

    async def release(self) -> None:
        """Free the lock if this scheduler holds it (a standby takes over at once)."""
        if self._held:
            self._held = False
            try:
                await self._store.release_lock(self._token)
            except FairQueueError as exc:
                log.warning("could not release the scheduler lock: %s", exc)
