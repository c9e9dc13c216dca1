"""Task.create's expiry (ADR 77): expires_at or expires_in, checked and typed, to whole ms;
the message carries it as epoch ms and the task read back has it again."""

from __future__ import annotations

import math
import time

import pytest

from fairque_core import Task, TaskValidationError
from fairque_core.app.accel.builders import PREBUILT
from fairque_core.app.engine.messages import REFERENCE_BUILD
from fairque_core.domain.errors import TaskTypeError
from fairque_core.domain.models import expiry_ms
from fairque_core.domain.validation import check_expires_ms


def test_no_expiry_by_default() -> None:
    task = Task.create("acme")
    assert task.expires_at is None
    assert expiry_ms(task.expires_at) == 0


def test_expires_in_counts_from_now_to_whole_ms() -> None:
    before = time.time()
    task = Task.create("acme", expires_in=30)
    assert task.expires_at is not None
    assert before + 30 - 0.001 <= task.expires_at <= time.time() + 30 + 0.001
    assert task.expires_at == round(task.expires_at * 1000) / 1000


def test_expires_at_is_kept() -> None:
    at = time.time() + 60.0004
    task = Task.create("acme", expires_at=at)
    assert task.expires_at == round(at * 1000) / 1000


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"expires_at": time.time() + 60, "expires_in": 5}, "expires_in"),
        ({"expires_in": 0}, "expires_in"),
        ({"expires_in": -1}, "expires_in"),
        ({"expires_in": math.nan}, "expires_in"),
        ({"expires_in": math.inf}, "expires_in"),
        ({"expires_at": time.time() - 1}, "expires_at"),
        ({"expires_at": -5.0}, "expires_at"),
        ({"expires_at": 1e13}, "expires_at"),
        # an expiry before the task may start: it could never run
        ({"expires_in": 5, "execute_after": time.time() + 3600}, "expires_in"),
        ({"expires_at": time.time() + 5, "execute_after": time.time() + 10}, "expires_at"),
    ],
)
def test_refused_expiries_are_typed(options: dict[str, float], field: str) -> None:
    with pytest.raises(TaskValidationError) as err:
        Task.create("acme", **options)  # type: ignore[arg-type]
    assert err.value.field == field


def test_a_non_number_is_a_type_error() -> None:
    with pytest.raises((TaskTypeError, TaskValidationError)):
        Task.create("acme", expires_in="soon")  # type: ignore[arg-type]


@pytest.mark.parametrize("build", [REFERENCE_BUILD, PREBUILT], ids=["reference", "prebuilt"])
def test_the_message_carries_it_and_the_task_comes_back_with_it(build: object) -> None:
    task = Task.create("acme", payload={"x": 1}, expires_in=12.5)
    message = build.message(task, b"{}", "application/json", 0.0, {})  # type: ignore[attr-defined]
    assert message.expires_ms == expiry_ms(task.expires_at)
    back = build.task(message, {"x": 1}, None)  # type: ignore[attr-defined]
    assert back.expires_at == task.expires_at


@pytest.mark.parametrize("value", [-1, True, 1.5, "1", 253_402_300_800_000])
def test_a_message_expiry_out_of_range_is_refused(value: object) -> None:
    with pytest.raises((TaskTypeError, TaskValidationError)):
        check_expires_ms(value)


def test_the_lua_stale_limit_is_the_python_one() -> None:
    import re

    from fairque_core.domain.models import STALE_CLAIM_LIMIT
    from fairque_redis.scripting.scripts import load_source

    source = load_source("_include/expiry")
    limit = re.search(r"^local FQ_STALE_CLAIM_LIMIT = (\d+)$", source, re.M)
    assert limit is not None
    assert int(limit.group(1)) == STALE_CLAIM_LIMIT
