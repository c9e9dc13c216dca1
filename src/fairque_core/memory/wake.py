"""The wake signal of the in-memory model: how an idle worker learns there is work.

It mirrors the Redis adapter's two signals (ADRs 16 and 17): a *wake token* (at most one
pending; a push or a claim that leaves ready work behind sets it, and one waiter consumes it,
so idle workers wake one after another) and the *schedule signal* (the earliest due time of a
scheduled task; a waiter returns when it comes due, and looks again when it moves earlier).

This is the only state of the model touched outside the model's lock, so that
``wait_for_work`` can block without holding it; it has its own condition variable.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

__all__ = ["WakeSignal"]


class WakeSignal:
    """The wake token and the earliest due time. ``now_ms`` reads the model's clock in ms."""

    def __init__(self, now_ms: Callable[[], int]) -> None:
        self._now_ms = now_ms
        self._cond = threading.Condition(threading.Lock())
        self._pending = False
        self._closed = False
        self._next_due: int | None = None  # ms; None = nothing scheduled

    @property
    def next_due(self) -> int | None:
        """The earliest due time published (ms), or None."""
        return self._next_due

    def signal(self) -> None:
        """Set the wake token (no-op when one is pending) and wake one waiter."""
        with self._cond:
            if not self._pending:
                self._pending = True
                self._cond.notify()

    def set_next_due(self, due_ms: int | None) -> None:
        """Publish the earliest due time; waiters look again when it moved earlier."""
        with self._cond:
            earlier = due_ms is not None and (self._next_due is None or due_ms < self._next_due)
            self._next_due = due_ms
            if earlier:
                self._cond.notify_all()

    def lower_next_due(self, due_ms: int) -> None:
        """Publish ``due_ms`` if it is earlier than the current earliest due time."""
        if self._next_due is None or due_ms < self._next_due:
            self.set_next_due(due_ms)

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for the wake token (consumed) or a scheduled task coming
        due, whichever is first; False on timeout or once closed."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                if self._pending:
                    self._pending = False
                    return True
                due_in = None if self._next_due is None else self._next_due - self._now_ms()
                if due_in is not None and due_in <= 0:
                    return True
                remaining = deadline - time.monotonic()
                if self._closed or remaining <= 0:
                    return False
                # clock time and waiting time are both seconds; an injected clock that stands
                # still is only looked at again when the wait ends or a signal comes
                self._cond.wait(remaining if due_in is None else min(remaining, due_in / 1000))

    def close(self) -> None:
        """Wake every waiter for good: later waits return False unless work is signalled."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
