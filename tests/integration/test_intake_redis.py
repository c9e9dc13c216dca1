"""The intake on Redis (ADR 47): what only the Redis side has, on real servers.

The semantics both backends share (what an ingest stores, counts and refuses, the order, the
claim's ingest) are tests/contract/test_intake.py. Here: the entry encoding (any bytes of meta
and body read back as push stores them), an entry that does not read (to ``intake:bad``) or
whose fields after the tenant do not (to the DLQ, rejected), a key of another type, the
producer's one plain command and the wake it raises, the idle claim woken by it, the claim's
bound and its passing on of the wake, EVALSHA instead of functions, the cluster, a partitioned
queue, and ``durability="replicated"``.
"""

from __future__ import annotations

import re
import string
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis.cluster import RedisCluster

from fairque_core import NotReplicatedError, QueueConfig
from fairque_core.domain.enums import FailureType, Priority, TaskState
from fairque_core.domain.errors import DamagedKeyError, PayloadTooLargeError, TaskValidationError
from fairque_core.domain.intake import INTAKE_CLAIM_LIMIT, IngestReport
from fairque_core.domain.models import Message
from fairque_redis.backends.backend import RedisBackend
from fairque_redis.durability.modes import Durability
from fairque_redis.keys import partition_for
from fairque_redis.partitioned.backend import PartitionedBackend
from fairque_redis.scripting.calls.intake import (
    ENTRY_VERSION,
    INGEST_CHUNK,
    decode_entry,
    encode_entry,
)
from fairque_redis.scripting.scripts import load_source

pytestmark = [
    pytest.mark.redis,
    pytest.mark.timeout(120),
    pytest.mark.usefixtures("accelerators_on"),
]

ID_CHARS = string.ascii_letters + string.digits + "_.:@/+=#-"


def msg(task_id: str, tenant: str = "alice", body: bytes = b"{}", **kw: Any) -> Message:
    return Message(task_id=task_id, tenant=tenant, priority=Priority.NORMAL, body=body, **kw)


def queue_name() -> str:
    return f"ik-{uuid.uuid4().hex[:10]}"


def calls(client: redis.Redis, *names: str) -> int:
    """Calls of the named commands so far (INFO commandstats)."""
    stats = client.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{n}", {}).get("calls", 0)) for n in names)


@pytest.fixture
def env(valkey_server: Any) -> Iterator[tuple[RedisBackend, redis.Redis]]:
    admin = redis.Redis.from_url(valkey_server.url)
    backend = RedisBackend.from_url(valkey_server.url, queue=queue_name())
    yield backend, admin
    backend.close()
    admin.close()


# ---------------------------------------------------------------------- the Lua and Python sides


def test_the_lua_limit_and_version_are_the_python_ones() -> None:
    source = load_source("_include/intake")
    limit = re.search(r"^local FQ_INTAKE_CLAIM_LIMIT = (\d+)$", source, re.M)
    assert limit is not None
    assert int(limit.group(1)) == INTAKE_CLAIM_LIMIT
    head = re.search(r"^local FQ_INTAKE_HEAD = '\^(\d)\|", source, re.M)
    assert head is not None
    assert head.group(1).encode() == ENTRY_VERSION


ids = st.text(ID_CHARS, min_size=1, max_size=128)
messages = st.builds(
    Message,
    task_id=ids,
    tenant=ids,
    priority=st.sampled_from(list(Priority)),
    body=st.binary(max_size=300),
    content_type=st.text(max_size=20),
    max_retries=st.integers(0, 50),
    created_at=st.floats(0, 2e9, allow_nan=False),
    delay=st.one_of(st.just(0.0), st.floats(-1000, 0, allow_nan=False)),
    headers=st.dictionaries(st.text(max_size=8), st.text(max_size=30), max_size=3),
    name=st.text(max_size=20),
)


@given(message=messages)
def test_an_entry_reads_back_field_for_field(message: Message) -> None:
    entry = decode_entry(encode_entry(message))
    assert entry is not None
    assert (entry.task_id, entry.tenant, entry.priority) == (
        message.task_id,
        message.tenant,
        int(message.priority),
    )
    assert entry.body == message.body
    assert entry.delay_ms <= 0


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=40)
@given(message=messages)
def test_an_ingested_message_is_stored_as_push_stores_it(
    env: tuple[RedisBackend, redis.Redis], message: Message
) -> None:
    """Through the intake or through push, the same record: get_message reads the same
    message (meta and body of any bytes, every field), state QUEUED."""
    backend, _admin = env
    tag = uuid.uuid4().hex[:8]
    via_intake = Message(**{**_fields(message), "task_id": f"i{tag}"})
    via_push = Message(**{**_fields(message), "task_id": f"p{tag}"})
    backend.push_intake([via_intake])
    backend.push(via_push)
    report = backend.ingest(10)
    assert report.ingested >= 1
    assert report.left == 0
    got_intake = backend.get_message(via_intake.task_id)
    got_push = backend.get_message(via_push.task_id)
    assert got_intake is not None
    assert got_push is not None
    assert _fields(got_intake) | {"task_id": ""} == _fields(got_push) | {"task_id": ""}
    assert got_intake.body == message.body
    assert backend.get_state(via_intake.task_id) is TaskState.QUEUED


def _fields(message: Message) -> dict[str, Any]:
    names = ("task_id", "tenant", "priority", "body", "content_type", "max_retries")
    more = ("created_at", "delay", "headers", "name")
    return {name: getattr(message, name) for name in (*names, *more)}


# ---------------------------------------------------------------------- entries that do not read


def test_an_unreadable_entry_goes_raw_to_intake_bad(env: tuple[RedisBackend, redis.Redis]) -> None:
    backend, admin = env
    keys = backend.keys
    backend.push_intake([msg("a")])
    raw = [b"garbage", b"2|b|alice|3|0|2|{}x", b"1|bad id|alice|3|0|0|", b"1|c|bad tenant|3|0|0|"]
    admin.rpush(keys.intake, *raw)
    backend.push_intake([msg("d")])
    report = backend.ingest(100)
    assert report == IngestReport(ingested=2, duplicates=0, rejected=4, left=0)
    assert admin.lrange(keys.intake_bad, 0, -1) == raw  # raw, in order, never dropped
    assert [c.message.task_id for c in backend.claim(count=5)] == ["a", "d"]
    assert backend.list_dlq() == []


def test_an_entry_of_another_tenants_live_id_goes_raw_to_intake_bad(
    env: tuple[RedisBackend, redis.Redis],
) -> None:
    """ADR 60: kept raw beside the unreadable ones, never stored over the live task."""
    backend, admin = env
    keys = backend.keys
    backend.push_batch([msg("report-1", "alice", body=b'{"mine": 1}')])
    backend.push_intake([msg("report-1", "bob", body=b'{"theirs": 1}'), msg("e", "bob")])
    [entry] = [e for e in admin.lrange(keys.intake, 0, -1) if b"|report-1|" in e]
    assert backend.ingest(10) == IngestReport(ingested=1, rejected=1)
    assert admin.lrange(keys.intake_bad, 0, -1) == [entry]
    message = backend.get_message("report-1")
    assert message is not None
    assert (message.tenant, message.body) == ("alice", b'{"mine": 1}')
    assert backend.list_dlq() == []


def test_a_readable_entry_with_bad_fields_is_rejected_into_the_dlq(
    env: tuple[RedisBackend, redis.Redis],
) -> None:
    backend, admin = env
    broken = {
        b"1|p9|alice|9|0|2|{}x": "p9",  # no such priority
        b"1|late|alice|3|5000|2|{}x": "late",  # delayed: the intake takes ready messages only
        b"1|short|alice|3|0|99|{}x": "short",  # a meta longer than the entry
    }
    admin.rpush(backend.keys.intake, *broken)
    report = backend.ingest(10)
    assert report.rejected == 3
    assert report.ingested == 0
    dlq = {e.entry_id: e for e in backend.list_dlq()}
    assert set(dlq) == set(broken.values())
    for entry in dlq.values():
        assert entry.failure_type is FailureType.REJECTED
        assert entry.reason == "rejected at ingest: malformed entry"
    assert backend.get_state("p9") is TaskState.FAILED
    stats = backend.stats()
    assert stats["dead"] == 3
    assert stats["pushed"] == 0
    assert stats["dlq"] == 3


def test_a_tenant_key_of_another_type_rejects_the_message_not_the_claim(
    env: tuple[RedisBackend, redis.Redis],
) -> None:
    """The tenant's queue damaged into a string: its message goes to the DLQ (rejected, the
    key named), the others are stored and claimed; repaired, a requeue pushes it again."""
    backend, admin = env
    keys = backend.keys
    admin.set(keys.normal("bob"), "oops")
    backend.push_intake([msg("a", "alice"), msg("b", "bob", b'"kept"'), msg("c", "carol")])
    got = backend.claim(count=5)
    assert sorted(c.message.task_id for c in got) == ["a", "c"]
    [entry] = backend.list_dlq()
    assert entry.entry_id == "b"
    assert entry.failure_type is FailureType.REJECTED
    assert entry.reason.startswith("rejected at ingest: damaged key ")
    assert keys.normal("bob") in entry.reason
    assert entry.original_task.body == b'"kept"'
    admin.delete(keys.normal("bob"))
    assert backend.requeue_dlq(["b"]) == 1
    [again] = backend.claim(count=1)
    assert again.message.task_id == "b"


def test_a_task_key_of_another_type_sets_the_entry_aside(
    env: tuple[RedisBackend, redis.Redis],
) -> None:
    backend, admin = env
    keys = backend.keys
    admin.set(keys.task("a"), "not a hash")
    backend.push_intake([msg("a"), msg("b")])
    assert backend.ingest(5) == IngestReport(ingested=1, duplicates=0, rejected=1, left=0)
    [entry] = admin.lrange(keys.intake_bad, 0, -1)
    assert decode_entry(entry) is not None
    assert decode_entry(entry).task_id == "a"
    assert admin.get(keys.task("a")) == b"not a hash"  # left for the operator


def test_an_intake_of_another_type_fails_ingest_but_not_the_claim(
    env: tuple[RedisBackend, redis.Redis],
) -> None:
    backend, admin = env
    backend.push(msg("a"))
    admin.set(backend.keys.intake, "oops")
    with pytest.raises(DamagedKeyError):
        backend.ingest(5)
    assert [c.message.task_id for c in backend.claim(count=2)] == ["a"]  # named as repaired
    assert admin.get(backend.keys.intake) == b"oops"


def test_a_payload_over_the_ingesting_maximum_is_rejected(valkey_server: Any) -> None:
    """A producer whose maximum is larger than the workers' (a config change between them):
    the claim's header carries its own maximum, and the message is rejected, not dropped."""
    name = queue_name()
    big = QueueConfig(name=name, max_payload_bytes=10_000)
    small = QueueConfig(name=name, max_payload_bytes=100)
    with (
        RedisBackend.from_url(valkey_server.url, queue=name, config=big) as producer,
        RedisBackend.from_url(valkey_server.url, queue=name, config=small) as worker,
    ):
        producer.push_intake([msg("big", body=b"x" * 500), msg("ok")])
        with pytest.raises(PayloadTooLargeError):
            worker.push_intake([msg("refused", body=b"x" * 500)])  # checked before any I/O
        assert [c.message.task_id for c in worker.claim(count=3)] == ["ok"]
        [entry] = worker.list_dlq()
        assert entry.reason == "rejected at ingest: payload of 500 bytes over 100"
        assert worker.intake_size() == 0


# ---------------------------------------------------------------------- the producer's commands


def test_the_producer_sends_one_plain_rpush_and_wakes_only_an_empty_intake(
    env: tuple[RedisBackend, redis.Redis],
) -> None:
    backend, admin = env
    backend.push(msg("warm"))  # the backend's first-call checks and registry done
    script_calls = calls(admin, "fcall", "evalsha", "eval")
    before = calls(admin, "rpush", "lpush", "lrem")
    backend.push_intake([msg("a"), msg("b")])  # empty before: RPUSH, then LREM + LPUSH
    assert calls(admin, "rpush", "lpush", "lrem") - before == 3
    before = calls(admin, "rpush", "lpush", "lrem")
    for k in range(5):  # not empty: one RPUSH each, nothing else
        backend.push_intake([msg(f"c{k}")])
    assert calls(admin, "rpush", "lpush", "lrem") - before == 5
    assert calls(admin, "fcall", "evalsha", "eval") == script_calls  # no script at all
    assert admin.lrange(backend.keys.wake, 0, -1) == [b"1"]  # one token, however many pushes
    assert backend.intake_size() == 7
    with pytest.raises(TaskValidationError):
        backend.push_intake([msg("x"), msg("later", delay=5.0)])  # the whole call refused
    with pytest.raises(TaskValidationError):
        backend.push_intake([msg("bad id")])
    with pytest.raises(TaskValidationError):
        backend.ingest(0)
    assert backend.intake_size() == 7
    backend.push_intake([])  # no-op
    assert backend.intake_size() == 7


def test_an_idle_claim_wakes_at_once_on_push_intake(valkey_server: Any) -> None:
    name = queue_name()
    with (
        RedisBackend.from_url(valkey_server.url, queue=name) as worker,
        RedisBackend.from_url(valkey_server.url, queue=name) as producer,
    ):
        producer.push(msg("warm"))
        worker.claim(count=1)
        got: list[Any] = []
        done = threading.Event()

        def wait() -> None:
            got.extend(worker.claim_when_ready(10.0, worker_id="w", count=1))
            done.set()

        thread = threading.Thread(target=wait)
        thread.start()
        time.sleep(0.3)  # the worker is blocked in its BLPOP by now
        assert not done.is_set()
        started = time.monotonic()
        producer.push_intake([msg("a")])
        assert done.wait(5.0)
        took = time.monotonic() - started
        thread.join()
        assert [c.message.task_id for c in got] == ["a"]
        assert took < 0.25, took  # a wake, not a poll (the wait had 10 s to go)


def test_a_claim_passes_the_wake_on_while_entries_are_left(
    env: tuple[RedisBackend, redis.Redis],
) -> None:
    """A claim ingests INTAKE_CLAIM_LIMIT entries at most; with more left it raises the wake
    for the next idle worker, even when it leased nothing. One that ingested and left ready
    work raises it too; one that took all and leased all raises none."""
    backend, admin = env
    wake = backend.keys.wake
    backend.push(msg("x"))
    [held] = backend.claim(count=1)
    backend.push_intake([msg("x")] * (INTAKE_CLAIM_LIMIT + 10))  # duplicates of a live task
    admin.delete(wake)
    assert backend.claim(count=1) == []
    assert backend.intake_size() == 10
    assert admin.llen(wake) == 1  # entries left, nothing ready
    admin.delete(wake)
    assert backend.claim(count=1) == []
    assert backend.intake_size() == 0
    assert admin.llen(wake) == 0  # nothing left for anyone
    assert backend.stats()["duplicates"] == INTAKE_CLAIM_LIMIT + 10

    backend.push_intake([msg("a"), msg("b")])
    admin.delete(wake)
    assert [c.message.task_id for c in backend.claim(count=1)] == ["a"]
    assert admin.llen(wake) == 1  # ready work left
    admin.delete(wake)
    backend.push_intake([msg("solo")])
    admin.delete(wake)
    assert [c.message.task_id for c in backend.claim(count=5)] == ["b", "solo"]
    assert admin.llen(wake) == 0  # all leased: no wake
    backend.finish(held.message.task_id, held.lease.token)


def test_a_large_ingest_is_several_bounded_script_calls(
    env: tuple[RedisBackend, redis.Redis],
) -> None:
    """ingest(limit) takes INGEST_CHUNK entries per script call at most (a script holds the
    server), until ``limit`` are done or the intake is empty; the report sums the calls."""
    backend, admin = env
    backend.push_intake([msg(f"t{k}", f"u{k % 9}") for k in range(INGEST_CHUNK * 2 + 600)])
    backend.push_intake([msg("t0", "u0")])  # a duplicate, last
    scripts = calls(admin, "fcall")
    report = backend.ingest(INGEST_CHUNK * 2 + 500)
    assert report == IngestReport(ingested=INGEST_CHUNK * 2 + 500, left=101)
    assert calls(admin, "fcall") - scripts == 3  # 1,000 + 1,000 + 500
    scripts = calls(admin, "fcall")
    assert backend.ingest(10**6) == IngestReport(ingested=100, duplicates=1, left=0)
    assert calls(admin, "fcall") - scripts == 1  # the intake ran dry in the first


def test_a_paused_queue_still_ingests(env: tuple[RedisBackend, redis.Redis]) -> None:
    backend, _admin = env
    backend.pause()
    backend.push_intake([msg("a"), msg("b")])
    assert backend.claim(count=1) == []
    assert backend.intake_size() == 0
    assert backend.get_state("a") is TaskState.QUEUED
    backend.resume()
    assert [c.message.task_id for c in backend.claim(count=2)] == ["a", "b"]


def test_the_documented_least_rights_user_pushes_and_ingests(valkey_server: Any) -> None:
    """docs/operations.md's ACL user (its rules read from the doc) can push_intake (RPUSH, and
    LREM + LPUSH for the wake) and its claims can ingest (LRANGE, LPOP inside the script)."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    block = re.search(r"```\nACL SETUSER fairque (.*?)```", doc, re.S)
    assert block is not None
    name, user = queue_name(), f"fq-{uuid.uuid4().hex[:8]}"
    rules = [w for w in block.group(1).replace("{orders", "{" + name).split() if w[0] != ">"]
    admin = redis.Redis.from_url(valkey_server.url)
    admin.execute_command("ACL", "SETUSER", user, *rules, ">pw")
    url = f"redis://{user}:pw@127.0.0.1:{valkey_server.port}/0"
    try:
        with RedisBackend.from_url(url, queue=name) as backend:
            backend.push_intake([msg("a"), msg("b", "bob")])
            backend.push_intake([msg("c")])
            assert len(backend.claim(count=1)) == 1
            assert backend.ingest(5) == IngestReport(left=0)
            assert len(backend.claim(count=5)) == 2
    finally:
        admin.execute_command("ACL", "DELUSER", user)
        admin.close()


# ---------------------------------------------------------------------- modes and topologies


def test_evalsha_fallback_ingests_the_same(valkey_server: Any) -> None:
    admin = redis.Redis.from_url(valkey_server.url)
    name = queue_name()
    with RedisBackend.from_url(valkey_server.url, queue=name, scripts="eval") as backend:
        backend.push(msg("warm"))
        fcalls = calls(admin, "fcall")
        backend.push_intake([msg("a", "x"), msg("b", "y"), msg("a", "x")])
        assert backend.ingest(1) == IngestReport(ingested=1, duplicates=0, rejected=0, left=2)
        got = [c.message.task_id for c in backend.claim(count=5)]
        assert sorted(got) == ["a", "b", "warm"]
        assert backend.stats()["duplicates"] == 1
        assert calls(admin, "fcall") == fcalls  # EVALSHA only
    admin.close()


@pytest.mark.cluster
def test_on_the_cluster(valkey_cluster: Any) -> None:
    name = queue_name()
    with RedisBackend.from_url(valkey_cluster.url, queue=name, cluster=True) as backend:
        backend.push_intake([msg(f"t{k}", f"u{k % 3}") for k in range(20)])
        assert backend.intake_size() == 20
        assert backend.ingest(5).left == 15
        got = [c.message.task_id for c in backend.claim(count=50)]
        assert sorted(got) == sorted(f"t{k}" for k in range(20))
        raw = RedisCluster.from_url(valkey_cluster.url)
        node = raw.get_node_from_key(backend.keys.meta)
        assert raw.get_node_from_key(backend.keys.intake) == node
        assert raw.get_node_from_key(backend.keys.intake_bad) == node
        raw.close()


@pytest.mark.parametrize("where", ["valkey", pytest.param("cluster", marks=pytest.mark.cluster)])
def test_a_partitioned_queue_has_an_intake_per_partition(
    where: str, request: pytest.FixtureRequest
) -> None:
    server = request.getfixturevalue("valkey_server" if where == "valkey" else "valkey_cluster")
    name = queue_name()
    tenants = [f"t{k}" for k in range(12)]
    backend = PartitionedBackend.from_url(
        server.url, queue=name, partitions=3, cluster=where == "cluster"
    )
    try:
        spread = {partition_for(t, 3) for t in tenants}
        assert spread == {0, 1, 2}
        backend.push_intake([msg(f"{t}.{i}", t) for i in range(3) for t in tenants])
        assert backend.intake_size() == 36
        report = backend.ingest(20)  # partitions in order, 20 in all
        assert report.ingested == 20
        assert report.left == 16
        claimed: list[str] = []
        for _ in range(20):
            claimed += [c.message.task_id for c in backend.claim(count=10)]
        assert sorted(claimed) == sorted(f"{t}.{i}" for i in range(3) for t in tenants)
        assert backend.intake_size() == 0
        for t in tenants:  # per tenant, intake order
            mine = [c for c in claimed if c.startswith(f"{t}.")]
            assert mine == [f"{t}.{i}" for i in range(3)]
    finally:
        backend.close()


def test_a_partition_with_only_intake_entries_gets_claimed(valkey_server: Any) -> None:
    """No tenant active anywhere: the picker still turns to the partition whose intake holds
    entries (its summary counts them)."""
    name = queue_name()
    backend = PartitionedBackend.from_url(valkey_server.url, queue=name, partitions=3)
    try:
        lonely = next(t for t in (f"x{k}" for k in range(100)) if partition_for(t, 3) == 2)
        backend.push_intake([msg("only", lonely)])
        assert [c.message.task_id for c in backend.claim(count=1)] == ["only"]
    finally:
        backend.close()


def test_replicated_without_a_replica_raises_after_the_append(valkey_server: Any) -> None:
    """``durability="replicated"``: the RPUSH and its WAIT on one connection; no replica
    confirms, so NotReplicatedError, with the intake's length on the primary as the result."""
    admin = redis.Redis.from_url(valkey_server.url)
    name = queue_name()
    replicated = Durability("replicated", timeout_ms=50)
    waits = calls(admin, "wait")
    with RedisBackend.from_url(valkey_server.url, queue=name, durability=replicated) as backend:
        with pytest.raises(NotReplicatedError) as caught:
            backend.push_intake([msg("a"), msg("b")])
        assert caught.value.operation == "push_intake"
        assert caught.value.result == 2
        assert backend.intake_size() == 2  # applied on the primary
    assert calls(admin, "wait") > waits
    admin.close()


@pytest.fixture(scope="module")
def replicated_valkey() -> Iterator[tuple[str, str]]:
    """(primary url, replica url): an embedded Valkey and its replica, in sync."""
    from fairque_redis.servers.embedded import EmbeddedValkey, ServerBinaryNotFoundError

    try:
        primary = EmbeddedValkey(extra_args=["--repl-diskless-sync-delay", "0"])
    except ServerBinaryNotFoundError as exc:
        pytest.skip(f"valkey unavailable: {exc}")
    with (
        primary,
        EmbeddedValkey(extra_args=["--replicaof", primary.host, str(primary.port)]) as replica,
    ):
        link = redis.Redis.from_url(replica.url)
        synced = any(
            link.info("replication").get("master_link_status") == "up" or time.sleep(0.02)
            for _ in range(750)
        )
        link.close()
        assert synced, "the replica never synced"
        yield primary.url, replica.url


def test_replicated_with_a_replica_has_the_entries_there_on_return(
    replicated_valkey: tuple[str, str],
) -> None:
    primary, replica = replicated_valkey
    name = queue_name()
    replicated = Durability("replicated", timeout_ms=2000, replica_fsync=False)
    on_replica = redis.Redis.from_url(replica)
    with RedisBackend.from_url(primary, queue=name, durability=replicated) as backend:
        for k in range(20):
            backend.push_intake([msg(f"t{k}")])
            assert on_replica.llen(backend.keys.intake) == k + 1  # there when it returned
        assert backend.ingest(100).ingested == 20
    on_replica.close()
