"""Dependencies: children wait for their parents, die with them, and must name known tasks."""

from __future__ import annotations

import pytest

from fairque_core import TaskState, TaskValidationError

from .helpers import claim_ids, msg


def _run(backend, task_id, *, ok=True):
    [c] = backend.claim(assigned=[backend.get_message(task_id).tenant])
    assert c.message.task_id == task_id
    if ok:
        backend.finish(task_id, c.lease.token)
    else:
        backend.fail(task_id, c.lease.token, retry_delay=None, reason="parent broke")


def test_child_deferred_until_parent_finishes(backend):
    backend.push(msg("parent", "p"))
    assert backend.push(msg("child", "p", depends_on=["parent"]))
    assert backend.get_state("child") is TaskState.DEFERRED
    sizes = backend.queue_sizes(["p"])["p"]
    assert sizes.total == 1  # the parent: a deferred child is in no queue yet
    assert backend.stats()["ready"] == 1
    _run(backend, "parent")
    assert backend.get_state("child") is TaskState.QUEUED
    assert claim_ids(backend, 2) == ["child"]


def test_child_waits_for_every_parent(backend):
    backend.push_batch([msg("p1"), msg("p2"), msg("child", depends_on=["p1", "p2"])])
    _run(backend, "p1")
    assert backend.get_state("child") is TaskState.DEFERRED
    _run(backend, "p2")
    assert backend.get_state("child") is TaskState.QUEUED


def test_retried_parent_keeps_child_waiting(backend, clock):
    backend.push(msg("parent"))
    backend.push(msg("child", depends_on=["parent"]))
    [c] = backend.claim()
    backend.fail("parent", c.lease.token, retry_delay=1)
    assert backend.get_state("child") is TaskState.DEFERRED
    clock.advance(1)
    _run(backend, "parent")
    assert backend.get_state("child") is TaskState.QUEUED


def test_delayed_child_is_scheduled_once_parent_finishes(backend, clock):
    backend.push(msg("parent"))
    backend.push(msg("child", delay=10, depends_on=["parent"]))
    _run(backend, "parent")
    assert backend.get_state("child") is TaskState.SCHEDULED
    assert backend.claim() == []
    clock.advance(10)
    assert claim_ids(backend, 1) == ["child"]


def test_child_canceled_when_parent_goes_to_the_dlq(backend):
    backend.push(msg("parent"))
    backend.push(msg("child", depends_on=["parent"]))
    backend.push(msg("grandchild", depends_on=["child"]))
    backend.push(msg("bystander", "c"))
    _run(backend, "parent", ok=False)
    assert backend.get_state("child") is TaskState.CANCELED
    assert backend.get_state("grandchild") is TaskState.CANCELED
    assert backend.get_state("bystander") is TaskState.QUEUED
    assert backend.stats()["canceled"] == 2
    assert claim_ids(backend, 3) == ["bystander"]


def test_child_canceled_when_parent_is_canceled(backend):
    backend.push(msg("parent"))
    backend.push(msg("child", depends_on=["parent"]))
    assert backend.cancel("parent")
    assert backend.get_state("child") is TaskState.CANCELED
    assert backend.tenant_stats("alice")["canceled"] == 2


def test_child_canceled_when_parent_lease_expires_too_often(make_backend, clock):
    from fairque_core import QueueConfig

    backend = make_backend(QueueConfig(lease_seconds=1, max_recoveries=0))
    backend.push(msg("parent"))
    backend.push(msg("child", depends_on=["parent"]))
    backend.claim()
    clock.advance(1)
    assert backend.requeue_expired() == 1
    assert backend.get_state("child") is TaskState.CANCELED


def test_push_after_parent_failed_is_canceled_at_once(backend):
    backend.push(msg("parent"))
    _run(backend, "parent", ok=False)
    assert backend.push(msg("child", depends_on=["parent"])) is True
    assert backend.get_state("child") is TaskState.CANCELED
    assert backend.stats()["canceled"] == 1
    assert backend.claim() == []


def test_push_after_parent_finished_is_ready(backend):
    backend.push(msg("parent"))
    _run(backend, "parent")
    backend.push(msg("child", depends_on=["parent"]))
    assert backend.get_state("child") is TaskState.QUEUED


def test_unknown_dependency_rejected(backend):
    with pytest.raises(TaskValidationError):
        backend.push(msg("child", depends_on=["ghost"]))
    assert backend.get_state("child") is None
    assert backend.stats()["pushed"] == 0


def test_dependency_later_in_the_batch_is_unknown(backend):
    with pytest.raises(TaskValidationError):
        backend.push_batch([msg("child", depends_on=["parent"]), msg("parent")])
    assert backend.get_state("parent") is None
    assert backend.get_state("child") is None


def test_requeued_parent_from_dlq_does_not_revive_canceled_child(backend):
    backend.push(msg("parent"))
    backend.push(msg("child", depends_on=["parent"]))
    _run(backend, "parent", ok=False)
    assert backend.requeue_dlq(["parent"]) == 1
    _run(backend, "parent")
    assert backend.get_state("child") is TaskState.CANCELED
