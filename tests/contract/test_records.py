"""The task record and the browse indexes (ADR 70): every attempt's worker, times, outcome and
failure record; a finished task's payload kept or previewed; list_tasks newest first by state
and tenant with a cursor; nothing listed (and no index entry left) once a record expired."""

from __future__ import annotations

import pytest

from fairque_core import FailureType, QueueConfig, TaskState
from fairque_core.domain.outcomes import decode_error_record, error_record
from fairque_core.domain.task_records import ATTEMPTS_KEPT, BODY_KEPT_BYTES, PREVIEW_BYTES

from .conftest import probe_of
from .helpers import msg


def _error(text: str) -> str:
    try:
        raise ValueError(text)
    except ValueError as exc:
        return error_record(exc)


def _attempt(backend, clock, task_id, worker, *, outcome, seconds=1.0):
    [c] = backend.claim(worker_id=worker)
    assert c.message.task_id == task_id
    clock.advance(seconds)
    if outcome == "finished":
        backend.finish(task_id, c.lease.token, b'{"ok":1}')
    elif outcome == "retried":
        backend.fail(task_id, c.lease.token, retry_delay=0, reason="x", error=_error(worker))
    else:
        backend.fail(task_id, c.lease.token, retry_delay=None, reason="x", error=_error(worker))
    clock.advance(1.0)


def test_a_task_that_failed_twice_then_finished_keeps_each_attempt(backend, clock):
    ms = round(clock() * 1000)
    backend.push(msg("t1", name="job"))
    _attempt(backend, clock, "t1", "w1", outcome="retried")
    _attempt(backend, clock, "t1", "w2", outcome="retried")
    _attempt(backend, clock, "t1", "w3", outcome="finished")
    rec = backend.get_record("t1")
    assert rec.state is TaskState.FINISHED
    assert rec.message.name == "job"
    assert rec.message.body == b'{"n": 1}'
    assert rec.body_size is None
    assert rec.result == b'{"ok":1}'
    assert rec.attempt_count == 3
    got = [(a.number, a.worker_id, a.outcome, a.started_ms, a.ended_ms) for a in rec.attempts]
    assert got == [
        (1, "w1", "retried", ms, ms + 1000),
        (2, "w2", "retried", ms + 2000, ms + 3000),
        (3, "w3", "finished", ms + 4000, ms + 5000),
    ]
    assert [decode_error_record(a.error)["message"] for a in rec.attempts] == ["w1", "w2", ""]
    assert "ValueError: w2" in decode_error_record(rec.attempts[1].error)["traceback"]
    assert (rec.started_ms, rec.ended_ms) == (ms + 4000, ms + 5000)


def test_a_dead_lettered_task_keeps_its_attempts_in_the_dlq_entry(backend, clock):
    ms = round(clock() * 1000)
    backend.push(msg("d1"))
    _attempt(backend, clock, "d1", "w1", outcome="retried")
    _attempt(backend, clock, "d1", "w2", outcome="failed")
    rec = backend.get_record("d1")
    assert rec.state is TaskState.FAILED
    assert [(a.worker_id, a.outcome) for a in rec.attempts] == [("w1", "retried"), ("w2", "failed")]
    assert rec.ended_ms == ms + 3000
    [entry] = backend.list_dlq()
    history = entry.retry_history
    assert [(h["number"], h["worker_id"], h["outcome"]) for h in history] == [
        (1, "w1", "retried"),
        (2, "w2", "failed"),
    ]
    assert "ValueError: w1" in history[0]["traceback"]
    assert history[1]["error_message"] == "w2"


def test_an_expired_lease_and_a_cancel_are_attempts_too(backend, clock):
    ms = round(clock() * 1000)
    backend.push(msg("e1"))
    backend.claim(worker_id="gone", lease_seconds=1)
    clock.advance(2)
    assert backend.requeue_expired() == 1
    backend.claim(worker_id="w2")
    assert backend.cancel("e1")
    rec = backend.get_record("e1")
    assert rec.state is TaskState.CANCELED
    assert [(a.worker_id, a.outcome) for a in rec.attempts] == [
        ("gone", "expired"),
        ("w2", "canceled"),
    ]
    assert rec.ended_ms == ms + 2000
    assert rec.attempts[0].error == ""


def test_a_long_finished_payload_keeps_its_size_and_a_preview(backend):
    body = b'{"p": "' + b"x" * BODY_KEPT_BYTES + b'"}'
    backend.push(msg("big", body=body))
    [c] = backend.claim()
    backend.finish("big", c.lease.token, None)
    rec = backend.get_record("big")
    assert rec.body_size == len(body)
    assert rec.message.body == body[:PREVIEW_BYTES]
    assert rec.result is None
    assert backend.get_message("big") is None  # as before: a finished task has no message


def test_only_the_last_attempts_are_kept(backend):
    backend.push(msg("many", max_retries=50))
    for k in range(ATTEMPTS_KEPT + 3):
        [c] = backend.claim(worker_id=f"w{k}")
        backend.fail("many", c.lease.token, retry_delay=0, error=_error(str(k)))
    rec = backend.get_record("many")
    assert rec.attempt_count == ATTEMPTS_KEPT + 3
    assert [a.number for a in rec.attempts] == list(range(4, ATTEMPTS_KEPT + 4))
    assert rec.attempts[-1].worker_id == f"w{ATTEMPTS_KEPT + 2}"


def _end(backend, clock, task_id, how, tenant="alice"):
    backend.push(msg(task_id, tenant))
    if how == "canceled":
        assert backend.cancel(task_id)
        return
    [c] = backend.claim(assigned=[tenant])
    if how == "finished":
        backend.finish(task_id, c.lease.token, None)
    else:
        backend.fail(task_id, c.lease.token, retry_delay=None, reason="bad")


def _ids(page):
    return [s.task_id for s in page[0]]


def test_list_tasks_newest_first_by_state_and_tenant(backend, clock):
    ms = round(clock() * 1000)
    for k, (tenant, how) in enumerate(
        [
            ("acme", "failed"),
            ("bob", "failed"),
            ("acme", "finished"),
            ("acme", "failed"),
            ("acme", "canceled"),
        ]
    ):
        _end(backend, clock, f"t{k}", how, tenant)
        clock.advance(1)
    assert _ids(backend.list_tasks(state=TaskState.FAILED, tenant="acme")) == ["t3", "t0"]
    assert _ids(backend.list_tasks(state=TaskState.FAILED)) == ["t3", "t1", "t0"]
    assert _ids(backend.list_tasks()) == ["t4", "t3", "t2", "t1", "t0"]
    assert _ids(backend.list_tasks(tenant="acme")) == ["t4", "t3", "t2", "t0"]
    items, cursor = backend.list_tasks(state=TaskState.FAILED, tenant="acme")
    first = items[0]
    assert (first.tenant, first.state, first.reason) == ("acme", TaskState.FAILED, "bad")
    assert first.ended_ms == ms + 3000
    assert cursor is None
    # a requeued entry leaves the failed index; a purged one too
    assert backend.requeue_dlq(["t3"]) == 1
    assert backend.purge_dlq(["t1"]) == 1
    assert _ids(backend.list_tasks(state=TaskState.FAILED)) == ["t0"]


def test_list_tasks_pages_through_ties_with_a_cursor(backend, clock):
    ids = [f"x{k:02d}" for k in range(7)]
    for task_id in ids:  # all end in the same millisecond
        _end(backend, clock, task_id, "failed")
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        items, cursor = backend.list_tasks(state=TaskState.FAILED, limit=3, cursor=cursor)
        seen += [s.task_id for s in items]
        pages += 1
        if cursor is None:
            break
    assert seen == sorted(ids, reverse=True)
    assert pages == 3


def test_list_tasks_skips_an_entry_whose_cursor_left(backend, clock):
    for k in range(4):
        _end(backend, clock, f"f{k}", "failed")
        clock.advance(1)
    items, cursor = backend.list_tasks(limit=2)
    assert [s.task_id for s in items] == ["f3", "f2"]
    backend.purge_dlq(["f2"])  # the cursor's own entry goes
    items, cursor = backend.list_tasks(limit=2, cursor=cursor)
    assert [s.task_id for s in items] == ["f1", "f0"]
    assert cursor is None


def test_nothing_is_listed_once_its_record_expired(make_backend, clock):
    backend = make_backend(QueueConfig(result_ttl_seconds=10))
    _end(backend, clock, "old", "finished")
    _end(backend, clock, "gone", "canceled")
    clock.advance(11)
    assert backend.list_tasks() == ([], None)
    _end(backend, clock, "new", "finished")
    assert _ids(backend.list_tasks()) == ["new"]


def test_the_indexes_hold_no_entry_of_an_expired_record(make_backend, clock):
    backend = make_backend(QueueConfig(result_ttl_seconds=10))
    for k in range(3):
        _end(backend, clock, f"old{k}", "finished")
        _end(backend, clock, f"gone{k}", "canceled")
    clock.advance(11)
    # the next end of each state trims its indexes (and, on server time, they expire with it)
    _end(backend, clock, "new", "finished")
    _end(backend, clock, "can", "canceled")
    assert _ids(backend.list_tasks()) == ["new", "can"]
    probe = probe_of(make_backend, backend)
    if probe is None:
        return
    client = probe.client
    keys = [k for k in probe.all_keys() if k.startswith(probe.prefix + "ix:")]
    assert sorted(keys) == sorted(
        probe.prefix + f"ix:{s}{t}" for s in ("finished", "canceled") for t in ("", ":alice")
    )
    members = {k: sorted(m.decode() for m in client.zrange(k, 0, -1)) for k in keys}
    for key, got in members.items():
        assert got == (["new"] if "finished" in key else ["can"]), key


def test_a_bad_cursor_or_state_is_refused(backend):
    from fairque_core.domain.errors import TaskValidationError

    with pytest.raises(TaskValidationError):
        backend.list_tasks(cursor="nope")
    with pytest.raises(TaskValidationError):
        backend.list_tasks(state=TaskState.QUEUED)
    with pytest.raises(TaskValidationError):
        backend.list_tasks(limit=0)
    assert FailureType.FAILED.value == "failed"
