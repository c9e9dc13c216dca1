"""Argument types for argparse: a bad value is a one-line usage error (exit 2), never an
internal error or a silent acceptance."""

from __future__ import annotations

import argparse
import math
from urllib.parse import urlsplit

from fairque_core.domain.errors import TaskValidationError
from fairque_core.domain.scoring import stride_for
from fairque_core.domain.validation import MAX_TENANT_PAGE, is_digits, validate_queue_name
from fairque_core.settings.config import mask_url

__all__ = [
    "check_queue",
    "check_queue_spec",
    "check_url",
    "non_negative_float",
    "non_negative_int",
    "port_number",
    "positive_float",
    "positive_int",
    "queue_weight",
    "tenant_page",
]

_REDIS_SCHEMES = ("redis", "rediss", "valkey", "valkeys")
_SENTINEL_SCHEMES = tuple(f"{s}+sentinel" for s in _REDIS_SCHEMES)
_SCHEMES = (*_REDIS_SCHEMES, *_SENTINEL_SCHEMES, "memory")


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None


def non_negative_float(text: str) -> float:
    value = _number(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def positive_float(text: str) -> float:
    value = _number(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def non_negative_int(text: str) -> int:
    value = _integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def positive_int(text: str) -> int:
    value = _integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text}")
    return value


def tenant_page(text: str) -> int:
    """A page size of a tenant listing: 1 to ``MAX_TENANT_PAGE``."""
    value = positive_int(text)
    if value > MAX_TENANT_PAGE:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_TENANT_PAGE}, got {text}")
    return value


def port_number(text: str) -> int:
    value = _integer(text)
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port number 1-65535, got {text}")
    return value


def check_queue(text: str) -> str:
    """A queue name (an empty one, as from ``--queue "$UNSET"``, used to mean the default
    queue: dangerous with ``purge --all``)."""
    try:
        return validate_queue_name(text)
    except TaskValidationError as exc:
        raise argparse.ArgumentTypeError(f"invalid queue name {text!r}: {exc.rule}") from None


def check_queue_spec(text: str) -> str:
    """``NAME`` or ``NAME:WEIGHT`` (a worker's queue and its weight, ADR 69): the text as
    given, once both parts are valid (queue names have no colon)."""
    name, colon, weight = text.partition(":")
    check_queue(name)
    if colon:
        try:
            queue_weight(weight)
        except argparse.ArgumentTypeError as exc:
            raise argparse.ArgumentTypeError(f"--queue {text}: weight {exc}") from None
    return text


def queue_weight(text: str) -> float:
    """A queue's weight, as a tenant's: a number in [0.001, 1e6]."""
    value = _number(text)
    try:
        stride_for(value)
    except TaskValidationError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} {exc.rule}") from None
    return value


def check_url(text: str) -> str:
    """A server URL: a known scheme, a valid port, and a numeric database (``/0``) if any."""
    url = text.strip()
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in _SCHEMES:
        known = ", ".join(f"{s}://" for s in _SCHEMES)
        raise argparse.ArgumentTypeError(f"unknown URL scheme in {_masked(url)!r} (known: {known})")
    if scheme in _SENTINEL_SCHEMES:
        from fairque_core.domain.errors import ConfigurationError
        from fairque_redis.backends.sentinel import parse_sentinel_url

        try:
            parse_sentinel_url(url)
        except ConfigurationError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    if scheme in _REDIS_SCHEMES:
        try:
            port = parts.port
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"bad port in {_masked(url)} (must be a number 1-65535)"
            ) from None
        if port == 0:
            raise argparse.ArgumentTypeError(f"bad port in {_masked(url)} (must be 1-65535)")
        if not parts.hostname:
            raise argparse.ArgumentTypeError(f"no host in {_masked(url)}")
        db = parts.path.strip("/")
        if db and not is_digits(db):
            raise argparse.ArgumentTypeError(
                f"bad database {db!r} in {_masked(url)} (the path is a database number, e.g. /0)"
            )
    return url


def _masked(url: str) -> str:
    return mask_url(url)
