"""The RetryPolicy plugin: non-retriable errors, backoff, the retry ceiling."""

from __future__ import annotations

import random

import pytest

from fairque_core import FailureType, Task
from fairque_core.app.plugins.host import PluginHost
from fairque_core.domain.errors import ConfigurationError
from fairque_plugins import RetryPolicy


class BadInput(ValueError):
    pass


def make_task(max_retries: int = 3) -> Task:
    return Task.create("tenant-a", task_id="t-1", max_retries=max_retries)


def test_non_retriable_is_poisoned_at_once() -> None:
    host = PluginHost([RetryPolicy(non_retriable=(BadInput,))], load_entrypoints=False)
    decision = host.retry_decide(make_task(), BadInput("no"), 1)
    assert decision.retry_delay is None
    assert decision.failure_type is FailureType.POISONED
    assert "BadInput" in decision.reason


def test_backoff_until_the_tasks_retries_are_used() -> None:
    policy = RetryPolicy(base=2.0, factor=3.0, cap=10.0)
    host = PluginHost([policy], load_entrypoints=False)
    task = make_task(max_retries=3)
    delays = [host.retry_decide(task, RuntimeError(), n).retry_delay for n in (1, 2, 3)]
    assert delays == [2.0, 6.0, 10.0]
    dead = host.retry_decide(task, RuntimeError("x"), 4)
    assert dead.retry_delay is None
    assert dead.failure_type is FailureType.FAILED


def test_policy_max_retries_is_a_ceiling() -> None:
    policy = RetryPolicy(max_retries=1)
    assert policy.decide(make_task(max_retries=5), RuntimeError(), 1).retry_delay == 1.0
    assert policy.decide(make_task(max_retries=5), RuntimeError(), 2).retry_delay is None
    assert policy.decide(make_task(max_retries=0), RuntimeError(), 1).retry_delay is None


def test_jitter_is_deterministic_with_an_rng_and_bounded() -> None:
    a = RetryPolicy(jitter=0.5, rng=random.Random(7))
    b = RetryPolicy(jitter=0.5, rng=random.Random(7))
    task = make_task()
    first = a.decide(task, RuntimeError(), 2).retry_delay
    assert first == b.decide(task, RuntimeError(), 2).retry_delay
    assert first is not None
    assert 1.0 <= first <= 3.0


def test_non_retriable_must_be_exception_classes() -> None:
    with pytest.raises(ConfigurationError):
        RetryPolicy(non_retriable=("ValueError",))  # type: ignore[arg-type]
