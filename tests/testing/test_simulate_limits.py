"""simulate with limits (rate, cap, pause, queue-wide rate) and with a handler, on the
reference model and on Valkey."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest

from fairque_core import FairQueue, Task, TierConfig
from fairque_core.settings.config import LimitsConfig, QueueConfig
from fairque_testing import (
    COMPLETED,
    DEAD,
    RETRIED,
    Dispatched,
    Held,
    Load,
    Unheld,
    assert_fair,
    clock_of,
    fairness_report,
    simulate,
)

BACKENDS = ["memory", pytest.param("valkey", marks=pytest.mark.redis)]


@pytest.fixture(params=BACKENDS)
def queue(request: pytest.FixtureRequest) -> FairQueue:
    name = "fairque_memory_queue" if request.param == "memory" else "fairque_queue"
    q: FairQueue = request.getfixturevalue(name)
    return q


def test_a_rate_limited_tenant_is_waited_for_not_stranded(queue: FairQueue) -> None:
    # measured before the fix: the run stopped at the first wait, 19 of 20 tasks "never run"
    clock = clock_of(queue)
    assert clock is not None
    start = clock()
    queue.set_tenant_limits("slow", rate=10)
    sim = simulate(queue, Load.flood("slow", 20) + Load.flood("fast", 20), workers=2)
    assert sim.undispatched == {}
    assert Counter(sim.dispatches) == {"slow": 20, "fast": 20}
    assert clock() - start >= 1.9  # 19 waits of 0.1 s on the fake clock
    holds = [e for e in sim.trace if isinstance(e, Held | Unheld)]
    assert holds[0] == Held("slow", "rate")
    # held after each start; let go for each next one (the last hold outlives the run)
    assert holds.count(Held("slow", "rate")) == 20
    assert holds.count(Unheld("slow")) == 19
    report = fairness_report(sim)
    assert report.tenants["slow"].held == 20
    # held, slow is owed nothing: fast draining alone meanwhile is not unfair to it
    assert_fair(report, tolerance=0.05, max_newcomer_wait=2)


def test_a_cap_holds_a_tenant_for_the_rest_of_a_claim(queue: FairQueue) -> None:
    queue.set_tenant_limits("capped", max_running=2)
    sim = simulate(queue, Load.flood("capped", 40) + Load.flood("free", 40), workers=1, batch=4)
    assert sim.undispatched == {}
    first = list(sim.trace[: sim.trace.index(Unheld("capped")) + 1])
    # two of capped's tasks, then it is held until the claim's tasks are finished
    assert [e.tenant for e in first if isinstance(e, Dispatched)].count("capped") == 2
    held_at = first.index(Held("capped", "cap"))
    assert first[held_at - 1] == Dispatched("capped", "worker-1")  # right after its 2nd
    assert_fair(fairness_report(sim), tolerance=0.05)


def test_a_paused_tenant_is_held_throughout(queue: FairQueue) -> None:
    queue.pause("sleepy")
    sim = simulate(queue, Load.flood("sleepy", 3) + Load.flood("awake", 3), workers=1)
    assert sim.trace[0] == Held("sleepy", "paused")
    assert sim.undispatched == {"sleepy": 3}
    report = fairness_report(sim)
    assert report.tenants["sleepy"].owed == 0
    assert report.stranded == {"sleepy": 3}


def test_a_queue_wide_rate_is_waited_for(fairque_make_queue: Callable[..., FairQueue]) -> None:
    config = QueueConfig(limits=LimitsConfig(rate=100))
    queue: FairQueue = fairque_make_queue(config, memory=True)
    sim = simulate(queue, Load.flood("a", 10) + Load.flood("b", 10), workers=2, batch=2)
    assert sim.undispatched == {}
    assert len(sim.dispatches) == 20


def test_a_handler_decides_each_outcome(queue: FairQueue) -> None:
    attempts: Counter[str] = Counter()

    def handler(task: Task) -> str:
        attempts[task.task_id] += 1
        if task.tenant == "flaky" and attempts[task.task_id] == 1:
            raise ConnectionError("first try fails")
        if task.tenant == "broken":
            raise ValueError("never works")
        return "ok"

    load = Load.flood("fine", 5) + Load.flood("flaky", 5) + Load.flood("broken", 2)
    sim = simulate(queue, load, workers=2, handler=handler)
    assert sim.undispatched == {}
    outcomes = Counter((r.tenant, r.outcome) for r in sim.records)
    assert outcomes == {
        ("fine", COMPLETED): 5,
        ("flaky", RETRIED): 5,
        ("flaky", COMPLETED): 5,
        ("broken", RETRIED): 6,  # three retries each (the default max_retries)
        ("broken", DEAD): 2,
    }
    assert {r.error for r in sim.records if r.tenant == "broken"} == {"ValueError: never works"}
    assert all(r.error == "" for r in sim.records if r.outcome == COMPLETED)
    done = [r.task_id for r in sim.records if r.tenant == "fine"]
    assert [queue.get_result(t) for t in done] == ["ok"] * 5


def test_retries_of_a_jittered_policy_are_found(
    fairque_make_queue: Callable[..., FairQueue],
) -> None:
    config = QueueConfig(retry_jitter=0.5, retry_base_seconds=2.0)
    queue: FairQueue = fairque_make_queue(config, memory=True)

    def handler(task: Task) -> None:
        raise RuntimeError("always")

    sim = simulate(queue, Load.flood("a", 4), workers=1, handler=handler)
    assert sim.undispatched == {}
    assert Counter(r.outcome for r in sim.records) == {RETRIED: 12, DEAD: 4}


def test_the_tiers_come_from_the_queue(fairque_make_queue: Callable[..., FairQueue]) -> None:
    config = QueueConfig(
        tiers={"free": TierConfig(weight=1, rank=0), "pro": TierConfig(weight=4, rank=1)},
        tenant_tiers={"acme": "pro", "bob": "free"},
    )
    queue: FairQueue = fairque_make_queue(config, memory=True)
    queue.set_tenant_weight("carol", 2.0, tier=3)
    load = Load.flood("acme", 1) + Load.flood("bob", 1) + Load.flood("carol", 1)
    sim = simulate(queue, load)
    assert sim.tiers == {"acme": "pro", "bob": "free", "carol": "3"}
    assert sim.pushed_by_tenant == {"acme": 1, "bob": 1, "carol": 1}
