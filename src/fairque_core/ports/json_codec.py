"""The strict JSON payload format: the rules the built-in codec and the ``fairque_plugins``
codecs share (UTF-8, no NaN/Infinity, ``str`` keys, a mapping at the top).

A codec plugin (``fairque_plugins.serialization``, or your own) uses these to read and write
the JSON content type exactly as the built-in codec does.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

from fairque_core.domain.errors import TaskSerializationError

__all__ = [
    "JSON_CONTENT_TYPE",
    "MAX_DEPTH",
    "check_str_keys",
    "decode_json",
    "encode_json",
    "media_type",
]

JSON_CONTENT_TYPE = "application/json"

#: How deep a payload, result or XCom value may nest (mappings and lists): deeper ones are
#: refused where they enter. Python's own limit is the call stack: a value that a shallow
#: producer could encode failed to decode in a worker's deeper stack (poisoned at claim), and
#: a deeper one came out of the codec plugin as a PluginError.
MAX_DEPTH = 100


def media_type(content_type: str) -> str:
    """``content_type`` without parameters, lower case: ``"application/json"``."""
    return content_type.split(";", 1)[0].strip().lower()


# Values that hold no mapping key: check_str_keys does not descend into them.
_LEAVES = frozenset({str, int, float, bool, type(None)})


def check_str_keys(value: object, path: str = "$", depth: int = 1) -> None:
    """TaskSerializationError unless every mapping key inside ``value`` is a ``str`` and it
    nests at most :data:`MAX_DEPTH` levels (``depth`` is the level ``value`` is at)."""
    # json.dumps turns int/float/bool/None keys into strings silently; a strict codec refuses
    # them, since the payload would not come back equal.
    if type(value) is dict or isinstance(value, Mapping):
        if depth > MAX_DEPTH:
            raise TaskSerializationError(
                f"payload nests deeper than {MAX_DEPTH} levels ({path[:60]}...)"
            )
        for key, item in value.items():
            if type(key) is not str and not isinstance(key, str):
                raise TaskSerializationError(f"payload key {key!r} at {path} is not a str")
            if type(item) not in _LEAVES:  # a path is spelled only for what may hold keys
                check_str_keys(item, f"{path}.{key}", depth + 1)
    elif isinstance(value, (list, tuple)):
        if depth > MAX_DEPTH:
            raise TaskSerializationError(
                f"payload nests deeper than {MAX_DEPTH} levels ({path[:60]}...)"
            )
        for index, item in enumerate(value):
            if type(item) not in _LEAVES:
                check_str_keys(item, f"{path}[{index}]", depth + 1)


# One encoder and one decoder for every call: json.dumps/json.loads with arguments other than
# their defaults build a new one per call (a measurable part of a push and of a claim).
_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def encode_json(payload: object) -> bytes:
    """``payload`` as compact UTF-8 JSON; TaskSerializationError when JSON cannot hold it.

    The top level must be a mapping; keys must be ``str``; NaN and infinities are refused
    (they are not JSON). Tuples are written as lists.
    """
    if type(payload) is not dict:
        if not isinstance(payload, Mapping):
            raise TaskSerializationError(
                f"a payload must be a mapping, not {type(payload).__name__}"
            )
        payload = dict(payload)
    check_str_keys(payload, "$")
    try:
        text = _ENCODER.encode(payload)
    except (TypeError, ValueError, RecursionError) as exc:
        raise TaskSerializationError(f"payload is not JSON-serializable: {exc}") from exc
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:  # lone surrogates
        raise TaskSerializationError(f"payload is not valid UTF-8 text: {exc}") from exc


def _refuse_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not valid JSON")


_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)
# The decoder's own scanner: ``decode`` of a document with no whitespace around it is one
# ``scan_once(text, 0)`` that ends at ``len(text)`` (anything else: ``decode`` itself, which
# answers or raises as it always did).
_SCAN: Callable[[str, int], tuple[Any, int]] = _DECODER.scan_once  # type: ignore[attr-defined]


def decode_json(body: bytes) -> dict[str, Any]:
    """The dict encoded in ``body``; TaskSerializationError for anything else."""
    try:
        text = (body if type(body) is bytes else bytes(body)).decode("utf-8")
        try:
            value, end = _SCAN(text, 0)
        except StopIteration:  # not a value at 0 (a BOM, whitespace, nothing): decode says
            # a BOM is never a value, so it is looked for only here; refused as json.loads does
            if text.startswith("\ufeff"):
                raise ValueError("Unexpected UTF-8 BOM") from None
            end = -1
        if end != len(text):
            value = _DECODER.decode(text)
    except (UnicodeDecodeError, ValueError, RecursionError, TypeError) as exc:
        raise TaskSerializationError(f"payload is not valid UTF-8 JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise TaskSerializationError(
            f"payload decodes to {type(value).__name__}, not a JSON object"
        )
    return value
