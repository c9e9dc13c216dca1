"""The event methods of the in-memory model's port (the log is ``memory/events.py``)."""

from __future__ import annotations

from fairque_core.domain.errors import LeaseLostError
from fairque_core.domain.events import QueueEvent
from fairque_core.domain.validation import validate_id
from fairque_core.memory.store import ModelStore, locked

__all__ = ["EventOps"]


class EventOps(ModelStore):
    """read_events, events_end and set_progress of the port."""

    @locked
    def set_progress(self, tenant: str, task_id: str, token: str, body: bytes) -> bool:
        """Keep ``body`` as the running task's progress and log a ``progress`` event; False
        (nothing changed) unless ``token`` is the task's live lease."""
        validate_id(task_id, "task_id")
        now = self._now()
        try:
            rec = self._leased(task_id, token, now)
        except LeaseLostError:
            return False
        rec.progress = bytes(body)
        text = rec.progress.decode("utf-8", "replace")
        self._events.add(now, "progress", id=task_id, u=rec.message.tenant, pg=text)
        return True

    @locked
    def read_events(
        self, after: str, *, count: int = 100, timeout: float = 0.0
    ) -> list[QueueEvent]:
        # waits on the log's condition, which releases the model's lock meanwhile
        return self._events.wait_after(after, count, timeout)

    @locked
    def events_end(self) -> str:
        return self._events.end()
