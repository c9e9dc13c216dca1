"""Process signals counted without a lock, acted on by the thread that polls them.

A Python signal handler runs on the main thread between two bytecodes, wherever that thread
is: also inside ``threading.Event.set()`` called by the handler of an earlier signal. The
Event's lock is not reentrant, so a handler that sets an Event deadlocks when a second signal
lands there (two SIGTERMs 0.1 ms apart, as ``timeout`` or ``docker stop`` around ``uv run``
send them, hung ``fairque worker`` for good). The same holds for a handler that sets an Event
the main thread is waiting on, at the moment its ``wait`` holds the lock.

So the handler of a :class:`SignalLatch` only appends the signal number to a list (one
bytecode, atomic under the GIL). The thread that installed it (the main thread, which waits in
short slices anyway) takes the new signals with :meth:`SignalLatch.take` and acts on them in
ordinary code, where locks, logging and Events are safe.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterable
from types import FrameType
from typing import Any

__all__ = ["STOP_SIGNALS", "SignalLatch"]

#: The signals that ask a worker (or a supervisor) to stop: a first one gracefully, a second
#: one at once.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class SignalLatch:
    """Signals received since :meth:`install`, taken by the polling thread (see the module)."""

    def __init__(self) -> None:
        self._got: list[int] = []
        self._taken = 0
        self._previous: list[tuple[int, Any]] = []

    def handler(self, signum: int, frame: FrameType | None) -> None:
        """The installed handler: records ``signum`` and nothing else."""
        self._got.append(signum)

    def install(self, signals: Iterable[int] = STOP_SIGNALS) -> bool:
        """Install the handler for ``signals`` when called on the main thread (the only one
        Python lets install one); False elsewhere, where nothing is installed."""
        if threading.current_thread() is not threading.main_thread():
            return False
        for signum in signals:
            self._previous.append((signum, signal.signal(signum, self.handler)))
        return True

    def restore(self) -> None:
        """Put back the handlers :meth:`install` replaced."""
        while self._previous:
            signum, old = self._previous.pop()
            signal.signal(signum, old)

    def take(self) -> list[int]:
        """The signals received since the last call, oldest first (call from one thread)."""
        new = self._got[self._taken :]  # a signal landing after this slice waits for the next
        self._taken += len(new)
        return new

    @property
    def received(self) -> int:
        """How many signals were received since :meth:`install`."""
        return len(self._got)
