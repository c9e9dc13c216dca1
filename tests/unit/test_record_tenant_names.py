"""ADR 23 step 2: ``Task.tenant`` and ``Message.tenant`` are the fields, ``user_id`` their
deprecated spelling (property and keyword), ``TaskFunction.create(tenant, /, ...)``; and the
stored record does not change with the name."""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

import attrs
import pytest

from fairque_core import Priority, Task
from fairque_core.app.engine.messages import decode_message, to_message
from fairque_core.app.plugins.host import PluginHost
from fairque_core.app.worker.handlers import TaskRegistry
from fairque_core.domain.models import Lease, Message
from fairque_core.settings.config import QueueConfig
from fairque_redis.keys import KeySpace
from fairque_redis.scripting.calls import ScriptCalls, read_message

T = TypeVar("T")
HOST = PluginHost(load_entrypoints=False)


def _warned(new: str, call: Callable[[], T]) -> tuple[T, int]:
    """``call()``'s result and the line the one DeprecationWarning it raised points at (it
    must name ``new`` and this file)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = call()
    found = [w for w in caught if issubclass(w.category, DeprecationWarning)]
    assert len(found) == 1, [str(w.message) for w in caught]
    (warning,) = found
    assert new in str(warning.message)
    assert "deprecated" in str(warning.message)
    assert warning.filename == __file__
    return result, warning.lineno


def _silent(call: Callable[[], T]) -> T:
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        return call()


def _line() -> int:
    """The line of the caller's call to this function."""
    frame = inspect.currentframe()
    assert frame is not None
    assert frame.f_back is not None
    return frame.f_back.f_lineno


def _task(**fields: Any) -> Task:
    return Task(task_id="t-1", priority=Priority.HIGH, created_at=1.0, execute_after=2.0, **fields)


# ---------------------------------------------------------------- Task


def test_task_user_id_property_warns_at_the_caller_and_reads_the_tenant() -> None:
    task = Task.create("acme", task_id="t-1")
    here = _line() + 1
    value, line = _warned("Task.tenant", lambda: task.user_id)
    assert line == here
    assert value == task.tenant == "acme"


def test_task_user_id_property_is_read_only() -> None:
    task = Task.create("acme")
    with pytest.raises(AttributeError):
        task.user_id = "other"  # type: ignore[misc]
    assert task.tenant == "acme"


def test_task_constructor_user_id_keyword_warns_and_equals_tenant() -> None:
    times = {"created_at": 1.0, "execute_after": 1.0}
    here = _line() + 1
    old, line = _warned("tenant=", lambda: Task(task_id="t", user_id="acme", **times))
    assert line == here
    assert old == _silent(lambda: Task(task_id="t", tenant="acme", **times))
    assert old.tenant == "acme"


def test_task_create_user_id_keyword_warns_and_equals_tenant() -> None:
    here = _line() + 1
    old, line = _warned("tenant=", lambda: Task.create(user_id="acme", task_id="x"))
    assert line == here
    new = _silent(lambda: Task.create("acme", task_id="x"))
    assert attrs.evolve(old, created_at=new.created_at, execute_after=new.execute_after) == new
    assert _silent(lambda: Task.create(tenant="acme", task_id="x")).tenant == "acme"


def test_task_create_takes_tenant_priority_payload_positionally() -> None:
    task = _silent(lambda: Task.create("acme", Priority.CRITICAL, {"n": 1}))
    assert (task.tenant, task.priority, task.payload) == ("acme", Priority.CRITICAL, {"n": 1})


def test_both_spellings_at_once_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="both"):
        _task(user_id="a", tenant="a")
    with pytest.raises(TypeError, match="both"):
        Task.create(user_id="a", tenant="a")  # type: ignore[call-arg]
    task = Task.create("a")
    with pytest.raises(TypeError, match="both"):
        attrs.evolve(task, user_id="b")
    assert _silent(lambda: attrs.evolve(task, tenant="b")).tenant == "b"


def test_the_tenant_is_validated_under_its_new_name() -> None:
    from fairque_core.domain.errors import TaskValidationError

    with pytest.raises(TaskValidationError) as info:
        _task(tenant="has space")
    assert info.value.field == "tenant"
    with pytest.raises(TaskValidationError) as info:
        _warned("tenant=", lambda: _task(user_id="has space"))
    assert info.value.field == "tenant"


def test_asdict_shows_tenant() -> None:
    data = attrs.asdict(Task.create("acme"))
    assert data["tenant"] == "acme"
    assert "user_id" not in data


# ---------------------------------------------------------------- Message


NORMAL = Priority.NORMAL


def _message(**fields: Any) -> Message:
    return Message(task_id="t", priority=NORMAL, body=b"", **fields)


def test_message_user_id_property_warns_and_reads_the_tenant() -> None:
    message = _silent(lambda: _message(tenant="acme"))
    here = _line() + 1
    value, line = _warned("Message.tenant", lambda: message.user_id)
    assert line == here
    assert value == message.tenant == "acme"


def test_message_constructor_user_id_keyword_warns_and_equals_tenant() -> None:
    rest: dict[str, Any] = {"priority": NORMAL, "body": b""}
    here = _line() + 1
    old, line = _warned("tenant=", lambda: Message(task_id="t", user_id="a", **rest))
    assert line == here
    assert old == _silent(lambda: _message(tenant="a"))
    with pytest.raises(TypeError, match="both"):
        _message(user_id="a", tenant="a")


# ---------------------------------------------------------------- TaskFunction


def _registry() -> TaskRegistry:
    return TaskRegistry()


def test_task_function_takes_the_tenant_first_and_positional_only() -> None:
    reg = _registry()

    @reg.task(name="greet")
    def greet(tenant: str, n: int = 0) -> str:  # a handler with its own "tenant"
        return f"{tenant}{n}"

    task = _silent(lambda: greet("acme", "someone", n=2))
    assert task.tenant == "acme"
    assert task.payload == {"args": ["someone"], "kwargs": {"n": 2}}
    task = _silent(lambda: greet.create("acme", tenant="someone"))
    assert (task.tenant, task.payload["kwargs"]) == ("acme", {"tenant": "someone"})
    with pytest.raises(TypeError, match="missing the tenant"):
        greet.create()


def test_task_function_user_id_keyword_names_the_tenant_with_a_warning() -> None:
    reg = _registry()

    @reg.task(name="add")
    def add(a: int, b: int) -> int:
        return a + b

    here = _line() + 1
    old, line = _warned("first argument", lambda: add(user_id="acme", a=1, b=2))
    assert line == here
    new = _silent(lambda: add("acme", a=1, b=2, task_id=old.task_id))
    assert attrs.evolve(old, created_at=new.created_at, execute_after=new.execute_after) == new
    here = _line() + 1
    step, line = _warned("first argument", lambda: add.step(user_id="acme", b=2))
    assert line == here
    assert (step.tenant, step.payload) == ("acme", {"args": [], "kwargs": {"b": 2}})
    with pytest.raises(TypeError, match="both"):
        add("acme", 1, 2, user_id="other")


def test_task_function_with_a_user_id_parameter_keeps_it_as_its_argument() -> None:
    reg = _registry()

    @reg.task(name="audit")
    def audit(user_id: str) -> str:
        return user_id

    task = _silent(lambda: audit("acme", user_id="someone"))
    assert task.tenant == "acme"
    assert task.payload == {"args": [], "kwargs": {"user_id": "someone"}}


# ---------------------------------------------------------------- the stored record

# Taken from the codec's output before the rename (fairque at fc8b30e): the push script's
# ARGV for this task after its 7-value header, and the six fields a claim reads back
# (id, tenant "u", priority, retry count, meta JSON, body). The tenant is a position in both,
# never a key named after the attribute; records stored before the rename read the same.
LEGACY_PUSH_ARGS = [
    1,
    "t-legacy-1",
    "acme",
    4,
    10000,
    '["application/json",5,1700000000.25,10.0,["p-1"],{"h":"v"},"job","k-1",2.5]',
    b'{"n":1,"s":"\xc3\xa9"}',
    "k-1",
    2500,
    1,
    "p-1",
]
LEGACY_RECORD = [
    b"t-legacy-1",
    b"acme",
    b"4",
    b"0",
    b'["application/json",5,1700000000.25,10.0,["p-1"],{"h":"v"},"job","k-1",2.5]',
    b'{"n":1,"s":"\xc3\xa9"}',
]
NOW = 1_700_000_000.25


def _legacy_task() -> Task:
    return Task(
        task_id="t-legacy-1",
        tenant="acme",
        priority=Priority.HIGH,
        payload={"n": 1, "s": "é"},
        max_retries=5,
        created_at=NOW,
        execute_after=NOW + 10.0,
        depends_on=("p-1",),
        headers={"h": "v"},
        name="job",
        unique_key="k-1",
        unique_window_seconds=2.5,
    )


def test_a_new_task_is_pushed_as_the_previous_release_wrote_it() -> None:
    config = QueueConfig(name="q")
    message = _silent(lambda: to_message(_legacy_task(), HOST, config, now=NOW))
    calls = ScriptCalls(KeySpace("q"), config, lambda: NOW, lambda: "tok")
    args = calls.push([message]).args
    assert args[7:] == LEGACY_PUSH_ARGS


def test_a_record_stored_before_the_rename_decodes_to_the_same_task() -> None:
    lease = Lease(token="tok", deadline=NOW + 30)
    message = _silent(lambda: read_message(LEGACY_RECORD))
    assert message.tenant == "acme"
    task = _silent(lambda: decode_message(message, HOST, lease))
    assert task == _legacy_task()
    assert task.lease is lease
