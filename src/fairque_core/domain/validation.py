"""The id grammar: what a tenant id, task id or queue name may look like.

Ids end up inside Redis key names, so they must never carry a hash-tag brace, whitespace,
control characters or glob characters, and must stay short. Checked before any I/O.
"""

from __future__ import annotations

import math
import re

from fairque_core.domain.errors import TaskValidationError

__all__ = [
    "MAX_ID_LENGTH",
    "MAX_QUEUE_NAME_LENGTH",
    "MAX_TENANT_PAGE",
    "check_finite",
    "check_tenant_page",
    "check_wait_timeout",
    "validate_id",
    "validate_queue_name",
]

MAX_ID_LENGTH = 128
MAX_QUEUE_NAME_LENGTH = 64
#: The largest page ``list_tenants`` returns in one call.
MAX_TENANT_PAGE = 1000

_ID_RE = re.compile(r"[A-Za-z0-9_.:@/+=#-]+")
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
        raise TaskValidationError(field, value, "must be a str")
    if not value or len(value) > MAX_ID_LENGTH or _ID_RE.fullmatch(value) is None:
        raise TaskValidationError(field, value, _ID_RULE)
    return value


def validate_queue_name(value: object) -> str:
    """Return ``value`` if it is a valid queue name, else raise TaskValidationError."""
    if not isinstance(value, str):
        raise TaskValidationError("queue name", value, "must be a str")
    if not value or len(value) > MAX_QUEUE_NAME_LENGTH or _QUEUE_RE.fullmatch(value) is None:
        raise TaskValidationError("queue name", value, _QUEUE_RULE)
    return value


def check_finite(value: object, field: str) -> float:
    """Return ``value`` as a float if it is a finite real number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TaskValidationError(field, value, "must be a number")
    as_float = float(value)
    if not math.isfinite(as_float):
        raise TaskValidationError(field, value, "must be finite")
    return as_float


def check_wait_timeout(value: object) -> float:
    """Return ``value`` (seconds) if it is a finite number >= 0 (a ``wait_for_work`` timeout)."""
    seconds = check_finite(value, "timeout")
    if seconds < 0:
        raise TaskValidationError("timeout", value, "must be >= 0")
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
