"""A claim that carries acknowledgements, answered by ONE call (``finish_and_claim``, ADR 40):
the driver's reading of its result and the loop's booking of its failure."""

from __future__ import annotations

from typing import Any

import pytest

from fairque_core import FairQueue, InMemoryBackend, Task, TaskHandler
from fairque_core.app.worker import actions as wa
from fairque_core.app.worker.driver import ClaimScope, claim_and_acks, finish_and_claim_call
from fairque_core.domain.errors import NotReplicatedError, RedisConnectionError

from .test_worker_loop import Sim, config


def _claim_with_acks(sim: Sim) -> wa.Claim:
    """Run two tasks, end both, and return the loop's next action: a claim carrying both acks."""
    sim.push(6)
    sim.sleep()
    sim.complete("t0")
    sim.complete("t1")
    action = sim.loop.next_action(sim.now)
    assert isinstance(action, wa.Claim), action
    assert action.acks is not None
    assert [t.task_id for t, _ in action.acks.items] == ["t0", "t1"]
    return action


def test_one_failed_call_is_one_backend_error_and_the_acks_wait_for_the_next_flush() -> None:
    sim = Sim(config(max_concurrent_tasks=2))
    _claim_with_acks(sim)
    down = RedisConnectionError("down")
    sim.loop.done(claim_and_acks(down))  # (down, down): the same error for both parts
    sim.cycle()  # the loop reads the answer, then backs off
    health = sim.loop.health(sim.now, 0.0)
    assert health["backend_errors"] == 1
    assert health["processed"] == 0
    while sim.finished != ["t0", "t1"]:  # the acks go again once the backoff is over
        sim.sleep()
    assert sim.loop.health(sim.now, 0.0)["processed"] == 2


def test_two_failed_calls_are_still_two_backend_errors() -> None:
    sim = Sim(config(max_concurrent_tasks=2))
    claim = _claim_with_acks(sim)
    sim.loop.done((RedisConnectionError("claim"), RedisConnectionError("finish")))
    sim.cycle()
    assert sim.loop.health(sim.now, 0.0)["backend_errors"] == 2
    assert claim.acks is not None


def test_the_result_is_read_as_tasks_then_flags() -> None:
    tasks = [Task.create("u")]
    assert claim_and_acks(([True, False], tasks)) == (tasks, [True, False])


def test_not_replicated_books_the_claimed_tasks_and_keeps_the_acks() -> None:
    sim = Sim(config(max_concurrent_tasks=2))
    claim = _claim_with_acks(sim)
    brought = [sim.ready.popleft() for _ in range(claim.count)]
    exc = NotReplicatedError("finish_claim", command="WAIT", timeout_ms=50)
    exc.result = ([True, True], brought)
    tasks, flags = claim_and_acks(exc)
    assert (tasks, flags) == (brought, exc)
    sim.loop.done((tasks, flags))
    sim.cycle()
    health = sim.loop.health(sim.now, 0.0)
    assert health["backend_errors"] == 1
    assert health["claimed"] == 2 + len(brought)  # booked: the loop runs them
    assert health["processed"] == 0  # unconfirmed: sent again with the next flush


@pytest.mark.parametrize("scope", [ClaimScope(None, None, "w"), ClaimScope(["a"], ["b"], "w")])
def test_the_call_is_the_engines_finish_and_claim(scope: ClaimScope) -> None:
    queue = FairQueue(InMemoryBackend())
    claim = wa.Claim(3, wa.Ack([]))
    call: Any = finish_and_claim_call(queue, claim, claim.acks, scope)  # type: ignore[arg-type]
    assert call.func == queue.finish_and_claim
    assert call.args == ([], 3, scope.assigned)
    assert call.keywords == {"steal": scope.steal, "worker_id": "w", "run_seconds": []}


class _CombiningQueue(FairQueue):
    """The model's queue, claiming that its backend makes finish_and_claim one call."""

    @property
    def combines_finish_and_claim(self) -> bool:
        return True


def _acks(n: int) -> wa.Ack:
    return wa.Ack([(wa.Slot(Task.create("u"), claimed_at=0.0), None) for _ in range(n)])


def test_the_one_call_is_used_up_to_the_limit_of_acks_and_places() -> None:
    from fairque_core import Worker, WorkerConfig

    worker = Worker(WorkerConfig(id="w"), Echo(), _CombiningQueue(InMemoryBackend()))
    limit = Worker.combined_acks_limit
    assert limit is not None
    assert worker._combined_call(wa.Claim(limit - 5, _acks(5))) is not None
    assert worker._combined_call(wa.Claim(limit - 4, _acks(5))) is None  # two calls at once
    assert worker._combined_call(wa.Claim(3)) is None  # no acks: a plain claim
    off = type("Off", (Worker,), {"combined_acks": False})
    plain = off(WorkerConfig(id="w"), Echo(), _CombiningQueue(InMemoryBackend()))
    assert plain._combined_call(wa.Claim(1, _acks(1))) is None
    model = Worker(WorkerConfig(id="w"), Echo(), FairQueue(InMemoryBackend()))
    assert model._combined_call(wa.Claim(1, _acks(1))) is None  # two calls there anyway


class Echo(TaskHandler):
    def process_task(self, task: Task) -> object:
        return task.task_id
