"""The intake's entries (ADR 47): how ``push_intake`` writes a message as one list element,
and the calls and replies around it. No I/O.

An entry is versioned and reads back unchanged whatever bytes the meta and body hold::

    1|<task id>|<tenant>|<priority 1-6>|<delay ms, <= 0>|<len(meta)>|<meta><body>

Ids and tenants follow the id grammar, which has no ``|``; the meta (the record's ``m`` field,
:func:`~fairque_redis.scripting.calls.records.encode_meta`) is counted in bytes and the body is
the rest. ``lua/_include/intake.lua`` (``FQ_INTAKE_HEAD``) reads it; :func:`decode_entry` is
the same reading in Python, for tests and tools.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import attrs

from fairque_core.domain.enums import Priority
from fairque_core.domain.intake import IngestReport, check_ingest_limit, check_intake_message
from fairque_core.domain.models import Message
from fairque_core.domain.scoring import to_ms
from fairque_core.domain.validation import MAX_ID_LENGTH, id_fullmatch
from fairque_redis.keys import KeySpace
from fairque_redis.scripting.calls import Call, ScriptCalls
from fairque_redis.scripting.calls.base import contract, int_reply
from fairque_redis.scripting.calls.records import encode_meta
from fairque_redis.scripting.calls.tasks import plain_message

__all__ = [
    "ENTRY_VERSION",
    "INGEST_CHUNK",
    "IngestPlan",
    "IntakeEntry",
    "append_call",
    "check_messages",
    "decode_entry",
    "encode_entries",
    "encode_entry",
    "ingest_call",
    "parse_report",
    "plain_entry",
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


# The id grammar's character class (``id_fullmatch`` is the bound fullmatch of its pattern,
# ``[...]+``), for the head of a plain entry: version, task id, tenant, each id of
# 1-MAX_ID_LENGTH characters of the grammar, which has no ``|``: one match checks both ids.
_ID_PATTERN: str = id_fullmatch.__self__.pattern  # type: ignore[attr-defined]
if not (_ID_PATTERN.startswith("[") and _ID_PATTERN.endswith("]+") and "|" not in _ID_PATTERN):
    raise RuntimeError(f"the id grammar {_ID_PATTERN!r} is not one class: update _PLAIN_HEAD")
_ID_CLASS = _ID_PATTERN.removesuffix("+")
_PLAIN_HEAD = re.compile(
    rf"1\|{_ID_CLASS}{{1,{MAX_ID_LENGTH}}}\|{_ID_CLASS}{{1,{MAX_ID_LENGTH}}}\|"
).fullmatch
_PLAIN_CT = "application/json"
_DIGITS = {p: str(int(p)) for p in Priority}  # a Priority's field, also its range check
_isfinite = math.isfinite


def plain_entry(message: Message, limit: int) -> bytes | None:
    """The entry of a plain message in one step, or None when ``message`` is not plain.

    Plain: what :func:`check_messages` accepts without a word and ``encode_meta`` writes in its
    common shape, judged on plain types only: str ids of the grammar (one match of the entry's
    head checks both), a :class:`Priority`, no dependency, unique key, headers or name, the
    JSON content type, an int ``max_retries``, a finite float ``created_at``, a ``delay`` of
    exactly 0 (ready now) and a ``bytes`` body of at most ``limit`` bytes. Such a message's
    entry is the bytes :func:`encode_entry` writes for it (a property test pins it); anything
    else answers None and takes :func:`check_messages` and :func:`encode_entry`, which raise
    the typed error it earns or encode it as before (issue 17: the producer's path)."""
    task_id, tenant, body, delay = message.task_id, message.tenant, message.body, message.delay
    if not (type(task_id) is str and type(tenant) is str and type(body) is bytes):
        return None
    head = f"1|{task_id}|{tenant}|"
    priority, created, retries = message.priority, message.created_at, message.max_retries
    if not (
        _PLAIN_HEAD(head) is not None
        and type(priority) is Priority
        and not message.depends_on
        and not message.unique_key
        and not message.headers
        and not message.name
        and message.content_type == _PLAIN_CT
        and type(retries) is int
        and type(created) is float
        and _isfinite(created)
        and (type(delay) is float or type(delay) is int)
        and delay == 0
        and len(body) <= limit
    ):
        return None
    # encode_meta's common shape; ASCII throughout (ids of the grammar, numbers), so its
    # length in characters is its length in bytes
    meta = f'["{_PLAIN_CT}",{retries},{created!r},{delay!r},[],{{}},""]'
    return f"{head}{_DIGITS[priority]}|0|{len(meta)}|{meta}".encode() + body


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


def encode_entries(planner: ScriptCalls, messages: Sequence[Message]) -> list[bytes]:
    """The entries of ``messages``, every one checked first (:func:`check_messages`): plain
    messages in one step each (:func:`plain_entry`); once one is not, all of them the general
    way, so the error raised is the one the first failing message earns, before any I/O."""
    limit = planner.config.max_payload_bytes
    entries: list[bytes] = []
    for message in messages:
        entry = plain_entry(message, limit)
        if entry is None:
            check_messages(planner, messages)
            return [encode_entry(message) for message in messages]
        entries.append(entry)
    return entries


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
