"""The lean push call of one message (``TaskCalls.push_one``, ``RedisBackend.push``'s path)
is the call ``push([message])`` makes: the same ARGV, the same answer to every reply, the same
refusals with the same errors. Also: ``Task.create`` has no wrapper and refuses bad calls as
Python does, and the unchecked builders refuse to run on a class whose fields they do not
know. No server: the calls are built and their parsers fed."""

from __future__ import annotations

import inspect
import json
import warnings
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fairque_core import Priority, Task
from fairque_core.accel.builders import _slot_setters
from fairque_core.domain.errors import (
    FairQueueError,
    PayloadTooLargeError,
    ScriptContractError,
    TaskSerializationError,
)
from fairque_core.domain.models import Message
from fairque_core.ports import json_codec as builtin_plugins
from fairque_core.ports import random_token
from fairque_core.ports.json_codec import decode_json
from fairque_core.settings.config import QueueConfig
from fairque_redis.keys import KeySpace
from fairque_redis.scripting.calls import ScriptCalls, records


class Text(str):
    """A valid id of a str subclass: the lean check leaves it to ``check_message``."""


def _planner(max_payload_bytes: int = 64) -> ScriptCalls:
    config = QueueConfig(name="q", max_payload_bytes=max_payload_bytes)
    return ScriptCalls(KeySpace("q"), config, lambda: 1_700_000_000.5, random_token)


ids = st.text("abcXYZ019_.:@/+=#-", min_size=1, max_size=10)
odd_ids = st.one_of(st.sampled_from(["", "a b", "{x}", "x" * 129, 5, None]), ids.map(Text))
messages = st.builds(
    Message,
    task_id=st.one_of(ids, odd_ids),
    tenant=st.one_of(ids, odd_ids),
    priority=st.one_of(st.sampled_from(Priority), st.sampled_from([3, "3", None])),
    body=st.binary(max_size=80),
    content_type=st.sampled_from(["application/json", "text/plain"]),
    max_retries=st.integers(0, 5),
    created_at=st.one_of(st.floats(0, 2e9), st.integers(0, 2**31)),
    delay=st.one_of(st.just(0), st.just(0.0), st.just(-0.0), st.floats(0, 1e6)),
    depends_on=st.lists(st.one_of(ids, odd_ids), max_size=2).map(tuple),
    headers=st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=2),
    name=st.text(max_size=4),
    unique_key=st.one_of(st.just(""), ids, odd_ids),
    unique_window=st.floats(0, 100),
)


def _built(make: Any) -> Any:
    try:
        return make()
    except (FairQueueError, TypeError, ValueError) as exc:
        return type(exc)


@given(messages)
def test_push_one_builds_the_call_push_builds(message: Message) -> None:
    planner = _planner()
    one = _built(lambda: planner.push_one(message))
    many = _built(lambda: planner.push([message]))
    if isinstance(many, type):  # refused: by the same error
        assert one is many
        return
    assert one.script == many.script == "push"
    assert one.writes == many.writes
    assert one.args == many.args
    assert [type(a) for a in one.args] == [type(a) for a in many.args]


REPLIES: list[Any] = [[1], [0], [True], [False], [b"holder"], ["holder"], [1.0]]
BAD_REPLIES: list[Any] = [[2], [], [1, 1], "1", None, 1, [None], [[1]], [b"h", 1]]


@pytest.mark.parametrize("reply", REPLIES + BAD_REPLIES)
def test_push_one_reads_every_reply_as_push_does(reply: Any) -> None:
    planner = _planner()
    message = Message(task_id="t1", tenant="u", priority=Priority.NORMAL, body=b"{}")
    one = _built(lambda: planner.push_one(message).parse(reply))
    many = _built(lambda: planner.push([message]).parse(reply))
    assert one == many
    if reply in BAD_REPLIES:
        assert one is ScriptContractError
    else:
        assert type(one) is list
        assert type(one[0]) is bool


def test_push_detailed_reads_mixed_replies() -> None:
    planner = _planner()
    batch = [
        Message(task_id=f"t{i}", tenant="u", priority=Priority.NORMAL, body=b"{}") for i in range(4)
    ]
    parse = planner.push_detailed(batch).parse
    assert parse([1, 0, b"held", "other"]) == [
        (True, "t0"),
        (False, "t1"),
        (False, "held"),
        (False, "other"),
    ]
    for bad in ([1, 0, 2, 1], [1, 0, None, 1], [1, 0, 1], "1010"):
        with pytest.raises(ScriptContractError):
            parse(bad)


def test_a_payload_over_the_limit_is_refused_on_both_paths() -> None:
    planner = _planner(max_payload_bytes=4)
    message = Message(task_id="t", tenant="u", priority=Priority.NORMAL, body=b"12345")
    for make in (lambda: planner.push_one(message), lambda: planner.push([message])):
        with pytest.raises(PayloadTooLargeError):
            make()


# ---------------------------------------------------------------- Task.create's signature


def test_create_has_no_wrapper_and_shows_its_declared_signature() -> None:
    assert not hasattr(Task.create, "__wrapped__")
    assert Task.create.__name__ == "_create"
    params = inspect.signature(Task.create).parameters
    assert list(params)[:3] == ["tenant", "priority", "payload"]
    assert params["tenant"].default is inspect.Parameter.empty
    assert all(p.kind is not p.VAR_KEYWORD for p in params.values())
    assert "user_id" not in params


def test_create_refuses_bad_calls_as_python_does() -> None:
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'tenant'"):
        Task.create()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="unexpected keyword argument 'tenant_id'"):
        Task.create("a", tenant_id="b")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="unexpected keyword argument 'colour'"):
        Task.create("a", colour="red")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="multiple values for argument 'tenant'"):
        Task.create("a", tenant="b")  # type: ignore[misc]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert Task.create("a", task_id="x").tenant == "a"


# ---------------------------------------------------------------- unchecked builders


def test_slot_setters_refuse_fields_they_do_not_know() -> None:
    with pytest.raises(RuntimeError, match="fields are"):
        _slot_setters(Message, "task_id tenant")
    # 17 fields since keep_result (ADR 78), expires_ms (ADR 77) and limit_key (ADR 79)
    assert len(_slot_setters(Message, " ".join(f.name for f in attrs.fields(Message)))) == 17


# ---------------------------------------------------------------- JSON read by the scanner

json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=4)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=8,
)
documents = st.one_of(
    st.builds(
        lambda value, before, after: before + json.dumps(value) + after,
        json_values,
        st.sampled_from(["", " ", "\n\t", "\ufeff"]),
        st.sampled_from(["", " ", "\n", "x", "1", "{}", ",", "]"]),
    ),
    st.sampled_from(["", " ", "{", '{"a":}', "NaN", '{"a": NaN}', "[1,]", "\u2028", "{}{}"]),
    st.text(max_size=6),
)


def _read_json(read: Any, text: str) -> Any:
    try:
        return ("value", read(text))
    except Exception as exc:  # the error's type and words are part of the behaviour
        return ("error", type(exc), str(exc))


@given(documents)
def test_the_payload_decoder_answers_as_decode_did(text: str) -> None:
    reference = json.JSONDecoder(parse_constant=builtin_plugins._refuse_constant)

    def before(doc: str) -> Any:  # decode_json as it was: the whole decode
        try:
            if doc.startswith("\ufeff"):
                raise ValueError("Unexpected UTF-8 BOM")
            value = reference.decode(doc)
        except (ValueError, RecursionError, TypeError) as exc:
            raise TaskSerializationError(f"payload is not valid UTF-8 JSON: {exc}") from exc
        if not isinstance(value, dict):
            raise TaskSerializationError(
                f"payload decodes to {type(value).__name__}, not a JSON object"
            )
        return value

    body = text.encode("utf-8", "surrogatepass")
    assert _read_json(lambda _t: decode_json(body), text) == _read_json(before, text)


@given(documents)
def test_the_record_meta_decoder_answers_as_decode_did(text: str) -> None:
    body = text.encode("utf-8", "surrogatepass")
    assert _read_json(lambda _t: records._meta(body), text) == _read_json(
        lambda _t: json.loads(body), text
    )
