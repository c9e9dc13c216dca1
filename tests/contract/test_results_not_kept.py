"""Results you don't keep (ADR 78), on every backend of the contract suite.

A finish with ``keep=False`` deletes the task's record instead of rewriting it, unless
something needs it: dependents, XCom values, a result waiter armed before the finish, a
unique key held for a window. A deleted record reads as unknown. Through the engine, a
task's ``keep_result`` (or the queue's ``results`` default) travels with its message and the
finish asks for it.
"""

from __future__ import annotations

import attrs
import pytest

from fairque_core import (
    FairQueue,
    LeaseLostError,
    QueueBackend,
    QueueConfig,
    Task,
    TaskNotFoundError,
    TaskState,
)

from .conftest import probe_of
from .helpers import msg


def _claim(backend: QueueBackend, n: int = 1) -> list[tuple[str, str]]:
    return [(c.message.task_id, c.lease.token) for c in backend.claim(count=n)]


def _task_keys(backend: QueueBackend, make_backend: object) -> set[str] | None:
    probe = probe_of(make_backend, backend)  # type: ignore[arg-type]
    if probe is None:
        return None
    per_task = (":task:", ":waits:", ":children:", ":done:", ":xcom:", ":ix:")
    return {key for key in probe.queue_keys() if any(part in key for part in per_task)}


def test_a_finish_not_kept_leaves_an_unknown_task(backend: QueueBackend) -> None:
    backend.push_batch([msg("a1"), msg("a2")])
    (a1, t1), (a2, t2) = _claim(backend, 2)
    backend.finish(a1, t1, b'"r1"', keep=False)
    backend.finish(a2, t2, b'"r2"')
    assert backend.get_state(a1) is None
    assert backend.get_result(a1) is None
    assert backend.get_outcome(a1) is None
    assert backend.get_state(a2) is TaskState.FINISHED
    assert backend.get_result(a2) == b'"r2"'
    assert backend.stats()["finished"] == 2  # counted as finished all the same
    assert backend.queue_sizes(["alice"])["alice"].leased == 0


def test_a_repeated_finish_not_kept_is_a_lost_lease(backend: QueueBackend) -> None:
    backend.push(msg("a1"))
    [(a1, t1)] = _claim(backend)
    backend.finish(a1, t1, None, keep=False)
    with pytest.raises(LeaseLostError):
        backend.finish(a1, t1, None, keep=False)
    assert backend.finish_batch([(a1, t1, None, None, False)]) == [False]


def test_finish_batch_items_choose_per_task(backend: QueueBackend) -> None:
    backend.push_batch([msg(f"t{i}") for i in range(4)])
    items = _claim(backend, 4)
    flags = backend.finish_batch(
        [
            (items[0][0], items[0][1], b"1", None, False),
            (items[1][0], items[1][1], b"2"),
            (items[2][0], items[2][1], None, None, False),
            (items[3][0], items[3][1], b"4", None, True),
        ]
    )
    assert flags == [True] * 4
    assert [backend.get_state(task_id) for task_id, _ in items] == [
        None,
        TaskState.FINISHED,
        None,
        TaskState.FINISHED,
    ]


def test_a_task_with_dependents_keeps_its_record(backend: QueueBackend) -> None:
    backend.push_batch([msg("parent"), msg("child", depends_on=["parent"])])
    [(parent, token)] = _claim(backend)
    backend.finish(parent, token, b"1", keep=False)
    assert backend.get_state("parent") is TaskState.FINISHED
    assert backend.get_result("parent") == b"1"
    assert backend.get_state("child") is TaskState.QUEUED
    [(child, token)] = _claim(backend)
    backend.finish(child, token, None, keep=False)
    assert backend.get_state("child") is None


def test_xcom_values_keep_the_record(backend: QueueBackend) -> None:
    backend.push(msg("a1"))
    [(a1, t1)] = _claim(backend)
    backend.finish(a1, t1, b"1", {"k": b"v"}, keep=False)
    assert backend.get_state(a1) is TaskState.FINISHED
    assert backend.xcom_get("alice", [(a1, "k"), (a1, "return_value")]) == [b"v", b"1"]


def test_an_armed_waiter_keeps_the_record(backend: QueueBackend) -> None:
    backend.push_batch([msg("a1"), msg("a2")])
    assert backend.wait_done("a1", 0) is False  # armed while alive
    (x, tx), (y, ty) = _claim(backend, 2)
    backend.finish_batch([(x, tx, b"1", None, False), (y, ty, b"2", None, False)])
    assert backend.get_state("a1") is TaskState.FINISHED
    assert backend.get_result("a1") == (b"1" if x == "a1" else b"2")
    assert backend.wait_done("a1", 0) is True
    assert backend.get_state("a2") is None
    assert backend.wait_done("a2", 0) is False  # unknown: nothing to wait for


def test_a_unique_window_keeps_the_record(backend: QueueBackend) -> None:
    held = attrs.evolve(msg("u1"), unique_key="k1", unique_window=60.0)
    freed = attrs.evolve(msg("u2"), unique_key="k2")
    assert backend.push_batch_detailed([held, freed]) == [(True, "u1"), (True, "u2")]
    for task_id, token in _claim(backend, 2):
        backend.finish(task_id, token, None, keep=False)
    assert backend.get_state("u1") is TaskState.FINISHED
    assert backend.get_state("u2") is None
    again = [attrs.evolve(msg("u3"), unique_key="k1"), attrs.evolve(msg("u4"), unique_key="k2")]
    assert backend.push_batch_detailed(again) == [(False, "u1"), (True, "u4")]


def test_finish_and_claim_forgets_too(backend: QueueBackend) -> None:
    inner = getattr(backend, "wrapped", backend)  # the async facade: its wrapped backend's
    both = getattr(backend, "finish_and_claim", None)
    if both is None or not hasattr(inner, "finish_and_claim"):
        pytest.skip("the backend has no finish_and_claim")
    backend.push_batch([msg("a1"), msg("a2")])
    [(a1, t1)] = _claim(backend)
    done, claimed = both([(a1, t1, b"1", None, False)], count=1)
    assert done == [True]
    assert [c.message.task_id for c in claimed] == ["a2"]
    assert backend.get_state(a1) is None


def test_a_drained_queue_not_kept_leaves_no_per_task_key(
    backend: QueueBackend, make_backend: object
) -> None:
    backend.push_batch([msg(f"t{i}", f"u{i % 5}") for i in range(40)])
    while claimed := _claim(backend, 7):
        assert all(backend.finish_batch([(i, t, b"x", None, False) for i, t in claimed]))
    assert backend.stats()["finished"] == 40
    assert all(backend.get_state(f"t{i}") is None for i in range(40))
    assert backend.list_tasks()[0] == []  # no browse index entry (ADR 70)
    keys = _task_keys(backend, make_backend)
    assert keys in (None, set())


def test_the_message_carries_keep_result(backend: QueueBackend) -> None:
    backend.push_batch([attrs.evolve(msg("a1"), keep_result=False), msg("a2")])
    got = {c.message.task_id: c.message.keep_result for c in backend.claim(count=2)}
    assert got == {"a1": False, "a2": True}


# ------------------------------------------------------------------ through the engine
@pytest.mark.parametrize("results", ["keep", "none"])
def test_the_queue_default_and_the_task_override(make_backend: object, results: str) -> None:
    backend = make_backend(config=QueueConfig(results=results))  # type: ignore[operator]
    config = getattr(getattr(backend, "wrapped", backend), "config", None)
    queue = FairQueue(backend, config=config)
    default = queue.push(Task.create("alice", payload={"n": 1}))
    kept = queue.push(Task.create("alice", payload={"n": 2}, keep_result=True))
    dropped = queue.push(Task.create("alice", payload={"n": 3}, keep_result=False))
    tasks = queue.claim_batch(3)
    # resolved at push: a claimed task's keep_result is False, or None for kept
    assert {t.task_id: t.keep_result for t in tasks} == {
        default.task_id: None if results == "keep" else False,
        kept.task_id: None,
        dropped.task_id: False,
    }
    assert all(queue.finish_batch([(t, {"ok": t.payload["n"]}) for t in tasks]))
    assert (queue.get_state(default.task_id) is None) is (results == "none")
    assert kept.get(timeout=1) == {"ok": 2}
    assert queue.get_state(dropped.task_id) is None
    with pytest.raises(TaskNotFoundError):
        dropped.get(timeout=1)


def test_a_record_not_kept_has_no_story_no_index_entry_but_its_event(
    backend: QueueBackend,
) -> None:
    """With the task records and the events log (ADR 70, 71): a deleted record writes no
    story and enters no browse index; its ``completed`` event is told (the log is the
    queue's)."""
    backend.push_batch([msg("a1"), msg("a2")])
    after = backend.events_end()
    (x, tx), (y, ty) = _claim(backend, 2)
    backend.finish_batch([(x, tx, b"1", None, False), (y, ty, b"2")])
    assert backend.get_record(x) is None
    assert backend.get_record(y) is not None
    page, _cursor = backend.list_tasks(state=TaskState.FINISHED)
    assert [s.task_id for s in page] == [y]
    told = [(e.type, e.task_id) for e in backend.read_events(after, count=10)]
    assert ("completed", x) in told
    assert ("completed", y) in told
