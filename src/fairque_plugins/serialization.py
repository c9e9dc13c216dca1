"""Payload codecs: strict JSON (the default format) and MessagePack.

Encoding is a firstresult hook: the first codec in the plugin list that encodes wins, so
``plugins=[MsgpackCodec(), JsonCodec()]`` pushes MessagePack. Decoding dispatches on the
stored content type, so a worker with both codecs reads whatever any producer wrote. A codec
built with ``encodes=False`` only decodes (a worker that must read MessagePack but should
never write it).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from fairque_core.domain.errors import (
    ConfigurationError,
    PayloadTooLargeError,
    TaskSerializationError,
)
from fairque_core.ports.hooks import hookimpl
from fairque_core.ports.json_codec import check_str_keys, decode_json, encode_json, media_type

if TYPE_CHECKING:
    from fairque_core.domain.models import Task

__all__ = ["JSON_CONTENT_TYPE", "MSGPACK_CONTENT_TYPE", "JsonCodec", "MsgpackCodec"]

JSON_CONTENT_TYPE = "application/json"
MSGPACK_CONTENT_TYPE = "application/msgpack"
_MSGPACK_ALIASES = frozenset(
    {MSGPACK_CONTENT_TYPE, "application/x-msgpack", "application/vnd.msgpack"}
)


def _check_limit(max_bytes: int | None) -> int | None:
    if max_bytes is None:
        return None
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes <= 0:
        raise ConfigurationError(
            f"max_bytes must be a positive int or None, not {max_bytes!r}",
            path="max_bytes",
            value=max_bytes,
        )
    return max_bytes


def _enforce(body: bytes, max_bytes: int | None) -> bytes:
    if max_bytes is not None and len(body) > max_bytes:
        raise PayloadTooLargeError(len(body), max_bytes)
    return body


class JsonCodec:
    """Strict JSON: UTF-8, no NaN/Infinity, ``str`` keys, a JSON object at the top.

    ``max_bytes`` refuses larger encoded payloads with ``PayloadTooLargeError`` while still
    in the producer, before any network call (the queue's ``max_payload_bytes`` applies too).
    """

    fairque_plugin_name = "fairque.json"
    content_type = JSON_CONTENT_TYPE

    def __init__(self, max_bytes: int | None = None, *, encodes: bool = True) -> None:
        self.max_bytes = _check_limit(max_bytes)
        self.encodes = encodes

    def dumps(self, payload: object) -> bytes:
        """``payload`` as strict JSON bytes (size limit applied)."""
        return _enforce(encode_json(payload), self.max_bytes)

    def loads(self, body: bytes) -> dict[str, Any]:
        """The dict in ``body``; TaskSerializationError with the reason otherwise."""
        return decode_json(body)

    @hookimpl
    def fairque_payload_encode(self, task: Task) -> tuple[bytes, str] | None:
        if not self.encodes:
            return None
        return self.dumps(task.payload), self.content_type

    @hookimpl
    def fairque_payload_decode(self, content_type: str, body: bytes) -> dict[str, Any] | None:
        if media_type(content_type) != JSON_CONTENT_TYPE:
            return None
        return self.loads(body)


class MsgpackCodec:
    """MessagePack (``pip install 'fairque[msgpack]'``): compact, binary-safe values.

    Refuses non-``str`` map keys (they would not decode back), like the JSON codec; bytes
    values survive a round trip. Construction fails with ``ConfigurationError`` when the
    ``msgpack`` package is missing.
    """

    fairque_plugin_name = "fairque.msgpack"
    content_type = MSGPACK_CONTENT_TYPE

    def __init__(self, max_bytes: int | None = None, *, encodes: bool = True) -> None:
        if importlib.util.find_spec("msgpack") is None:
            raise ConfigurationError(
                "MsgpackCodec needs the msgpack package: pip install 'fairque[msgpack]'",
                path="plugins",
                value="MsgpackCodec",
            )
        self.max_bytes = _check_limit(max_bytes)
        self.encodes = encodes

    def dumps(self, payload: object) -> bytes:
        """``payload`` as MessagePack bytes (size limit applied)."""
        import msgpack

        if not isinstance(payload, Mapping):
            raise TaskSerializationError(
                f"a payload must be a mapping, not {type(payload).__name__}"
            )
        payload = dict(payload)
        check_str_keys(payload)
        try:
            body = msgpack.packb(payload, use_bin_type=True)
        except (TypeError, ValueError, OverflowError, RecursionError) as exc:
            raise TaskSerializationError(f"payload is not MessagePack-serializable: {exc}") from exc
        return _enforce(bytes(body), self.max_bytes)

    def loads(self, body: bytes) -> dict[str, Any]:
        """The dict in ``body``; TaskSerializationError with the reason otherwise."""
        import msgpack

        try:
            value = msgpack.unpackb(bytes(body), raw=False, strict_map_key=True)
        except Exception as exc:  # msgpack raises many types (ExtraData, FormatError, ...)
            raise TaskSerializationError(f"payload is not valid MessagePack: {exc!r}") from exc
        if not isinstance(value, dict):
            raise TaskSerializationError(
                f"payload decodes to {type(value).__name__}, not a MessagePack map"
            )
        return value

    @hookimpl
    def fairque_payload_encode(self, task: Task) -> tuple[bytes, str] | None:
        if not self.encodes:
            return None
        return self.dumps(task.payload), self.content_type

    @hookimpl
    def fairque_payload_decode(self, content_type: str, body: bytes) -> dict[str, Any] | None:
        if media_type(content_type) not in _MSGPACK_ALIASES:
            return None
        return self.loads(body)
