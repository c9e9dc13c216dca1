"""The places of the worker loop (ADR 20, 30): handlers' outcomes booked, timeouts, and the
buffered tasks started on the places that are free.

:class:`PlaceSteps` is a base class of :class:`~fairque_core.app.worker.loop.WorkerLoop` and
keeps no state of its own: the loop's attributes it works on are declared below. Its steps are
the cycle's (``_collect``, ``_book``, ``_expire``, ``_dispatch``); the hand-off accelerator
(``app/worker/handoff.py``, ADR 51) books a handler's end from the handler's thread with the
same ``_book`` and ``_dispatch``. No I/O, no clock.
"""

from __future__ import annotations

import logging
from typing import Any

from fairque_core.app.worker.actions import Slot, Stats
from fairque_core.app.worker.buffer import TurnBuffer
from fairque_core.app.worker.pacing import PrefetchGauge
from fairque_core.domain.errors import TaskTimeoutError
from fairque_core.settings.config import WorkerConfig

__all__ = ["PlaceSteps"]

logger = logging.getLogger("fairque.worker")


class PlaceSteps:
    """The loop's steps about its places (see the module docstring)."""

    config: WorkerConfig
    stats: Stats
    state: str
    cap: int
    prefetch: int
    adaptive: bool
    gauge: PrefetchGauge
    stuck_limit: int
    timeout: float
    held: dict[str, Slot]
    buffer: TurnBuffer
    running: dict[int, Slot]  # by id(slot)
    executing: int
    stuck: int
    _now: float
    _inbox: list[tuple[Slot, bool, Any, float]]
    _acks: list[tuple[Slot, object]]
    _fails: list[tuple[Slot, BaseException]]
    _releases: list[Slot]
    _acks_since: float

    def _collect(self) -> None:
        inbox, self._inbox = self._inbox, []
        if not inbox:
            return
        if not self._acks:
            self._acks_since = self._now
        for slot, ok, value, run_seconds in inbox:
            self._book(slot, ok, value, run_seconds)
        if self.adaptive:
            self.prefetch = self.gauge.depth()

    def _book(self, slot: Slot, ok: bool, value: Any, run_seconds: float) -> None:
        """One handler's end: its place freed, its outcome queued for the queue."""
        task_id = slot.task.task_id
        # by the slot, not the task id: a timed-out attempt's thread that returns late must not
        # take the entry of the same task's retry (whose timeout was then never checked)
        self.running.pop(id(slot), None)
        if slot.zombie:
            self.stuck -= 1
        else:
            self.executing -= 1
        if slot.timed_out:
            return  # failed already when it timed out; its late outcome is dropped
        self.gauge.ran(run_seconds)
        slot.run_seconds = run_seconds
        if slot.lost:
            self.held.pop(task_id, None)
        elif ok:
            self._acks.append((slot, value))
        else:
            self._fails.append((slot, value))

    def _expire(self, now: float) -> list[Slot]:
        expired: list[Slot] = []
        for slot in self.running.values():
            started = slot.started_at
            if slot.timed_out or started is None or now - started < self.timeout:
                continue
            expired.append(slot)
            slot.timed_out = True
            self.stats.timed_out += 1
            logger.warning("worker %s: task %s timed out", self.config.id, slot.task.task_id)
            if self.stuck < self.stuck_limit:
                slot.zombie = True
                self.stuck += 1
                self.executing -= 1
            slot.run_seconds = now - started
            self.gauge.ran(slot.run_seconds)
            if slot.lost:
                self.held.pop(slot.task.task_id, None)
            else:
                self._fails.append((slot, TaskTimeoutError(slot.task.task_id, self.timeout)))
        return expired

    def _room(self) -> int:
        return self.cap + self.prefetch - self.executing - len(self.buffer)

    def _claim_threshold(self) -> int:
        return max(1, (self.cap + self.prefetch) // 4)

    def _dispatch(self, now: float, most: int = -1) -> list[Slot]:
        slots: list[Slot] = []
        while self.buffer and self.executing < self.cap and most != len(slots):
            slot = self.buffer.popleft()
            slot.started_at = now
            self.executing += 1
            self.running[id(slot)] = slot
            slots.append(slot)
        return slots
