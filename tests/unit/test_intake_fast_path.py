"""The producer's fast path (issue 17, ADR 50): a plain message's intake entry made in one step
is the entry the general path writes, byte for byte, and everything else still takes the
general path and its typed errors; ``to_message`` and the handles keep what they made."""

from __future__ import annotations

import math
import pickle
import time
from typing import Any

import attrs
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from fairque_core import (
    FairQueue,
    Message,
    PayloadTooLargeError,
    Priority,
    QueueConfig,
    Task,
    TaskValidationError,
)
from fairque_core.app.engine.handles import TaskHandle
from fairque_core.app.engine.handles_async import AsyncTaskHandle
from fairque_core.app.engine.messages import to_message
from fairque_core.app.plugins.host import PluginHost
from fairque_core.domain.errors import FairQueueError
from fairque_core.domain.validation import is_valid_id
from fairque_core.memory.model import InMemoryBackend
from fairque_core.ports import random_token
from fairque_core.ports.hooks import hookimpl
from fairque_redis.accel import intake
from fairque_redis.keys import KeySpace
from fairque_redis.scripting.calls import ScriptCalls
from fairque_redis.scripting.calls import intake as reference

LIMIT = 300


def _planner(limit: int = LIMIT) -> ScriptCalls:
    config = QueueConfig(name="q", max_payload_bytes=limit)
    return ScriptCalls(KeySpace("q"), config, None, random_token)


class Sub(str):
    """A str subclass: valid by the validators, never plain."""


_ids = st.one_of(
    st.from_regex(r"[A-Za-z0-9_.:@/+=#-]{1,8}", fullmatch=True),
    st.just("a" * 128),
    st.just("a" * 129),  # too long
    st.sampled_from(["", "a|b", "ü", "a b", "x\n"]),  # not of the grammar
    st.builds(Sub, st.sampled_from(["sub", "a|b"])),
)
_numbers = st.one_of(
    st.sampled_from([0, 0.0, -0.0, 1, 2.5, -3.0, math.inf, -math.inf, math.nan, True]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(10**6), 10**6),
)
_messages = st.builds(
    lambda **kw: attrs.evolve(_BASE, **kw),
    task_id=_ids,
    tenant=_ids,
    priority=st.one_of(st.sampled_from(list(Priority)), st.sampled_from([3, 0, "3"])),
    body=st.one_of(st.binary(max_size=LIMIT + 2), st.builds(bytearray, st.binary(max_size=4))),
    content_type=st.sampled_from(["application/json", "text/plain", Sub("application/json")]),
    max_retries=st.one_of(st.integers(0, 50), st.just(True)),
    created_at=_numbers,
    delay=_numbers,
    depends_on=st.sampled_from([(), ("dep-1",)]),
    headers=st.sampled_from([{}, {"k": "v"}]),
    name=st.sampled_from(["", "job"]),
    unique_key=st.sampled_from(["", "u-1"]),
    unique_window=st.sampled_from([0.0, 5.0]),
)
_BASE = Message(task_id="t", tenant="u", priority=Priority.NORMAL, body=b"{}")
_valid_ids = st.from_regex(r"[A-Za-z0-9_.:@/+=#-]{1,128}", fullmatch=True)
_plain_messages = st.builds(  # what the fast path takes, and a field off here and there
    lambda **kw: attrs.evolve(_BASE, **kw),
    task_id=st.one_of(_valid_ids, st.uuids().map(str)),
    tenant=_valid_ids,
    priority=st.sampled_from(list(Priority)),
    body=st.binary(max_size=LIMIT),
    max_retries=st.integers(0, 1000),
    created_at=st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.just(time.time())),
    delay=st.sampled_from([0, 0.0, -0.0]),
)
_any_messages = st.one_of(_plain_messages, _messages)


def _general(planner: ScriptCalls, messages: list[Message]) -> list[bytes] | BaseException:
    """The path every message took before the fast path: check all, then encode each."""
    try:
        reference.check_messages(planner, messages)
        return [reference.encode_entry(m) for m in messages]
    except Exception as exc:
        return exc


def _fast(planner: ScriptCalls, messages: list[Message]) -> list[bytes] | BaseException:
    try:
        return intake.encode_entries(planner, messages)
    except Exception as exc:
        return exc


def _same(left: list[bytes] | BaseException, right: list[bytes] | BaseException) -> None:
    if isinstance(left, BaseException) or isinstance(right, BaseException):
        assert type(left) is type(right), (left, right)
        assert str(left) == str(right)
    else:
        assert left == right


@settings(max_examples=800, deadline=None)
@given(_any_messages)
def test_a_plain_entry_is_the_general_paths_entry(message: Message) -> None:
    planner = _planner()
    entry = intake.plain_entry(message, LIMIT)
    general = _general(planner, [message])
    event("plain" if entry is not None else "general")
    if entry is not None:
        assert general == [entry]  # checked as the general path checks, the same bytes
        decoded = reference.decode_entry(entry)
        assert decoded is not None
        assert (decoded.task_id, decoded.tenant, decoded.body) == (
            message.task_id,
            message.tenant,
            bytes(message.body),
        )
    _same(_fast(planner, [message]), general)


@settings(max_examples=300, deadline=None)
@given(st.lists(_any_messages, min_size=1, max_size=5))
def test_a_batch_answers_as_the_general_path(messages: list[Message]) -> None:
    """Entries, or the error the first failing message earns, as before; plain and not plain
    mixed in any order."""
    planner = _planner()
    _same(_fast(planner, messages), _general(planner, messages))


@settings(max_examples=300, deadline=None)
@given(_ids, _ids)
def test_the_one_head_match_is_the_two_id_checks(task_id: str, tenant: str) -> None:
    task_id, tenant = str(task_id), str(tenant)  # plain_entry tests the types apart
    head = f"1|{task_id}|{tenant}|"
    both = is_valid_id(task_id) and is_valid_id(tenant)
    assert (intake._PLAIN_HEAD(head) is not None) == both


def test_tasks_made_by_create_take_the_fast_path_with_the_same_bytes() -> None:
    planner = _planner(10_000)
    host = PluginHost(load_entrypoints=False)
    config = planner.config
    for i in range(300):
        payload: dict[str, Any] = {"t": time.time(), "i": i, "s": "é" * (i % 3), "l": [i]}
        task = Task.create(f"tenant-{i % 7}", Priority(1 + i % 6), payload, max_retries=i % 9)
        message = to_message(task, host, config)
        entry = intake.plain_entry(message, config.max_payload_bytes)
        assert entry is not None
        assert [entry] == _general(planner, [message])


def test_what_is_not_plain_raises_what_it_raised() -> None:
    planner = _planner()
    ready = Message(task_id="a", tenant="u", priority=Priority.NORMAL, body=b"{}")
    cases: list[tuple[Message, type[FairQueueError], str]] = [
        (attrs.evolve(ready, delay=1.0), TaskValidationError, "delay"),
        (attrs.evolve(ready, depends_on=("b",)), TaskValidationError, "depends_on"),
        (attrs.evolve(ready, unique_key="k"), TaskValidationError, "unique_key"),
        (attrs.evolve(ready, tenant="a|b"), TaskValidationError, "tenant"),
        (attrs.evolve(ready, task_id="x" * 129), TaskValidationError, "task_id"),
        (attrs.evolve(ready, body=b"x" * (LIMIT + 1)), PayloadTooLargeError, ""),
    ]
    for message, error, field in cases:
        assert intake.plain_entry(message, LIMIT) is None
        with pytest.raises(error) as info:
            intake.encode_entries(planner, [ready, message])  # the second one refuses both
        assert field in str(info.value)


def _reference_message(task: Task, host: PluginHost, config: QueueConfig, now: float) -> Message:
    """``to_message`` as it was written before the fast path (commit 21a4372)."""
    headers = host.push_headers(task, queue=config.name)
    if headers != task.headers:
        task = attrs.evolve(task, headers={**task.headers, **headers})
    body, content_type = host.encode(task)
    return Message(
        task_id=task.task_id,
        tenant=task.tenant,
        priority=task.priority,
        body=body,
        content_type=content_type,
        retry_count=0,
        max_retries=task.max_retries,
        created_at=task.created_at,
        delay=max(0.0, task.execute_after - now),
        depends_on=task.depends_on,
        headers=dict(task.headers),
        name=task.name,
        unique_key=task.unique_key,
        unique_window=task.unique_window_seconds,
    )


class _Tracing:
    """A plugin that adds a header (so ``to_message`` takes its evolve branch)."""

    @hookimpl
    def fairque_push_headers(self, headers: dict[str, str]) -> None:
        headers["trace"] = "t-1"


@settings(max_examples=200, deadline=None)
@given(
    headers=st.sampled_from([None, {"a": "1"}, {"trace": "old", "b": "2"}]),
    name=st.sampled_from(["", "job", "é"]),
    deps=st.sampled_from([(), ("d-1", "d-2")]),
    later=st.sampled_from([None, -5.0, 0.0, 3.0, math.nan]),
    tracing=st.booleans(),
)
def test_to_message_makes_what_it_made(
    headers: dict[str, str] | None,
    name: str,
    deps: tuple[str, ...],
    later: float | None,
    tracing: bool,
) -> None:
    host = PluginHost([_Tracing()] if tracing else [], load_entrypoints=False)
    config = QueueConfig(name="q", max_payload_bytes=10_000)
    now = time.time()
    task = Task.create("alice", payload={"n": 1}, headers=headers, name=name, depends_on=deps)
    if later is not None:
        task = attrs.evolve(task, execute_after=now + later) if not math.isnan(later) else task
    got = to_message(task, host, config, now)
    want = _reference_message(task, host, config, now)
    assert got == want
    assert type(got.headers) is dict
    assert got.headers is not task.headers


def test_to_message_keeps_its_refusals() -> None:
    host = PluginHost(load_entrypoints=False)
    small = QueueConfig(name="q", max_payload_bytes=20)
    task = Task.create("alice", payload={"n": 1})
    with pytest.raises(TaskValidationError, match="depend on itself"):
        to_message(attrs.evolve(task, depends_on=(task.task_id,)), host, small)
    with pytest.raises(TaskValidationError, match="reserved"):
        to_message(attrs.evolve(task, headers={"x-fairque-unreadable": "x"}), host, small)
    with pytest.raises(PayloadTooLargeError):  # the name counts toward the limit
        to_message(attrs.evolve(task, name="n" * 20), host, small)
    assert to_message(task, host, small).body == b'{"n":1}'


@pytest.mark.parametrize("kind", [TaskHandle, AsyncTaskHandle])
def test_handles_store_only_what_differs(kind: Any) -> None:
    plain = kind("t-1", None)
    assert (plain, plain.duplicate, plain.intake) == ("t-1", False, False)
    assert "duplicate" not in vars(plain)
    assert "intake" not in vars(plain)
    both = kind("t-2", None, duplicate=True, intake=True)
    assert (both.duplicate, both.intake, both.task_id) == (True, True, "t-2")
    assert repr(both) == f"{kind.__name__}('t-2', duplicate=True)"
    assert pickle.loads(pickle.dumps(both)) == "t-2"
    assert not kind("t-3", None).duplicate  # another handle's value is not shared


def test_push_intake_and_its_batch_store_the_same_entries() -> None:
    """The single push's own path and the batch's make the same messages (the model keeps
    them), with handles marked ``intake``."""
    config = QueueConfig(name="q", max_payload_bytes=600)
    model = InMemoryBackend(queue=config.name, config=config)
    queue = FairQueue(model)
    one = Task.create("alice", payload={"n": 1})
    two = Task.create("bob", payload={"n": 2})
    handle = queue.push_intake(one)
    [batched] = queue.push_intake_batch([two])
    assert (handle.intake, batched.intake, handle.duplicate) == (True, True, False)
    got = queue.claim_batch(5)
    assert sorted((t.task_id, dict(t.payload)["n"]) for t in got) == sorted(
        [(one.task_id, 1), (two.task_id, 2)]
    )
