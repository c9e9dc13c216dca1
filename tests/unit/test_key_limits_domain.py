"""Limits by key (ADR 79): the values, their checks and encodings, the task's limit key and
its place in the stored meta. No I/O."""

from __future__ import annotations

import pytest

from fairque_core import Task, TaskValidationError
from fairque_core.app.worker.handlers import TaskRegistry
from fairque_core.domain.enums import Priority
from fairque_core.domain.errors import TaskTypeError
from fairque_core.domain.key_limits import (
    KeyLimits,
    check_key_limits,
    decode_key_limits,
    encode_key_limits,
    key_scope,
    scope_key,
    scope_tenant,
)
from fairque_core.domain.models import Message
from fairque_redis.scripting.calls.records import decode_message, encode_meta


def test_check_accepts_and_clears() -> None:
    assert check_key_limits("export", max_running=1) == KeyLimits(max_running=1)
    got = check_key_limits("pay", rate=20, burst=5, per_tenant=False)
    assert got == KeyLimits(rate=20.0, burst=5, per_tenant=False)
    assert check_key_limits("export") is None  # every number None: cleared


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"key": "a b", "max_running": 1}, "key"),
        ({"key": "a|b", "max_running": 1}, "key"),
        ({"key": "", "max_running": 1}, "key"),
        ({"key": "k", "max_running": 0}, "max_running"),
        ({"key": "k", "max_running": -3}, "max_running"),
        ({"key": "k", "max_running": 1.5}, "max_running"),
        ({"key": "k", "rate": -1.0}, "rate"),
        ({"key": "k", "rate": float("nan")}, "rate"),
        ({"key": "k", "rate": 1.0, "burst": 0}, "burst"),
        ({"key": "k", "max_running": 1, "per_tenant": 1}, "per_tenant"),
    ],
)
def test_check_refuses_typed(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(TaskValidationError) as info:
        check_key_limits(**kwargs)  # type: ignore[arg-type]
    assert info.value.field == field


def test_record_round_trip_and_scopes() -> None:
    for limits in (
        KeyLimits(max_running=2),
        KeyLimits(rate=0.5, burst=3, per_tenant=False),
        KeyLimits(max_running=1, rate=1e-9),
    ):
        assert decode_key_limits(encode_key_limits(limits)) == limits
    assert decode_key_limits("") is None
    assert encode_key_limits(KeyLimits(rate=20.0, per_tenant=False)) == ",20.0,,1"
    assert key_scope("export", "acme", True) == "export|acme"
    assert key_scope("pay", "acme", False) == "pay|"
    assert (scope_key("export|acme"), scope_tenant("export|acme")) == ("export", "acme")
    assert scope_tenant("pay|") == ""


def test_task_limit_key_is_an_id() -> None:
    assert Task.create("acme", limit_key="export").limit_key == "export"
    assert Task.create("acme").limit_key == ""
    with pytest.raises(TaskValidationError):
        Task.create("acme", limit_key="not an id")
    with pytest.raises(TaskTypeError):
        Task.create("acme", limit_key=5)  # type: ignore[arg-type]


def test_a_task_function_defaults_to_its_name() -> None:
    registry = TaskRegistry()

    @registry.task(name="reports.export")
    def export(n: int) -> int:
        return n

    @registry.task(name="odd name")
    def odd() -> None:
        return None

    assert export("acme", 1).limit_key == "reports.export"
    assert export("acme", 1, limit_key="big-export").limit_key == "big-export"
    assert export.step("acme").limit_key == "reports.export"
    assert odd("acme").limit_key == ""  # a name that is not an id gives no key


@pytest.mark.parametrize(
    "extra",
    [
        {"limit_key": "export"},
        {"limit_key": "export", "keep_result": False},
        {"limit_key": "e", "unique_key": "u", "unique_window": 5.0},
        {"limit_key": "x", "expires_ms": 1_900_000_000_000, "name": "f"},
    ],
)
def test_the_meta_carries_the_key_last(extra: dict[str, object]) -> None:
    message = Message(task_id="t1", tenant="a", priority=Priority.NORMAL, body=b"{}", **extra)  # type: ignore[arg-type]
    meta = encode_meta(message)
    assert meta.endswith(f'["{message.limit_key}"]]')  # where the claim's match looks
    assert decode_message([b"t1", b"a", b"3", b"0", meta.encode(), b"{}"]) == message


def test_a_meta_without_a_key_is_unchanged() -> None:
    message = Message(task_id="t1", tenant="a", priority=Priority.NORMAL, body=b"{}", name="f")
    assert not encode_meta(message).endswith("]]")
