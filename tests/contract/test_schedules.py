"""The schedule store contract (ports/schedules.py) and the engine's schedule API, on every
backend of the contract suite (the model, Valkey, Redis 7, the cluster, and the async twins)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from fairque_core import FairQueue, QueueBackend, QueueConfig, Scheduler, ScheduleValidationError
from fairque_core.domain.schedules import Schedule, encode_schedule
from fairque_core.ports.schedules import ScheduleStore

from ._async_facade import SyncOverAsync
from .conftest import MODEL_KINDS
from .helpers import FakeClock


class _SyncStore:
    """The async store of an async backend, called through the facade's loop."""

    def __init__(self, facade: SyncOverAsync) -> None:
        self._facade = facade
        self._store = facade.wrapped.schedules  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self._store, name)
        return lambda *args: self._facade._call(method(*args))


def store_of(backend: QueueBackend) -> ScheduleStore:
    if isinstance(backend, SyncOverAsync):
        return _SyncStore(backend)  # type: ignore[return-value]
    return backend.schedules  # type: ignore[attr-defined,no-any-return]


def let_lease_run_out(kind: str, clock: FakeClock, seconds: float) -> None:
    """The model's lock expires on its (fake) clock; Redis's on the server's real time."""
    if kind in MODEL_KINDS:
        clock.advance(seconds)
    else:
        time.sleep(seconds)


def test_definitions_are_saved_replaced_listed_and_deleted(backend: QueueBackend) -> None:
    store = store_of(backend)
    assert store.list() == []
    assert store.get("a") is None
    store.save("b", b"B1")
    store.save("a", b"A1")
    store.save("b", b"B2")
    assert [(r.name, r.definition, r.last_fired) for r in store.list()] == [
        ("a", b"A1", None),
        ("b", b"B2", None),
    ]
    assert store.delete("a") is True
    assert store.delete("a") is False
    assert [r.name for r in store.list()] == ["b"]


def test_the_lock_is_a_lease_with_a_token(
    backend: QueueBackend, backend_kind: str, clock: FakeClock
) -> None:
    store = store_of(backend)
    assert store.lock_holder() is None
    assert store.acquire_lock("t1", 0.3) is True
    assert store.acquire_lock("t2", 0.3) is False  # not a bare SETNX: held means held
    assert store.acquire_lock("t1", 0.3) is False  # taking is not renewing
    assert store.renew_lock("t2", 0.3) is False
    assert store.release_lock("t2") is False
    assert store.lock_holder() == "t1"
    assert store.renew_lock("t1", 0.3) is True
    let_lease_run_out(backend_kind, clock, 0.5)
    assert store.lock_holder() is None
    assert store.renew_lock("t1", 0.3) is False  # expired: the old holder cannot revive it
    assert store.acquire_lock("t2", 5) is True
    assert store.release_lock("t1") is False  # nor free the new holder's lock
    assert store.lock_holder() == "t2"
    assert store.release_lock("t2") is True
    assert store.acquire_lock("t3", 5) is True


def test_mark_fired_is_fenced_by_the_lock_and_moves_forward_only(backend: QueueBackend) -> None:
    store = store_of(backend)
    store.save("s", b"{}")
    assert store.mark_fired("s", 100.0, "t1") is False  # nobody holds the lock
    assert store.acquire_lock("t1", 10) is True
    assert store.mark_fired("s", 100.0, "t2") is False  # another token
    assert store.mark_fired("s", 100.0, "t1") is True
    assert store.mark_fired("s", 50.0, "t1") is True
    record = store.get("s")
    assert record is not None
    assert record.last_fired == 100.0
    assert store.mark_fired("gone", 100.0, "t1") is False  # no such schedule
    store.save("s", b'{"v":2}')  # replacing keeps the progress
    assert [(r.definition, r.last_fired) for r in store.list()] == [(b'{"v":2}', 100.0)]
    assert store.delete("s") is True
    store.save("s", b"{}")  # a new schedule of the same name starts afresh
    record = store.get("s")
    assert record is not None
    assert record.last_fired is None


def test_engine_schedule_api(make_backend: Callable[..., QueueBackend]) -> None:
    backend = make_backend()
    if isinstance(backend, SyncOverAsync):
        pytest.skip("the sync engine needs a sync backend")
    queue = FairQueue(backend)
    store = store_of(backend)
    with pytest.raises(ScheduleValidationError) as info:
        queue.add_schedule("n", "not cron", {"tenant": "acme"})
    assert info.value.field == "cron"
    with pytest.raises(ScheduleValidationError) as info:
        queue.add_schedule("n", "* * * * *", {"tenant": "acme"}, timezone="Nowhere/Land")
    assert info.value.field == "timezone"
    assert queue.list_schedules() == []  # nothing half-written
    queue.add_schedule(
        "every-minute", "* * * * *", {"tenant": "acme", "task_name": "ping"}, misfire="run_once"
    )
    [info_] = queue.list_schedules()
    assert info_.schedule.template.task_name == "ping"
    assert info_.last_fired is None
    assert info_.next_at is not None
    assert info_.next_at > time.time() - 1
    added_at = info_.added_at
    queue.add_schedule("every-minute", "*/2 * * * *", {"tenant": "acme"})
    [again] = queue.list_schedules()
    assert again.schedule.cron == "*/2 * * * *"
    assert again.added_at == added_at  # replaced, same start
    assert [r.name for r in store.list()] == ["every-minute"]
    assert queue.remove_schedule("every-minute") is True
    assert queue.remove_schedule("every-minute") is False
    assert queue.list_schedules() == []
    # a cron whose only dates are past would never fire: refused; a far future one is kept
    # (the check looked from the year 2000 and past croniter's 50-year search: the other way)
    with pytest.raises(ScheduleValidationError, match="from now on") as info:
        queue.add_schedule("gone", "0 0 1 1 * 0 2020", {"tenant": "acme"})
    assert info.value.field == "cron"
    queue.add_schedule("far", "0 0 1 1 * 0 2090", {"tenant": "acme"})
    [far] = queue.list_schedules()
    assert far.next_at == 3786912000.0  # 2090-01-01T00:00:00Z
    assert queue.remove_schedule("far") is True


def test_a_round_pushes_each_due_tick_once_for_the_schedules_tenant(
    make_backend: Callable[..., QueueBackend],
) -> None:
    backend = make_backend()
    if isinstance(backend, SyncOverAsync):
        pytest.skip("the sync engine needs a sync backend")
    queue = FairQueue(backend)
    queue.add_schedule(
        "tick", "* * * * * *", {"tenant": "acme", "payload": {"k": 1}}, misfire="catch_up"
    )
    [info] = queue.list_schedules()
    first, second = Scheduler(queue, token="one"), Scheduler(queue, token="two")
    now = int(info.added_at) + 3.01  # ticks at +1, +2, +3 whole seconds
    pushed = first.run_once(now)
    assert len(pushed) == 3
    assert second.run_once(now) == []  # the standby does nothing
    assert first.run_once(now) == []  # nothing new is due
    task = queue.get_task(pushed[0])
    assert task is not None
    assert task.tenant == "acme"
    assert task.payload == {"k": 1}
    assert queue.list_schedules()[0].last_fired == int(info.added_at) + 3


def test_a_schedule_whose_ticks_could_not_be_pushed_is_refused_and_skipped(
    make_backend: Callable[..., QueueBackend],
) -> None:
    """add_schedule checks a tick's task as a push would (the queue's codec and payload
    limit) and refuses, nothing stored; a bad schedule already in the store (written before
    that check, or by a queue with a larger limit) is skipped by the scheduler, logged, and
    the other schedules still fire."""
    backend = make_backend(config=QueueConfig(max_payload_bytes=1000))
    if isinstance(backend, SyncOverAsync):
        pytest.skip("the sync engine needs a sync backend")
    queue = FairQueue(backend)
    big = {"tenant": "acme", "payload": {"blob": "x" * 2000}}
    with pytest.raises(ScheduleValidationError) as info:
        queue.add_schedule("big", "* * * * * *", big)
    assert info.value.field == "task"
    assert queue.list_schedules() == []
    with pytest.raises(ScheduleValidationError):
        queue.remove_schedule("not a name")
    queue.add_schedule("a-good", "* * * * * *", {"tenant": "good"}, misfire="catch_up")
    added = queue.list_schedules()[0].added_at
    bad = Schedule(name="0-bad", cron="* * * * * *", template=big, misfire="catch_up")
    store_of(backend).save("0-bad", encode_schedule(bad, added))
    scheduler = Scheduler(queue, token="one")
    pushed = scheduler.run_once(int(added) + 2.01)
    assert len(pushed) == 2
    assert all(task_id.startswith("cron:a-good:") for task_id in pushed)
    assert scheduler.skipped == 1
    assert queue.get_queue_sizes("acme")["total"] == 0


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"misfire_grace": "5"}, "misfire_grace"),
        ({"misfire_grace": None}, "misfire_grace"),
        ({"misfire_grace": True}, "misfire_grace"),
        ({"misfire_grace": float("inf")}, "misfire_grace"),
        ({"max_per_round": "many"}, "max_per_round"),
        ({"max_per_round": float("nan")}, "max_per_round"),
        ({"max_per_round": 0}, "max_per_round"),
        ({"max_per_round": True}, "max_per_round"),
    ],
)
def test_scheduler_settings_are_typed_errors_naming_the_field(
    options: dict[str, Any], field: str
) -> None:
    """They were a bare TypeError/ValueError/OverflowError, or silently bent (0 became 1)."""
    from fairque_core import InMemoryBackend, TaskValidationError

    queue = FairQueue(InMemoryBackend(queue="sched-args"))
    with pytest.raises(TaskValidationError) as info:
        Scheduler(queue, **options)
    assert info.value.field == field
