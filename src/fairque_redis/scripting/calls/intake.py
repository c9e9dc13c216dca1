"""The intake's entries (ADR 47): how ``push_intake`` writes a message as one list element,
and the calls and replies around it. No I/O. The reference: :func:`encode_entries` checks every
message, then encodes each; the intake client (:mod:`fairque_redis.accel.intake`, the
accelerator ``intake``) writes a plain message's entry in one step and must write the same
bytes.

An entry is versioned and reads back unchanged whatever bytes the meta and body hold::

    1|<task id>|<tenant>|<priority 1-6>|<delay ms, <= 0>|<len(meta)>|<meta><body>

Ids and tenants follow the id grammar, which has no ``|``; the meta (the record's ``m`` field,
:func:`~fairque_redis.scripting.calls.records.encode_meta`) is counted in bytes and the body is
the rest. ``lua/_include/intake.lua`` (``FQ_INTAKE_HEAD``) reads it; :func:`decode_entry` is
the same reading in Python, for tests and tools.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from fairque_core.domain.enums import Priority
from fairque_core.domain.intake import IngestReport, check_ingest_limit, check_intake_message
from fairque_core.domain.models import Message
from fairque_core.domain.scoring import to_ms
from fairque_redis.keys import KeySpace
from fairque_redis.scripting.calls import ScriptCalls
from fairque_redis.scripting.calls.base import Call, contract, int_reply
from fairque_redis.scripting.calls.records import encode_meta
from fairque_redis.scripting.calls.tasks import plain_message

__all__ = [
    "ENTRY_VERSION",
    "INGEST_CHUNK",
    "EntryEncoder",
    "IngestPlan",
    "IntakeEntry",
    "append_call",
    "check_messages",
    "decode_entry",
    "encode_entries",
    "encode_entry",
    "ingest_call",
    "parse_report",
    "size_call",
    "wake",
]

#: The version an entry starts with (``lua/_include/intake.lua`` reads this one only).
ENTRY_VERSION = b"1"

_HEAD = re.compile(rb"1\|([^|]*)\|([^|]*)\|([^|]*)\|([^|]*)\|([0-9]+)\|", re.S)


def encode_entry(message: Message) -> bytes:
    """One message's intake entry (checked already: see :func:`encode_entries`)."""
    meta = encode_meta(message).encode()
    delay = message.delay
    dms = 0 if delay == 0 else to_ms(delay)
    return b"%s|%s|%s|%d|%d|%d|%s%s" % (
        ENTRY_VERSION,
        message.task_id.encode(),
        message.tenant.encode(),
        int(message.priority),
        dms,
        len(meta),
        meta,
        message.body,
    )


def check_messages(planner: ScriptCalls, messages: Sequence[Message]) -> None:
    """Refuse, before anything is sent, what ``push_intake`` does not take: anything but a
    plain message (``check_intake_message``), then what ``push`` refuses (ids, tenant,
    priority, payload size against the queue's maximum). TaskValidationError or
    PayloadTooLargeError."""
    limit = planner.config.max_payload_bytes
    for message in messages:
        check_intake_message(message)
        if not plain_message(message, limit):  # push's fast path first, as push_one
            planner.check_message(message)


#: How a backend turns ``push_intake``'s messages into entries (every one checked first, before
#: any I/O): :func:`encode_entries` here, or the intake client's one-step encoder plugged in by
#: a composition root (``fairque_redis.accel.intake.encode_entries``).
EntryEncoder = Callable[[ScriptCalls, Sequence[Message]], list[bytes]]


def encode_entries(planner: ScriptCalls, messages: Sequence[Message]) -> list[bytes]:
    """The entries of ``messages``, every one checked first (:func:`check_messages`), so the
    error raised is the one the first failing message earns, before any I/O."""
    check_messages(planner, messages)
    return [encode_entry(message) for message in messages]


@attrs.frozen
class IntakeEntry:
    """An entry read back (:func:`decode_entry`)."""

    task_id: str
    tenant: str
    priority: int
    delay_ms: int
    meta: bytes
    body: bytes


def decode_entry(entry: bytes) -> IntakeEntry | None:
    """An entry's fields as ``intake.lua`` reads them, or None where it would not."""
    head = _HEAD.match(entry)
    if head is None:
        return None
    task_id, tenant, priority, delay, length = head.groups()
    at = head.end()
    size = int(length)
    if at + size > len(entry) or not re.fullmatch(rb"-?[0-9]+", delay):
        return None
    if priority not in {b"%d" % p for p in Priority}:
        return None
    return IntakeEntry(
        task_id=task_id.decode("ascii", "replace"),
        tenant=tenant.decode("ascii", "replace"),
        priority=int(priority),
        delay_ms=int(delay),
        meta=entry[at : at + size],
        body=entry[at + size :],
    )


def parse_report(reply: Any) -> IngestReport:
    """``ingest.lua``'s reply: ingested, duplicates, rejected, left."""
    ok = isinstance(reply, list) and len(reply) == 4 and all(isinstance(x, int) for x in reply)
    contract("ingest", ok, reply)
    ingested, duplicates, rejected, left = reply
    return IngestReport(ingested=ingested, duplicates=duplicates, rejected=rejected, left=left)


def ingest_call(planner: ScriptCalls, limit: int) -> Call[IngestReport]:
    """The call of ``ingest.lua`` for up to ``limit`` entries (an int >= 1)."""
    return Call("ingest", [*planner.header(), check_ingest_limit(limit)], parse_report)


#: The most entries one ``ingest.lua`` call takes: a script holds the server while it runs
#: (~33 µs per entry measured, so ~33 ms), so a larger ``ingest(limit)`` is several calls.
INGEST_CHUNK = 1000


class IngestPlan:
    """``ingest(limit)`` as script calls of :data:`INGEST_CHUNK` entries at most, until
    ``limit`` entries are done or the intake is empty; ``report`` sums them (``left`` is the
    last call's). The backend runs ``call()`` while ``due``, giving each reply to ``take``."""

    def __init__(self, planner: ScriptCalls, limit: int) -> None:
        self._planner = planner
        self._room = check_ingest_limit(limit)
        self.report = IngestReport()
        self._calls = 0

    @property
    def due(self) -> bool:
        return self._room > 0 and (self._calls == 0 or self.report.left > 0)

    def call(self) -> Call[IngestReport]:
        return ingest_call(self._planner, min(self._room, INGEST_CHUNK))

    def take(self, got: IngestReport) -> None:
        self._calls += 1
        self._room -= got.done
        self.report = attrs.evolve(self.report + got, left=got.left)


def append_call(keys: KeySpace, entries: list[bytes]) -> Call[int]:
    """The producer's one command: ``RPUSH <intake> e1 e2 ...`` (no script; a backend runs a
    Call whose name is no script as this plain command). Its reply is the intake's new
    length: equal to ``len(entries)`` when the intake was empty before."""
    return Call("push_intake", ["RPUSH", keys.intake, *entries], _read_length)


def _read_length(reply: Any) -> int:
    """RPUSH's reply: an int (ScriptContractError for anything else, as ``int_reply``)."""
    return reply if type(reply) is int else _checked_length(reply)


_checked_length = int_reply("push_intake")


def size_call(keys: KeySpace) -> Call[int]:
    """``LLEN <intake>``: the entries waiting."""
    return Call("intake_size", ["LLEN", keys.intake], int_reply("intake_size"), writes=False)


def wake(pipe: Any, keys: KeySpace) -> Any:
    """Queue the raise of the wake signal on ``pipe`` (a pipeline without MULTI, returned):
    LREM of every token, then LPUSH of one, so the list holds one token (the scripts' ``1``),
    however many producers found the intake empty; a worker's BLPOP between the two finds the
    list empty and waits for the LPUSH. Both commands are in the documented ACL."""
    pipe.lrem(keys.wake, 0, b"1")
    pipe.lpush(keys.wake, b"1")
    return pipe
