"""list_tenants: every tenant the queue has seen, in first-push order, paged, with the total."""

from __future__ import annotations

import pytest

from fairque_core import (
    FairQueue,
    Priority,
    QueueConfig,
    TaskIdConflictError,
    TaskState,
    TaskValidationError,
)
from fairque_core.domain.scoring import to_ms

from .conftest import MODEL_KINDS, probe_of
from .helpers import msg
from .test_validation import no_commands


def test_an_empty_queue_has_no_tenants(backend):
    assert backend.list_tenants() == ([], 0)
    assert backend.list_tenants(limit=0) == ([], 0)
    assert backend.list_tenants(limit=1000, offset=5) == ([], 0)


def test_tenants_in_first_push_order_stable_when_they_push_again(backend, clock):
    backend.push(msg("b1", "bob"))
    clock.advance(1)
    backend.push(msg("a1", "alice"))
    clock.advance(1)
    # one call, one clock reading: ties by id (byte order), whatever the order in the batch
    backend.push_batch([msg("z1", "zed"), msg("c1", "carol"), msg("b2", "bob")])
    expected = (["bob", "alice", "carol", "zed"], 4)
    assert backend.list_tenants() == expected
    clock.advance(1)
    backend.push_batch([msg("a2", "alice"), msg("z2", "zed", Priority.CRITICAL)])
    backend.push(msg("b3", "bob", delay=30))
    assert backend.list_tenants() == expected
    backend.push(msg("d1", "dave"))
    assert backend.list_tenants() == ([*expected[0], "dave"], 5)


def test_every_kind_of_stored_push_lists_the_tenant(backend, clock):
    # (a dependency names a task of its own tenant, ADR 63: a deferred or canceled-at-push
    # task's tenant is listed from its parent's push already)
    backend.push(msg("p", "parent"))
    clock.advance(1)
    backend.push(msg("s", "scheduled", delay=60))
    clock.advance(1)
    backend.push(msg("c", "critical", Priority.CRITICAL))
    clock.advance(1)
    backend.push(msg("d", "parent", depends_on=["p"]))
    [claimed] = backend.claim(assigned=["parent"])
    backend.fail("p", claimed.lease.token, retry_delay=None)
    clock.advance(1)
    backend.push(msg("x", "parent", depends_on=["p"]))  # canceled at once: its parent failed
    assert backend.stats()["canceled"] == 2  # "d" and "x"
    assert backend.list_tenants() == (["parent", "scheduled", "critical"], 3)


def test_a_dependency_on_another_tenants_task_reads_as_unknown(backend):
    """A tenant cannot tell another tenant's task ids from unknown ones through
    ``depends_on``, nor tie its tasks to another tenant's fate (ADR 63)."""
    backend.push(msg("acme-42", "acme"))
    for dep in ("acme-42", "acme-43"):  # a live task of acme's, and no task at all
        with pytest.raises(TaskValidationError, match="names no known task"):
            backend.push(msg("g1", "globex", depends_on=[dep]))
    with pytest.raises(TaskValidationError, match="names no known task"):
        backend.push_batch([msg("g2", "acme"), msg("g3", "globex", depends_on=["g2"])])
    assert backend.get_state("g1") is None
    assert backend.get_state("g2") is None  # the batch was refused whole
    assert backend.push(msg("a2", "acme", depends_on=["acme-42"]))  # its own tenant's: kept
    assert backend.get_state("a2") is TaskState.DEFERRED
    assert backend.stats()["pushed"] == 2


def test_a_duplicate_push_adds_nothing(backend, clock):
    assert backend.push(msg("t1", "alice"))
    clock.advance(1)
    assert backend.push(msg("t1", "alice")) is False
    # another tenant's push of a live id is refused, not counted (ADR 60)
    with pytest.raises(TaskIdConflictError):
        backend.push(msg("t1", "mallory"))
    with pytest.raises(TaskIdConflictError):
        backend.push_batch([msg("t1", "eve"), msg("t1", "alice")])
    assert backend.push_batch([msg("t1", "alice"), msg("t1", "alice")]) == [False, False]
    assert backend.list_tenants() == (["alice"], 1)
    assert backend.tenant_stats("mallory")["duplicates"] == 0
    assert backend.tenant_stats("mallory")["pushed"] == 0
    assert backend.tenant_stats("alice")["duplicates"] == 3
    clock.advance(1)
    assert backend.push(msg("t2", "mallory"))  # its first stored task: listed from now on
    assert backend.list_tenants() == (["alice", "mallory"], 2)


def test_pages_and_the_total(backend, clock):
    names = [f"tenant-{k:02d}" for k in range(7)]
    for k, name in enumerate(names):
        backend.push(msg(f"t{k}", name))
        clock.advance(0.25)
    assert backend.list_tenants() == (names, 7)
    assert backend.list_tenants(limit=3) == (names[:3], 7)
    assert backend.list_tenants(limit=3, offset=3) == (names[3:6], 7)
    assert backend.list_tenants(limit=3, offset=6) == (names[6:], 7)
    assert backend.list_tenants(limit=3, offset=7) == ([], 7)
    assert backend.list_tenants(limit=2, offset=10**12) == ([], 7)
    assert backend.list_tenants(limit=0, offset=2) == ([], 7)
    assert backend.list_tenants(limit=1000) == (names, 7)
    paged: list[str] = []
    while len(paged) < 7:
        page, total = backend.list_tenants(limit=2, offset=len(paged))
        assert total == 7
        assert page
        paged += page
    assert paged == names


def test_a_tenant_with_nothing_left_stays_listed(make_backend, clock):
    backend = make_backend(QueueConfig(lease_seconds=5, max_recoveries=0, result_ttl_seconds=10))
    backend.push_batch([msg("f", "finished"), msg("c", "canceled"), msg("d", "dead")])
    clock.advance(1)
    backend.push_batch([msg("e", "expired"), msg("g", "purged")])
    workers = ["finished", "dead", "expired", "purged"]
    claims = {c.message.task_id: c for c in backend.claim(count=4, assigned=workers)}
    assert sorted(claims) == ["d", "e", "f", "g"]
    backend.finish("f", claims["f"].lease.token, b"ok")
    backend.fail("d", claims["d"].lease.token, retry_delay=None, reason="boom")
    backend.fail("g", claims["g"].lease.token, retry_delay=None)
    assert backend.cancel("c")
    clock.advance(6)
    assert backend.requeue_expired() == 1  # "e" dies of an expired lease
    assert backend.purge_dlq(["g"]) == 1
    clock.advance(60)  # past the result TTL: the finished and canceled records are gone
    assert backend.get_state("f") is None
    assert backend.get_state("c") is None
    stats = backend.stats()
    assert (stats["ready"], stats["scheduled"], stats["leased"], stats["active_tenants"]) == (
        0,
        0,
        0,
        0,
    )
    everyone = ["canceled", "dead", "finished", "expired", "purged"]
    assert backend.list_tenants() == (everyone, 5)


@pytest.mark.parametrize(
    ("limit", "offset"),
    [
        (-1, 0),
        (1001, 0),
        (10**9, 0),
        (True, 0),
        (False, 0),
        (1.0, 0),
        ("5", 0),
        (None, 0),
        (10, -1),
        (10, True),
        (10, 2.5),
        (10, "0"),
        (10, None),
    ],
)
def test_bad_limit_or_offset_refused_before_any_command(make_backend, limit, offset):
    backend = make_backend()
    backend.push(msg("t1", "alice"))
    with no_commands(make_backend, backend), pytest.raises(TaskValidationError):
        backend.list_tenants(limit=limit, offset=offset)
    queue = FairQueue(backend)
    with no_commands(make_backend, backend), pytest.raises(TaskValidationError):
        queue.list_tenants(limit=limit, offset=offset)
    assert backend.list_tenants() == (["alice"], 1)


def test_the_engine_passes_list_tenants_through(backend, clock):
    queue = FairQueue(backend)
    assert queue.list_tenants() == ([], 0)
    backend.push_batch([msg("t1", "bob"), msg("t2", "alice")])
    assert queue.list_tenants() == (["alice", "bob"], 2)
    assert queue.list_tenants(limit=1, offset=1) == (["bob"], 2)


def test_the_index_is_a_zset_of_first_push_times_in_the_queue_slot(
    make_backend, clock, backend_kind
):
    if backend_kind in MODEL_KINDS:
        pytest.skip("the model has no server keys")
    from fairque_redis.keys import KeySpace

    backend = make_backend()
    probe = probe_of(make_backend, backend)
    first = to_ms(clock())
    backend.push(msg("t1", "alice"))
    clock.advance(2)
    backend.push_batch([msg("t2", "alice"), msg("t3", "bob")])
    key = KeySpace(backend.queue).tenants
    assert key == probe.prefix + "tenants"
    assert probe.client.zrange(key, 0, -1, withscores=True) == [
        (b"alice", float(first)),
        (b"bob", float(first + 2000)),
    ]
    if backend_kind.startswith("cluster"):
        assert probe.keyslot(key) == probe.keyslot("{" + backend.queue + "}")


def test_a_first_push_is_still_one_script_call(make_backend, clock, backend_kind):
    if backend_kind in MODEL_KINDS:
        pytest.skip("round trips are a property of a networked backend")
    backend = make_backend()
    probe = probe_of(make_backend, backend)
    backend.push(msg("warm-up", "someone"))  # scripts loaded, connections open
    clock.advance(1)
    sent = probe.client_commands(lambda: backend.push(msg("t1", "newcomer")))
    assert len(sent) == 1, sent
    assert sent[0].split()[0].upper() in ("EVALSHA", "EVAL", "FCALL"), sent
    assert backend.list_tenants() == (["someone", "newcomer"], 2)


def test_the_script_checks_offset_and_limit_itself(backend, backend_kind):
    # the planner never sends these; the script refuses them anyway, with FQ_E_BAD_ARG
    if backend_kind in MODEL_KINDS or backend_kind.endswith("-async"):
        pytest.skip("calls the sync adapter's script directly")
    from fairque_redis.scripting.calls import Call

    backend.push(msg("t1", "alice"))
    header = backend._planner.header()
    for offset, limit, field in [
        ("-1", "5", "offset"),
        ("1.5", "5", "offset"),
        ("", "5", "offset"),
        ("0", "1001", "limit"),
        ("0", "-1", "limit"),
        ("0", "2e2", "limit"),
        ("0", "", "limit"),
    ]:
        call = Call("tenants", [*header, offset, limit], lambda reply: reply, writes=False)
        with pytest.raises(TaskValidationError) as info:
            backend._run(call)
        assert info.value.field == field, (offset, limit)
    ok = Call("tenants", [*header, "0", "1000"], lambda reply: reply, writes=False)
    assert backend._run(ok) == [1, b"alice"]
