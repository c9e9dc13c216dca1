"""The queue's event log (ADR 71; ``read_events``/``events_end`` of the port) on every backend.

Each change worth telling writes its event in the same step: completed, failed, retried,
dead_lettered, canceled, paused, resumed, limits_changed; an event names the task, tenant and
task name, never the payload. A read resumes after any event's id, missing none and repeating
none. A partitioned queue merges its partitions' logs (one tenant's events stay in order)
and tells a queue-wide change once.
"""

from __future__ import annotations

import threading
import time

import pytest

from fairque_core import QueueConfig, TaskValidationError
from fairque_core.domain.enums import FailureType

from .helpers import msg


def _all(backend, after="0"):
    out = []
    while True:
        got = backend.read_events(after, count=7)
        if not got:
            return out
        out.extend(got)
        after = got[-1].id


def _told(events):
    return [(e.type, e.task_id, e.failure_type, e.error) for e in events]


def test_a_task_story_is_told_in_order(backend):
    backend.push_batch([msg(f"t{i}", name="report") for i in range(4)])
    a, b, c, d = backend.claim(count=4)
    backend.finish(a.message.task_id, a.lease.token, b'"ok"')
    backend.fail(b.message.task_id, b.lease.token, retry_delay=5.0, reason="E: once")
    backend.fail(
        c.message.task_id,
        c.lease.token,
        retry_delay=None,
        failure_type=FailureType.POISONED,
        reason="E: never",
    )
    backend.cancel(d.message.task_id)
    events = _all(backend)
    assert _told(events) == [
        ("completed", "t0", "", ""),
        ("failed", "t1", "failed", "E: once"),
        ("retried", "t1", "failed", "E: once"),
        ("failed", "t2", "poisoned", "E: never"),
        ("dead_lettered", "t2", "poisoned", "E: never"),
        ("canceled", "t3", "", "canceled"),
    ]
    assert {(e.tenant, e.name) for e in events} == {("alice", "report")}
    assert all(e.at > 0 for e in events)
    assert "ok" not in repr(events)  # no result, no payload
    assert "payload" not in {k for e in events for k in e.as_dict()}


def test_a_read_resumes_after_any_event_missing_none(backend):
    backend.push_batch([msg(f"t{i}") for i in range(30)])
    for c in backend.claim(count=30):
        backend.finish(c.message.task_id, c.lease.token)
    events = _all(backend)
    assert [e.task_id for e in events] == [f"t{i}" for i in range(30)]
    assert len({e.id for e in events}) == 30
    for k in (0, 11, 29):
        rest = _all(backend, events[k].id)
        assert [e.task_id for e in rest] == [f"t{i}" for i in range(k + 1, 30)]
    assert backend.events_end() == events[-1].id
    assert backend.read_events(backend.events_end()) == []


def test_the_end_of_an_empty_log_reads_nothing_and_then_what_comes(backend):
    end = backend.events_end()
    assert backend.read_events(end) == []
    backend.push(msg("t1"))
    assert backend.cancel("t1")
    assert _told(backend.read_events(end)) == [("canceled", "t1", "", "canceled")]


def test_expired_leases_are_retried_then_dead_lettered(make_backend, clock):
    backend = make_backend(QueueConfig(lease_seconds=5, max_recoveries=1))
    backend.push(msg("t1"))
    for _ in range(2):
        backend.claim()
        clock.advance(6)
        assert backend.requeue_expired() == 1
    assert _told(_all(backend)) == [
        ("retried", "t1", "expired", "lease expired 1 times"),
        ("dead_lettered", "t1", "expired", "lease expired 2 times"),
    ]


def test_dependents_canceled_with_a_dead_parent_are_told(backend):
    backend.push(msg("p"))
    backend.push_batch([msg("c1", depends_on=["p"]), msg("c2", depends_on=["c1"])])
    [claimed] = backend.claim()
    backend.fail("p", claimed.lease.token, retry_delay=None, reason="E")
    backend.push(msg("late", depends_on=["p"]))
    reason = "dependency {} did not finish"
    assert _told(_all(backend)) == [
        ("failed", "p", "failed", "E"),
        ("dead_lettered", "p", "failed", "E"),
        ("canceled", "c1", "", reason.format("p")),
        ("canceled", "c2", "", reason.format("c1")),
        ("canceled", "late", "", reason.format("p")),
    ]


def test_purged_tasks_are_told_canceled(backend):
    backend.push_batch([msg("t1"), msg("t2", tenant="bob")])
    assert backend.purge_tenant("bob") == 1
    assert _told(_all(backend)) == [("canceled", "t2", "", "purged")]


def test_pause_resume_and_limits_are_told_once(backend):
    backend.pause()
    backend.resume()
    backend.pause("acme")
    backend.set_limits({"max_running": 2}, tenant="acme")
    backend.set_limits({"rate": 5.0}, tier=1)
    backend.set_limits({"max_running": 9})
    events = _all(backend)
    got = [(e.type, e.tenant, e.tier) for e in events]
    assert sorted(got, key=repr) == sorted(
        [
            ("paused", "", None),
            ("resumed", "", None),
            ("paused", "acme", None),
            ("limits_changed", "acme", None),
            ("limits_changed", "", 1),
            ("limits_changed", "", None),
        ],
        key=repr,
    )
    limits = {(e.tenant, e.tier): e.limits for e in events if e.type == "limits_changed"}
    assert limits[("acme", None)]["max_running"] == 2
    assert limits[("", 1)]["rate"] == 5.0
    assert limits[("", None)]["max_running"] == 9


def test_events_off_writes_none(make_backend):
    backend = make_backend(QueueConfig(events_maxlen=0))
    backend.push(msg("t1"))
    [c] = backend.claim()
    backend.finish("t1", c.lease.token)
    backend.pause()
    assert backend.read_events("0") == []


def test_the_log_is_capped(make_backend):
    backend = make_backend(QueueConfig(events_maxlen=10))
    backend.push_batch([msg(f"t{i}") for i in range(300)])
    for c in backend.claim(count=300):
        backend.finish(c.message.task_id, c.lease.token)
    kept = _all(backend)
    # about the cap: Redis trims whole nodes of its stream (MAXLEN ~), the model exactly
    assert 10 <= len(kept) < 300
    assert kept[-1].task_id == "t299"


def test_a_blocking_read_returns_an_event_written_while_it_waits(backend):
    end = backend.events_end()
    backend.push(msg("t1"))
    [c] = backend.claim()
    done = threading.Event()

    def finish_later():
        done.wait(5)
        backend.finish("t1", c.lease.token)

    thread = threading.Thread(target=finish_later)
    thread.start()
    started = time.monotonic()
    done.set()
    got = backend.read_events(end, timeout=10)
    thread.join()
    while not got and time.monotonic() - started < 10:  # a read shortened by the socket
        got = backend.read_events(end, timeout=1)
    assert [e.type for e in got] == ["completed"]
    assert time.monotonic() - started < 10


@pytest.mark.parametrize("bad", ["x", "1-", "-1", "1-2-3", ""])
def test_a_bad_position_is_refused(backend, bad):
    with pytest.raises(TaskValidationError):
        backend.read_events(bad)
