"""ADR 23 step 2: ``Task.tenant`` and ``Message.tenant`` are the fields,
``TaskFunction.create(tenant, /, ...)`` takes the tenant first; and the stored record does not
change with the name (the old ``user_id`` spellings are gone: test_removed_names.py)."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from fairque_core import Priority, Task
from fairque_core.app.engine.messages import decode_message, to_message
from fairque_core.app.plugins.host import PluginHost
from fairque_core.app.worker.handlers import TaskRegistry
from fairque_core.domain.models import Lease
from fairque_core.settings.config import QueueConfig
from fairque_redis.keys import KeySpace
from fairque_redis.scripting.calls import ScriptCalls, read_message

HOST = PluginHost(load_entrypoints=False)


def _task(**fields: Any) -> Task:
    return Task(task_id="t-1", priority=Priority.HIGH, created_at=1.0, execute_after=2.0, **fields)


# ---------------------------------------------------------------- Task


def test_task_create_takes_tenant_priority_payload_positionally() -> None:
    task = Task.create("acme", Priority.CRITICAL, {"n": 1})
    assert (task.tenant, task.priority, task.payload) == ("acme", Priority.CRITICAL, {"n": 1})
    assert Task.create(tenant="acme", task_id="x").tenant == "acme"


def test_the_tenant_is_validated_under_its_name() -> None:
    from fairque_core.domain.errors import TaskValidationError

    with pytest.raises(TaskValidationError) as info:
        _task(tenant="has space")
    assert info.value.field == "tenant"


def test_asdict_shows_tenant() -> None:
    data = attrs.asdict(Task.create("acme"))
    assert data["tenant"] == "acme"
    assert "user_id" not in data


# ---------------------------------------------------------------- TaskFunction


def _registry() -> TaskRegistry:
    return TaskRegistry()


def test_task_function_takes_the_tenant_first_and_positional_only() -> None:
    reg = _registry()

    @reg.task(name="greet")
    def greet(tenant: str, n: int = 0) -> str:  # a handler with its own "tenant"
        return f"{tenant}{n}"

    task = greet("acme", "someone", n=2)
    assert task.tenant == "acme"
    assert task.payload == {"args": ["someone"], "kwargs": {"n": 2}}
    task = greet.create("acme", tenant="someone")
    assert (task.tenant, task.payload["kwargs"]) == ("acme", {"tenant": "someone"})
    with pytest.raises(TypeError, match="tenant"):
        greet.create()  # type: ignore[call-arg]


def test_task_function_with_a_user_id_parameter_keeps_it_as_its_argument() -> None:
    reg = _registry()

    @reg.task(name="audit")
    def audit(user_id: str) -> str:
        return user_id

    task = audit("acme", user_id="someone")
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
    message = to_message(_legacy_task(), HOST, config, now=NOW)
    calls = ScriptCalls(KeySpace("q"), config, lambda: NOW, lambda: "tok")
    args = calls.push([message]).args
    assert args[7:] == LEGACY_PUSH_ARGS


def test_a_record_stored_before_the_rename_decodes_to_the_same_task() -> None:
    lease = Lease(token="tok", deadline=NOW + 30)
    message = read_message(LEGACY_RECORD)
    assert message.tenant == "acme"
    task = decode_message(message, HOST, lease)
    assert task == _legacy_task()
    assert task.lease is lease
