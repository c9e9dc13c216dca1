"""The intake (ADR 47) on every backend: ``push_intake``, ``ingest`` and ``intake_size``.

``push_intake`` stores plain messages in one append and nothing else; a claim (or ``ingest``)
takes them from the head, in order, and does for each what ``push`` of it would do then:
stored, a duplicate, or refused into the dead-letter queue as REJECTED with its reason. These
tests hold the reference model and the Redis adapter (one slot, async, partitioned) to the same
answers, and the engine's ``push_intake`` to the same client path as ``push``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from fairque_core import (
    INTAKE_CLAIM_LIMIT,
    FailureType,
    IngestReport,
    Message,
    PayloadTooLargeError,
    Priority,
    QueueConfig,
    Task,
    TaskIdConflictError,
    TaskState,
    TaskValidationError,
)
from fairque_core.app.engine.queue import FairQueue
from fairque_core.app.engine.queue_async import AsyncFairQueue

from .conftest import PARTITIONED_KINDS
from .helpers import claim_tenants, msg
from .test_finish_and_claim import finish_and_claim


class _OverFacade:
    """The intake of an async backend seen through the contract suite's sync facade."""

    def __init__(self, facade: Any) -> None:
        self._facade = facade

    def push_intake(self, messages: Any) -> None:
        self._facade._call(self._facade.wrapped.push_intake(messages))

    def ingest(self, limit: int = 1000) -> IngestReport:
        report: IngestReport = self._facade._call(self._facade.wrapped.ingest(limit))
        return report

    def intake_size(self) -> int:
        size: int = self._facade._call(self._facade.wrapped.intake_size())
        return size


def intake(backend: Any) -> Any:
    """``backend``'s intake methods, called synchronously (through the facade when async)."""
    inner = getattr(backend, "wrapped", backend)
    assert hasattr(inner, "push_intake"), f"{type(inner).__name__} has no intake"
    return _OverFacade(backend) if inner is not backend else backend


def _ids(claims: Any) -> list[str]:
    return [c.message.task_id for c in claims]


def _drain_wake(backend: Any) -> None:
    while backend.wait_for_work(0):
        pass


# ---------------------------------------------------------------- push_intake and ingest
def test_pushed_through_the_intake_then_claimed_in_order(backend):
    intake(backend).push_intake([msg(f"a{i}") for i in range(4)])
    assert _ids(backend.claim(count=10)) == ["a0", "a1", "a2", "a3"]
    stats = backend.stats()
    assert (stats["pushed"], stats["claimed"], stats["leased"]) == (4, 4, 4)
    assert backend.tenant_stats("alice")["pushed"] == 4


def test_nothing_is_visible_before_ingest(backend):
    box = intake(backend)
    box.push_intake([msg("a0"), msg("b0", "bob")])
    assert box.intake_size() == 2
    for task_id in ("a0", "b0"):
        assert backend.get_state(task_id) is None
        assert backend.get_message(task_id) is None
        assert backend.get_outcome(task_id) is None
    assert backend.cancel("a0") is False  # cannot reach it
    sizes = backend.queue_sizes(["alice", "bob"])
    assert all(s.critical + s.normal + s.scheduled + s.leased == 0 for s in sizes.values())
    stats = backend.stats()
    assert (stats["pushed"], stats["ready"], stats["active_tenants"]) == (0, 0, 0)
    assert backend.tenant_stats("alice")["pushed"] == 0
    assert backend.list_tenants() == ([], 0)
    assert box.ingest() == IngestReport(ingested=2, left=0)
    assert box.intake_size() == 0
    assert backend.get_state("a0") is TaskState.QUEUED
    assert backend.get_message("b0") == msg("b0", "bob")
    assert backend.stats()["ready"] == 2
    assert sorted(backend.list_tenants()[0]) == ["alice", "bob"]


def test_ingest_takes_up_to_its_limit_and_reports_what_is_left(backend):
    box = intake(backend)
    box.push_intake([msg(f"a{i}") for i in range(5)])
    assert box.ingest(2) == IngestReport(ingested=2, left=3)
    assert box.intake_size() == 3
    assert backend.stats()["ready"] == 2
    assert box.ingest(10) == IngestReport(ingested=3, left=0)
    assert box.ingest() == IngestReport()  # an empty intake: nothing to do
    assert _ids(backend.claim(count=10)) == [f"a{i}" for i in range(5)]


@pytest.mark.parametrize("limit", [0, -1, True, 2.5, "3"])
def test_ingest_limit_must_be_a_positive_int(backend, limit):
    box = intake(backend)
    box.push_intake([msg("a0")])
    with pytest.raises(TaskValidationError):
        box.ingest(limit)
    assert box.intake_size() == 1


def test_empty_push_intake_is_a_no_op(backend):
    box = intake(backend)
    box.push_intake([])
    assert box.intake_size() == 0
    assert box.ingest() == IngestReport()


def test_duplicates_are_counted_as_push_counts_them(backend):
    box = intake(backend)
    assert backend.push(msg("t1", body=b'"first"'))
    box.push_intake([msg("t1", body=b'"second"'), msg("t2"), msg("t2", body=b'"again"')])
    assert box.ingest() == IngestReport(ingested=1, duplicates=2, left=0)
    assert backend.get_message("t1").body == b'"first"'  # the stored task is untouched
    assert backend.get_message("t2").body == msg("t2").body  # the first of the intake wins
    stats = backend.stats()
    assert (stats["pushed"], stats["duplicates"], stats["ready"]) == (2, 2, 2)
    assert backend.tenant_stats("alice")["duplicates"] == 2


def test_an_id_whose_record_expired_is_stored_again(make_backend, clock):
    backend = make_backend(QueueConfig(result_ttl_seconds=5))
    box = intake(backend)
    backend.push(msg("t1"))
    [c] = backend.claim()
    backend.finish("t1", c.lease.token, b"1")
    box.push_intake([msg("t1")])
    assert box.ingest() == IngestReport(duplicates=1)  # its result is still kept
    clock.advance(6)
    box.push_intake([msg("t1")])
    assert box.ingest() == IngestReport(ingested=1)
    assert backend.get_state("t1") is TaskState.QUEUED


# ---------------------------------------------------------------- refusals
def test_a_tenant_at_max_queued_is_refused_into_the_dlq(backend):
    box = intake(backend)
    backend.set_limits({"max_queued": 2}, tenant="alice")
    box.push_intake([msg(f"a{i}") for i in range(4)] + [msg("b0", "bob")])
    assert box.ingest() == IngestReport(ingested=3, rejected=2, left=0)
    assert backend.get_state("a1") is TaskState.QUEUED
    for task_id in ("a2", "a3"):
        assert backend.get_state(task_id) is TaskState.FAILED
        assert backend.get_message(task_id) == msg(task_id)
    dlq = backend.list_dlq()
    assert [e.entry_id for e in dlq] == ["a2", "a3"]
    for entry in dlq:
        assert entry.failure_type is FailureType.REJECTED
        assert entry.original_task == msg(entry.entry_id)
        assert "max_queued" in entry.reason
        assert "2" in entry.reason
    assert [e.entry_id for e in backend.list_dlq(failure_type=FailureType.REJECTED)] == [
        "a2",
        "a3",
    ]
    alice = backend.tenant_stats("alice")
    assert (alice["pushed"], alice["dead"], alice["refusals"], alice["ready"]) == (2, 2, 2, 2)
    assert backend.stats()["dlq"] == 2
    outcome = backend.get_outcome("a2")
    assert outcome is not None
    assert outcome.state is TaskState.FAILED
    assert outcome.failure_type == FailureType.REJECTED


def test_a_rejected_task_is_requeued_through_the_normal_path(backend):
    box = intake(backend)
    backend.set_limits({"max_queued": 1}, tenant="alice")
    box.push_intake([msg("a0"), msg("a1")])
    assert box.ingest().rejected == 1
    [c] = backend.claim()
    assert c.message.task_id == "a0"
    assert backend.requeue_dlq(["a1"]) == 1
    assert backend.get_state("a1") is TaskState.QUEUED
    assert backend.list_dlq() == []
    assert backend.tenant_stats("alice")["dlq_requeued"] == 1
    [c1] = backend.claim()
    assert c1.message == msg("a1")
    backend.finish("a1", c1.lease.token, b"2")
    assert backend.get_state("a1") is TaskState.FINISHED


def test_a_payload_over_the_maximum_is_refused_before_any_io(make_backend):
    backend = make_backend(QueueConfig(max_payload_bytes=1024))
    box = intake(backend)
    with pytest.raises(PayloadTooLargeError):
        box.push_intake([msg("ok"), msg("big", body=b"x" * 1025)])
    assert box.intake_size() == 0  # the batch is refused whole
    box.push_intake([msg("edge", body=b"x" * 1024)])
    assert box.ingest() == IngestReport(ingested=1)


@pytest.mark.parametrize(
    "bad",
    [
        msg("late", delay=5),
        msg("child", depends_on=["parent"]),
        Message(task_id="u1", tenant="alice", priority=Priority.NORMAL, body=b"1", unique_key="k"),
    ],
    ids=["delay", "depends_on", "unique_key"],
)
def test_only_plain_messages_are_taken(backend, bad):
    box = intake(backend)
    backend.push(msg("parent"))
    with pytest.raises(TaskValidationError):
        box.push_intake([msg("fine"), bad])
    assert box.intake_size() == 0
    assert box.ingest() == IngestReport()


# ---------------------------------------------------------------- when ingest happens
def test_a_claim_ingests_at_most_the_claim_limit(backend):
    box = intake(backend)
    extra = 7
    box.push_intake([msg(f"a{i:04d}") for i in range(INTAKE_CLAIM_LIMIT + extra)])
    [c] = backend.claim()
    assert c.message.task_id == "a0000"
    assert box.intake_size() == extra
    stats = backend.stats()
    assert (stats["pushed"], stats["ready"]) == (INTAKE_CLAIM_LIMIT, INTAKE_CLAIM_LIMIT - 1)
    backend.claim()
    assert box.intake_size() == 0
    assert backend.stats()["pushed"] == INTAKE_CLAIM_LIMIT + extra


def test_a_paused_queue_still_ingests(backend):
    box = intake(backend)
    backend.pause()
    box.push_intake([msg("a0"), msg("a1")])
    assert backend.claim(count=5) == []
    assert box.intake_size() == 0
    assert backend.tenant_stats("alice")["ready"] == 2
    backend.resume()
    assert _ids(backend.claim(count=5)) == ["a0", "a1"]


def test_a_paused_tenant_is_ingested_and_waits(backend):
    box = intake(backend)
    backend.pause("alice")
    box.push_intake([msg("a0"), msg("b0", "bob")])
    assert _ids(backend.claim(count=5)) == ["b0"]
    assert backend.get_state("a0") is TaskState.QUEUED
    backend.resume("alice")
    assert _ids(backend.claim(count=5)) == ["a0"]


def test_finish_and_claim_ingests_in_its_claim_after_the_finish(backend):
    box = intake(backend)
    backend.push(msg("a0"))
    [c] = backend.claim(worker_id="w1")
    box.push_intake([msg("b0", "bob"), msg("b1", "bob")])
    flags, claims = finish_and_claim(
        backend, [(c.message.task_id, c.lease.token, b"1")], worker_id="w1", count=5
    )
    assert flags == [True]
    assert _ids(claims) == ["b0", "b1"]
    assert backend.get_state("a0") is TaskState.FINISHED
    assert box.intake_size() == 0


def test_nothing_but_a_claim_or_ingest_ingests(backend):
    box = intake(backend)
    box.push_intake([msg("a0")])
    backend.push(msg("b0", "bob"))
    backend.push_batch([msg("b1", "bob")])
    backend.get_state("a0")
    backend.cancel("a0")
    backend.stats()
    backend.requeue_expired()
    assert box.intake_size() == 1


def test_an_intake_task_is_ordered_by_its_ingest(backend):
    box = intake(backend)
    box.push_intake([msg("a0"), msg("a1")])
    backend.push(msg("a2"))  # pushed after, but stored before the intake is ingested
    assert _ids(backend.claim(count=5)) == ["a2", "a0", "a1"]


def test_priorities_are_kept_through_the_intake(backend):
    box = intake(backend)
    box.push_intake([msg("low", priority=Priority.LOW), msg("crit", priority=Priority.CRITICAL)])
    assert _ids(backend.claim(count=5)) == ["crit", "low"]


# ---------------------------------------------------------------- wake and fairness
def test_push_intake_wakes_an_idle_worker(backend):
    box = intake(backend)
    _drain_wake(backend)
    box.push_intake([msg("a0")])
    assert backend.wait_for_work(0) is True
    assert _ids(backend.claim()) == ["a0"]


def test_stats_count_the_intake_until_it_is_ingested(backend):
    box = intake(backend)
    assert backend.stats()["intake"] == 0
    box.push_intake([msg(f"a{i}") for i in range(3)])
    stats = backend.stats()
    assert (stats["intake"], stats["ready"]) == (3, 0)
    backend.claim(count=1)
    stats = backend.stats()
    assert (stats["intake"], stats["ready"], stats["leased"]) == (0, 2, 1)


def test_a_claim_that_leases_nothing_passes_the_wake_on_while_entries_wait(backend):
    """A paused queue leases nothing, but its claim still ingests (at most the limit): the
    entries left in the intake keep the wake signal raised, for the next claim to ingest."""
    box = intake(backend)
    box.push_intake([msg(f"a{i:04d}") for i in range(INTAKE_CLAIM_LIMIT + 3)])
    backend.pause()
    _drain_wake(backend)
    assert backend.claim(count=5) == []
    assert box.intake_size() == 3
    assert backend.wait_for_work(0) is True
    assert backend.claim(count=5) == []
    assert box.intake_size() == 0
    backend.resume()
    assert _ids(backend.claim(count=2)) == ["a0000", "a0001"]


def test_a_flood_through_the_intake_is_served_as_fairly_as_pushed(make_backend, backend_kind):
    """A heavy tenant's flood takes no more turns from a light one through the intake than
    pushed: the light tenant's five tasks are claimed within the first ten either way."""
    turns: dict[str, list[str]] = {}
    for way in ("push", "intake"):
        backend = make_backend()
        heavy = [msg(f"h{i:03d}", "heavy") for i in range(200)]
        if way == "push":
            backend.push_batch(heavy)
        else:
            intake(backend).push_intake(heavy)
        backend.push_batch([msg(f"l{i}", "light") for i in range(5)])
        turns[way] = claim_tenants(backend, 10)
    window = 12 if backend_kind in PARTITIONED_KINDS else 10  # cross-partition: approximate
    for got in turns.values():
        assert got[:window].count("light") == 5, got
    assert turns["intake"].count("light") == turns["push"].count("light")


# ---------------------------------------------------------------- the engine
def _run_engine(backend: Any, scenario: Any) -> Any:
    """Run ``scenario(queue)`` on the engine over ``backend``: a FairQueue on a sync one, an
    AsyncFairQueue (on the facade's loop) on an async one; its result."""
    inner = getattr(backend, "wrapped", None)
    if inner is None:
        return scenario(FairQueue(backend))

    async def run() -> Any:
        return await scenario(AsyncFairQueue(inner))

    return backend._call(run())


def test_the_engine_pushes_through_the_intake(backend):
    def sync(queue: FairQueue) -> Any:
        task = Task.create("alice", payload={"n": 1})
        handle = queue.push_intake(task)
        more = queue.push_intake_batch([Task.create("bob", payload={"n": i}) for i in range(3)])
        size = queue.intake_size()
        report = queue.ingest()
        claimed = queue.claim_batch(10)
        return task, handle, more, size, report, claimed

    async def in_async(queue: AsyncFairQueue) -> Any:
        task = Task.create("alice", payload={"n": 1})
        handle = await queue.push_intake(task)
        more = await queue.push_intake_batch(
            [Task.create("bob", payload={"n": i}) for i in range(3)]
        )
        size = await queue.intake_size()
        report = await queue.ingest()
        claimed = await queue.claim_batch(10)
        return task, handle, more, size, report, claimed

    is_async = hasattr(backend, "wrapped")
    task, handle, more, size, report, claimed = _run_engine(backend, in_async if is_async else sync)
    assert handle == task.task_id
    assert (handle.duplicate, handle.intake) == (False, True)
    assert [h.intake for h in more] == [True] * 3
    assert size == 4
    assert report == IngestReport(ingested=4)
    assert sorted(t.task_id for t in claimed) == sorted([task.task_id, *more])
    by_id = {t.task_id: t for t in claimed}
    assert by_id[task.task_id].payload == {"n": 1}
    assert [by_id[h].payload["n"] for h in more] == [0, 1, 2]


def test_the_engine_refuses_a_task_that_is_not_plain_before_any_io(backend):
    box = intake(backend)
    backend.push(msg("parent"))
    bad = [
        Task.create("alice", execute_after=4_000_000_000.0),
        Task.create("alice", depends_on=["parent"]),
        Task.create("alice", unique_key="k"),
    ]

    def sync(queue: FairQueue) -> list[str]:
        errors = []
        for task in bad:
            with pytest.raises(TaskValidationError) as info:
                queue.push_intake(task)
            errors.append(info.value.field)
        with pytest.raises(TaskValidationError):
            queue.push_intake_batch([Task.create("alice"), bad[0]])
        return errors

    async def in_async(queue: AsyncFairQueue) -> list[str]:
        errors = []
        for task in bad:
            with pytest.raises(TaskValidationError) as info:
                await queue.push_intake(task)
            errors.append(info.value.field)
        with pytest.raises(TaskValidationError):
            await queue.push_intake_batch([Task.create("alice"), bad[0]])
        return errors

    errors = _run_engine(backend, in_async if hasattr(backend, "wrapped") else sync)
    assert errors == ["delay", "depends_on", "unique_key"]
    assert box.intake_size() == 0


def test_concurrent_async_push_intake_calls_share_intake_calls(backend):
    inner = getattr(backend, "wrapped", None)
    if inner is None:
        pytest.skip("grouping is the async engine's (sync callers are threads)")
    calls: list[int] = []
    append = inner.push_intake

    async def counted(messages: Any) -> None:
        calls.append(len(messages))
        await asyncio.sleep(0)  # a call in flight, as a networked one is
        await append(messages)

    async def run() -> tuple[list[str], list[str], int]:
        queue = AsyncFairQueue(inner)
        inner.push_intake = counted
        try:
            tasks = [Task.create(f"t{i % 3}", payload={"i": i}) for i in range(20)]
            handles = await asyncio.gather(*(queue.push_intake(t) for t in tasks))
        finally:
            del inner.push_intake
        return [t.task_id for t in tasks], list(handles), queue._intake_coalescer.groups

    ids, handles, groups = backend._call(run())
    assert handles == ids
    assert sum(calls) == 20
    assert len(calls) < 20  # grouped
    assert groups >= 1
    assert intake(backend).intake_size() == 20
    assert sorted(_ids(backend.claim(count=50))) == sorted(ids)


def test_an_intake_entry_of_another_tenants_live_id_is_set_aside(backend):
    """ADR 60: the intake cannot refuse at once, so the ingest sets aside an entry whose id a
    live task of another tenant holds (counted rejected; Redis keeps it raw in intake:bad),
    stores nothing for it and leaves that task alone; its handle's get raises
    TaskIdConflictError instead of giving the other tenant's result."""

    def sync(queue: FairQueue) -> Any:
        mine = queue.push(Task.create("alice", payload={"n": 1}, task_id="report-1"))
        theirs = queue.push_intake(Task.create("bob", payload={"n": 2}, task_id="report-1"))
        report = queue.ingest()
        [claimed] = queue.claim_batch(5)
        queue.finish(claimed, {"secret": "alice"})
        try:
            theirs.get(timeout=2)
        except TaskIdConflictError as exc:
            refused: object = exc
        else:
            refused = None
        return report, claimed, mine.get(timeout=2), refused

    async def in_async(queue: AsyncFairQueue) -> Any:
        mine = await queue.push(Task.create("alice", payload={"n": 1}, task_id="report-1"))
        theirs = await queue.push_intake(Task.create("bob", payload={"n": 2}, task_id="report-1"))
        report = await queue.ingest()
        [claimed] = await queue.claim_batch(5)
        await queue.finish(claimed, {"secret": "alice"})
        try:
            await theirs.get(timeout=2)
        except TaskIdConflictError as exc:
            refused: object = exc
        else:
            refused = None
        return report, claimed, await mine.get(timeout=2), refused

    is_async = hasattr(backend, "wrapped")
    report, claimed, result, refused = _run_engine(backend, in_async if is_async else sync)
    assert report == IngestReport(rejected=1)
    assert (claimed.task_id, claimed.tenant, claimed.payload) == ("report-1", "alice", {"n": 1})
    assert result == {"secret": "alice"}
    assert isinstance(refused, TaskIdConflictError)
    assert refused.task_id == "report-1"
    assert backend.stats()["pushed"] == 1
