"""Queue events (ADR 71): what other processes hear of a queue's changes.

Every backend keeps a capped log of events, appended in the same atomic step as the change it
tells (a script call on Redis, one locked call in the memory model): a task completed, failed,
was retried, was dead-lettered or canceled; the queue or a tenant paused or resumed; limits
changed. An event carries ids, names and short texts, never a payload or a result.

Event types, one meaning each (a failed attempt that will run again is ``failed`` then
``retried``; one that will not is ``failed`` then ``dead_lettered``):

=================  ====================================================================
``completed``      a task finished (``finish``)
``failed``         a worker reported a failed attempt (``fail``), retried or not
``retried``        the task will run again: after a failed attempt (``failure_type``
                   ``failed``), or its lease expired and the reaper gave it back
                   (``expired``)
``dead_lettered``  the task entered the DLQ, whatever the road (its failure type)
``canceled``       a task was canceled (``error``: ``canceled``, ``purged``, or the
                   dependency that did not finish)
``paused``         the queue (``tenant`` empty) or a tenant was paused
``resumed``        ... resumed
``limits_changed`` the limits of a tenant, a tier (``tier``) or the queue (neither) changed
=================  ====================================================================

An event's ``id`` is its place in the log and the position to resume after: a stream entry
id ``<ms>-<n>`` (in the order written), or for a partitioned queue a cursor naming one such id
per partition (:func:`merge_cursor`). Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from enum import Enum
from typing import Any

import attrs

from fairque_core.domain.errors import TaskValidationError
from fairque_core.domain.limits import decode_limits

__all__ = [
    "EVENT_TEXT_MAX",
    "MAX_EVENT_COUNT",
    "EventType",
    "QueueEvent",
    "check_event_count",
    "event_from_fields",
    "later_id",
    "merge_cursor",
    "parse_stream_id",
    "split_cursor",
]

#: Bytes of an event's error text kept (the task's record keeps the whole reason).
EVENT_TEXT_MAX = 200
#: The most events one read returns.
MAX_EVENT_COUNT = 10_000


def check_event_count(count: object) -> int:
    """``count`` if it is an int in [1, MAX_EVENT_COUNT] (events per read)."""
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_EVENT_COUNT:
        raise TaskValidationError("count", count, f"must be an int in [1, {MAX_EVENT_COUNT}]")
    return count


class EventType(str, Enum):
    """The kinds of queue events (see the module docstring)."""

    COMPLETED = "completed"
    FAILED = "failed"
    RETRIED = "retried"
    DEAD_LETTERED = "dead_lettered"
    CANCELED = "canceled"
    PAUSED = "paused"
    RESUMED = "resumed"
    LIMITS_CHANGED = "limits_changed"
    PROGRESS = "progress"


@attrs.frozen(kw_only=True)
class QueueEvent:
    """One event of a queue's log. ``at`` is epoch seconds by the queue's clock; the other
    fields are empty where they do not apply (``tier`` None, ``limits`` None)."""

    id: str
    type: str
    at: float
    task_id: str = ""
    tenant: str = ""
    name: str = ""
    failure_type: str = ""
    error: str = ""
    tier: int | None = None
    limits: Mapping[str, float | None] | None = None
    #: a ``progress`` event's value (``ctx.set_progress``), decoded JSON
    progress: Any = None

    def as_dict(self) -> dict[str, Any]:
        """The event as one JSON object (what ``fairque events`` prints): empty fields left
        out."""
        out: dict[str, Any] = {"id": self.id, "type": self.type, "at": self.at}
        for name in ("task_id", "tenant", "name", "failure_type", "error"):
            value = getattr(self, name)
            if value:
                out[name] = value
        if self.tier is not None:
            out["tier"] = self.tier
        if self.limits is not None:
            out["limits"] = dict(self.limits)
        if self.progress is not None:
            out["progress"] = self.progress
        return out


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def event_from_fields(event_id: str, fields: Mapping[Any, Any]) -> QueueEvent:
    """The event of a log entry: its id and its field-value pairs as the scripts write them
    (``t`` type, ``at`` ms (or the id's ms), ``id`` task, ``u`` tenant, ``n`` name, ``ft``
    failure type, ``err`` text, ``tier``, ``lim`` the limits record; bytes or text)."""
    f = {_text(k): _text(v) for k, v in fields.items()}
    try:  # on server time the scripts leave ``at`` out: the id's ms is the time
        at = int(f.get("at") or event_id.partition("-")[0]) / 1000
    except ValueError:
        at = 0.0
    tier_text = f.get("tier")
    lim = f.get("lim")
    return QueueEvent(
        id=event_id,
        type=f.get("t", ""),
        at=at,
        task_id=f.get("id", ""),
        tenant=f.get("u", ""),
        name=f.get("n", ""),
        failure_type=f.get("ft", ""),
        error=f.get("err", ""),
        tier=int(tier_text) if tier_text and tier_text.isdigit() else None,
        limits=None if lim is None else decode_limits(lim).as_dict(),
        progress=_progress(f.get("pg")),
    )


def _progress(text: str | None) -> Any:
    """A ``progress`` event's value: its JSON decoded (the raw text if it is not JSON)."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def parse_stream_id(text: str) -> tuple[int, int]:
    """``<ms>-<n>`` (or ``<ms>``, ``0``) as a pair of ints; TaskValidationError otherwise."""
    head, dash, tail = text.partition("-")
    if not head.isdigit() or (tail and not tail.isdigit()) or (dash and not tail):
        raise TaskValidationError("since", text, "must be an event id (<ms>-<n>)")
    return int(head), int(tail or 0)


def later_id(a: str, b: str) -> bool:
    """Whether stream id ``a`` comes after ``b``."""
    return parse_stream_id(a) > parse_stream_id(b)


def split_cursor(cursor: str, partitions: int) -> list[str]:
    """The per-partition stream ids of a partitioned queue's cursor (``0`` = the start of
    every partition); TaskValidationError when it does not name ``partitions`` ids."""
    parts = cursor.split(",")
    if len(parts) == 1 and partitions > 1 and parts[0] in ("0", "0-0"):
        parts = ["0"] * partitions
    if len(parts) != partitions:
        raise TaskValidationError(
            "since", cursor, f"must name {partitions} event ids (one per partition)"
        )
    for part in parts:
        parse_stream_id(part)
    return parts


def merge_cursor(ids: Sequence[str]) -> str:
    """The cursor of a partitioned queue: each partition's last id read, comma-separated
    (``0`` for a partition read from its start)."""
    return ",".join("0" if i in ("0-0", "") else i for i in ids)
