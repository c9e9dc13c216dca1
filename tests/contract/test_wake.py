"""The wake signal: one pending token per queue, raised when work becomes ready.

Idle workers wait on it (``wait_for_work``) instead of sleeping a poll interval. The rules are
the same on every backend: every call that makes a task ready raises it, a claim that leaves
ready tasks behind raises it again (so idle workers wake one after another), and at most one
token is ever pending.
"""

from __future__ import annotations

import math
import threading

import pytest

from fairque_core import FailureType, QueueConfig, TaskValidationError

from .helpers import msg


def _drain(backend) -> None:
    while backend.wait_for_work(0):
        pass


def test_empty_queue_has_no_signal(backend):
    assert backend.wait_for_work(0) is False
    assert backend.wait_for_work(0.05) is False  # the blocking path, timing out


def test_pushes_raise_one_token_at_most(backend):
    for i in range(3):
        backend.push(msg(f"t{i}"))
    backend.push_batch([msg("b1", "bob"), msg("b2", "bob")])
    assert backend.wait_for_work(0) is True
    assert backend.wait_for_work(0) is False


def test_scheduled_and_deferred_pushes_do_not_signal(backend, clock):
    backend.push(msg("later", delay=60))
    backend.push(msg("parent-held", delay=60))
    backend.push(msg("child", depends_on=["parent-held"]))
    assert backend.wait_for_work(0) is False


def test_claim_passes_the_token_on_while_work_remains(backend):
    backend.push_batch([msg("t1"), msg("t2", "bob")])
    assert backend.wait_for_work(0) is True
    backend.claim()
    assert backend.wait_for_work(0) is True, "one task is still ready"
    backend.claim()
    assert backend.wait_for_work(0) is False, "nothing is ready any more"
    assert backend.claim() == []
    assert backend.wait_for_work(0) is False, "an empty claim raises nothing"


def test_release_and_reaper_signal(make_backend, clock):
    backend = make_backend(QueueConfig(lease_seconds=10))
    backend.push_batch([msg("t1"), msg("t2")])
    a, _b = backend.claim(count=2)
    _drain(backend)
    backend.release(a.message.task_id, a.lease.token)
    assert backend.wait_for_work(0) is True
    backend.claim()
    _drain(backend)
    clock.advance(11)
    assert backend.requeue_expired() == 2
    assert backend.wait_for_work(0) is True


def test_retry_coming_due_and_dlq_requeue_signal(make_backend, clock):
    backend = make_backend()
    backend.push_batch([msg("t1"), msg("t2")])
    a, b = backend.claim(count=2)
    backend.fail(a.message.task_id, a.lease.token, retry_delay=5)
    backend.fail(
        b.message.task_id, b.lease.token, retry_delay=None, failure_type=FailureType.FAILED
    )
    _drain(backend)
    clock.advance(6)
    [again] = backend.claim()  # moves the due retry into the queue and claims it
    assert again.message.task_id == "t1"
    _drain(backend)
    assert backend.requeue_dlq() == 1
    assert backend.wait_for_work(0) is True


def test_a_finished_parent_signals_its_child(backend):
    backend.push(msg("parent"))
    backend.push(msg("child", depends_on=["parent"]))
    [parent] = backend.claim()
    _drain(backend)
    backend.finish("parent", parent.lease.token)
    assert backend.wait_for_work(0) is True
    assert [c.message.task_id for c in backend.claim()] == ["child"]


def test_a_blocked_waiter_is_woken_by_a_push(backend):
    result: list[bool] = []
    waiter = threading.Thread(target=lambda: result.append(backend.wait_for_work(20)))
    waiter.start()
    # let the waiter block first; a token pushed earlier would also be taken, so the test
    # holds either way, and `True` can only come from the token (the timeout is 20 s)
    waiter.join(0.1)
    backend.push(msg("t1"))
    waiter.join(20)
    assert not waiter.is_alive()
    assert result == [True]
    assert backend.wait_for_work(0) is False, "the waiter took the only token"


@pytest.mark.parametrize("bad", [-0.5, math.nan, math.inf, "1", True, None])
def test_bad_timeouts_are_refused_before_any_command(backend_kind, backend, make_backend, bad):
    from .conftest import probe_of

    probe = probe_of(make_backend, backend)
    before = None if probe is None else probe.command_count()
    with pytest.raises(TaskValidationError, match="timeout"):
        backend.wait_for_work(bad)
    if probe is not None:
        assert probe.command_count() - before == 0, "a command reached the server"


def test_a_due_scheduled_task_ends_the_wait_without_a_token(backend, clock):
    backend.push(msg("later", delay=5))
    assert backend.wait_for_work(0) is False, "not due yet"
    clock.advance(5)
    # due: the wait ends at once (the next claim moves it), and no token was taken or raised
    assert backend.wait_for_work(0) is True
    assert backend.wait_for_work(0.05) is True, "still due until a claim moves it"
    [claimed] = backend.claim()
    assert claimed.message.task_id == "later"
    _drain(backend)  # moving it made it ready, which raised the wake signal
    assert backend.wait_for_work(0) is False, "nothing is scheduled any more"


def test_a_canceled_scheduled_task_no_longer_ends_the_wait(backend, clock):
    backend.push(msg("later", delay=5))
    assert backend.cancel("later") is True
    clock.advance(10)
    assert backend.wait_for_work(0) is False


def test_an_earlier_schedule_reaches_a_blocked_waiter(backend, clock):
    """A waiter blocked with nothing scheduled learns of a task scheduled meanwhile.

    The clock is injected and stands still while the waiter blocks, so the test moves it past
    the new due time right after the push; without the schedule signal the waiter would stay
    blocked for its whole 20 s timeout, since it saw nothing scheduled when it started.
    """
    result: list[bool] = []
    waiter = threading.Thread(target=lambda: result.append(backend.wait_for_work(20)))
    waiter.start()
    waiter.join(0.1)
    backend.push(msg("soon", delay=0.05))
    clock.advance(0.06)
    waiter.join(5)
    assert not waiter.is_alive(), "the waiter never looked at the new due time"
    assert result == [True]
    assert [c.message.task_id for c in backend.claim()] == ["soon"]


def test_a_later_schedule_does_not_signal(make_backend, clock):
    """Only a due time earlier than every other one moves the queue's next due time."""
    backend = make_backend()
    backend.push(msg("first", delay=5))
    result: list[bool] = []
    waiter = threading.Thread(target=lambda: result.append(backend.wait_for_work(0.5)))
    waiter.start()
    waiter.join(0.1)
    backend.push(msg("second", delay=60))
    waiter.join(5)
    assert result == [False], "nothing became due and no token was raised"
