"""Push: storing messages, idempotency by task id, batches in one round trip."""

from __future__ import annotations

import math

import attrs
import pytest

from fairque_core import Priority, TaskIdConflictError, TaskState, TaskValidationError

from .conftest import MODEL_KINDS, probe_of
from .helpers import claim_ids, msg


def test_push_stores_the_message(backend):
    m = msg(
        "t1",
        "bob",
        Priority.HIGH,
        body=b"\x00\x01 binary \xff",
        headers={"traceparent": "00-1-2-01", "k": "v"},
        name="report.build",
        max_retries=7,
    )
    assert backend.push(m) is True
    assert backend.get_message("t1") == m
    assert backend.get_state("t1") is TaskState.QUEUED
    assert backend.get_result("t1") is None
    stats = backend.stats()
    assert (stats["pushed"], stats["ready"], stats["active_tenants"]) == (1, 1, 1)


def test_push_is_idempotent_by_task_id(backend, clock):
    first = msg("same", body=b"first")
    assert backend.push(first) is True
    clock.advance(1)
    assert backend.push(msg("same", body=b"second", priority=Priority.CRITICAL)) is False
    # another tenant's push of the id is no duplicate of alice's task: refused (ADR 60)
    with pytest.raises(TaskIdConflictError) as refused:
        backend.push(msg("same", tenant="bob"))
    assert refused.value.task_id == "same"
    assert backend.get_message("same") == first
    stats = backend.stats()
    assert (stats["pushed"], stats["duplicates"], stats["ready"]) == (1, 1, 1)
    sizes = backend.queue_sizes(["alice", "bob"])
    assert (sizes["alice"].normal, sizes["alice"].critical, sizes["bob"].total) == (1, 0, 0)
    assert backend.tenant_stats("alice")["duplicates"] == 1
    assert claim_ids(backend, 3) == ["same"]


@pytest.mark.parametrize("later", ["started", "finished", "failed", "canceled", "scheduled"])
def test_push_of_a_known_id_is_a_noop_in_every_state(backend, later):
    backend.push(msg("t", delay=100 if later == "scheduled" else 0))
    if later in ("started", "finished", "failed"):
        [c] = backend.claim()
        if later == "finished":
            backend.finish("t", c.lease.token)
        elif later == "failed":
            backend.fail("t", c.lease.token, retry_delay=None)
    elif later == "canceled":
        backend.cancel("t")
    state = backend.get_state("t")
    assert backend.push(msg("t")) is False
    assert backend.get_state("t") is state
    assert backend.stats()["duplicates"] == 1
    assert backend.stats()["pushed"] == 1


def test_push_batch_flags_in_order(backend):
    backend.push(msg("old"))
    flags = backend.push_batch(
        [
            msg("a"),
            msg("old"),
            msg("b", "bob", Priority.CRITICAL),
            msg("a", body=b"dup in batch"),
            msg("c", delay=5),
        ]
    )
    assert flags == [True, False, True, False, True]
    assert backend.get_message("a").body == msg("a").body
    assert backend.get_state("c") is TaskState.SCHEDULED
    stats = backend.stats()
    assert (stats["pushed"], stats["duplicates"], stats["ready"], stats["scheduled"]) == (
        4,
        2,
        3,
        1,
    )
    assert claim_ids(backend, 5) == ["old", "b", "a"]


def test_push_batch_keeps_order_within_the_batch(backend):
    ids = [f"t{i:02d}" for i in range(30)]
    assert backend.push_batch([msg(t) for t in ids]) == [True] * 30
    assert claim_ids(backend, 40) == ids


def test_push_batch_empty(backend):
    assert backend.push_batch([]) == []
    assert backend.stats()["pushed"] == 0


def test_push_batch_with_one_bad_message_stores_nothing(backend):
    with pytest.raises(TaskValidationError):
        backend.push_batch([msg("good1"), msg("bad id"), msg("good2")])
    with pytest.raises(TaskValidationError):
        backend.push_batch([msg("good1"), msg("good2", depends_on=["ghost"])])
    assert backend.get_state("good1") is None
    assert backend.get_state("good2") is None
    assert backend.stats()["pushed"] == 0


def test_push_batch_is_one_round_trip(make_backend, backend_kind):
    if backend_kind in MODEL_KINDS:
        pytest.skip("round trips are a property of a networked backend")
    backend = make_backend()
    probe = probe_of(make_backend, backend)
    assert probe is not None
    backend.push_batch([msg("warm-up")])  # scripts loaded, connections open
    batch = [msg(f"t{i}", f"u{i % 7}") for i in range(50)] + [msg("t3", "u3")]
    flags: list[bool] = []
    sent = probe.client_commands(lambda: flags.extend(backend.push_batch(batch)))
    assert flags == [True] * 50 + [False]
    assert len(sent) == 1, sent
    assert sent[0].split()[0].upper() in ("EVALSHA", "EVAL", "FCALL"), sent
    assert backend.stats()["pushed"] == 51


def test_a_batch_naming_another_tenants_live_id_stores_nothing(backend, clock):
    """ADR 60: a task id belongs to its tenant while the task lives. A batch with one message
    of such an id (or one id for two tenants) is refused whole, typed, before anything is
    written; once the task's record has expired the id is free for anyone."""
    backend.push(msg("taken", tenant="alice"))
    for batch in (
        [msg("new-1", tenant="bob"), msg("taken", tenant="bob")],
        [msg("twice", tenant="bob"), msg("twice", tenant="carol")],
    ):
        with pytest.raises(TaskIdConflictError):
            backend.push_batch(batch)
    assert backend.stats()["pushed"] == 1
    assert backend.queue_sizes(["bob", "carol"])["bob"].total == 0
    assert backend.get_message("new-1") is None
    assert backend.get_message("twice") is None
    # the same id twice for one tenant is still a duplicate, not a conflict
    assert backend.push_batch([msg("twice", tenant="bob"), msg("twice", tenant="bob")]) == [
        True,
        False,
    ]
    # finished and past its result TTL, alice's id may be taken by bob
    [claimed] = [c for c in backend.claim(count=5) if c.message.task_id == "taken"]
    backend.finish("taken", claimed.lease.token)
    with pytest.raises(TaskIdConflictError):
        backend.push(msg("taken", tenant="bob"))  # still alive: its result is kept
    clock.advance(3600 + 1)  # the default result TTL
    assert backend.push(msg("taken", tenant="bob")) is True


@pytest.mark.parametrize(
    "change",
    [
        {"unique_key": "k", "unique_window": 1e308},
        {"unique_key": "k", "unique_window": -1.0},
        {"delay": 1e308},
        {"delay": math.nan},
    ],
)
def test_a_message_whose_times_overflow_the_backend_is_refused_typed(backend, change):
    """A Message built by hand (the backend's port) with a unique window or a delay beyond
    the year-9999 span: TaskValidationError before anything is written, as ``Task.create``
    refuses the same values (a window of 1e308 s was a bare OverflowError on Redis)."""
    with pytest.raises(TaskValidationError):
        backend.push(attrs.evolve(msg("far"), **change))
    assert backend.get_state("far") is None
    assert backend.stats()["pushed"] == 0
