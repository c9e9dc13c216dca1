"""The wait for work on several queues at once: woken by the first queue's wake signal.

A worker that serves several queues (ADR 69) listens on each queue's wake signal (ADRs 16,
38) while all of them are empty, and wakes on the first. :class:`AsyncWakeAny` runs the waits
as asyncio tasks and cancels the others when one wakes. :class:`WakeAny` runs each on a thread
of its own; a thread's blocking pop cannot be cancelled, so a wait still running when a call
returns is kept: the next call waits on it instead of starting another for that queue, and a
wake it brings later is kept for that call (no wake signal taken is lost). One call waits at a
time (the worker's listener); no busy loop: each wait blocks up to its timeout.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["AsyncWakeAny", "WakeAny"]


class _Waits:
    """The waits of the queues, one per queue, in their order."""

    def __init__(self, waits: Sequence[Callable[[float], Any]]) -> None:
        self._waits = list(waits)


class WakeAny(_Waits):
    """``wait(timeout)``: True as soon as one of ``waits`` (each a queue's ``wait_for_work``)
    returns True; False when none did within ``timeout``; a wait's exception is raised."""

    def __init__(self, waits: Sequence[Callable[[float], bool]]) -> None:
        super().__init__(waits)
        self._cond = threading.Condition(threading.Lock())
        self._out = [False] * len(self._waits)  # a wait for queue i is running
        self._woke = False
        self._error: Exception | None = None

    def wait(self, timeout: float) -> bool:
        with self._cond:
            for i, out in enumerate(self._out):
                if not out:
                    self._out[i] = True
                    threading.Thread(
                        target=self._one, args=(i, timeout), name=f"fairque-wake-{i}", daemon=True
                    ).start()
            self._cond.wait_for(lambda: self._woke or self._error is not None, timeout)
            woke, self._woke = self._woke, False
            error = None if woke else self._error
            if error is not None:
                self._error = None
        if error is not None:
            raise error
        return woke

    def _one(self, index: int, timeout: float) -> None:
        woke, error = False, None
        try:
            woke = bool(self._waits[index](timeout))
        except Exception as exc:  # an outage or a closed queue: the caller's to see
            error = exc
        with self._cond:
            self._out[index] = False
            self._woke = self._woke or woke
            if error is not None and self._error is None:
                self._error = error
            self._cond.notify_all()

    def running(self) -> int:
        """How many waits are running now (tests)."""
        with self._cond:
            return sum(self._out)


class AsyncWakeAny(_Waits):
    """:class:`WakeAny` for asyncio: ``await wait(timeout)``; the waits still running when
    one wakes (or raises) are cancelled."""

    async def wait(self, seconds: float) -> bool:
        tasks = [asyncio.ensure_future(wait(seconds)) for wait in self._waits]
        found = False
        try:
            pending: set[asyncio.Future[bool]] = set(tasks)
            while pending and not found:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                found = any(task.result() for task in done)  # raises a wait's exception
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        return found
