"""RetrySchedule backoff arithmetic, its validation, and the retry/DLQ decision."""

from __future__ import annotations

import ast
import math
import random
from pathlib import Path

import pytest

import fairque_core
from fairque_core import (
    ConfigurationError,
    FailureType,
    QueueConfig,
    RetryDecision,
    RetrySchedule,
    TaskValidationError,
    decide,
)
from fairque_core.app.plugins.builtin import DefaultRetry, retry_schedule
from fairque_core.domain import retry as retry_module


def test_defaults_double_from_one_second() -> None:
    policy = RetrySchedule()
    assert (policy.base, policy.factor, policy.cap, policy.jitter, policy.max_retries) == (
        1.0,
        2.0,
        300.0,
        0.0,
        3,
    )
    assert [policy.delay(n) for n in range(4)] == [1.0, 2.0, 4.0, 8.0]


def test_delay_is_capped() -> None:
    policy = RetrySchedule(base=10.0, factor=3.0, cap=100.0)
    assert [policy.delay(n) for n in range(4)] == [10.0, 30.0, 90.0, 100.0]
    assert policy.delay(10_000) == 100.0  # no OverflowError for huge attempts


def test_factor_one_is_constant_and_base_zero_is_immediate() -> None:
    assert {RetrySchedule(base=5.0, factor=1.0).delay(n) for n in range(20)} == {5.0}
    assert RetrySchedule(base=0.0, cap=0.0).delay(7) == 0.0
    assert RetrySchedule(base=0.0, jitter=0.5).delay(3, random.Random(1)) == 0.0


def test_jitter_stays_in_band_and_is_reproducible() -> None:
    policy = RetrySchedule(base=10.0, factor=2.0, cap=1000.0, jitter=0.25)
    draws = [policy.delay(2, random.Random(seed)) for seed in range(200)]
    assert all(30.0 <= d <= 50.0 for d in draws)
    assert max(draws) - min(draws) > 10.0  # really spread, not constant
    assert policy.delay(2, random.Random(7)) == policy.delay(2, random.Random(7))


def test_jitter_never_exceeds_the_cap() -> None:
    policy = RetrySchedule(base=100.0, factor=2.0, cap=150.0, jitter=0.9)
    draws = [policy.delay(5, random.Random(seed)) for seed in range(200)]
    assert max(draws) == 150.0
    assert min(draws) >= 150.0 * 0.1


def test_delay_without_rng_uses_a_default_generator() -> None:
    policy = RetrySchedule(base=1.0, jitter=0.5)
    assert 0.5 <= policy.delay(0) <= 1.5


@pytest.mark.parametrize("attempt", [-1, 1.5, True, "2"])
def test_bad_attempt(attempt: object) -> None:
    with pytest.raises(TaskValidationError) as info:
        RetrySchedule().delay(attempt)  # type: ignore[arg-type]
    assert info.value.field == "attempt"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("base", -1.0),
        ("base", math.nan),
        ("base", math.inf),
        ("base", "1"),
        ("factor", 0.5),
        ("factor", math.inf),
        ("cap", -0.1),
        ("cap", math.nan),
        ("jitter", -0.1),
        ("jitter", 1.0),
        ("jitter", 2.0),
        ("max_retries", -1),
        ("max_retries", 1.5),
        ("max_retries", True),
    ],
)
def test_bad_parameters_are_configuration_errors(field: str, value: object) -> None:
    with pytest.raises(ConfigurationError) as info:
        RetrySchedule(**{field: value})  # type: ignore[arg-type]
    assert info.value.path == field
    assert info.value.value is value
    assert field in str(info.value)


def test_cap_below_base_is_rejected() -> None:
    with pytest.raises(ConfigurationError, match="cap") as info:
        RetrySchedule(base=10.0, cap=5.0)
    assert info.value.path == "cap"


def test_the_app_builds_the_schedule_from_the_queue_config() -> None:
    config = QueueConfig(
        retry_base_seconds=0.5, retry_factor=3.0, retry_cap_seconds=60.0, retry_jitter=0.1
    )
    assert retry_schedule(config) == RetrySchedule(base=0.5, factor=3.0, cap=60.0, jitter=0.1)
    retry = DefaultRetry()
    retry.fairque_configure(config)
    assert retry.policy == retry_schedule(config)


def test_the_domain_does_not_read_the_config() -> None:
    assert not hasattr(RetrySchedule, "from_queue_config")
    tree = ast.parse(Path(retry_module.__file__).read_text(encoding="utf-8"))
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not {name for name in imported if name and name.startswith("fairque_core.app")}


def test_the_old_name_is_gone_from_the_core() -> None:
    with pytest.raises(ImportError):
        from fairque_core import RetryPolicy  # type: ignore[attr-defined]  # noqa: F401
    with pytest.raises(AttributeError):
        retry_module.RetryPolicy  # type: ignore[attr-defined]  # noqa: B018
    assert "RetryPolicy" not in fairque_core.__all__
    with pytest.raises(AttributeError):
        fairque_core.NoSuchName  # type: ignore[attr-defined]  # noqa: B018


# ---------------------------------------------------------------------- RetryDecision


def test_retry_and_dead_constructors() -> None:
    retry = RetryDecision.retry(2.5)
    assert (retry.retry_delay, retry.failure_type, retry.is_retry) == (
        2.5,
        FailureType.FAILED,
        True,
    )
    dead = RetryDecision.dead(FailureType.POISONED, "bad payload")
    assert (dead.retry_delay, dead.failure_type, dead.reason, dead.is_retry) == (
        None,
        FailureType.POISONED,
        "bad payload",
        False,
    )


def test_decisions_are_frozen() -> None:
    import attrs

    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        RetryDecision.retry(1.0).retry_delay = 2.0  # type: ignore[misc]


@pytest.mark.parametrize("delay", [-1.0, math.nan, math.inf, "1"])
def test_retry_rejects_bad_delays(delay: object) -> None:
    with pytest.raises(TaskValidationError):
        RetryDecision.retry(delay)  # type: ignore[arg-type]


def test_decide_retries_while_count_below_max() -> None:
    policy = RetrySchedule()
    error = RuntimeError("boom")
    decisions = [decide(policy, count, 3, error) for count in range(5)]
    assert [d.retry_delay for d in decisions] == [1.0, 2.0, 4.0, None, None]
    for dead in decisions[3:]:
        assert dead.failure_type is FailureType.FAILED
        assert dead.reason == "RuntimeError('boom')"


def test_decide_uses_the_policy_limit_when_none_is_given() -> None:
    policy = RetrySchedule(max_retries=1)
    assert decide(policy, 0, None, ValueError()).is_retry
    assert not decide(policy, 1, None, ValueError()).is_retry


def test_decide_with_zero_retries_goes_straight_to_the_dlq() -> None:
    decision = decide(RetrySchedule(), 0, 0, KeyError("k"))
    assert decision == RetryDecision.dead(FailureType.FAILED, "KeyError('k')")


def test_decide_passes_the_rng_through() -> None:
    policy = RetrySchedule(jitter=0.5)
    first = decide(policy, 1, 3, RuntimeError(), rng=random.Random(3))
    again = decide(policy, 1, 3, RuntimeError(), rng=random.Random(3))
    assert first == again
    assert first.retry_delay is not None
    assert 1.0 <= first.retry_delay <= 3.0
