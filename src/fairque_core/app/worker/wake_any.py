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
from collections.abc import Awaitable, Callable, Sequence

__all__ = ["AsyncWakeAny", "WakeAny"]


class WakeAny:
    """``wait(timeout)``: True as soon as one of ``waits`` (each a queue's ``wait_for_work``)
    returns True; False when none did within ``timeout``; a wait's exception is raised."""

    def __init__(self, waits: Sequence[Callable[[float], bool]]) -> None:
        self._waits = list(waits)
        self._cond = threading.Condition(threading.Lock())
        self._out = [False] * len(self._waits)  # a wait for queue i is running
        self._woke = False
        self._error: Exception | None = None

    def wait(self, timeout: float) -> bool:
        if len(self._waits) == 1:
            return bool(self._waits[0](timeout))
        with self._cond:
            for i, out in enumerate(self._out):
                if not out:
                    self._out[i] = True
                    threading.Thread(
                        target=self._one, args=(i, timeout), name=f"fairque-wake-{i}", daemon=True
                    ).start()
            self._cond.wait_for(lambda: self._woke or self._error is not None, timeout)
            if self._woke:
                self._woke = False
                return True
            error, self._error = self._error, None
        if error is not None:
            raise error
        return False

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


class AsyncWakeAny:
    """:class:`WakeAny` for asyncio: ``await wait(timeout)``; the waits still running when
    one wakes (or raises) are cancelled."""

    def __init__(self, waits: Sequence[Callable[[float], Awaitable[bool]]]) -> None:
        self._waits = list(waits)

    async def wait(self, timeout: float) -> bool:
        if len(self._waits) == 1:
            return bool(await self._waits[0](timeout))
        tasks = [asyncio.ensure_future(wait(timeout)) for wait in self._waits]
        try:
            pending: set[asyncio.Future[bool]] = set(tasks)
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    if task.result():  # raises the wait's exception
                        return True
            return False
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def running(self) -> int:
        """How many waits are running now (tests): none between calls."""
        return 0
