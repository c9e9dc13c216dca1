"""The lean client paths of issue 17 give what the checked paths give, and refuse what they
refuse, with the same typed errors.

``Task.create`` and the decoding of a claimed record build a Task without running the attrs
validators when every value is plainly valid; the plugin host calls the built-in JSON codec
directly while it is the only codec; a claimed task's XCom context is built when its handler
asks for it. Each is compared here with the path it short-cuts.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import attrs
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from fairque_core import (
    FairQueue,
    FairQueueError,
    Priority,
    Task,
    TaskSerializationError,
    TaskTypeError,
    TaskValidationError,
    current_task_context,
)
from fairque_core.app import context
from fairque_core.app.accel.builders import model_build
from fairque_core.app.accel.plugin_shortcuts import host_class
from fairque_core.app.engine.messages import decode_message, to_message
from fairque_core.app.plugins.host import PluginHost
from fairque_core.domain.models import Lease, Message, new_task_id
from fairque_core.domain.validation import check_mapping
from fairque_core.memory.model import InMemoryBackend
from fairque_core.ports.hooks import hookimpl
from fairque_core.settings.accel import Accelerators
from fairque_core.settings.config import QueueConfig

# ---------------------------------------------------------------- values, valid and not


class Text(str):
    """A str subclass: valid, but not a plain str (the lean paths leave it to the validators)."""


_ID_CHARS = "abcXYZ019_.:@/+=#-"
ids = st.text(_ID_CHARS, min_size=1, max_size=12)
valid_ids = ids
# not plain: bad, or valid but a str subclass (the validators judge those)
bad_ids = st.one_of(
    st.sampled_from(["", "a b", "{x}", "x" * 129, "é", 7, None, b"raw"]), ids.map(Text)
)
times = st.one_of(
    st.floats(0, 253_402_300_799.0), st.integers(0, 10**11), st.just(253_402_300_799.0)
)
counts = st.one_of(st.integers(0, 10), st.just(2**31 - 1))
windows = st.one_of(st.floats(0, 1e308), st.integers(0, 10**6), st.just(0))
bad_numbers = st.sampled_from(
    [-1, -0.5, float("nan"), float("inf"), True, "3", None, 2**31, 2**1100, 253_402_300_800.0]
)
dep_lists = st.one_of(st.lists(valid_ids, max_size=3), st.lists(ids, max_size=3).map(tuple))
bad_deps = st.one_of(
    st.sampled_from(["ab", b"ab", {"a": 1}, None, 5]), st.lists(bad_ids, min_size=1, max_size=2)
)
header_maps = st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=3)
bad_headers = st.sampled_from(["h", [("a", "b")], {1: "x"}, {"a": 1}, 5])
names = st.text(max_size=8)
bad_names = st.one_of(st.sampled_from([None, 5, b"n"]), st.text(max_size=3).map(Text))


def fields(
    valid: dict[str, st.SearchStrategy[Any]],
    invalid: dict[str, st.SearchStrategy[Any]],
    broken: str | None,
) -> st.SearchStrategy[dict[str, Any]]:
    """One value per field: plain valid ones, but for the field ``broken`` one that is not
    (a bad value, or a valid one of a subclass)."""
    return st.fixed_dictionaries(
        {name: invalid[name] if name == broken else value for name, value in valid.items()}
    )


def _outcome(make: Callable[[], Task]) -> Task | type[BaseException]:
    try:
        return make()
    except FairQueueError as exc:
        return type(exc)


def _same(left: Task, right: Task) -> None:
    assert left == right
    for field in attrs.fields(Task):
        a, b = getattr(left, field.name), getattr(right, field.name)
        assert type(a) is type(b), field.name
    assert left.lease == right.lease


# ---------------------------------------------------------------- task ids


def test_new_task_ids_are_uuid4_text() -> None:
    made = [new_task_id() for _ in range(2000)]
    assert len(set(made)) == len(made)
    for text in made:
        parsed = uuid.UUID(text)
        assert str(parsed) == text
        assert parsed.version == 4
        assert parsed.variant == uuid.RFC_4122
    assert Task.create("t").task_id != Task.create("t").task_id


# ---------------------------------------------------------------- Task.create


CREATE_VALID = {
    "tenant": valid_ids,
    "task_id": st.one_of(st.none(), valid_ids),
    "priority": st.one_of(st.sampled_from(list(Priority)), st.integers(1, 6)),
    "payload": st.one_of(
        st.none(), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2)
    ),
    "max_retries": counts,
    "execute_after": st.one_of(st.none(), times),
    "depends_on": dep_lists,
    "headers": st.one_of(st.none(), header_maps),
    "name": names,
    "unique_key": st.one_of(st.none(), st.just(""), valid_ids),
    "window": st.one_of(st.none(), windows),
}
CREATE_INVALID = {
    "tenant": bad_ids,
    "task_id": bad_ids.filter(lambda v: v is not None),
    "priority": st.sampled_from([0, 7, True, 3.0, "3"]),
    "payload": st.sampled_from([[1], "p", 5]),
    "max_retries": bad_numbers,
    "execute_after": bad_numbers.filter(lambda v: v is not None),
    "depends_on": bad_deps,
    "headers": bad_headers,
    "name": bad_names,
    "unique_key": bad_ids.filter(lambda v: v not in ("", None)),
    "window": bad_numbers.filter(lambda v: v is not None),
}


@pytest.mark.parametrize("broken", [None, *CREATE_INVALID])
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_create_matches_the_validated_constructor(broken: str | None, data: st.DataObject) -> None:
    values = data.draw(fields(CREATE_VALID, CREATE_INVALID, broken))
    tenant, task_id, priority, payload = (
        values["tenant"],
        values["task_id"],
        values["priority"],
        values["payload"],
    )
    max_retries, execute_after, depends_on = (
        values["max_retries"],
        values["execute_after"],
        values["depends_on"],
    )
    headers, name, unique_key, window = (
        values["headers"],
        values["name"],
        values["unique_key"],
        values["window"],
    )
    made = _outcome(
        lambda: Task.create(
            tenant,
            priority,
            payload,
            task_id=task_id,
            max_retries=max_retries,
            execute_after=execute_after,
            depends_on=depends_on,
            headers=headers,
            name=name,
            unique_key=unique_key,
            unique_window_seconds=window,
        )
    )
    created = made.created_at if isinstance(made, Task) else 1_700_000_000.0

    def checked() -> Task:  # what create did before it had a lean path
        priority_ = priority
        if not isinstance(priority, Priority):
            try:
                priority_ = Priority.from_int(priority)
            except ValueError as exc:
                raise TaskValidationError("priority", priority, "must be 1-6") from exc
        return Task(
            task_id=task_id if task_id is not None else getattr(made, "task_id", "t-1"),
            tenant=tenant,
            priority=priority_,
            payload=dict(check_mapping(payload, "payload")) if payload is not None else {},
            max_retries=max_retries,
            created_at=created,
            execute_after=execute_after if execute_after is not None else created,
            depends_on=depends_on,
            headers=headers,
            name=name,
            unique_key=unique_key if unique_key is not None else "",
            unique_window_seconds=window or 0.0,
        )

    reference = _outcome(checked)
    event("built" if isinstance(made, Task) else "refused")
    if isinstance(made, Task):
        assert isinstance(reference, Task)
        _same(made, reference)
    else:
        assert reference is made


def test_create_still_raises_typed_errors() -> None:
    with pytest.raises(TaskValidationError):
        Task.create("bad id")
    with pytest.raises(TaskTypeError):
        Task.create("u", name=5)  # type: ignore[arg-type]
    with pytest.raises(TaskTypeError):
        Task.create("u", depends_on="abc")
    with pytest.raises(TaskValidationError):
        Task.create("u", execute_after=float("nan"))
    with pytest.raises(TaskValidationError):
        Task.create("u", unique_window_seconds=-1)
    with pytest.raises(TaskValidationError):
        Task.create("u", 9)


# ---------------------------------------------------------------- decoding a claimed record

HOST = PluginHost(load_entrypoints=False)
LEASE = Lease(token="tok", deadline=5.0, worker_id="w")


DECODE_VALID = {
    "task_id": valid_ids,
    "tenant": valid_ids,
    "priority": st.sampled_from(list(Priority)),
    "retry_count": counts,
    "max_retries": counts,
    "created_at": times,
    "delay": st.one_of(st.floats(-10, 1e6), st.integers(-10, 10**6), st.just(float("nan"))),
    "depends_on": st.lists(valid_ids, max_size=3).map(tuple),
    "headers": header_maps,
    "name": names,
    "unique_key": st.one_of(st.just(""), valid_ids),
    "window": windows,
    "lease": st.sampled_from([None, LEASE]),
}
DECODE_INVALID = {
    "task_id": bad_ids,
    "tenant": bad_ids,
    "priority": st.sampled_from([3, 0, "3", None]),
    "retry_count": bad_numbers,
    "max_retries": bad_numbers,
    "created_at": bad_numbers,
    "delay": st.sampled_from([float("inf"), 1e308, 2**1100, "1", None]),
    "depends_on": st.one_of(
        bad_deps,
        st.lists(ids, max_size=2),  # a list: valid, but not what a backend hands out
        st.lists(bad_ids, min_size=1, max_size=2).map(tuple),
    ),
    "headers": bad_headers,
    "name": bad_names,
    "unique_key": bad_ids.filter(lambda v: v != ""),
    "window": bad_numbers,
    "lease": st.sampled_from(["tok", 5]),
}


SWITCHES = [Accelerators(), Accelerators.none()]


@pytest.mark.parametrize("accel", SWITCHES, ids=["on", "off"])
@pytest.mark.parametrize("broken", [None, *DECODE_INVALID])
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_decoding_matches_the_validated_constructor(
    accel: Accelerators, broken: str | None, data: st.DataObject
) -> None:
    """prebuilt_builders' equivalence: decoding with the switch on or off gives the task the
    validated constructor gives, field by field, or TaskSerializationError when it refuses."""
    build = model_build(accel)
    values = data.draw(fields(DECODE_VALID, DECODE_INVALID, broken))
    task_id, tenant, priority, retry_count, max_retries = (
        values["task_id"],
        values["tenant"],
        values["priority"],
        values["retry_count"],
        values["max_retries"],
    )
    created_at, delay, depends_on, headers, name = (
        values["created_at"],
        values["delay"],
        values["depends_on"],
        values["headers"],
        values["name"],
    )
    unique_key, window, lease = values["unique_key"], values["window"], values["lease"]
    message = Message(
        task_id=task_id,
        tenant=tenant,
        priority=priority,
        body=b'{"n":1}',
        retry_count=retry_count,
        max_retries=max_retries,
        created_at=created_at,
        delay=delay,
        depends_on=depends_on,
        headers=headers,
        name=name,
        unique_key=unique_key,
        unique_window=window,
    )

    def checked() -> Task:  # what decoding did before it had a lean path
        return Task(
            task_id=task_id,
            tenant=tenant,
            priority=priority,
            payload={"n": 1},
            retry_count=retry_count,
            max_retries=max_retries,
            created_at=created_at,
            execute_after=created_at + max(0.0, delay),
            depends_on=depends_on,
            headers=message.headers,
            name=name,
            unique_key=unique_key,
            unique_window_seconds=window,
            lease=lease,
        )

    try:
        reference: Task | None = checked()
    except (FairQueueError, TypeError, ValueError, OverflowError):
        reference = None
    event("built" if reference is not None else "refused")
    if reference is None:
        with pytest.raises(TaskSerializationError):
            decode_message(message, HOST, lease, build)
    else:
        _same(decode_message(message, HOST, lease, build), reference)


@pytest.mark.parametrize("accel", SWITCHES, ids=["on", "off"])
def test_push_then_decode_round_trips(accel: Accelerators) -> None:
    build = model_build(accel)
    config = QueueConfig(name="q")
    task = Task.create(
        "u-1",
        Priority.HIGH,
        {"a": [1, {"b": "é"}]},
        depends_on=["p-1"],
        headers={"h": "v"},
        name="job",
        unique_key="k",
        unique_window_seconds=2.5,
        execute_after=2_000_000_000.0,
    )
    message = to_message(task, HOST, config, task.created_at, build)
    assert attrs.asdict(message, recurse=False) == attrs.asdict(
        to_message(task, HOST, config, task.created_at), recurse=False
    )
    back = decode_message(message, HOST, LEASE, build)
    assert back.execute_after == pytest.approx(task.execute_after)  # created + delay
    assert attrs.evolve(back, execute_after=task.execute_after) == task
    assert back.lease is LEASE


# ---------------------------------------------------------------- the codec shortcut


class Marked:
    """A codec of its own content type (any codec plugin turns the JSON shortcut off)."""

    fairque_plugin_name = "marked"

    @hookimpl
    def fairque_payload_encode(self, task: Task) -> tuple[bytes, str]:
        return b"M" + repr(sorted(task.payload)).encode(), "text/marked"

    @hookimpl
    def fairque_payload_decode(self, content_type: str, body: bytes) -> dict[str, Any] | None:
        return {"marked": body.decode()} if content_type == "text/marked" else None


class Listener:
    fairque_plugin_name = "listener"

    def __init__(self) -> None:
        self.seen: list[str] = []

    @hookimpl
    def fairque_task_event(self, event: str) -> None:
        self.seen.append(event)


class Wrapping:
    """A wrapper around the JSON codec: pluggy's call loop must run it."""

    fairque_plugin_name = "wrapping"

    def __init__(self) -> None:
        self.calls = 0

    @hookimpl(wrapper=True)
    def fairque_payload_encode(self, task: Task) -> Any:
        self.calls += 1
        return (yield)


@pytest.mark.parametrize("accel", SWITCHES, ids=["on", "off"])
def test_codec_shortcut_follows_registration(accel: Accelerators) -> None:
    host = host_class(accel)(load_entrypoints=False)
    task = Task.create("u", payload={"x": 1})
    assert host.encode(task) == (b'{"x":1}', "application/json")
    name = host.register(Marked())
    assert host.encode(task) == (b"M['x']", "text/marked")
    assert host.decode("text/marked", b"y") == {"marked": "y"}
    host.unregister(name)
    assert host.encode(task) == (b'{"x":1}', "application/json")
    with pytest.raises(TaskSerializationError, match="no codec"):
        host.decode("text/marked", b"y")
    wrapper = Wrapping()
    host.register(wrapper)
    assert host.encode(task) == (b'{"x":1}', "application/json")
    assert wrapper.calls == 1


@pytest.mark.parametrize("accel", SWITCHES, ids=["on", "off"])
def test_event_and_header_shortcuts_follow_registration(accel: Accelerators) -> None:
    host = host_class(accel)(load_entrypoints=False)
    task = Task.create("u", headers={"a": "b"})
    assert not host.has_event_listeners()
    assert host.push_headers(task) == {"a": "b"}
    listener = Listener()
    name = host.register(listener)
    assert host.has_event_listeners()
    host.task_event("pushed", task, "q")
    assert listener.seen == ["pushed"]
    host.unregister(name)
    assert not host.has_event_listeners()


def test_content_type_parameters_still_decode() -> None:
    assert HOST.decode("Application/JSON; charset=utf-8", b'{"a":1}') == {"a": 1}


# ---------------------------------------------------------------- the lazy task context


def _queue() -> FairQueue:
    return FairQueue(InMemoryBackend(config=QueueConfig(name="q")))


def test_context_is_built_only_when_a_handler_asks() -> None:
    queue = _queue()
    queue.push_batch([Task.create("u", task_id=f"t{i}") for i in range(2)])
    quiet, asking = queue.claim_batch(2)
    for task in (quiet, asking):
        assert task.lease is not None
        assert not isinstance(
            context._CONTEXTS[(task.task_id, task.lease.token)], context.TaskContext
        )

    def handler() -> object:
        first = current_task_context()
        assert current_task_context() is first
        assert first.task.task_id == asking.task_id
        first.xcom_push("seen", [1, 2])
        return "done"

    assert queue.plugins.execute(asking, handler) == "done"
    assert asking.lease is not None
    built = context._CONTEXTS[(asking.task_id, asking.lease.token)]
    assert isinstance(built, context.TaskContext)
    assert queue.plugins.execute(quiet, lambda: "quiet") == "quiet"
    queue.finish(asking, "done")
    queue.finish(quiet, None)
    assert queue.xcom_pull(asking.task_id, "seen", tenant="u") == [1, 2]
    assert (asking.task_id, asking.lease.token) not in context._CONTEXTS
    assert quiet.lease is not None
    assert (quiet.task_id, quiet.lease.token) not in context._CONTEXTS


def test_context_outside_a_claim_has_no_queue() -> None:
    task = Task.create("u")
    with pytest.raises(FairQueueError, match="only available inside"):
        current_task_context()

    def handler() -> object:
        ctx = current_task_context()
        with pytest.raises(FairQueueError, match="not claimed"):
            ctx.xcom_pull("other")
        return ctx.tenant

    assert HOST.execute(task, handler) == "u"
