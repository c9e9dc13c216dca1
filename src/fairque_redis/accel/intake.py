"""The intake client (ADR 47), the accelerator ``intake`` (fairque_core.settings.accel;
docs/performance.md): a plain message's entry written in one step.

The reference is :mod:`fairque_redis.scripting.calls.intake` (``encode_entries``: check every
message, then encode each); :func:`encode_entries` here must give the same bytes and raise
the same errors (tests/unit/test_intake_fast_path.py pins it). A composition root
(``connect``, ``backend_from_url``) plugs it into a backend (``intake_entries=``) unless
``FAIRQUE_ACCEL_OFF`` names ``intake``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from fairque_core.domain.enums import Priority
from fairque_core.domain.models import Message
from fairque_core.domain.validation import MAX_ID_LENGTH, id_fullmatch
from fairque_redis.scripting.calls import ScriptCalls
from fairque_redis.scripting.calls.intake import check_messages, encode_entry

__all__ = ["encode_entries", "plain_entry"]

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
    head checks both), a :class:`Priority`, no dependency, unique key, expiry, headers or name, the
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
        and message.keep_result is True
        and not message.expires_ms
        and not message.limit_key
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
