"""Issue 34, item 3: damage is atomic and found. For each kind of damage the reliability review
met, a call either applies whole or changes nothing (a ``DamagedKeyError`` naming the key), the
doctor names it, and ``fairque doctor --repair`` restores service with no task lost:

1. ``active:0`` or ``sched`` of another type (a push or cancel used to write, then raise
   "the call changed nothing", and the tasks sat unserved);
2. a DLQ score that is not a whole number (``list_dlq`` raised a bare ValueError, the
   dashboard's DLQ page answered 500, and the doctor called the queue sound);
3. a child whose dependency link was deleted while its parent ended (deferred for ever);
4. a meta counter that is not a number (``HSET meta ready lots``) or a ``delayed`` of another
   type (every push and claim failed with an unnamed script error).

On Valkey 9 and Redis 7, a fresh queue per test.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from starlette.testclient import TestClient

from fairque_core import AsyncFairQueue, DamagedKeyError, FairQueue, FairQueueConfig, Task
from fairque_core.app.backend_loading import open_async_backend
from fairque_dashboard import DashboardSettings, create_app
from fairque_redis import connect
from fairque_redis.doctor.examine import check
from fairque_redis.doctor.repair import repair

pytestmark = [pytest.mark.redis, pytest.mark.timeout(60)]


@pytest.fixture(autouse=True)
def _no_autoload(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAIRQUE_DISABLE_PLUGIN_AUTOLOAD", "1")


@pytest.fixture
def env(valkey_and_redis7_url: str) -> Iterator[tuple[FairQueue, Any, str, str]]:
    name = f"atomic-{uuid.uuid4().hex[:8]}"
    queue = connect(valkey_and_redis7_url, queue=name)
    raw = redis.Redis.from_url(valkey_and_redis7_url)
    try:
        yield queue, raw, name, valkey_and_redis7_url
    finally:
        queue.close()
        raw.close()


def _key(name: str, suffix: str) -> str:
    return f"fq:{{{name}}}:{suffix}"


def _dump(raw: Any, name: str) -> dict[bytes, bytes]:
    """Every key of the queue, serialized: equal dumps mean nothing changed."""
    return {key: raw.dump(key) for key in raw.scan_iter(match=f"fq:{{{name}}}:*", count=1000)}


def _whole_or_nothing(raw: Any, name: str, key: str, call: Callable[[], object]) -> bool:
    """Run ``call``: True when it applied, False when it was refused with a DamagedKeyError
    naming ``key`` and changed nothing; any other outcome fails the test."""
    before = _dump(raw, name)
    try:
        call()
    except DamagedKeyError as exc:
        refused = exc
    else:
        return True
    assert refused.key == key, refused
    assert _dump(raw, name) == before, "a refused call changed keys"
    return False


def _drain(queue: FairQueue) -> list[str]:
    served: list[str] = []
    for _ in range(100):
        task = queue.claim()
        if task is None:
            break
        queue.finish(task)
        served.append(task.task_id)
    return served


def _seed(queue: FairQueue) -> set[str]:
    ids = set()
    for tenant in ("alice", "bob"):
        for i in range(3):
            task_id = f"{tenant}-{i}"
            queue.push(Task.create(tenant, 6 if i == 0 else 3, {"i": i}, task_id=task_id))
            ids.add(task_id)
    return ids


@pytest.mark.parametrize("suffix", ["active:0", "sched"])
def test_a_damaged_active_set_or_sched_applies_whole_or_changes_nothing(
    env: tuple[FairQueue, Any, str, str], suffix: str
) -> None:
    queue, raw, name, _ = env
    pushed = _seed(queue)
    leased = queue.claim()
    assert leased is not None
    key = _key(name, suffix)
    raw.delete(key)
    raw.set(key, "junk")
    calls: dict[str, Callable[[], object]] = {
        "push of a new tenant": lambda: queue.push(Task.create("carol", 3, {}, task_id="carol-0")),
        "push of a child": lambda: queue.push(
            Task.create("alice", 3, {}, task_id="alice-kid", depends_on=["alice-2"])
        ),
        "delayed push": lambda: queue.push(
            Task.create("bob", 3, {}, task_id="bob-later", execute_after=time.time() + 60)
        ),
        "cancel": lambda: queue.cancel("bob-2"),
        "release": lambda: queue.release(leased),
        "claim": queue.claim,
    }
    applied = {what: _whole_or_nothing(raw, name, key, call) for what, call in calls.items()}
    if suffix == "active:0":  # every one of them may activate or deactivate a tenant
        assert not any(applied.values()), applied
    # the doctor names the key; the repair restores service; nothing pushed is lost
    assert any(suffix in line for line in check(raw, name))
    repair(raw, name)
    assert check(raw, name) == []
    served = _drain(queue)
    assert len(served) == len(set(served))
    if not applied["release"]:
        queue.finish(leased)  # still ours: its lease survived the refused release
    # nothing lost: every task ran (or was canceled by the cancel that applied), but the
    # delayed one, which waits for its time
    states = {
        key.decode().rpartition(":")[2]: raw.hget(key, "st").decode()
        for key in raw.scan_iter(match=_key(name, "task:*"))
    }
    assert pushed <= set(states)
    want = dict.fromkeys(states, "finished")
    if applied["cancel"]:
        want["bob-2"] = "canceled"
    if applied["delayed push"]:
        want["bob-later"] = "scheduled"
    assert states == want
    assert check(raw, name) == []


def test_a_dlq_score_that_is_not_whole_is_listed_shown_and_repaired(
    env: tuple[FairQueue, Any, str, str],
) -> None:
    queue, raw, name, url = env
    queue.push(Task.create("alice", 3, {}, task_id="doomed", max_retries=0))
    queue.push(Task.create("alice", 3, {}, task_id="doomed-2", max_retries=0))
    for _ in range(2):
        task = queue.claim()
        assert task is not None
        queue.fail(task, RuntimeError("boom"))
    assert check(raw, name) == []
    moved = raw.zscore(_key(name, "dlq"), "doomed")
    raw.zadd(_key(name, "dlq"), {"doomed": 1.5}, xx=True)

    entries = {e.entry_id: e for e in queue.list_dlq()}
    assert set(entries) == {"doomed", "doomed-2"}  # shown, and the other entry with it
    assert "1.5" in entries["doomed"].damage
    assert entries["doomed-2"].damage == ""
    # the dashboard's DLQ page shows it, no 500
    config = FairQueueConfig.from_dict({"redis": {"url": url}, "queue": {"name": name}}, env={})

    async def opener() -> AsyncFairQueue:
        return AsyncFairQueue(open_async_backend(config))

    app = create_app(opener, DashboardSettings(sample_interval=0, target=url))
    with TestClient(app, raise_server_exceptions=False) as client:
        page = client.get("/dlq")
    assert page.status_code == 200
    assert 'data-entry="doomed"' in page.text
    assert "damaged:" in page.text

    assert any("dlq entry doomed" in line for line in check(raw, name))
    repair(raw, name)
    assert check(raw, name) == []
    assert raw.zscore(_key(name, "dlq"), "doomed") == moved
    assert all(e.damage == "" for e in queue.list_dlq())
    assert queue.requeue_dlq(["doomed"]) == 1
    assert _drain(queue) == ["doomed"]


@pytest.mark.parametrize("parent_ends", ["finished", "failed"])
@pytest.mark.parametrize("deleted", [("children:p",), ("children:p", "waits:kid")])
def test_a_child_whose_link_was_deleted_is_found_and_released(
    env: tuple[FairQueue, Any, str, str], deleted: tuple[str, ...], parent_ends: str
) -> None:
    queue, raw, name, _ = env
    queue.push(Task.create("alice", 3, {}, task_id="p", max_retries=0))
    queue.push(Task.create("alice", 3, {}, task_id="kid", depends_on=["p"]))
    for suffix in deleted:
        raw.delete(_key(name, suffix))
    parent = queue.claim()
    assert parent is not None
    assert parent.task_id == "p"
    if parent_ends == "finished":
        queue.finish(parent)
    else:
        queue.fail(parent, RuntimeError("boom"))
    assert queue.claim() is None  # the child waits, for ever without a repair
    assert any("task kid is deferred for ever" in line for line in check(raw, name))
    repair(raw, name)
    assert check(raw, name) == []
    served = _drain(queue)
    if parent_ends == "finished":
        assert served == ["kid"]
    else:  # what the parent's failure would have done: the child canceled
        assert served == []
        record = raw.hgetall(_key(name, "task:kid"))
        assert record[b"st"] == b"canceled"
        assert queue.get_stats()["canceled"] == 1
    assert check(raw, name) == []


@pytest.mark.parametrize("field", ["ready", "seq", "act", "vtime"])
def test_a_meta_counter_that_is_not_a_number_refuses_typed_and_is_recomputed(
    env: tuple[FairQueue, Any, str, str], field: str
) -> None:
    queue, raw, name, _ = env
    pushed = _seed(queue)
    leased = queue.claim()
    assert leased is not None
    raw.hset(_key(name, "meta"), field, "lots")
    meta = _key(name, "meta")
    calls: list[Callable[[], object]] = [
        lambda: queue.push(Task.create("carol", 3, {}, task_id="carol-0")),
        queue.claim,
        lambda: queue.cancel("bob-2"),
        lambda: queue.release(leased),
        lambda: queue.fail(leased, RuntimeError("boom")),
    ]
    for call in calls:  # each may move the ready gauge, the virtual time or a sequence
        assert not _whole_or_nothing(raw, name, meta, call)
    with pytest.raises(DamagedKeyError, match=f'{field} is "lots"'):
        queue.claim()
    assert f"meta {field} = 'lots' is not a number" in check(raw, name)
    repair(raw, name)
    assert check(raw, name) == []
    queue.push(Task.create("carol", 3, {}, task_id="carol-0"))
    queue.finish(leased)  # its lease survived every refused call
    served = _drain(queue)
    assert sorted([*served, leased.task_id]) == sorted(pushed | {"carol-0"})
    assert check(raw, name) == []


def test_a_damaged_delayed_refuses_typed_and_is_repaired(
    env: tuple[FairQueue, Any, str, str],
) -> None:
    queue, raw, name, _ = env
    pushed = _seed(queue)
    key = _key(name, "delayed")
    raw.set(key, "junk")
    assert not _whole_or_nothing(
        raw, name, key, lambda: queue.push(Task.create("carol", 3, {}, task_id="carol-0"))
    )
    assert not _whole_or_nothing(raw, name, key, queue.claim)
    assert any("'delayed' is a string" in line for line in check(raw, name))
    repair(raw, name)
    assert check(raw, name) == []
    assert sorted(_drain(queue)) == sorted(pushed)


def test_a_queue_counter_that_is_not_a_number_costs_its_count_only(
    env: tuple[FairQueue, Any, str, str],
) -> None:
    queue, raw, name, _ = env
    pushed = _seed(queue)
    raw.hset(_key(name, "stats"), "pushed", "lots")
    queue.push(Task.create("carol", 3, {}, task_id="carol-0"))  # applies whole
    assert any(line.startswith("stats pushed") for line in check(raw, name))
    repair(raw, name)
    assert check(raw, name) == []
    assert queue.get_stats()["pushed"] == len(pushed) + 1
    assert sorted(_drain(queue)) == sorted(pushed | {"carol-0"})


def test_dashboard_time_filter_survives_a_time_outside_the_calendar() -> None:
    from fairque_dashboard.board import format_time

    assert format_time(1e300).startswith("n/a")


def test_a_damaged_active_set_of_a_strict_tier_is_reported_honestly_and_repaired(
    valkey_and_redis7_url: str,
) -> None:
    """The active set of a tier other than 0 (strict tiers) is not among the up-front checks:
    a call that meets it past its first write says it may have applied in part (never "changed
    nothing"), and the doctor finds and repairs what it left."""
    name = f"atomic-{uuid.uuid4().hex[:8]}"
    queue = connect(valkey_and_redis7_url, queue=name, strict_tiers=True)
    raw = redis.Redis.from_url(valkey_and_redis7_url)
    try:
        queue.set_tenant_weight("carol", 1, tier=1)
        raw.set(_key(name, "active:1"), "junk")
        before = _dump(raw, name)
        with pytest.raises(DamagedKeyError) as refused:
            queue.push(Task.create("carol", 3, {}, task_id="carol-0"))
        if _dump(raw, name) != before:
            assert refused.value.partial
            assert "may have applied in part" in str(refused.value)
        assert any("active:1" in line for line in check(raw, name))
        repair(raw, name, strict_tiers=True)
        assert check(raw, name) == []
        stored = {"carol-0"} if raw.exists(_key(name, "task:carol-0")) else set()
        queue.push(Task.create("carol", 3, {}, task_id="carol-1"))
        assert sorted(_drain(queue)) == sorted({"carol-1"} | stored)  # nothing stored is lost
        assert check(raw, name) == []
    finally:
        queue.close()
        raw.close()
