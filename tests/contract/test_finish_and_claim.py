"""finish_and_claim (ADR 40): a batch of acknowledgements and the next claim in one call.

A backend that has the optional ``finish_and_claim`` (the Redis backend, one script call) must
answer exactly as ``finish_batch`` followed by ``claim`` would: that pair is what the engine
does on a backend without it (the reference model, the partitioned queue), so every param
runs the same scenarios, the capable ones through the combined call.
"""

from __future__ import annotations

from typing import Any

import pytest

from fairque_core import QueueConfig, TaskState, TaskValidationError

from .conftest import MODEL_KINDS, PARTITIONED_KINDS, probe_of
from .helpers import msg

#: The params whose backend has the combined call (a networked queue of one hash tag).
COMBINED_KINDS = frozenset(
    {"valkey", "valkey-ref", "redis7", "cluster", "valkey-async", "cluster-async"}
)


def _combined(backend: Any) -> Any:
    """The backend's ``finish_and_claim``, or None (through the async facade: its wrapped)."""
    inner = getattr(backend, "wrapped", backend)
    return backend.finish_and_claim if hasattr(inner, "finish_and_claim") else None


def finish_and_claim(backend: Any, items: Any, **claim: Any) -> tuple[list[bool], list[Any]]:
    both = _combined(backend)
    if both is not None:
        return both(items, **claim)
    return backend.finish_batch(items), backend.claim(**claim)  # the engine's fallback


def _ids(claims: Any) -> list[str]:
    return [c.message.task_id for c in claims]


def test_the_networked_one_slot_backends_have_the_combined_call(backend, backend_kind):
    assert (_combined(backend) is not None) == (backend_kind in COMBINED_KINDS)


def test_finishes_then_claims(backend):
    backend.push_batch([msg("t1"), msg("t2"), msg("t3", "bob")])
    [c1] = backend.claim(worker_id="w1")
    flags, claims = finish_and_claim(
        backend, [(c1.message.task_id, c1.lease.token, b'"done"')], worker_id="w1", count=5
    )
    assert flags == [True]
    assert sorted(_ids(claims)) == ["t2", "t3"]
    assert backend.get_state("t1") is TaskState.FINISHED
    assert backend.get_result("t1") == b'"done"'
    for c in claims:
        assert backend.get_state(c.message.task_id) is TaskState.STARTED
        assert c.lease.worker_id == "w1"
        assert c.message == backend.get_message(c.message.task_id)
    assert len({c.lease.token for c in claims}) == 2
    stats = backend.stats()
    assert (stats["finished"], stats["claimed"]) == (1, 3)
    sizes = backend.queue_sizes(["alice", "bob"])
    assert (sizes["alice"].leased, sizes["bob"].leased) == (1, 1)


def test_a_finish_frees_a_key_slot_for_the_claim_of_the_same_call(backend):
    """Limits by key (ADR 79): the finish puts a parked task back, the claim leases it."""
    backend.set_key_limits("export", max_running=1)
    backend.push_batch([msg(f"e{i}", limit_key="export") for i in range(3)])
    [c1] = backend.claim(count=3)
    flags, claims = finish_and_claim(backend, [("e0", c1.lease.token, None)], count=3)
    assert (flags, _ids(claims)) == ([True], ["e1"])
    assert backend.key_limit_status("export").parked == {"alice": 1}


def test_the_claimed_leases_work(backend):
    backend.push_batch([msg("t1"), msg("t2")])
    [c1] = backend.claim()
    _, [c2] = finish_and_claim(backend, [("t1", c1.lease.token, None)])
    assert backend.heartbeat("t2", c2.lease.token) > 0
    flags, more = finish_and_claim(backend, [("t2", c2.lease.token, b"2")], count=3)
    assert (flags, more) == ([True], [])
    assert backend.get_result("t2") == b"2"


def test_a_lost_lease_is_reported_per_item_and_the_claim_still_runs(backend):
    backend.push_batch([msg("a"), msg("b"), msg("c"), msg("next")])
    got = {c.message.task_id: c for c in backend.claim(count=3)}
    items = [
        ("a", got["a"].lease.token, b"1"),
        ("b", "not-the-token", b"2"),
        ("ghost", "x", None),
        ("c", got["c"].lease.token, None),
    ]
    flags, claims = finish_and_claim(backend, items, count=2)
    assert flags == [True, False, False, True]
    assert _ids(claims) == ["next"]
    assert backend.get_state("b") is TaskState.STARTED  # its lease stands, nothing changed
    assert backend.get_result("b") is None
    assert backend.stats()["finished"] == 2


def test_a_repeated_finish_is_true_and_changes_nothing(backend):
    backend.push_batch([msg("t1"), msg("t2")])
    [c1] = backend.claim()
    assert finish_and_claim(backend, [("t1", c1.lease.token, b"r")], count=1)[0] == [True]
    before = backend.stats()
    flags, claims = finish_and_claim(backend, [("t1", c1.lease.token, b"r")], count=1)
    assert (flags, claims) == ([True], [])
    assert backend.stats() == before


def test_no_items_is_a_plain_claim(backend):
    backend.push(msg("t1"))
    flags, claims = finish_and_claim(backend, [], count=2)
    assert (flags, _ids(claims)) == ([], ["t1"])


def test_nothing_ready_still_finishes(backend):
    backend.push(msg("t1"))
    [c] = backend.claim()
    assert finish_and_claim(backend, [("t1", c.lease.token, None)], count=4) == ([True], [])
    assert backend.get_state("t1") is TaskState.FINISHED


def test_xcom_values_are_written_with_the_finish(backend):
    backend.push_batch([msg("p1"), msg("p2")])
    [c] = backend.claim()
    flags, _ = finish_and_claim(backend, [("p1", c.lease.token, b"1", {"rows": b"42"})])
    assert flags == [True]
    assert backend.xcom_get("alice", [("p1", "rows")]) == [b"42"]


def test_a_tenant_cap_freed_by_the_finish_lets_the_claim_take_its_next_task(backend):
    backend.set_limits({"max_running": 1}, tenant="a")
    backend.push_batch([msg("a0", "a"), msg("a1", "a")])
    [c] = backend.claim(count=2)
    assert backend.claim() == []  # capped: a1 waits for a0's lease to end
    flags, claims = finish_and_claim(backend, [("a0", c.lease.token, None)], count=2)
    assert flags == [True]
    assert _ids(claims) == ["a1"]  # one lease ended, one more start: the cap holds
    status = backend.limit_status("a")
    assert (status.running, status.capped) == (1, True)


def test_a_queue_wide_cap_freed_by_the_finish_lets_the_claim_start_one(backend, backend_kind):
    if backend_kind in PARTITIONED_KINDS:
        pytest.skip("a queue-wide limit holds per partition (ADR 34)")
    backend.set_limits({"max_running": 2})
    backend.push_batch([msg(f"{u}{i}", u) for u in "ab" for i in range(2)])
    claims = backend.claim(count=4)
    assert len(claims) == 2
    first = claims[0]
    flags, more = finish_and_claim(
        backend, [(first.message.task_id, first.lease.token, None)], count=4
    )
    assert flags == [True]
    assert len(more) == 1


def test_a_dependent_released_by_the_finish_can_be_claimed(backend):
    backend.push_batch([msg("parent"), msg("child", depends_on=["parent"])])
    [c] = backend.claim(count=2)
    assert c.message.task_id == "parent"
    flags, claims = finish_and_claim(backend, [("parent", c.lease.token, b"p")], count=2)
    assert flags == [True]
    assert _ids(claims) == ["child"]
    assert backend.get_state("child") is TaskState.STARTED
    assert backend.stats()["ready"] == 0


def test_assigned_and_steal_scope_the_claim(backend):
    backend.push_batch([msg("a1", "a"), msg("b1", "b"), msg("c1", "c")])
    [c] = backend.claim(assigned=["a"])
    flags, claims = finish_and_claim(
        backend, [("a1", c.lease.token, None)], assigned=["b"], steal=["c"], count=1
    )
    assert (flags, _ids(claims)) == ([True], ["b1"])


def test_a_paused_queue_finishes_and_claims_nothing(backend):
    backend.push_batch([msg("t1"), msg("t2")])
    [c] = backend.claim()
    backend.pause()
    assert finish_and_claim(backend, [("t1", c.lease.token, None)], count=2) == ([True], [])
    assert backend.get_state("t2") is TaskState.QUEUED


def test_bad_claim_arguments_are_refused_before_the_finish(backend, backend_kind):
    if _combined(backend) is None:
        pytest.skip("without the combined call the engine checks the claim first")
    backend.push(msg("t1"))
    [c] = backend.claim()
    with pytest.raises(TaskValidationError):
        backend.finish_and_claim([("t1", c.lease.token, None)], count=0)
    with pytest.raises(TaskValidationError):
        backend.finish_and_claim([("t1", c.lease.token, None)], assigned=["bad id"])
    assert backend.get_state("t1") is TaskState.STARTED


def test_the_combined_call_is_one_round_trip(make_backend, backend_kind):
    if backend_kind in MODEL_KINDS or backend_kind in PARTITIONED_KINDS:
        pytest.skip("the combined call is one script call of a one-slot networked backend")
    backend = make_backend(QueueConfig(lease_seconds=30))
    probe = probe_of(make_backend, backend)
    assert probe is not None
    backend.push_batch([msg(f"t{i}", f"u{i % 3}") for i in range(20)])
    held = backend.claim(count=10)  # scripts loaded, connections open
    items = [(c.message.task_id, c.lease.token, b"1") for c in held]
    out: list[Any] = []
    sent = probe.client_commands(lambda: out.append(backend.finish_and_claim(items, count=10)))
    [(flags, claims)] = out
    assert flags == [True] * 10
    assert len(claims) == 10
    assert len(sent) == 1, sent
    assert sent[0].split()[0].upper().strip("\"'") in ("EVALSHA", "EVAL", "FCALL"), sent
