"""The id grammar and the value rules every public entry point checks before any I/O.

Ids end up inside Redis key names, so they must never carry a hash-tag brace, whitespace,
control characters or glob characters, and must stay short. Times are epoch seconds between
0 and the end of year 9999 (so every delay and score fits the integer milliseconds both
backends compute with); counts are ints in a stated range (a bool is never a number here).
Every rule raises :class:`TaskValidationError` (a ``ValueError``) naming the field.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence, Set
from typing import Any

from fairque_core.domain.errors import TaskTypeError, TaskValidationError

__all__ = [
    "MAX_EPOCH_SECONDS",
    "MAX_ID_LENGTH",
    "MAX_PAGE_INDEX",
    "MAX_QUEUE_NAME_LENGTH",
    "MAX_RETRY_COUNT",
    "MAX_TENANT_PAGE",
    "check_count",
    "check_duration",
    "check_expires_ms",
    "check_finite",
    "check_id_list",
    "check_mapping",
    "check_page_bound",
    "check_str",
    "check_tenant_page",
    "check_time",
    "check_wait_timeout",
    "check_xcom_key",
    "id_fullmatch",
    "is_digits",
    "is_utf8",
    "is_valid_id",
    "validate_id",
    "validate_queue_name",
]

MAX_ID_LENGTH = 128
MAX_QUEUE_NAME_LENGTH = 64
#: The largest page ``list_tenants`` returns in one call.
MAX_TENANT_PAGE = 1000
#: The latest time a task may carry (9999-12-31T23:59:59Z): ``execute_after`` beyond it
#: overflowed the backends' millisecond scores (issue 16: 1e16 s ran at once).
MAX_EPOCH_SECONDS = 253_402_300_799.0
#: The largest ``limit``/``offset`` of a listing: the largest integer a Lua number (a double)
#: holds exactly (a larger one was refused by the server as "not an integer or out of range").
MAX_PAGE_INDEX = 2**53 - 1
#: The largest ``retry_count``/``max_retries`` (a 32-bit int; both backends count exactly).
MAX_RETRY_COUNT = 2**31 - 1

_ID_RE = re.compile(r"[A-Za-z0-9_.:@/+=#-]+")
_ID_FULL = _ID_RE.fullmatch
#: The id grammar's match of a whole str (None when it does not match; the length limit is
#: apart): for hot paths that spell :func:`is_valid_id` inline on values of type ``str``.
id_fullmatch = _ID_FULL
_QUEUE_RE = re.compile(r"[A-Za-z0-9_.-]+")
_ID_RULE = (
    f"must be 1-{MAX_ID_LENGTH} ASCII characters from letters, digits and _ . : @ / + = # - "
    "(no braces, whitespace, control or glob characters)"
)
_QUEUE_RULE = (
    f"must be 1-{MAX_QUEUE_NAME_LENGTH} ASCII characters from letters, digits and _ . - "
    "(no braces, colons, whitespace, control or glob characters)"
)


def validate_id(value: object, field: str = "id") -> str:
    """Return ``value`` if it is a valid tenant or task id, else raise TaskValidationError."""
    if not isinstance(value, str):
        raise TaskTypeError(field, value, "must be a str")
    if not value or len(value) > MAX_ID_LENGTH or _ID_RE.fullmatch(value) is None:
        raise TaskValidationError(field, value, _ID_RULE)
    return value


def is_valid_id(value: object) -> bool:
    """Whether ``value`` is a plain ``str`` that :func:`validate_id` accepts (a str subclass
    answers False: ask :func:`validate_id` for the verdict and the error)."""
    return type(value) is str and len(value) <= MAX_ID_LENGTH and _ID_FULL(value) is not None


def validate_queue_name(value: object) -> str:
    """Return ``value`` if it is a valid queue name, else raise TaskValidationError."""
    if not isinstance(value, str):
        raise TaskTypeError("queue name", value, "must be a str")
    if not value or len(value) > MAX_QUEUE_NAME_LENGTH or _QUEUE_RE.fullmatch(value) is None:
        raise TaskValidationError("queue name", value, _QUEUE_RULE)
    return value


def check_finite(value: object, field: str) -> float:
    """Return ``value`` as a float if it is a finite real number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TaskTypeError(field, value, "must be a number")
    try:
        as_float = float(value)
    except OverflowError:  # an int beyond the float range
        raise TaskValidationError(field, value, "must be finite") from None
    if not math.isfinite(as_float):
        raise TaskValidationError(field, value, "must be finite")
    return as_float


def check_time(value: object, field: str) -> float:
    """Return ``value`` as a float if it is a time (epoch seconds) in [0, MAX_EPOCH_SECONDS]."""
    seconds = check_finite(value, field)
    if not 0.0 <= seconds <= MAX_EPOCH_SECONDS:
        raise TaskValidationError(
            field, value, f"must be epoch seconds in [0, {MAX_EPOCH_SECONDS:.0f}] (year 9999)"
        )
    return seconds


def check_duration(value: object, field: str, low: float = 0.0) -> float:
    """Return ``value`` as a float if it is a span of seconds in [``low``,
    MAX_EPOCH_SECONDS]: no longer than from the epoch to the year 9999, so that a time plus it
    still fits the backends' millisecond integers."""
    seconds = check_finite(value, field)
    if not low <= seconds <= MAX_EPOCH_SECONDS:
        raise TaskValidationError(field, value, f"must be in [{low:g}, {MAX_EPOCH_SECONDS:.0f}]")
    return seconds


def check_expires_ms(value: object) -> int:
    """Return a message's ``expires_ms`` if it is an int of epoch milliseconds in [0, the
    year 9999] (0: no expiry)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TaskTypeError("expires_ms", value, "must be an int (epoch milliseconds, 0 = none)")
    if not 0 <= value <= MAX_EPOCH_SECONDS * 1000:
        raise TaskValidationError(
            "expires_ms",
            value,
            f"must be epoch milliseconds in [0, {MAX_EPOCH_SECONDS * 1000:.0f}]",
        )
    return value


def check_count(value: object, field: str, low: int = 0, high: int | None = None) -> int:
    """Return ``value`` if it is an int (not a bool) in [low, high]."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TaskTypeError(field, value, "must be an int")
    if value < low or (high is not None and value > high):
        rule = f"must be >= {low}" if high is None else f"must be in [{low}, {high}]"
        raise TaskValidationError(field, value, rule)
    return value


def check_page_bound(field: str, value: object) -> int:
    """A listing's ``limit`` or ``offset``: an int in [0, MAX_PAGE_INDEX]."""
    return check_count(value, field, 0, MAX_PAGE_INDEX)


def is_digits(text: str) -> bool:
    """``text`` is one or more ASCII digits, which ``int()`` reads: ``str.isdigit()`` alone
    also takes superscripts and other Unicode digits that ``int()`` refuses."""
    return text.isascii() and text.isdigit()


def is_utf8(text: str) -> bool:
    """``text`` encodes to UTF-8: no lone surrogate (``"\\ud800"``), which a str may hold
    but no server can store (the client's encoder raises on it)."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def check_xcom_key(key: object, field: str = "key") -> str:
    """An XCom key: a non-empty str that encodes to UTF-8 (every backend refuses the same
    keys; a lone surrogate, which no server stores, is refused before any I/O)."""
    if not isinstance(key, str) or not key:
        raise TaskValidationError(field, key, "must be a non-empty str")
    if not is_utf8(key):
        raise TaskValidationError(field, key, "must encode to UTF-8 (no lone surrogates)")
    return key


def check_str(value: object, field: str) -> str:
    """Return ``value`` if it is a str."""
    if not isinstance(value, str):
        raise TaskTypeError(field, value, "must be a str")
    return value


def check_mapping(value: object, field: str) -> Mapping[Any, Any]:
    """Return ``value`` if it is a mapping."""
    if not isinstance(value, Mapping):
        raise TaskTypeError(field, value, "must be a mapping")
    return value


def check_id_list(value: object, field: str) -> list[str]:
    """Return ``value`` as a list if it is a list, tuple or set of valid ids.

    A str is refused (it would be read as one id per character), and so is any other
    iterable: the ids are checked before anything is iterated twice or sent.
    """
    if isinstance(value, (str, bytes, bytearray)) or not isinstance(value, (Sequence, Set)):
        raise TaskTypeError(field, value, "must be a list of ids (not a str)")
    items = list(value)
    for item in items:
        validate_id(item, field)
    return items


#: The longest wait a call takes (about 31 years): longer ones overflow the platform's timers
#: (threading's TIMEOUT_MAX, time_t) deep inside a wait, as an untyped OverflowError.
MAX_WAIT_SECONDS = 1e9


def check_wait_timeout(value: object) -> float:
    """Return ``value`` (seconds) if it is a finite number in [0, :data:`MAX_WAIT_SECONDS`]
    (a ``wait_for_work`` timeout)."""
    seconds = check_finite(value, "timeout")
    if not 0 <= seconds <= MAX_WAIT_SECONDS:
        raise TaskValidationError("timeout", value, f"must be in [0, {MAX_WAIT_SECONDS:.0f}]")
    return seconds


def _count(field: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise TaskValidationError(field, value, "must be an int >= 0")
    return value


def check_tenant_page(limit: object, offset: object) -> tuple[int, int]:
    """Return ``(limit, offset)`` of a ``list_tenants`` call if both are ints >= 0 (a bool is
    refused) and the limit is at most :data:`MAX_TENANT_PAGE`."""
    page, skip = _count("limit", limit), _count("offset", offset)
    if page > MAX_TENANT_PAGE:
        raise TaskValidationError("limit", limit, f"must be at most {MAX_TENANT_PAGE}")
    return page, skip
