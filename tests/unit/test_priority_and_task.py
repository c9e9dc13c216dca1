"""Priority arithmetic, Task construction and the id grammar checked before any I/O."""

from __future__ import annotations

import math
import uuid

import pytest

from fairque_core import Priority, Task, TaskValidationError
from fairque_core.domain.validation import (
    MAX_ID_LENGTH,
    MAX_QUEUE_NAME_LENGTH,
    check_finite,
    validate_id,
    validate_queue_name,
)

# ---------------------------------------------------------------------- Priority


@pytest.mark.parametrize(
    ("priority", "weight"),
    [
        (Priority.VERY_LOW, 0.2),
        (Priority.LOW, 0.4),
        (Priority.NORMAL, 0.6),
        (Priority.HIGH, 0.8),
        (Priority.VERY_HIGH, 1.0),
    ],
)
def test_weight_is_p_over_five(priority: Priority, weight: float) -> None:
    assert priority.weight == pytest.approx(weight)
    assert not priority.is_critical


def test_critical_has_no_weight() -> None:
    assert Priority.CRITICAL.is_critical
    with pytest.raises(ValueError, match="Critical priority does not use weight"):
        _ = Priority.CRITICAL.weight


@pytest.mark.parametrize("value", range(1, 7))
def test_from_int_round_trips(value: int) -> None:
    assert Priority.from_int(value) is Priority(value)
    assert int(Priority.from_int(value)) == value


def test_from_int_exact_error_message() -> None:
    with pytest.raises(ValueError, match=r"^Invalid priority value: 7\. Must be 1-6\.$"):
        Priority.from_int(7)


@pytest.mark.parametrize("value", [0, -1, 100])
def test_from_int_rejects_out_of_range(value: int) -> None:
    with pytest.raises(ValueError, match=f"Invalid priority value: {value}. Must be 1-6."):
        Priority.from_int(value)


@pytest.mark.parametrize("value", [True, 3.0, "3", None])
def test_from_int_rejects_non_ints(value: object) -> None:
    with pytest.raises(ValueError, match="Invalid priority value"):
        Priority.from_int(value)  # type: ignore[arg-type]


def test_priority_order_matches_value() -> None:
    assert sorted(Priority) == [Priority(v) for v in range(1, 7)]


# ---------------------------------------------------------------------- Task.create


def test_create_fills_defaults() -> None:
    task = Task.create("tenant-a", Priority.HIGH, {"n": 1})
    assert task.tenant == "tenant-a"
    assert task.priority is Priority.HIGH
    assert task.payload == {"n": 1}
    assert uuid.UUID(task.task_id).version == 4
    assert task.retry_count == 0
    assert task.max_retries == 3
    assert task.execute_after == task.created_at
    assert task.depends_on == ()
    assert task.headers == {}
    assert task.is_ready_to_execute(task.created_at)
    assert task.can_retry()


def test_create_takes_an_int_priority_and_named_id() -> None:
    task = Task.create("t", 5, task_id="job:42", depends_on=["a", "b"], execute_after=1e9)
    assert task.priority is Priority.VERY_HIGH
    assert task.task_id == "job:42"
    assert task.depends_on == ("a", "b")
    assert not task.is_ready_to_execute(1e9 - 1)
    assert task.is_ready_to_execute(1e9)


def test_create_ids_are_unique() -> None:
    assert len({Task.create("t").task_id for _ in range(100)}) == 100


@pytest.mark.parametrize("priority", [0, 7, -3])
def test_create_rejects_bad_priority(priority: int) -> None:
    with pytest.raises(TaskValidationError) as info:
        Task.create("t", priority)
    assert info.value.field == "priority"
    assert info.value.value == priority


def test_task_rejects_a_non_priority() -> None:
    with pytest.raises(TaskValidationError, match="priority"):
        Task(task_id="x", tenant="t", priority=3)  # type: ignore[arg-type]


def test_max_retries_must_be_non_negative() -> None:
    assert Task.create("t", max_retries=0).max_retries == 0
    with pytest.raises(TaskValidationError) as info:
        Task.create("t", max_retries=-1)
    assert (info.value.field, info.value.value) == ("max_retries", -1)
    with pytest.raises(TaskValidationError):
        Task.create("t", max_retries=True)


def test_can_retry_follows_the_count() -> None:
    task = Task(task_id="x", tenant="t", retry_count=2, max_retries=3)
    assert task.can_retry()
    assert not Task(task_id="x", tenant="t", retry_count=3, max_retries=3).can_retry()


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_times_are_rejected(bad: float) -> None:
    with pytest.raises(TaskValidationError) as info:
        Task.create("t", execute_after=bad)
    assert info.value.field == "execute_after"
    with pytest.raises(TaskValidationError) as info:
        Task(task_id="x", tenant="t", created_at=bad)
    assert info.value.field == "created_at"


@pytest.mark.parametrize("window", [1e308, 10**400, 253_402_300_800, -1, math.nan, math.inf])
def test_a_unique_window_must_fit_the_backends_millisecond_times(window: float) -> None:
    """At most the span from the epoch to the year 9999 (a window of 1e308 s overflowed the
    Redis push's millisecond conversion with a bare OverflowError)."""
    with pytest.raises(TaskValidationError) as info:
        Task.create("t", unique_key="k", unique_window_seconds=window)
    assert info.value.field == "unique_window_seconds"
    longest = Task.create("t", unique_key="k", unique_window_seconds=253_402_300_799)
    assert longest.unique_window_seconds == 253_402_300_799


def test_check_finite() -> None:
    assert check_finite(3, "x") == 3.0
    with pytest.raises(TaskValidationError, match="must be a number"):
        check_finite("3", "x")
    with pytest.raises(TaskValidationError, match="must be a number"):
        check_finite(True, "x")


def test_payload_and_headers_are_checked() -> None:
    with pytest.raises(TaskValidationError, match="payload"):
        Task(task_id="x", tenant="t", payload=[1, 2])  # type: ignore[arg-type]
    with pytest.raises(TaskValidationError, match="headers"):
        Task(task_id="x", tenant="t", headers={"k": 1})  # type: ignore[dict-item]
    task = Task.create("t", headers={"traceparent": "00-abc"})
    assert task.headers == {"traceparent": "00-abc"}


def test_lease_takes_no_part_in_equality() -> None:
    from fairque_core import Lease

    plain = Task(task_id="x", tenant="t", created_at=1.0, execute_after=1.0)
    leased = Task(
        task_id="x",
        tenant="t",
        created_at=1.0,
        execute_after=1.0,
        lease=Lease(token="tok", deadline=2.0),
    )
    assert plain == leased


# ---------------------------------------------------------------------- the id grammar

BAD_IDS = [
    pytest.param("", id="empty"),
    pytest.param("a{b}", id="braces"),
    pytest.param("{tag}", id="hash-tag"),
    pytest.param("a b", id="space"),
    pytest.param("a\tb", id="tab"),
    pytest.param("line\n", id="newline"),
    pytest.param("a\x00b", id="nul"),
    pytest.param("a\x7fb", id="del"),
    pytest.param("user*", id="glob-star"),
    pytest.param("user?", id="glob-question"),
    pytest.param("user[1]", id="glob-brackets"),
    pytest.param("usér", id="non-ascii"),
    pytest.param("用户", id="cjk"),
    pytest.param("x" * (MAX_ID_LENGTH + 1), id="too-long"),
]


@pytest.mark.parametrize("value", BAD_IDS)
def test_bad_ids_are_rejected_naming_field_and_value(value: str) -> None:
    with pytest.raises(TaskValidationError) as info:
        validate_id(value, "tenant")
    assert info.value.field == "tenant"
    assert info.value.value == value
    assert "tenant" in str(info.value)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("value", BAD_IDS)
def test_task_rejects_bad_tenant_and_task_ids(value: str) -> None:
    with pytest.raises(TaskValidationError) as info:
        Task.create(value)
    assert (info.value.field, info.value.value) == ("tenant", value)
    with pytest.raises(TaskValidationError) as info:
        Task.create("ok", task_id=value)
    assert (info.value.field, info.value.value) == ("task_id", value)
    with pytest.raises(TaskValidationError) as info:
        Task.create("ok", depends_on=[value])
    assert (info.value.field, info.value.value) == ("depends_on", value)


@pytest.mark.parametrize(
    "value",
    ["a", "user:1", "tenant_42", "org.example/team-a", "a@b", "k=v+w#x", "x" * MAX_ID_LENGTH],
)
def test_good_ids_pass(value: str) -> None:
    assert validate_id(value) == value
    assert Task.create(value, task_id=value).tenant == value


def test_non_string_id_is_rejected() -> None:
    with pytest.raises(TaskValidationError, match="must be a str") as info:
        validate_id(42, "task_id")
    assert info.value.value == 42


def test_long_values_are_shortened_in_the_message() -> None:
    with pytest.raises(TaskValidationError) as info:
        validate_id("x" * 500)
    assert info.value.value == "x" * 500
    assert len(str(info.value)) < 400


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("", id="empty"),
        pytest.param("q{1}", id="braces"),
        pytest.param("a:b", id="colon"),
        pytest.param("a b", id="space"),
        pytest.param("q\n", id="newline"),
        pytest.param("q*", id="glob"),
        pytest.param("qü", id="non-ascii"),
        pytest.param("q" * (MAX_QUEUE_NAME_LENGTH + 1), id="too-long"),
        pytest.param(None, id="none"),
    ],
)
def test_bad_queue_names(value: object) -> None:
    with pytest.raises(TaskValidationError) as info:
        validate_queue_name(value)
    assert info.value.field == "queue name"
    assert info.value.value == value


@pytest.mark.parametrize("value", ["default", "emails.v2", "a-b_c", "q" * MAX_QUEUE_NAME_LENGTH])
def test_good_queue_names(value: str) -> None:
    assert validate_queue_name(value) == value
