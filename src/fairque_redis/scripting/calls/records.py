"""The stored task record: the message fields Lua keeps as one JSON value (:func:`encode_meta`),
and reading the six fields a script returns back into a :class:`Message`, salvaging what it
can from a damaged record. No I/O."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from typing import Any

from fairque_core.accel.builders import unchecked_message
from fairque_core.domain.enums import Priority
from fairque_core.domain.errors import TaskSerializationError, TaskValidationError
from fairque_core.domain.models import UNREADABLE_HEADER, Message
from fairque_core.domain.validation import validate_id
from fairque_redis.scripting.calls.base import to_bytes, to_text

__all__ = [
    "UNREADABLE",
    "decode_message",
    "encode_meta",
    "read_message",
    "salvage_message",
    "unreadable",
]

_DEFAULT_CT = "application/json"

# What a stored record that was written or damaged behind the client's back can raise while
# it is read: bad JSON or UTF-8, wrong shapes and types, absurd nesting, failed validators.
UNREADABLE = (ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError)


def encode_meta(message: Message) -> str:
    """The immutable message fields Lua stores as one JSON value. A message with an expiry
    puts it first, as a number of epoch ms (every other meta starts with the content type, a
    string): the claim reads it there without decoding the rest (``_include/expiry.lua``)."""
    if message.expires_ms:
        return f"[{int(message.expires_ms)},{_encode_fields(message)[1:]}"
    return _encode_fields(message)


def _encode_fields(message: Message) -> str:
    if (
        message.content_type == _DEFAULT_CT
        and not message.depends_on
        and not message.headers
        and not message.name
        and not message.unique_key
        and message.keep_result is True
        and not message.limit_key
        and type(message.max_retries) is int
        and type(message.created_at) is float
        and type(message.delay) in (int, float)
        and math.isfinite(message.created_at)
        and math.isfinite(message.delay)
    ):
        # the common shape, spelled directly (json.dumps writes floats with repr too)
        return (
            f'["{_DEFAULT_CT}",{message.max_retries},{message.created_at!r},'
            f'{message.delay!r},[],{{}},""]'
        )
    fields: list[Any] = [
        message.content_type,
        message.max_retries,
        message.created_at,
        message.delay,
        list(message.depends_on),
        dict(message.headers),
        message.name,
    ]
    limit_key = message.limit_key
    if message.unique_key or message.keep_result is not True or limit_key:
        # two more fields only when set: older records have seven
        fields += [message.unique_key, message.unique_window]
    if message.keep_result is not True or limit_key:
        # a tenth when the result is not kept (0, ADR 78), or a limit key follows (1)
        fields.append(0 if message.keep_result is not True else 1)
    if limit_key:
        # an eleventh, last, as a list of one: the claim finds it at the end of the text
        # (``["<key>"]]``, _include/keylimits.lua) without decoding the rest (ADR 79)
        fields.append([limit_key])
    return json.dumps(
        fields,
        separators=(",", ":"),
        allow_nan=False,
    )


def decode_message(fields: Sequence[Any]) -> Message:
    """A Message from the six fields a script returns: id, tenant, priority, retries, meta, body."""
    task_id, tenant, priority, retry_count, meta, body = fields
    value = _meta(meta)
    expires = 0
    # an expiry first (ADR 77), then the content type: a damaged content type that reads as a
    # number is no expiry (the record is refused as before)
    if type(value) is list and len(value) > 1 and type(value[0]) is int and type(value[1]) is str:
        expires = value[0]
        value = value[1:]
    if type(value) is list and len(value) == 7:  # encode_meta's seven fields (no unique key)
        content_type, max_retries, created_at, delay, deps, headers, name = value
        unique_key, unique_window, keep, limit_key = "", 0.0, True, ""
    else:
        content_type, max_retries, created_at, delay, deps, headers, name, *unique = value
        keep, limit_key = True, ""
        if len(unique) == 4:  # encode_meta's eleventh field: the limit key (ADR 79)
            (limit_key,) = unique.pop()
            validate_id(limit_key, "limit_key")
        if len(unique) == 3:  # the tenth: 0 = the result is not kept (ADR 78)
            keep = unique.pop() != 0
        unique_key, unique_window = unique if unique else ("", 0.0)
    prio = _PRIORITIES.get(priority)
    # bytes as the server sends them decoded inline (to_text's way); values by position, in
    # the Message's field order (cheaper than keywords, once per claimed task)
    return unchecked_message(
        task_id.decode("utf-8", "surrogateescape") if type(task_id) is bytes else to_text(task_id),
        tenant.decode("utf-8", "surrogateescape") if type(tenant) is bytes else to_text(tenant),
        prio if prio is not None else Priority(int(priority)),
        body if type(body) is bytes else to_bytes(body),
        content_type,
        int(retry_count),
        max_retries,
        created_at,
        delay,
        () if type(deps) is list and not deps else tuple(deps),
        headers,
        name,
        unique_key,
        unique_window,
        keep,
        expires,
        limit_key,
    )


# A priority as a script returns it (bytes of its number), to the member: no enum lookup.
_PRIORITIES: dict[object, Priority] = {str(int(p)).encode(): p for p in Priority}


def _meta(meta: Any) -> Any:
    """The JSON value of a record's meta field (UTF-8 text, as :func:`encode_meta` writes it,
    read by the decoder's scanner when it is one document without whitespace around it; the
    decoder decides anything else, and ``json.loads`` bytes that are not UTF-8 or start with a
    BOM, as it always did). The BOM is looked for only when the scanner finds no value."""
    if type(meta) is bytes:
        try:
            text = meta.decode("utf-8")
        except UnicodeDecodeError:
            return json.loads(meta)
        try:
            value, end = _META_SCAN(text, 0)
        except StopIteration:  # no value at 0: a BOM (json.loads takes it), whitespace, nothing
            if text.startswith("\ufeff"):
                return json.loads(meta)
            return _META_DECODER.decode(text)
        return value if end == len(text) else _META_DECODER.decode(text)
    return json.loads(meta)


_META_DECODER = json.JSONDecoder()
_META_SCAN: Callable[[str, int], tuple[Any, int]] = _META_DECODER.scan_once  # type: ignore[attr-defined]


def read_message(fields: Sequence[Any]) -> Message:
    """:func:`decode_message`, with an unreadable record as TaskSerializationError."""
    try:
        return decode_message(fields)
    except UNREADABLE as exc:
        raise TaskSerializationError(unreadable(fields, exc)) from exc


def unreadable(fields: Sequence[Any], exc: BaseException) -> str:
    """What :func:`read_message` says of a record :func:`decode_message` failed on."""
    text = f"task {to_text(fields[0])} has an unreadable record: {type(exc).__name__}: {exc}"
    return text[:500]


def salvage_message(fields: Sequence[Any], problem: str) -> Message:
    """The message of a record :func:`read_message` refuses, as far as it can be read: its id,
    tenant and body bytes, default metadata, and the problem in the header
    :data:`~fairque_core.domain.models.UNREADABLE_HEADER`. A claim hands such a message out
    (the engine poisons it, as it does an undecodable body), and a DLQ listing shows it, so
    that one damaged record neither fails the call nor hides the others."""
    task_id, raw_tenant, priority, _retries, _meta, body = fields
    try:
        prio = Priority(int(priority))
    except UNREADABLE:
        prio = Priority.NORMAL
    tenant = to_text(raw_tenant) if isinstance(raw_tenant, (bytes, str)) and raw_tenant else ""
    try:
        validate_id(tenant, "tenant")
    except TaskValidationError:
        tenant = "unknown"
    return Message(
        task_id=to_text(task_id),
        tenant=tenant,
        priority=prio,
        body=body if isinstance(body, bytes) else b"",
        headers={UNREADABLE_HEADER: problem[:200]},
    )
