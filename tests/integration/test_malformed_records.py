"""S1, scaled for CI: task records corrupted directly in Valkey, bypassing the client.

Every bad record starts as a valid task pushed through the API (so the queue's structures,
the tenant's queue and the lease bookkeeping all exist); then a raw ``redis.Redis`` overwrites
or deletes fields of its hash (``b`` body, ``m`` meta JSON, ``p``, ``rc``, ``rec``, ``u``; the
field list is at the top of ``lua/_include/task.lua``).

What the product does, pinned here:

- a body the codecs cannot decode (invalid JSON or UTF-8, 100 000 levels of nesting,
  NaN/Infinity, not an object, a multi-MB blob, a pickle under any content type), meta that
  parses but does not make a valid Task (NaN ``created_at``, infinite delay, bad headers,
  negative counts) and a negative retry count: the claim (``claim_batch``) moves the task to the
  DLQ as ``poisoned`` with the reason ``"TaskSerializationError: ..."`` and never hands it out;
- a registered-handler task with an unknown name, or arguments of the wrong shape: the handler
  raises ``UnknownTaskError`` / ``TaskSerializationError`` and the worker dead-letters it as
  ``poisoned`` with that error class in the reason;
- no pickle is ever loaded: the canary file a pickle would create never appears.

Records whose *record-level* fields cannot be read (meta that is not the 7-item JSON array,
a non-numeric or missing priority, retry count or recoveries, a missing body): the claim's
reply parser cannot build the message, so the backend sends the leased record to the DLQ as
``poisoned`` at once (reason ``TaskSerializationError: task <id> has an unreadable record``),
and the good tasks claimed in the same batch are handed out as usual. ``list_dlq`` lists such
an entry with what could be read and the problem in the ``x-fairque-unreadable`` header. The
scripts read damaged numbers (``rec``) as defaults, and a hash without its tenant as absent:
its lease is lost for ``finish``/``fail`` and the reaper drops its stray lease entry.
(These were product bugs this file first pinned with strict xfails; fixed since.)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import pickle
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from fairque_core import FailureType, FairQueue, Task, TaskState, WorkerConfig
from fairque_core.app.worker.handlers import RegistryHandler, TaskRegistry
from fairque_core.app.worker.worker import Worker
from fairque_core.app.worker.worker_async import AsyncWorker
from fairque_core.domain.errors import TaskSerializationError
from fairque_plugins import MsgpackCodec
from fairque_redis import aconnect, connect

pytestmark = [pytest.mark.redis, pytest.mark.timeout(60)]

GOOD_TENANTS = ("alice", "bob", "carol")
GOOD_PER_TENANT = 40
BAD_TENANTS = ("mallory-0", "mallory-1", "mallory-2", "mallory-3")
COPIES = 12  # records per kind of corruption (the multi-MB blob gets BIG_COPIES)
BIG_COPIES = 2
BIG_BLOB = 4 << 20  # 4 MiB, over the default max_payload_bytes (1 MiB) the client enforces
DEEP = 100_000


@pytest.fixture(autouse=True)
def _no_autoload(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAIRQUE_DISABLE_PLUGIN_AUTOLOAD", "1")


class Canary:
    """Unpickling this object opens (creates) ``path``: proof that a pickle was loaded."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self) -> tuple[Any, tuple[str, str]]:
        return (open, (self.path, "w"))


# ---- the corruptions -------------------------------------------------------------------------
#
# A corruption maps the record's current fields to the fields to write (None = HDEL). ``m`` is
# the meta JSON array: [content_type, max_retries, created_at, delay, depends_on, headers, name].

Fields = dict[str, bytes]
Corruption = Callable[[Fields, bytes], dict[str, bytes | None]]


def _meta(index: int, value: Any) -> Corruption:
    def corrupt(fields: Fields, _pickled: bytes) -> dict[str, bytes | None]:
        meta = json.loads(fields["m"])
        meta[index] = value
        return {"m": json.dumps(meta).encode()}  # allow_nan: NaN/Infinity written as such

    return corrupt


def _body(value: bytes) -> Corruption:
    return lambda _fields, _pickled: {"b": value}


def _pickle_as(content_type: str | None) -> Corruption:
    def corrupt(fields: Fields, pickled: bytes) -> dict[str, bytes | None]:
        out: dict[str, bytes | None] = {"b": pickled}
        if content_type is not None:
            out.update(_meta(0, content_type)(fields, pickled))
        return out

    return corrupt


# kind -> (corruption, error class in the DLQ reason, a phrase of the reason)
HANDLED: dict[str, tuple[Corruption, str, str]] = {
    "body-invalid-json": (_body(b'{"args": [1, 2'), "TaskSerializationError", "valid UTF-8 JSON"),
    "body-invalid-utf8": (
        _body(b'{"args": ["\xff\xfe\xfd"], "kwargs": {}}'),
        "TaskSerializationError",
        "codec can't decode",
    ),
    "body-deep-nesting": (
        _body(b'{"args": ' + b"[" * DEEP + b"]" * DEEP + b"}"),
        "TaskSerializationError",
        "recursion",
    ),
    "body-nan": (
        _body(b'{"args": [NaN], "kwargs": {}}'),
        "TaskSerializationError",
        "NaN is not valid JSON",
    ),
    "body-infinity": (
        _body(b'{"args": [-Infinity], "kwargs": {}}'),
        "TaskSerializationError",
        "Infinity is not valid JSON",
    ),
    "body-not-an-object": (_body(b"[1, 2, 3]"), "TaskSerializationError", "not a JSON object"),
    "body-null": (_body(b"null"), "TaskSerializationError", "not a JSON object"),
    "body-empty": (_body(b""), "TaskSerializationError", "valid UTF-8 JSON"),
    "body-wrong-schema": (
        _body(b'{"args": 5, "kwargs": []}'),
        "TaskSerializationError",
        "payload must hold 'args' (list) and 'kwargs' (mapping)",
    ),
    "body-pickle": (_pickle_as(None), "TaskSerializationError", "valid UTF-8 JSON"),
    "body-pickle-as-msgpack": (
        _pickle_as("application/msgpack"),
        "TaskSerializationError",
        "not valid MessagePack",
    ),
    "body-pickle-content-type": (
        _pickle_as("application/x-python-pickle"),
        "TaskSerializationError",
        "no codec plugin decodes content type 'application/x-python-pickle'",
    ),
    "meta-nan-created-at": (
        _meta(2, float("nan")),
        "TaskSerializationError",
        "invalid created_at nan",
    ),
    "meta-infinite-delay": (
        _meta(3, float("inf")),
        "TaskSerializationError",
        "invalid execute_after inf",
    ),
    "meta-negative-max-retries": (
        _meta(1, -1),
        "TaskSerializationError",
        "invalid max_retries -1",
    ),
    "meta-headers-not-a-map": (_meta(5, "x"), "TaskSerializationError", "is malformed"),
    "meta-content-type-not-text": (_meta(0, 5), "TaskSerializationError", "cannot decode"),
    "retry-count-negative": (
        lambda _f, _p: {"rc": b"-5"},
        "TaskSerializationError",
        "invalid retry_count -5",
    ),
    "unknown-task-name": (
        _meta(6, "no.such.task"),
        "UnknownTaskError",
        "no handler is registered for task name 'no.such.task'",
    ),
    "big-blob": (
        _body(b"\x00\xff" * (BIG_BLOB // 2)),
        "TaskSerializationError",
        "valid UTF-8 JSON",
    ),
}

#: Rejected by the handler (after a claim), not by the claim's decoding.
HANDLER_LEVEL = frozenset({"unknown-task-name", "body-wrong-schema"})


# ---- set-up ----------------------------------------------------------------------------------


class Runs:
    """Executions of the registered task, by task id (thread-safe)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ids: list[str] = []


def make_registry(runs: Runs) -> TaskRegistry:
    registry = TaskRegistry()

    @registry.task("echo", bind=True)
    def echo(task: Task, n: int) -> dict[str, Any]:
        with runs.lock:
            runs.ids.append(task.task_id)
        return {"n": n, "id": task.task_id}

    return registry


class Scenario:
    """One fresh queue holding good tasks and bad records; the ids of each."""

    def __init__(self, url: str, tmp_path: Path) -> None:
        self.url = url
        self.name = f"mal-{uuid.uuid4().hex[:10]}"
        self.raw = redis.Redis.from_url(url)
        self.queue = connect(url, queue=self.name, plugins=[MsgpackCodec(encodes=False)])
        self.canary = tmp_path / "canary"
        self.runs = Runs()
        self.registry = make_registry(self.runs)
        self.good: list[str] = []
        self.bad: dict[str, str] = {}  # task id -> kind

    def key(self, task_id: str) -> str:
        return self.queue.backend.keys.task(task_id)

    def push_bad(self, kinds: dict[str, tuple[Corruption, str, str]]) -> None:
        echo = self.registry.get("echo")
        tasks: list[Task] = []
        for kind in kinds:
            for i in range(BIG_COPIES if kind == "big-blob" else COPIES):
                task_id = f"bad-{kind}-{i}"
                tasks.append(echo.create(BAD_TENANTS[i % len(BAD_TENANTS)], i, task_id=task_id))
                self.bad[task_id] = kind
        self.queue.push_batch(tasks)
        pickled = pickle.dumps(Canary(self.canary))
        for task_id, kind in self.bad.items():
            corrupt = kinds[kind][0]
            fields = {k.decode(): v for k, v in self.raw.hgetall(self.key(task_id)).items()}
            for field, value in corrupt(fields, pickled).items():
                if value is None:
                    self.raw.hdel(self.key(task_id), field)
                else:
                    self.raw.hset(self.key(task_id), field, value)

    def push_good(self) -> None:
        echo = self.registry.get("echo")
        tasks = [
            echo.create(tenant, n, task_id=f"good-{tenant}-{n}")
            for n in range(GOOD_PER_TENANT)
            for tenant in GOOD_TENANTS
        ]
        self.queue.push_batch(tasks)
        self.good = [t.task_id for t in tasks]

    def settled(self) -> bool:
        stats = self.queue.get_stats()
        return stats["finished"] == len(self.good) and stats["dlq"] == len(self.bad)

    def close(self) -> None:
        self.queue.close()
        self.raw.close()


@pytest.fixture
def scenario(valkey_server: Any, tmp_path: Path) -> Iterator[Scenario]:
    made = Scenario(valkey_server.url, tmp_path)
    try:
        yield made
    finally:
        made.close()


def test_the_canary_pickle_is_live(tmp_path: Path) -> None:
    """The control: loading the pickle written into the bad records DOES create its canary, so
    the canary's absence below means no pickle was loaded, not that the payload was inert."""
    control = tmp_path / "control-canary"
    with pickle.loads(pickle.dumps(Canary(control))):
        pass
    assert control.exists()


def worker_config(worker_id: str) -> WorkerConfig:
    return WorkerConfig(
        id=worker_id,
        max_concurrent_tasks=8,
        poll_interval_seconds=0.05,
        reaper_interval_seconds=0.2,
    )


def check_outcome(s: Scenario, health: dict[str, Any]) -> None:
    """Good tasks all finished exactly once; every bad record poisoned with a typed reason."""
    queue = s.queue
    n_good, n_bad = len(s.good), len(s.bad)
    handler_level = sum(1 for kind in s.bad.values() if kind in HANDLER_LEVEL)
    # the worker kept going: every good task ran once and was acknowledged, nothing escaped
    # into its control loop (that would be counted as a backend error)
    assert health["backend_errors"] == 0, health["last_error"]
    assert health["processed"] == n_good
    assert health["lease_lost"] == 0
    assert health["poisoned"] == health["dead"] == handler_level
    assert Counter(s.runs.ids) == Counter(dict.fromkeys(s.good, 1))
    for task_id in s.good:
        assert queue.get_state(task_id) is TaskState.FINISHED
    tenant = s.good[0].split("-")[1]
    assert queue.get_result(f"good-{tenant}-7") == {"n": 7, "id": f"good-{tenant}-7"}
    for tenant in GOOD_TENANTS:
        stats = queue.get_tenant_stats(tenant)
        assert (stats["finished"], stats["dead"], stats["recovered"]) == (GOOD_PER_TENANT, 0, 0)

    # every bad record: in the DLQ as POISONED, the error class first in the reason
    entries = queue.list_dlq(limit=10 * n_bad)
    assert len(entries) == n_bad
    by_id = {e.entry_id: e for e in entries}
    assert set(by_id) == set(s.bad)
    for task_id, kind in s.bad.items():
        entry = by_id[task_id]
        _corrupt, error_class, phrase = HANDLED[kind]
        assert entry.failure_type is FailureType.POISONED, (task_id, entry.reason)
        assert entry.reason.startswith(f"{error_class}: "), (task_id, entry.reason)
        assert phrase in entry.reason, (task_id, entry.reason)
        assert queue.get_state(task_id) is TaskState.FAILED
    for tenant in BAD_TENANTS:
        assert queue.get_tenant_stats(tenant)["finished"] == 0

    # nothing left leased, ready or scheduled; the raw lease set agrees with the gauges
    stats = queue.get_stats()
    assert stats["finished"] == n_good
    assert (stats["dead"], stats["dlq"]) == (n_bad, n_bad)
    assert (stats["leased"], stats["ready"], stats["scheduled"]) == (0, 0, 0)
    assert s.raw.zcard(queue.backend.keys.leases) == 0
    assert not s.canary.exists()


def test_thread_worker_poisons_bad_records_and_finishes_every_good_task(
    scenario: Scenario,
) -> None:
    s = scenario
    s.push_bad(HANDLED)
    s.push_good()
    assert len(s.bad) == (len(HANDLED) - 1) * COPIES + BIG_COPIES
    worker = Worker(worker_config("w-mal"), RegistryHandler(s.registry), s.queue)
    started = time.monotonic()
    worker.start()
    try:
        deadline = started + 20
        while not s.settled():
            assert worker.state == "running"
            assert time.monotonic() < deadline, (s.queue.get_stats(), worker.health())
            time.sleep(0.02)
        assert worker.state == "running"  # still alive after every bad record went through
    finally:
        assert worker.stop(10)
    check_outcome(s, worker.health())
    # the API reports such a record as a typed error, too
    with pytest.raises(TaskSerializationError):
        s.queue.get_task("bad-body-invalid-json-0")


def test_async_worker_poisons_bad_records_and_finishes_every_good_task(
    scenario: Scenario,
) -> None:
    s = scenario
    s.push_bad(HANDLED)
    s.push_good()

    async def run() -> dict[str, Any]:
        queue = await aconnect(s.url, queue=s.name, plugins=[MsgpackCodec(encodes=False)])
        async with queue:
            worker = AsyncWorker(worker_config("aw-mal"), RegistryHandler(s.registry), queue)
            await worker.start()
            try:
                deadline = time.monotonic() + 20
                while not s.settled():
                    assert worker.state == "running"
                    assert time.monotonic() < deadline, (s.queue.get_stats(), worker.health())
                    await asyncio.sleep(0.02)
                assert worker.state == "running"
            finally:
                assert await worker.stop(10)
            return worker.health()

    check_outcome(s, asyncio.run(run()))


# ---- record-level corruption: product bugs ---------------------------------------------------
#
# The claim script returns the record's ``p``, ``rc``, ``m``, ``b`` and ``rec`` fields, and
# ``fairque_redis._plan.decode_message`` (with ``int(reply[i + 6])``) parses them in the claim's
# reply parser, OUTSIDE the engine's poison handling: a raw ValueError / TypeError /
# RecursionError escapes ``claim_batch`` after the server already leased the whole batch.

RECORD_LEVEL: dict[str, Corruption] = {
    "meta-invalid-json": lambda _f, _p: {"m": b"[not json"},
    "meta-invalid-utf8": lambda _f, _p: {"m": b'["\xff\xfe"]'},
    "meta-not-the-array": lambda _f, _p: {"m": b'{"content_type": "application/json"}'},
    "meta-deep-nesting": lambda _f, _p: {"m": b"[" * DEEP + b"]" * DEEP},
    "meta-depends-on-not-a-list": _meta(4, 5),
    "priority-not-a-number": lambda _f, _p: {"p": b"high"},
    "priority-out-of-range": lambda _f, _p: {"p": b"99"},
    "retry-count-not-a-number": lambda _f, _p: {"rc": b"many"},
    "missing-body": lambda _f, _p: {"b": None},
    "missing-meta": lambda _f, _p: {"m": None},
    "missing-priority": lambda _f, _p: {"p": None},
    "missing-retry-count": lambda _f, _p: {"rc": None},
    "missing-recoveries": lambda _f, _p: {"rec": None},
}


@contextlib.contextmanager
def raw_queue(url: str, **opts: Any) -> Iterator[tuple[FairQueue, redis.Redis]]:
    queue = connect(url, queue=f"mal-{uuid.uuid4().hex[:10]}", **opts)
    raw = redis.Redis.from_url(url)
    try:
        yield queue, raw
    finally:
        queue.close()
        raw.close()


def corrupt_record(
    queue: FairQueue, raw: redis.Redis, task_id: str, corruption: Corruption
) -> None:
    key = queue.backend.keys.task(task_id)
    fields = {k.decode(): v for k, v in raw.hgetall(key).items()}
    for field, value in corruption(fields, b"").items():
        if value is None:
            raw.hdel(key, field)
        else:
            raw.hset(key, field, value)


def ft_of(queue: FairQueue, raw: redis.Redis, task_id: str) -> bytes | None:
    value = raw.hget(queue.backend.keys.task(task_id), "ft")
    return value if isinstance(value, bytes) else None


@pytest.mark.parametrize("kind", sorted(RECORD_LEVEL))
def test_unreadable_record_is_poisoned_at_claim(valkey_server: Any, kind: str) -> None:
    with raw_queue(valkey_server.url) as (queue, raw):
        queue.push(Task.create("mallory", payload={"x": 1}, task_id="bad"))
        corrupt_record(queue, raw, "bad", RECORD_LEVEL[kind])
        assert queue.claim_batch(4, worker_id="w") == []
        assert queue.get_state("bad") is TaskState.FAILED
        assert ft_of(queue, raw, "bad") == b"poisoned"


def test_unreadable_record_does_not_strand_good_tasks_claimed_with_it(
    valkey_server: Any,
) -> None:
    with raw_queue(valkey_server.url) as (queue, raw):
        queue.push(Task.create("alice", payload={"x": 1}, task_id="good"))
        queue.push(Task.create("mallory", payload={"x": 1}, task_id="bad"))
        corrupt_record(queue, raw, "bad", RECORD_LEVEL["meta-invalid-json"])
        got = queue.claim_batch(2, worker_id="w")
        assert [t.task_id for t in got] == ["good"]


def test_worker_poisons_unreadable_records_and_finishes_good_tasks(valkey_server: Any) -> None:
    registry = make_registry(Runs())
    echo = registry.get("echo")
    with raw_queue(valkey_server.url, lease_seconds=0.5) as (queue, raw):
        bad = [f"bad-{i}" for i in range(8)]
        queue.push_batch([echo.create(BAD_TENANTS[i % 2], i, task_id=b) for i, b in enumerate(bad)])
        for task_id in bad:
            corrupt_record(queue, raw, task_id, RECORD_LEVEL["meta-invalid-json"])
        good = [f"good-{t}-{n}" for n in range(10) for t in GOOD_TENANTS]
        queue.push_batch([echo.create(g.split("-")[1], 0, task_id=g) for g in good])
        config = WorkerConfig(
            id="w-unreadable",
            max_concurrent_tasks=4,
            poll_interval_seconds=0.05,
            reaper_interval_seconds=0.1,
        )
        worker = Worker(config, RegistryHandler(registry), queue)
        worker.start()
        try:
            # until every bad record is poisoned and every good task finished (a stop before
            # that releases the tasks still prefetched: they would read as queued)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not (
                all(ft_of(queue, raw, b) for b in bad)
                and all(queue.get_state(g) is TaskState.FINISHED for g in good)
            ):
                time.sleep(0.05)
        finally:
            assert worker.stop(5)
        outcome = Counter((ft_of(queue, raw, b) or b"none").decode() for b in bad)
        good_states = Counter(str(queue.get_state(g)) for g in good)
        health = worker.health()
        summary = f"bad: {dict(outcome)}, good: {dict(good_states)}, health: {health}"
        assert outcome == Counter({"poisoned": len(bad)}), summary
        assert good_states == Counter({"finished": len(good)}), summary
        assert health["backend_errors"] == 0, summary


def test_list_dlq_lists_an_entry_with_unreadable_meta(valkey_server: Any) -> None:
    with raw_queue(valkey_server.url) as (queue, raw):
        queue.push(Task.create("mallory", payload={"x": 1}, task_id="bad"))
        corrupt_record(queue, raw, "bad", RECORD_LEVEL["meta-invalid-json"])
        assert queue.claim_batch(1, worker_id="w") == []
        assert ft_of(queue, raw, "bad") == b"poisoned"
        [entry] = queue.list_dlq()
        assert entry.entry_id == "bad"
        assert entry.original_task.tenant == "mallory"
        assert "unreadable record" in entry.original_task.headers["x-fairque-unreadable"]
        assert "unreadable record" in entry.reason
        assert queue.purge_dlq(["bad"]) == 1
        assert queue.list_dlq() == []


def test_reaper_handles_a_record_with_unreadable_recoveries(valkey_server: Any) -> None:
    with raw_queue(valkey_server.url, lease_seconds=0.2) as (queue, raw):
        queue.push(Task.create("mallory", payload={"x": 1}, task_id="bad"))
        [claimed] = queue.claim_batch(1, worker_id="w")
        raw.hset(queue.backend.keys.task("bad"), "rec", b"several")  # damaged while leased
        time.sleep(0.3)
        assert queue.requeue_expired() == 1
        assert queue.get_state("bad") is TaskState.QUEUED
        assert raw.hget(queue.backend.keys.task("bad"), "rec") == b"1", "read as 0, then +1"
        assert raw.zcard(queue.backend.keys.leases) == 0
        assert claimed.task_id == "bad"


def test_a_record_missing_its_tenant_reads_as_absent(valkey_server: Any) -> None:
    """Its lease is lost for finish (the batch's other items still finish), and the reaper
    drops its stray lease entry; the hash is left for inspection."""
    with raw_queue(valkey_server.url, lease_seconds=0.2) as (queue, raw):
        queue.push(Task.create("alice", payload={"x": 1}, task_id="good"))
        queue.push(Task.create("mallory", payload={"x": 1}, task_id="bad"))
        raw.hdel(queue.backend.keys.task("bad"), "u")
        claimed = {t.task_id: t for t in queue.claim_batch(2, worker_id="w")}
        assert set(claimed) == {"good", "bad"}
        flags = queue.finish_batch([(claimed["good"], 1), (claimed["bad"], 2)])
        assert flags == [True, False]
        assert queue.get_state("good") is TaskState.FINISHED
        assert queue.get_result("good") == 1
        assert raw.zcard(queue.backend.keys.leases) == 1
        time.sleep(0.3)
        assert queue.requeue_expired() == 1
        assert raw.zcard(queue.backend.keys.leases) == 0
        assert queue.get_stats()["finished"] == 1


def test_async_claim_poisons_an_unreadable_record(valkey_server: Any) -> None:
    async def scenario(name: str) -> list[str]:
        queue = await aconnect(valkey_server.url, queue=name)
        async with queue:
            got = await queue.claim_batch(4, worker_id="aw")
            return [t.task_id for t in got]

    with raw_queue(valkey_server.url) as (queue, raw):
        queue.push(Task.create("alice", payload={"x": 1}, task_id="good"))
        queue.push(Task.create("mallory", payload={"x": 1}, task_id="bad"))
        corrupt_record(queue, raw, "bad", RECORD_LEVEL["priority-not-a-number"])
        assert asyncio.run(scenario(queue.name)) == ["good"]
        assert queue.get_state("bad") is TaskState.FAILED
        assert ft_of(queue, raw, "bad") == b"poisoned"
        with pytest.raises(TaskSerializationError, match="unreadable record"):
            queue.get_task("bad")
