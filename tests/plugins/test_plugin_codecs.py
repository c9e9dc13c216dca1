"""Codec plugins: round trips, strictness, size limits, dispatch by content type."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fairque_core import PayloadTooLargeError, Task, TaskSerializationError
from fairque_core.app.plugins.host import PluginHost
from fairque_core.domain.errors import ConfigurationError
from fairque_plugins import JsonCodec, MsgpackCodec

needs_msgpack = pytest.mark.skipif(
    importlib.util.find_spec("msgpack") is None, reason="msgpack is not installed"
)

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=20,
)
json_payloads = st.dictionaries(st.text(), json_values, max_size=6)
msgpack_payloads = st.dictionaries(
    st.text(),
    st.recursive(json_scalars | st.binary(), lambda i: st.lists(i, max_size=4)),
    max_size=6,
)


def task_with(payload: dict[str, Any]) -> Task:
    return Task(task_id="t-1", tenant="tenant-a", payload=payload)


def host(*plugins: object) -> PluginHost:
    return PluginHost(plugins, load_entrypoints=False)


@given(json_payloads)
def test_json_round_trip(payload: dict[str, Any]) -> None:
    h = host(JsonCodec())
    body, content_type = h.encode(task_with(payload))
    assert content_type == "application/json"
    assert h.decode(content_type, body) == payload


@needs_msgpack
@given(msgpack_payloads)
def test_msgpack_round_trip(payload: dict[str, Any]) -> None:
    h = host(MsgpackCodec())
    body, content_type = h.encode(task_with(payload))
    assert content_type == "application/msgpack"
    assert h.decode(content_type, body) == payload


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_json_rejects_nan_and_infinity(bad: float) -> None:
    with pytest.raises(TaskSerializationError, match="JSON"):
        host(JsonCodec()).encode(task_with({"x": [1, {"y": bad}]}))


def test_json_rejects_non_str_keys_and_objects() -> None:
    with pytest.raises(TaskSerializationError, match="not a str"):
        JsonCodec().dumps({"x": {1: "a"}})
    with pytest.raises(TaskSerializationError):
        JsonCodec().dumps({"x": {1, 2}})
    with pytest.raises(TaskSerializationError, match="mapping"):
        JsonCodec().dumps([1, 2])


def test_oversize_payload_is_refused_before_io() -> None:
    codec = JsonCodec(max_bytes=32)
    assert len(codec.dumps({"x": "a" * 10})) <= 32
    with pytest.raises(PayloadTooLargeError) as info:
        host(codec).encode(task_with({"x": "a" * 100}))
    assert info.value.limit == 32
    assert info.value.size > 32


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_bad_limit_is_a_configuration_error(bad: Any) -> None:
    with pytest.raises(ConfigurationError):
        JsonCodec(max_bytes=bad)


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"\xff\x00", "UTF-8"),
        (b'{"a": 1', "JSON"),
        (b"[1, 2, 3]", "not a JSON object"),
        (b'{"a": NaN}', "NaN"),
        (b'{"a": Infinity}', "Infinity"),
    ],
)
def test_undecodable_json_bytes(body: bytes, reason: str) -> None:
    with pytest.raises(TaskSerializationError, match=reason):
        host(JsonCodec()).decode("application/json", body)


@needs_msgpack
@pytest.mark.parametrize(
    "body", [b"\xc1", b"\x93\x01\x02\x03", b"\x81\x01\xa1a", b"\x81\xa1a", b"\x81\xa1a\x01\x02"]
)
def test_undecodable_msgpack_bytes(body: bytes) -> None:
    with pytest.raises(TaskSerializationError):
        host(MsgpackCodec()).decode("application/msgpack", body)


@needs_msgpack
def test_msgpack_rejects_non_str_keys_and_unknown_types() -> None:
    with pytest.raises(TaskSerializationError, match="not a str"):
        MsgpackCodec().dumps({"x": {1: "a"}})
    with pytest.raises(TaskSerializationError, match="MessagePack"):
        MsgpackCodec().dumps({"x": object()})


@needs_msgpack
def test_first_codec_encodes_and_decoding_follows_content_type() -> None:
    payload = {"n": 1, "s": "x"}
    producer_msgpack = host(MsgpackCodec(), JsonCodec())
    producer_json = host(JsonCodec(), MsgpackCodec())
    worker = host(JsonCodec(encodes=False), MsgpackCodec(encodes=False))
    body_m, type_m = producer_msgpack.encode(task_with(payload))
    body_j, type_j = producer_json.encode(task_with(payload))
    assert (type_m, type_j) == ("application/msgpack", "application/json")
    assert worker.decode(type_m, body_m) == payload
    assert worker.decode(type_j, body_j) == payload
    assert worker.decode("application/json; charset=utf-8", body_j) == payload
    # a decode-only worker falls back to the core's strict JSON to encode
    assert worker.encode(task_with(payload))[1] == "application/json"


def test_unknown_content_type_is_a_serialization_error() -> None:
    with pytest.raises(TaskSerializationError, match="no codec"):
        host(JsonCodec()).decode("application/x-pickle", b"...")


def test_msgpack_missing_gives_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec

    def fake(name: str, *args: Any) -> Any:
        return None if name == "msgpack" else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", fake)
    with pytest.raises(ConfigurationError, match=r"fairque\[msgpack\]"):
        MsgpackCodec()
