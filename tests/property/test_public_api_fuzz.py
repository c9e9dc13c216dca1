"""Fuzz of the public API (issue 16, defect 6 and S9): bad input is always typed.

Hypothesis throws good, odd and foreign values at every public entry point of the engine
(``Task.create``, ``Task(...)``, push, claim, finish/fail/heartbeat, tenants, reads, the DLQ)
and at the config classes, on the reference model and on Valkey. Two properties:

* **typed**: the only exceptions that escape are :class:`FairQueueError` subclasses;
* **stored right**: a task that push accepted reads back equal to what was pushed, modulo the
  documented normalisation (see :func:`expected_readback`), and is in the state its
  ``execute_after`` asks for (scheduled when in the future, queued when due).

The example budget follows the hypothesis profile (``tests/conftest.py``) but is capped, so the
whole module stays well under 20 s in the default run; ``HYPOTHESIS_PROFILE=nightly`` lifts the
cap. ``FAIRQUE_FUZZ_TALLY=1`` records failures instead of stopping at the first (used to
survey the API: ``pytest -s`` prints the tally).
"""

from __future__ import annotations

import json
import math
import os
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fairque_core import (
    FailureType,
    FairQueue,
    FairQueueConfig,
    FairQueueError,
    InMemoryBackend,
    Lease,
    Priority,
    QueueConfig,
    Task,
    TaskState,
    WorkerConfig,
)

MAX_PAYLOAD = 2048
TENANTS = ["fz-a", "fz-b", "fz-c"]
_TALLY = os.environ.get("FAIRQUE_FUZZ_TALLY", "") not in ("", "0")
_FAILURES: Counter[str] = Counter()
_EXAMPLES: dict[str, str] = {}

_PROFILE_EXAMPLES = settings.default.max_examples
#: Examples per test: the profile's budget, capped in the default and ci runs.
BUDGET = _PROFILE_EXAMPLES if _PROFILE_EXAMPLES > 500 else min(_PROFILE_EXAMPLES, 150)
FUZZ = settings(
    max_examples=BUDGET,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


# ---------------------------------------------------------------------- values


class Foreign:
    """An object no API expects."""

    def __repr__(self) -> str:
        return "Foreign()"


class Explodes:
    """A value whose every protocol method raises (len, iter, str, float, compare, hash)."""

    def __len__(self) -> int:
        raise RuntimeError("len")

    def __iter__(self) -> Iterator[Any]:
        raise RuntimeError("iter")

    def __float__(self) -> float:
        raise RuntimeError("float")

    def __index__(self) -> int:
        raise RuntimeError("index")

    def __repr__(self) -> str:
        return "Explodes()"


EXTREME_NUMBERS = [
    float("nan"),
    float("inf"),
    float("-inf"),
    -1,
    0,
    -0.0,
    1e16,
    1.8e305,
    -1.8e305,
    2**63,
    -(2**63),
    10**30,
    10**400,
    1e-320,
    True,
    False,
]

hashable_junk = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),  # a NaN key is never equal to itself: no stable dict
    st.text(max_size=6),
    st.binary(max_size=4),
    st.tuples(st.text(max_size=3)),
    st.builds(Foreign),
)
junk = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.sampled_from(EXTREME_NUMBERS),
    st.text(max_size=12),
    st.binary(max_size=8),
    st.lists(st.one_of(st.text(max_size=4), st.integers()), max_size=3),
    st.tuples(st.text(max_size=3)),
    st.dictionaries(
        st.one_of(st.text(max_size=4), hashable_junk),
        st.one_of(st.integers(), st.text(max_size=4)),
        max_size=3,
    ),
    st.builds(Foreign),
    st.builds(Explodes),
    # one_of of justs, not sampled_from: hypothesis replays str-subclass enums badly
    *(st.just(v) for v in (Priority.HIGH, TaskState.QUEUED, FailureType.FAILED, b"\xff", "{q}")),
)

good_ids = st.from_regex(r"[A-Za-z0-9_.:@/+=#-]{1,12}", fullmatch=True)
fresh_ids = st.builds(lambda: "fz-" + uuid.uuid4().hex)
odd_strings = st.one_of(
    st.text(max_size=40),
    st.text(min_size=120, max_size=140, alphabet="ab"),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=10),
    st.sampled_from(["", " ", "a b", "a{b}", "*", "é", "\ud800", "x" * 129]),
    st.integers(129, 6000).map(lambda n: "x" * n),
)


def maybe(good: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly a good value, sometimes junk or an odd string."""
    return st.one_of(good, good, junk, odd_strings)


def id_lists(good: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.none(), st.lists(maybe(good), max_size=4), maybe(good), junk)


tenants = st.sampled_from(TENANTS)
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=8)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.tuples(inner),
        st.dictionaries(st.one_of(st.text(max_size=6), st.integers()), inner, max_size=3),
    ),
    max_leaves=8,
)
payloads = st.one_of(
    st.dictionaries(st.text(max_size=8), json_values, max_size=4),
    st.dictionaries(st.text(max_size=4), st.text(min_size=1000, max_size=1500), max_size=2),
    junk,
)
headers = st.one_of(
    st.none(),
    st.dictionaries(st.text(max_size=8), st.text(max_size=20), max_size=3),
    st.dictionaries(hashable_junk, hashable_junk, max_size=2),
    st.dictionaries(st.text(max_size=4), st.text(min_size=1000, max_size=2500), max_size=1),
    junk,
)
names = st.one_of(
    st.just(""),
    st.sampled_from(["send_email", "a.b:c"]),
    st.text(max_size=30),
    st.text(min_size=1900, max_size=2200, alphabet="n"),
    junk,
)
times = st.one_of(
    st.none(),
    st.floats(min_value=-5, max_value=5).map(lambda d: time.time() + d),
    st.floats(min_value=10, max_value=3e7).map(lambda d: time.time() + d),
    st.sampled_from([0.0, 1e9, 1e12, 1e15, 1e16, 1e17, 1e300, 1.8e305, -1.0]),
    junk,
)
priorities = st.one_of(st.sampled_from(list(Priority)), st.integers(-2, 8), junk)
counts = st.one_of(st.integers(0, 5), st.sampled_from([10**6, 10**12, 2**63]), junk)


# ---------------------------------------------------------------------- the harness


def attempt(where: str, call: Callable[[], Any]) -> tuple[bool, Any]:
    """Run ``call``: ``(True, value)``, or ``(False, error)`` for a FairQueueError.

    Anything else fails the test (or, when tallying, is counted and reported as refused).
    """
    try:
        return True, call()
    except FairQueueError as exc:
        return False, exc
    except Exception as exc:
        if not _TALLY:
            raise AssertionError(f"{where} raised untyped {type(exc).__name__}: {exc!r}") from exc
        key = f"{where}: untyped {type(exc).__name__}"
        _FAILURES[key] += 1
        _EXAMPLES.setdefault(key, repr(exc)[:200])
        return False, exc


def wrong(where: str, text: str) -> None:
    if not _TALLY:
        raise AssertionError(f"{where}: {text}")
    key = f"{where}: {text.split(':', maxsplit=1)[0]}"
    _FAILURES[key] += 1
    _EXAMPLES.setdefault(key, text[:300])


def json_round_trip(value: Any) -> Any:
    return json.loads(json.dumps(value, allow_nan=False))


def expected_readback(task: Task, pushed_from: float, pushed_to: float, got: Task) -> str:
    """What differs between ``got`` (read back) and ``task`` (pushed), beyond the documented
    normalisation, as text ('' when nothing):

    * the payload reads back as its JSON round trip (the default codec: tuples become lists);
    * the headers read back with those the plugins add;
    * ``retry_count`` reads back 0 (a push starts the attempt count);
    * ``execute_after`` reads back as ``created_at + max(0, execute_after - push time)``.
    """
    problems = []
    for field in ("task_id", "tenant", "priority", "max_retries", "created_at", "name"):
        if getattr(got, field) != getattr(task, field):
            problems.append(f"{field} {getattr(got, field)!r} != {getattr(task, field)!r}")
    if tuple(got.depends_on) != tuple(task.depends_on):
        problems.append(f"depends_on {got.depends_on!r} != {task.depends_on!r}")
    if got.retry_count != 0:
        problems.append(f"retry_count {got.retry_count} != 0")
    if dict(got.payload) != json_round_trip(dict(task.payload)):
        problems.append(f"payload {got.payload!r} != {task.payload!r}")
    for key, value in task.headers.items():
        if got.headers.get(key) != value:
            problems.append(f"header {key!r} {got.headers.get(key)!r} != {value!r}")
    low = task.created_at + max(0.0, task.execute_after - pushed_to)
    high = task.created_at + max(0.0, task.execute_after - pushed_from)
    slack = 1e-6 * max(1.0, abs(task.created_at), abs(task.execute_after))
    if not low - slack <= got.execute_after <= high + slack:
        problems.append(f"execute_after {got.execute_after!r} not in [{low!r}, {high!r}]")
    return "; ".join(problems)


def expected_state(task: Task, pushed_to: float, state: TaskState | None) -> str:
    if task.depends_on:
        return ""
    if task.execute_after > pushed_to + 5 and state is not TaskState.SCHEDULED:
        return f"state {state} for execute_after {task.execute_after!r} (now {pushed_to:.0f})"
    return ""


class Fuzzer:
    """The engine under test and what the checks need to know about it."""

    def __init__(self, queue: FairQueue) -> None:
        self.queue = queue

    # ---- building tasks

    def task_create(self, data: st.DataObject) -> tuple[bool, Any]:
        kwargs: dict[str, Any] = {}
        for key, strategy in (
            ("task_id", st.one_of(fresh_ids, fresh_ids, junk, odd_strings)),
            ("max_retries", st.one_of(st.integers(0, 5), counts)),
            ("execute_after", times),
            ("depends_on", id_lists(good_ids)),
            ("headers", headers),
            ("name", names),
        ):
            if data.draw(st.booleans(), label=f"give {key}"):
                kwargs[key] = data.draw(strategy, label=key)
        tenant_id = data.draw(maybe(tenants), label="tenant")
        priority = data.draw(priorities, label="priority")
        payload = data.draw(st.one_of(st.none(), payloads), label="payload")
        return attempt("Task.create", lambda: Task.create(tenant_id, priority, payload, **kwargs))

    def task_init(self, data: st.DataObject) -> tuple[bool, Any]:
        kwargs: dict[str, Any] = {
            "task_id": data.draw(st.one_of(fresh_ids, fresh_ids, junk, odd_strings)),
            "tenant": data.draw(maybe(tenants)),
        }
        for key, strategy in (
            ("priority", priorities),
            ("payload", payloads),
            ("retry_count", counts),
            ("max_retries", counts),
            ("created_at", times),
            ("execute_after", times),
            ("depends_on", id_lists(good_ids)),
            ("headers", headers),
            ("name", names),
            ("lease", st.one_of(st.none(), junk, st.builds(self.lease))),
        ):
            if data.draw(st.booleans(), label=f"give {key}"):
                kwargs[key] = data.draw(strategy, label=key)
        return attempt("Task()", lambda: Task(**kwargs))

    def lease(self) -> Lease:
        return Lease(token="not-a-token", deadline=time.time() + 30)

    def some_task(self, data: st.DataObject) -> Any:
        how = data.draw(st.sampled_from(["create", "init", "junk", "claimed"]), label="task from")
        fallback = data.draw(junk, label="fallback")
        if how == "junk":
            return fallback
        if how == "claimed":
            ok, got = attempt("claim", self.queue.claim)
            return got if ok and got is not None else fallback
        ok, task = self.task_create(data) if how == "create" else self.task_init(data)
        return task if ok else fallback

    # ---- push and read back

    def push(self, data: st.DataObject) -> None:
        task = self.some_task(data)
        known = isinstance(task, Task) and self._known(task.task_id)
        before = time.time()
        ok, _ = attempt("push", lambda: self.queue.push(task))
        after = time.time()
        if ok and isinstance(task, Task) and not known:
            self._check_stored("push", task, before, after)

    def push_batch(self, data: st.DataObject) -> None:
        batch = data.draw(st.one_of(st.lists(st.just(None), max_size=3), junk), label="batch")
        if isinstance(batch, list):
            batch = [self.some_task(data) for _ in batch]
        fresh = [
            t
            for t in (batch if isinstance(batch, list) else [])
            if isinstance(t, Task) and not self._known(t.task_id)
        ]
        before = time.time()
        ok, _ = attempt("push_batch", lambda: self.queue.push_batch(batch))
        after = time.time()
        if ok:
            for task in fresh:
                self._check_stored("push_batch", task, before, after)

    def _known(self, task_id: str) -> bool:
        ok, state = attempt("get_state", lambda: self.queue.get_state(task_id))
        return not ok or state is not None

    def _check_stored(self, where: str, task: Task, before: float, after: float) -> None:
        ok, got = attempt("get_task", lambda: self.queue.get_task(task.task_id))
        if not ok:
            wrong(where, f"accepted but unreadable: {got!r}")
            return
        state = self.queue.get_state(task.task_id)
        if got is None or got.task is None:  # (the record's stored Task: ADR 70)
            if state not in (TaskState.CANCELED, TaskState.FINISHED):
                wrong(where, f"accepted but not stored: state {state}")
            return
        problem = expected_readback(task, before, after, got.task)
        if problem:
            wrong(where, f"stored wrong: {problem}")
        problem = expected_state(task, after, state)
        if problem:
            wrong(where, f"wrong state: {problem}")

    # ---- the other entry points

    def claim(self, data: st.DataObject) -> None:
        assigned = data.draw(id_lists(tenants), label="assigned")
        steal = data.draw(id_lists(tenants), label="steal")
        worker_id = data.draw(st.one_of(st.just(""), good_ids, junk, odd_strings), label="worker")
        if data.draw(st.booleans(), label="batch"):
            count = data.draw(counts, label="count")
            call: Callable[[], Any] = lambda: self.queue.claim_batch(  # noqa: E731
                count, assigned, steal=steal, worker_id=worker_id
            )
        else:
            call = lambda: self.queue.claim(assigned, steal=steal, worker_id=worker_id)  # noqa: E731
        # what to do with the claimed tasks is drawn first: draws never depend on the queue
        how = data.draw(st.sampled_from(["finish", "fail", "heartbeat", "release"]))
        result = data.draw(st.one_of(st.none(), json_values, junk), label="result")
        seconds = data.draw(st.one_of(st.none(), st.floats(0, 10), junk), label="run_seconds")
        error = data.draw(st.one_of(st.builds(ValueError, st.text()), junk), label="error")
        ok, got = attempt("claim", call)
        if ok:
            for task in got if isinstance(got, list) else [got] if got else []:
                self._settle(task, how, result, seconds, error)

    def _settle(self, task: Task, how: str, result: Any, seconds: Any, error: Any) -> None:
        """Finish, fail, heartbeat or release a claimed task with fuzzed extras."""
        if how == "finish":
            attempt("finish", lambda: self.queue.finish(task, result, run_seconds=seconds))
        elif how == "fail":
            attempt("fail", lambda: self.queue.fail(task, error))
        elif how == "heartbeat":
            attempt("heartbeat", lambda: self.queue.heartbeat(task))
            attempt("release", lambda: self.queue.release(task))
        else:
            attempt("release", lambda: self.queue.release(task))

    def acknowledge_foreign(self, data: st.DataObject) -> None:
        """finish/fail/heartbeat/release and their batch forms with foreign objects."""
        thing = self.some_task(data)
        how = data.draw(
            st.sampled_from(
                ["finish", "fail", "heartbeat", "release", "finish_batch", "heartbeat_batch"]
            )
        )
        if how == "finish":
            attempt("finish", lambda: self.queue.finish(thing, data.draw(junk)))
        elif how == "fail":
            attempt("fail", lambda: self.queue.fail(thing, data.draw(junk)))
        elif how == "heartbeat":
            attempt("heartbeat", lambda: self.queue.heartbeat(thing))
        elif how == "release":
            attempt("release", lambda: self.queue.release(thing))
        elif how == "finish_batch":
            items = data.draw(
                st.one_of(junk, st.lists(st.tuples(st.just(thing), junk), max_size=2))
            )
            attempt("finish_batch", lambda: self.queue.finish_batch(items))
        else:
            items = data.draw(st.one_of(junk, st.lists(st.just(thing), max_size=2)))
            attempt("heartbeat_batch", lambda: self.queue.heartbeat_batch(items))

    def tenants(self, data: st.DataObject) -> None:
        q = self.queue
        tenant = data.draw(maybe(tenants), label="tenant")
        how = data.draw(
            st.sampled_from(
                [
                    "set_tenant_weight",
                    "get_queue_sizes",
                    "get_queue_sizes_batch",
                    "get_tenant_stats",
                    "list_tenants",
                    "get_tenant_weights",
                ]
            )
        )
        if how == "set_tenant_weight":
            weight = data.draw(st.one_of(st.floats(0.001, 1000), junk), label="weight")
            tier = data.draw(st.one_of(st.integers(0, 3), junk), label="tier")
            ok, _ = attempt(how, lambda: q.set_tenant_weight(tenant, weight, tier=tier))
            if ok and tenant in TENANTS:  # reset, so claims stay fair enough to drain
                q.set_tenant_weight(tenant, 1.0)
        elif how == "get_queue_sizes":
            attempt(how, lambda: q.get_queue_sizes(tenant))
        elif how == "get_queue_sizes_batch":
            attempt(how, lambda: q.get_queue_sizes_batch(data.draw(id_lists(tenants))))
        elif how == "get_tenant_stats":
            attempt(how, lambda: q.get_tenant_stats(tenant))
        elif how == "get_tenant_weights":
            attempt(how, lambda: q.get_tenant_weights(data.draw(id_lists(tenants))))
        else:
            limit, offset = data.draw(counts), data.draw(counts)
            attempt(how, lambda: q.list_tenants(limit=limit, offset=offset))

    def reads(self, data: st.DataObject) -> None:
        q = self.queue
        task_id = data.draw(maybe(good_ids), label="task_id")
        how = data.draw(st.sampled_from(["cancel", "get_task", "get_state", "get_result"]))
        attempt(how, lambda: getattr(q, how)(task_id))

    def dlq(self, data: st.DataObject) -> None:
        q = self.queue
        how = data.draw(st.sampled_from(["list_dlq", "requeue_dlq", "purge_dlq"]))
        if how == "list_dlq":
            limit, offset = data.draw(counts), data.draw(counts)
            ftype = data.draw(st.one_of(st.none(), st.sampled_from(list(FailureType)), junk))
            attempt(how, lambda: q.list_dlq(limit=limit, offset=offset, failure_type=ftype))
        else:
            # only ids that name nothing real, so a requeue/purge never touches other work
            ids = data.draw(st.one_of(id_lists(fresh_ids), junk), label="entry_ids")
            if ids is None:
                ids = []
            attempt(how, lambda: getattr(q, how)(ids))

    def other_writes(self, data: st.DataObject) -> None:
        q = self.queue
        how = data.draw(st.sampled_from(["requeue_expired", "wait_for_work", "purge_tenant"]))
        if how == "requeue_expired":
            attempt(how, lambda: q.requeue_expired(data.draw(counts)))
        elif how == "wait_for_work":
            value = data.draw(st.one_of(st.sampled_from([0, 0.0, 0.001]), junk))
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
                value = min(value, 0.01)
            attempt(how, lambda: q.wait_for_work(value))
        else:
            # a tenant no other step uses, or a bad one
            attempt(how, lambda: q.purge_tenant(data.draw(maybe(st.just("fz-purged")))))


STEPS = {
    "push": Fuzzer.push,
    "push_batch": Fuzzer.push_batch,
    "claim": Fuzzer.claim,
    "acknowledge_foreign": Fuzzer.acknowledge_foreign,
    "tenants": Fuzzer.tenants,
    "reads": Fuzzer.reads,
    "dlq": Fuzzer.dlq,
    "other_writes": Fuzzer.other_writes,
}


# ---------------------------------------------------------------------- fixtures and tests


#: The backends both fuzz modules run on: the reference model, Valkey 9 and Redis 7.
BACKENDS = [
    "memory",
    pytest.param("valkey", marks=pytest.mark.redis),
    pytest.param("redis7", marks=pytest.mark.redis),
]


def fuzz_queue(request: pytest.FixtureRequest, prefix: str) -> FairQueue:
    """A fresh queue on the backend ``request.param`` names (see :data:`BACKENDS`)."""
    config = QueueConfig(name=prefix + uuid.uuid4().hex[:8], max_payload_bytes=MAX_PAYLOAD)
    if request.param == "memory":
        return FairQueue(InMemoryBackend(config=config))
    from fairque_redis.backends.backend import RedisBackend

    server = request.getfixturevalue(f"{request.param}_server")
    return FairQueue(RedisBackend.from_url(server.url, config=config))


@pytest.fixture(scope="module", params=BACKENDS)
def fuzzer(request: pytest.FixtureRequest) -> Iterator[Fuzzer]:
    with fuzz_queue(request, "fuzz-") as queue:
        yield Fuzzer(queue)


@pytest.fixture(scope="module", autouse=True)
def _report() -> Iterator[None]:
    yield
    if _TALLY and _FAILURES:
        print("\nfuzz tally (failures by kind):")
        for key, n in _FAILURES.most_common():
            print(f"  {n:5d}  {key}\n         e.g. {_EXAMPLES[key]}")


@FUZZ
@given(step=st.sampled_from(sorted(STEPS)), data=st.data())
def test_public_api_only_typed_errors_and_exact_storage(
    fuzzer: Fuzzer, step: str, data: st.DataObject
) -> None:
    STEPS[step](fuzzer, data)


@FUZZ
@given(data=st.data())
def test_task_values_only_typed_errors(data: st.DataObject) -> None:
    fuzzer = Fuzzer(FairQueue(InMemoryBackend()))
    ok, task = fuzzer.task_create(data)
    if ok:
        assert math.isfinite(task.execute_after)
    fuzzer.task_init(data)


config_fields = st.dictionaries(
    st.sampled_from(
        [
            "id",
            "assigned_tenants",
            "steal_targets",
            "poll_interval_seconds",
            "task_timeout_seconds",
            "max_concurrent_tasks",
            "graceful_shutdown_timeout",
            "heartbeat_interval_seconds",
            "reaper_interval_seconds",
            "claim_batch_size",
        ]
    ),
    st.one_of(junk, st.lists(maybe(good_ids), max_size=2)),
    max_size=3,
)
queue_fields = st.dictionaries(
    st.sampled_from(
        [
            "name",
            "lease_seconds",
            "aging_horizon_seconds",
            "max_payload_bytes",
            "max_recoveries",
            "result_ttl_seconds",
            "delayed_move_limit",
            "retry_base_seconds",
            "retry_factor",
            "retry_cap_seconds",
            "retry_jitter",
            "tenant_weights",
            "tiers",
            "tenant_tiers",
            "strict_tiers",
        ]
    ),
    st.one_of(
        junk,
        st.dictionaries(
            st.one_of(good_ids, hashable_junk), st.one_of(junk, st.floats(0.001, 10)), max_size=2
        ),
        st.dictionaries(
            st.one_of(good_ids, hashable_junk),
            st.dictionaries(st.sampled_from(["weight", "rank"]), junk),
            max_size=2,
        ),
    ),
    max_size=3,
)


@FUZZ
@given(
    worker=config_fields,
    queue=queue_fields,
    data=st.one_of(
        junk,
        st.fixed_dictionaries(
            {},
            optional={
                "worker": st.one_of(config_fields, junk),
                "queue": st.one_of(queue_fields, junk),
                "redis": st.one_of(
                    junk, st.dictionaries(st.sampled_from(["url", "host", "port", "db"]), junk)
                ),
                "schedules": st.one_of(junk, st.lists(junk, max_size=2)),
            },
        ),
    ),
)
def test_config_values_only_typed_errors(
    worker: dict[str, Any], queue: dict[str, Any], data: Any
) -> None:
    attempt("WorkerConfig()", lambda: WorkerConfig(**worker))
    attempt("QueueConfig()", lambda: QueueConfig(**queue))
    attempt("FairQueueConfig.from_dict", lambda: FairQueueConfig.from_dict(data, env={}))
