"""outcome_report and assert_outcomes_fair on simulations of the reference model."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from fairque_core import FairQueue, Task
from fairque_testing import (
    Load,
    OutcomeReport,
    Simulation,
    assert_outcomes_fair,
    outcome_report,
    simulate,
)

TIERS = {"f1": "free", "f2": "free", "p1": "pro"}


def run(
    queue: FairQueue, fail: set[str], count: int = 12, max_rounds: int = 1_000_000
) -> Simulation:
    def handler(task: Task) -> None:
        if task.tenant in fail:
            raise RuntimeError(f"no service for {task.tenant}")

    load = sum((Load.flood(t, count) for t in TIERS), Load())
    return simulate(queue, load, workers=2, handler=handler, max_rounds=max_rounds)


def test_counts_per_tenant_and_per_tier(fairque_memory_queue: FairQueue) -> None:
    report = outcome_report(run(fairque_memory_queue, {"f1"}), tiers=TIERS)
    f1, f2, p1 = (report.tenants[t] for t in ("f1", "f2", "p1"))
    assert (f1.pushed, f1.completed, f1.dead, f1.retried, f1.unfinished) == (12, 0, 12, 36, 0)
    assert (f2.completed, f2.dead, f2.retried) == (12, 0, 0)
    assert f1.errors == ("RuntimeError: no service for f1",)
    assert math.isclose(f1.success_rate, 0.0)
    assert p1.success_rate == 1.0
    free = report.tiers["free"]
    assert (free.pushed, free.completed, free.dead, free.retried) == (24, 12, 12, 36)
    assert free.success_rate == 0.5
    assert report.total.success_rate == pytest.approx(24 / 36)
    assert list(report.tiers) == ["free", "pro"]
    text = str(report)
    assert text.startswith("36 tasks, 3 tenants in 2 tiers: 24 completed, 12 dead, 36 retried")
    assert "per tier:" in text
    assert "per tenant:" in text


def test_a_tier_whose_tasks_all_fail_fails_with_the_tables(
    fairque_memory_queue: FairQueue,
) -> None:
    report = outcome_report(run(fairque_memory_queue, {"f1", "f2"}), tiers=TIERS)
    with pytest.raises(AssertionError) as err:
        assert_outcomes_fair(report)
    message = str(err.value)
    lines = message.splitlines()
    assert lines[0].startswith("outcome check failed (36 tasks, 3 tenants in 2 tiers")
    assert (
        "  - tier 'free' completed 0.0% of its tasks (0 of 24), below the queue's 33.3% by more "
        "than 5.0% (errors: RuntimeError: no service for f1; RuntimeError: no service for f2)"
    ) in lines
    assert any(line.startswith("  - tenant 'f1' (tier 'free') completed 0.0%") for line in lines)
    assert "tenant 'p1'" not in message.split("per tier:", maxsplit=1)[0]
    table = lines[lines.index("per tier:") + 1 :]
    assert table[0].split() == [
        "tier", "pushed", "completed", "dead", "retried", "unfinished", "success",
    ]  # fmt: skip


def test_equal_outcomes_pass_and_a_floor_catches_a_broken_handler(
    fairque_memory_queue: FairQueue, fairque_make_queue: Callable[..., FairQueue]
) -> None:
    assert_outcomes_fair(outcome_report(run(fairque_memory_queue, set()), tiers=TIERS))
    everyone = fairque_make_queue(memory=True)
    broken = outcome_report(run(everyone, set(TIERS)), tiers=TIERS)
    assert_outcomes_fair(broken)  # all fail alike: fair, if useless
    with pytest.raises(AssertionError, match=r"completed 0.0% of its tasks \(0 of 24\), below 90"):
        assert_outcomes_fair(broken, min_success_rate=0.9)


def test_unfinished_work_fails_unless_allowed(fairque_memory_queue: FairQueue) -> None:
    report = outcome_report(run(fairque_memory_queue, {"f1"}, max_rounds=5), tiers=TIERS)
    assert report.total.unfinished > 0
    with pytest.raises(AssertionError, match="neither completed nor dead at the end"):
        assert_outcomes_fair(report, tolerance=1)
    assert_outcomes_fair(report, tolerance=1, allow_unfinished=True)


def test_small_counts_are_not_judged_and_bad_input(fairque_memory_queue: FairQueue) -> None:
    report = outcome_report(run(fairque_memory_queue, {"f1"}, count=3), tiers=TIERS)
    assert isinstance(report, OutcomeReport)
    assert not report.judged(report.tenants["f1"])  # 3 settled tasks
    assert "f1 (not judged)" in report.table()
    assert_outcomes_fair(report)  # no tenant nor tier has 10 settled tasks: none is judged
    with pytest.raises(ValueError, match="tolerance"):
        assert_outcomes_fair(report, tolerance=-1)
    with pytest.raises(ValueError, match="must be a number"):
        assert_outcomes_fair(report, min_success_rate=float("nan"))


def test_default_tiers_are_the_queues(fairque_memory_queue: FairQueue) -> None:
    fairque_memory_queue.set_tenant_weight("p1", 4.0, tier=2)
    report = outcome_report(run(fairque_memory_queue, set(), count=2))
    assert {t: o.tier for t, o in report.tenants.items()} == {"f1": "0", "f2": "0", "p1": "2"}
    assert set(report.tiers) == {"0", "2"}
