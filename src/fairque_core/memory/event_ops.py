"""The event methods of the in-memory model's port (the log is ``memory/events.py``)."""

from __future__ import annotations

from fairque_core.domain.events import QueueEvent
from fairque_core.memory.store import ModelStore, locked

__all__ = ["EventOps"]


class EventOps(ModelStore):
    """read_events and events_end of the port."""

    @locked
    def read_events(
        self, after: str, *, count: int = 100, timeout: float = 0.0
    ) -> list[QueueEvent]:
        # waits on the log's condition, which releases the model's lock meanwhile
        return self._events.wait_after(after, count, timeout)

    @locked
    def events_end(self) -> str:
        return self._events.end()
