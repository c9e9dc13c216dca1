"""The in-memory model's event log (ADR 71; ``lua/_include/events.lua`` on Redis).

A capped list of entries with stream-style ids (``<ms>-<n>``: the queue clock's ms, numbered
within one ms, never going back), appended by the operation that makes the change in the
same locked step, read by :meth:`EventOps.read_events`. It keeps exactly ``maxlen`` entries
(Redis keeps about as many: ``MAXLEN ~`` trims whole nodes); ``maxlen`` 0 keeps none.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Mapping

from fairque_core.domain.events import (
    EVENT_TEXT_MAX,
    QueueEvent,
    check_event_count,
    event_from_fields,
    parse_stream_id,
)
from fairque_core.domain.validation import check_wait_timeout

__all__ = ["EventLog", "event_text"]


def event_text(text: str) -> str:
    """``text`` cut to the bytes an event keeps, as the Lua cuts it (and Python reads it)."""
    return text.encode("utf-8", "surrogateescape")[:EVENT_TEXT_MAX].decode("utf-8", "replace")


class EventLog:
    """The capped log; ``changed`` (a condition on the model's lock) wakes blocked readers."""

    def __init__(self, maxlen: int, changed: threading.Condition) -> None:
        self._maxlen = maxlen
        self._entries: deque[tuple[tuple[int, int], Mapping[str, str]]] = deque(
            maxlen=max(maxlen, 1)
        )
        self._last = (0, 0)
        self._changed = changed

    def add(self, now_ms: int, kind: str, **fields: str) -> None:
        """Append an event of type ``kind`` at ``now_ms`` (caller holds the model's lock)."""
        if self._maxlen <= 0:
            return
        ms, n = self._last
        self._last = (ms, n + 1) if now_ms <= ms else (now_ms, 0)
        self._entries.append((self._last, {"t": kind, "at": str(now_ms), **fields}))
        self._changed.notify_all()

    def end(self) -> str:
        """The id of the last entry (``0-0`` when none was ever written)."""
        return f"{self._last[0]}-{self._last[1]}"

    def after(self, position: str, count: int) -> list[QueueEvent]:
        """Up to ``count`` entries after ``position``, oldest first."""
        mark = parse_stream_id(position)
        out: list[QueueEvent] = []
        for key, fields in self._entries:
            if key > mark:
                out.append(event_from_fields(f"{key[0]}-{key[1]}", fields))
                if len(out) >= count:
                    break
        return out

    def wait_after(self, position: str, count: int, timeout: float) -> list[QueueEvent]:
        """:meth:`after`, waiting up to ``timeout`` s for an entry when there is none (the
        caller holds the lock the condition is made on)."""
        check_wait_timeout(timeout)
        check_event_count(count)
        deadline = time.monotonic() + timeout
        while True:
            out = self.after(position, count)
            left = deadline - time.monotonic()
            if out or left <= 0:
                return out
            self._changed.wait(left)
