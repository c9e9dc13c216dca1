"""Results you can wait for, XCom values, unique tasks and workflows (ADR 27), on every
backend of the contract suite: the model, Valkey, Redis 7, the cluster and the async twins.

Port level first (push_batch_detailed, finish with XCom, xcom_get, get_outcome, wait_done),
then through the engine: handles, a chain of three, a chord over 1,000 members, tenant
isolation of XCom values, and how fast ``handle.get`` returns after the finish.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import attrs
import pytest

from fairque_core import (
    Chain,
    FailureType,
    FairQueue,
    QueueBackend,
    QueueConfig,
    RegistryHandler,
    ResultTimeoutError,
    Task,
    TaskCanceledError,
    TaskFailedError,
    TaskRegistry,
    TaskState,
    TaskTypeError,
    TaskValidationError,
    XComTooLargeError,
    chain,
    chord,
    current_task_context,
    group,
)
from fairque_core.domain.outcomes import error_record

from .helpers import FakeClock, msg


def _claim_one(backend: QueueBackend) -> tuple[str, str]:
    [claimed] = backend.claim()
    return claimed.message.task_id, claimed.lease.token


# ------------------------------------------------------------------ port: unique keys
def test_unique_key_duplicate_returns_the_holder(backend: QueueBackend) -> None:
    first = Task.create("alice", task_id="a1", unique_key="report-7").task_id
    m1 = _unique_msg("a1", "alice", "report-7")
    m2 = _unique_msg("a2", "alice", "report-7")
    other = _unique_msg("b1", "bob", "report-7")  # same key, another tenant: its own
    assert backend.push_batch_detailed([m1]) == [(True, first)]
    assert backend.push_batch_detailed([m2, other]) == [(False, "a1"), (True, "b1")]
    assert backend.get_state("a2") is None
    assert backend.stats()["duplicates"] == 1
    assert backend.push_batch_detailed([m1]) == [(False, "a1")]  # a known id is its own holder


def test_unique_key_is_held_while_running_and_freed_at_the_end(backend: QueueBackend) -> None:
    backend.push_batch_detailed([_unique_msg("a1", "alice", "k")])
    task_id, token = _claim_one(backend)
    assert backend.push_batch_detailed([_unique_msg("a2", "alice", "k")]) == [(False, "a1")]
    backend.finish(task_id, token, None)
    assert backend.push_batch_detailed([_unique_msg("a3", "alice", "k")]) == [(True, "a3")]


def test_unique_window_after_the_end(backend: QueueBackend, clock: FakeClock) -> None:
    backend.push_batch_detailed([_unique_msg("a1", "alice", "k", window=10.0)])
    assert backend.cancel("a1")
    clock.advance(5)
    assert backend.push_batch_detailed([_unique_msg("a2", "alice", "k")]) == [(False, "a1")]
    clock.advance(6)
    assert backend.push_batch_detailed([_unique_msg("a3", "alice", "k")]) == [(True, "a3")]


def test_unique_duplicates_inside_one_batch(backend: QueueBackend) -> None:
    got = backend.push_batch_detailed(
        [_unique_msg("a1", "alice", "k"), _unique_msg("a2", "alice", "k")]
    )
    assert got == [(True, "a1"), (False, "a1")]


# ------------------------------------------------------------------ port: XCom and outcomes
def test_xcom_values_are_written_with_the_finish_and_kept_per_tenant(
    backend: QueueBackend,
) -> None:
    backend.push(msg("p1", "alice"))
    task_id, token = _claim_one(backend)
    assert backend.xcom_get("alice", [("p1", "rows")]) == [None]
    backend.finish(task_id, token, b"42", {"rows": b"application/json\n{}", "n": b"x"})
    assert backend.xcom_get("alice", [("p1", "rows"), ("p1", "return_value"), ("p1", "no")]) == [
        b"application/json\n{}",
        b"42",
        None,
    ]
    # another tenant reads exactly what it would read of a task that does not exist
    assert backend.xcom_get("bob", [("p1", "rows"), ("p1", "return_value")]) == [None, None]
    assert backend.xcom_get("bob", [("nope", "rows")]) == [None]


def _finish_with_xcom(backend: QueueBackend, task_id: str, xcom: dict[str, bytes]) -> None:
    [claimed] = backend.claim()
    assert claimed.message.task_id == task_id
    backend.finish(task_id, claimed.lease.token, None, xcom)


def test_a_finish_stores_thousands_of_xcom_values(backend: QueueBackend) -> None:
    # the values go to the server in one finish call; Lua's unpack takes about 8,000 values
    # at once, so a task publishing past ~4,000 failed its finish (a LuaScriptError) on Redis
    values = {f"k{n}": str(n).encode() for n in range(9_000)}
    backend.push(msg("many", "alice"))
    _finish_with_xcom(backend, "many", values)
    probe = [("many", "k0"), ("many", "k4321"), ("many", "k8999"), ("many", "k9000")]
    assert backend.xcom_get("alice", probe) == [b"0", b"4321", b"8999", None]


def test_xcom_values_end_with_the_record_and_a_reused_id_starts_without_them(
    make_backend: Callable[..., QueueBackend], clock: FakeClock
) -> None:
    # XCom values live as long as the finished record (result_ttl_seconds). Once it expired, a
    # push may reuse the id: the new task has no values, neither while it waits nor after a
    # finish that publishes none (an empty value is a value like any other while it lives)
    ttl = 12.0
    backend = make_backend(config=QueueConfig(result_ttl_seconds=ttl))
    keys = [("p1", "a"), ("p1", "b"), ("p1", "return_value")]
    backend.push(msg("p1", "alice"))
    _finish_with_xcom(backend, "p1", {"a": b"", "b": b"x"})
    assert backend.xcom_get("alice", keys) == [b"", b"x", None]
    clock.advance(ttl + 0.001)
    assert backend.xcom_get("alice", keys) == [None, None, None]
    assert backend.push(msg("p1", "alice", body=b""))
    assert backend.xcom_get("alice", keys) == [None, None, None]
    _finish_with_xcom(backend, "p1", {})
    assert backend.xcom_get("alice", keys) == [None, None, None]

    # the id reused by another tenant, then by the first one again: the first task's values
    # do not come back either
    backend.push(msg("p2", "alice"))
    _finish_with_xcom(backend, "p2", {"a": b"old"})
    clock.advance(ttl + 0.001)
    assert backend.push(msg("p2", "bob"))
    assert backend.xcom_get("alice", [("p2", "a")]) == [None]
    assert backend.xcom_get("bob", [("p2", "a")]) == [None]
    assert backend.cancel("p2")
    clock.advance(ttl + 0.001)
    assert backend.push(msg("p2", "alice"))
    assert backend.xcom_get("alice", [("p2", "a")]) == [None]


def test_outcomes_of_finished_failed_and_canceled_tasks(backend: QueueBackend) -> None:
    backend.push_batch([msg("f1"), msg("f2"), msg("f3")])
    assert backend.get_outcome("zz") is None
    outcome = backend.get_outcome("f3")
    assert outcome is not None
    assert outcome.state is TaskState.QUEUED
    assert not outcome.ended
    tid, tok = _claim_one(backend)
    backend.finish(tid, tok, b'"ok"')
    tid2, tok2 = _claim_one(backend)
    try:
        raise KeyError("missing row")
    except KeyError as exc:
        record = error_record(exc)
    backend.fail(tid2, tok2, retry_delay=None, reason="KeyError: 'missing row'", error=record)
    assert backend.cancel("f3")
    done = backend.get_outcome(tid)
    failed = backend.get_outcome(tid2)
    canceled = backend.get_outcome("f3")
    assert done is not None
    assert done.state is TaskState.FINISHED
    assert done.result == b'"ok"'
    assert failed is not None
    assert failed.state is TaskState.FAILED
    assert failed.error == record
    assert failed.failure_type == "failed"
    assert canceled is not None
    assert canceled.state is TaskState.CANCELED
    assert canceled.reason == "canceled"


def test_wait_done_wakes_every_waiter_and_times_out(backend: QueueBackend) -> None:
    backend.push(msg("w1"))
    started = time.monotonic()
    assert backend.wait_done("w1", 0.1) is False
    assert time.monotonic() - started >= 0.09
    woke: list[bool] = []
    waiters = [
        threading.Thread(target=lambda: woke.append(backend.wait_done("w1", 5))) for _ in range(3)
    ]
    for waiter in waiters:
        waiter.start()
    time.sleep(0.1)
    tid, tok = _claim_one(backend)
    backend.finish(tid, tok, None)
    for waiter in waiters:
        waiter.join(5)
    assert woke == [True, True, True]
    assert backend.wait_done("w1", 0.5) is True  # the notification stays for later waiters


# ------------------------------------------------------------------ engine: handles
def _drain(queue: FairQueue, handler: RegistryHandler, *, limit: int = 100_000) -> int:
    """Run every ready task through the plugin host (as a worker does); how many ran."""
    ran = 0
    while ran < limit:
        tasks = queue.claim_batch(100)
        if not tasks:
            return ran
        done: list[tuple[Task, object]] = []
        for task in tasks:
            call: Callable[[], object] = lambda t=task: handler.run_sync(t)  # noqa: E731
            try:
                value = queue.plugins.execute(task, call, queue=queue.name)
            except Exception as exc:
                queue.fail(task, exc)
            else:
                done.append((task, value))
        if done:
            queue.finish_batch(done)
        ran += len(tasks)
    return ran


def _registry() -> TaskRegistry:
    registry = TaskRegistry()

    @registry.task("add")
    def add(previous: int, n: int) -> int:
        return previous + n

    @registry.task("start")
    def start(n: int) -> int:
        current_task_context().xcom_push("seen", {"start": n})
        return n

    @registry.task("total")
    def total(results: list[int]) -> int:
        return sum(results)

    @registry.task("square")
    def square(n: int) -> int:
        return n * n

    @registry.task("boom", max_retries=0)
    def boom() -> None:
        raise ValueError("the input was bad")

    return registry


def test_push_returns_a_handle_that_is_the_id(backend: QueueBackend) -> None:
    queue = FairQueue(backend)
    task = Task.create("alice", task_id="h1", unique_key="only-one")
    handle = queue.push(task)
    assert handle == "h1"
    assert isinstance(handle, str)
    assert handle.task_id == "h1"
    assert handle.duplicate is False
    again = queue.push(Task.create("alice", task_id="h2", unique_key="only-one"))
    assert again == "h1"
    assert again.duplicate is True
    assert queue.push(task).duplicate is True  # a known id is reported as a duplicate now
    ids = queue.push_batch([Task.create("alice", task_id="h3"), task])
    assert ids == ["h3", "h1"]
    assert [h.duplicate for h in ids] == [False, True]


def test_an_id_given_twice_in_a_batch_is_stored_once_its_second_copy_the_duplicate(
    backend: QueueBackend,
) -> None:
    """The first copy is the push (``duplicate`` False), the second a duplicate of it, also
    when the batch is reordered to put a parent before its child."""
    queue = FairQueue(backend)
    first = Task.create("alice", payload={"n": 1}, task_id="twice")
    second = Task.create("alice", payload={"n": 2}, task_id="twice")
    handles = queue.push_batch([first, second])
    assert [(h, h.duplicate) for h in handles] == [("twice", False), ("twice", True)]
    assert queue.get_task("twice").task == first
    child = Task.create("alice", task_id="kid", depends_on=["mom"])
    mom = Task.create("alice", task_id="mom")
    handles = queue.push_batch([child, first, mom, child])
    assert [(h, h.duplicate) for h in handles] == [
        ("kid", False),
        ("twice", True),
        ("mom", False),
        ("kid", True),
    ]


def test_chain_of_three_passes_values_end_to_end(backend: QueueBackend) -> None:
    registry = _registry()
    queue = FairQueue(backend)
    start, add = registry.get("start"), registry.get("add")
    steps = chain(start.create("alice", 1), add.step("alice", 10), add.step("alice", 100))
    last = queue.push_chain(steps)
    assert _drain(queue, RegistryHandler(registry)) == 3
    assert last.get(timeout=5) == 111
    first = steps.tasks[0].task_id
    assert queue.xcom_pull(first, "seen", tenant="alice") == {"start": 1}
    assert queue.xcom_pull(first, tenant="alice") == 1


def test_a_step_whose_parent_result_expired_fails_instead_of_reading_none(
    make_backend: Callable[..., QueueBackend], clock: FakeClock
) -> None:
    """A chain step (or chord callback) that starts after its parent's finished record expired
    got None as the parent's result, silently; now it fails with ParentResultExpiredError and
    goes to the DLQ as poisoned. A parent that returned None still hands over None."""
    ttl = 5.0
    backend = make_backend(config=QueueConfig(result_ttl_seconds=ttl))
    registry = _registry()
    queue = FairQueue(backend)
    square, add = registry.get("square"), registry.get("add")
    late = queue.push_chain(chain(square.create("alice", 6), add.step("alice", 1)))
    [parent] = queue.claim_batch(1)
    queue.finish(parent, 36)
    clock.advance(ttl + 1)  # the parent's record (and result) expire before the step runs
    assert _drain(queue, RegistryHandler(registry)) == 1
    with pytest.raises(TaskFailedError, match="ParentResultExpiredError") as info:
        late.get(timeout=5)
    assert "poisoned" in str(info.value)
    [entry] = queue.list_dlq()
    assert entry.original_task.task_id == late.task_id
    assert entry.failure_type == FailureType.POISONED

    @registry.task("nothing")
    def nothing() -> None:
        return None

    @registry.task("took")
    def took(previous: object) -> str:
        return f"got {previous!r}"

    kept = queue.push_chain(chain(nothing.create("alice"), took.step("alice")))
    assert _drain(queue, RegistryHandler(registry)) == 2
    assert kept.get(timeout=5) == "got None"


def test_a_chord_callback_gets_its_members_results_not_its_own_dependencies(
    backend: QueueBackend,
) -> None:
    registry = _registry()
    queue = FairQueue(backend)
    square, total = registry.get("square"), registry.get("total")
    extra = queue.push(square.create("alice", 10))
    callback = attrs.evolve(total.step("alice"), depends_on=(extra.task_id,))
    handle = queue.push_chord(chord(group([square.create("alice", n) for n in (2, 3)]), callback))
    assert _drain(queue, RegistryHandler(registry)) == 4
    assert handle.get(timeout=5) == 13  # 4 + 9: the extra dependency's 100 is not a member's


def test_workflows_of_one_tenant_and_of_the_built_types_only(backend: QueueBackend) -> None:
    queue = FairQueue(backend)
    a, b = Task.create("alice"), Task.create("bob")
    with pytest.raises(TaskValidationError, match="one tenant"):
        chain(a, b)
    with pytest.raises(TaskValidationError, match="one tenant"):
        chord(group([a]), b)
    with pytest.raises(TaskValidationError, match="one tenant"):
        queue.push_chain(Chain((a, b)))
    for wrong, push in (
        ([a], queue.push_group),
        ([a, a], queue.push_chain),
        ((a,), queue.push_chord),
    ):
        with pytest.raises(TaskTypeError):
            push(wrong)  # type: ignore[arg-type]
    with pytest.raises(TaskValidationError, match="at least one task"):
        queue.push_chain(Chain(()))
    for bad in (None, 5):
        with pytest.raises(TaskTypeError):
            group(bad)  # type: ignore[arg-type]
    assert queue.push_group(group([a, b])) == [a.task_id, b.task_id]  # a group may mix tenants
    for key in (5, "", None, ["a"]):
        with pytest.raises(TaskValidationError, match="key"):
            queue.xcom_pull(a.task_id, key, tenant="alice")  # type: ignore[arg-type]


def test_tenant_b_cannot_read_tenant_a_xcom(backend: QueueBackend) -> None:
    registry = _registry()
    queue = FairQueue(backend)
    a_task = registry.get("start").create("tenant-a", 7)
    queue.push(a_task)
    _drain(queue, RegistryHandler(registry))
    assert queue.xcom_pull(a_task.task_id, "seen", tenant="tenant-a") == {"start": 7}
    assert queue.xcom_pull(a_task.task_id, "seen", tenant="tenant-b") is None
    assert queue.xcom_pull(a_task.task_id, tenant="tenant-b") is None
    # nor from inside a handler of tenant B
    seen: list[Any] = []

    @registry.task("peek")
    def peek() -> None:
        ctx = current_task_context()
        seen.append((ctx.xcom_pull(a_task.task_id, "seen"), ctx.xcom_pull(a_task.task_id)))

    queue.push(registry.get("peek").create("tenant-b"))
    _drain(queue, RegistryHandler(registry))
    assert seen == [(None, None)]


def test_chord_over_1000_members_runs_its_callback_once(backend: QueueBackend) -> None:
    registry = _registry()
    calls: list[int] = []

    @registry.task("count")
    def count(results: list[int]) -> int:
        calls.append(len(results))
        return sum(results)

    square = registry.get("square")
    members = group(square.create("alice", n) for n in range(1000))
    queue = FairQueue(backend)
    callback = queue.push_chord(chord(members, registry.get("count").step("alice")))
    assert _drain(queue, RegistryHandler(registry)) == 1001
    assert calls == [1000]
    assert callback.get(timeout=5) == sum(n * n for n in range(1000))


def test_failed_member_cancels_the_callback(backend: QueueBackend) -> None:
    registry = _registry()
    queue = FairQueue(backend)
    boom = registry.get("boom").create("alice")
    callback = queue.push_chord(
        chord(
            [registry.get("square").create("alice", 2), boom], registry.get("total").step("alice")
        )
    )
    _drain(queue, RegistryHandler(registry))
    with pytest.raises(TaskFailedError) as failed:
        queue.result(boom.task_id).get(timeout=5)
    assert failed.value.error_type == "ValueError"
    assert failed.value.error_message == "the input was bad"
    assert "raise ValueError" in failed.value.traceback
    with pytest.raises(TaskCanceledError, match=boom.task_id):
        callback.get(timeout=5)


def test_get_times_out_cleanly_and_tells_none_from_no_result(backend: QueueBackend) -> None:
    queue = FairQueue(backend)
    handle = queue.push(Task.create("alice", task_id="slow"))
    started = time.monotonic()
    with pytest.raises(ResultTimeoutError):
        handle.get(timeout=0.2)
    assert 0.15 <= time.monotonic() - started < 2
    with pytest.raises(TimeoutError):  # a TimeoutError too
        handle.get(timeout=0)
    [task] = queue.claim_batch(1)
    queue.finish(task, None)
    assert handle.get(timeout=1) is None  # the result is None: that is an answer


def test_get_returns_within_ms_of_the_finish(backend: QueueBackend, backend_kind: str) -> None:
    queue = FairQueue(backend)
    gaps: list[float] = []
    for round_no in range(5):
        handle = queue.push(Task.create("alice", task_id=f"fast{round_no}"))
        [task] = queue.claim_batch(1)
        finished_at: list[float] = []

        def finish_later(
            claimed: Task = task, n: int = round_no, stamps: list[float] = finished_at
        ) -> None:
            time.sleep(0.05)
            queue.finish(claimed, {"round": n})
            stamps.append(time.perf_counter())

        finisher = threading.Thread(target=finish_later)
        finisher.start()
        assert handle.get(timeout=5) == {"round": round_no}
        returned = time.perf_counter()
        finisher.join()
        gaps.append(max(0.0, returned - finished_at[0]) * 1000)
    print(
        f"\n[{backend_kind}] handle.get after finish: median {statistics.median(gaps):.2f} ms, "
        f"max {max(gaps):.2f} ms"
    )
    # woken by the finish's signal, not by the 5 s timeout or a poll: the figure printed above
    # is the speed (a few ms); the bound only tells a wake from a wait (a loaded 2-core machine
    # has seen a 3-master cluster's median pass 5 ms)
    assert statistics.median(gaps) < 250


def test_bad_workflow_and_xcom_input_is_refused(backend: QueueBackend) -> None:
    registry = _registry()
    with pytest.raises(TaskValidationError, match="group"):
        chord([], registry.get("total").step("alice"))
    queue = FairQueue(backend)

    @registry.task("big")
    def big() -> None:
        current_task_context().xcom_push("blob", "x" * (queue.config.max_payload_bytes + 1))

    @registry.task("odd")
    def odd() -> None:
        current_task_context().xcom_push("when", object())

    errors: list[BaseException] = []

    class Keep(RegistryHandler):
        def run_sync(self, task: Task) -> object:
            try:
                return super().run_sync(task)
            except Exception as exc:
                errors.append(exc)
                raise

    queue.push_batch([registry.get("big").create("alice"), registry.get("odd").create("alice")])
    _drain(queue, Keep(registry))
    assert isinstance(errors[0], XComTooLargeError)
    assert errors[0].field == "xcom[blob]"
    assert "xcom[when]" in str(errors[1])
    assert backend.stats()["finished"] == 0  # nothing half-written


def _unique_msg(task_id: str, tenant_id: str, key: str, *, window: float = 0.0) -> Any:
    import attrs

    return attrs.evolve(msg(task_id, tenant_id), unique_key=key, unique_window=window)
