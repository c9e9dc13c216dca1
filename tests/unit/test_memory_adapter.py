"""The in-memory adapter on its own: thread safety without the engine, the memory:// factory."""

from __future__ import annotations

import re
import threading
from pathlib import Path

import pytest

import fairque_core.memory
from fairque_core import Message, Priority, TaskState
from fairque_core.domain.errors import InvalidTransition
from fairque_core.domain.states import TaskEvent
from fairque_core.memory import AsyncInMemoryBackend, InMemoryBackend, backend_from_url
from fairque_core.settings.config import FairQueueConfig, QueueConfig


def _message(task_id: str, tenant_id: str) -> Message:
    return Message(task_id=task_id, tenant=tenant_id, priority=Priority.NORMAL, body=b"")


def test_threads_pushing_and_claiming_lose_nothing() -> None:
    model = InMemoryBackend()
    per_thread, threads = 300, 4
    claimed: list[str] = []
    claimed_lock = threading.Lock()
    start = threading.Barrier(threads * 2)

    def pusher(n: int) -> None:
        start.wait()
        for k in range(per_thread):
            model.push(_message(f"t{n}-{k}", f"u{k % 7}"))

    def claimer() -> None:
        start.wait()
        mine: list[str] = []
        idle = 0
        while idle < 200:
            got = model.claim(count=3)
            if not got:
                idle += 1
                continue
            idle = 0
            for item in got:
                model.finish(item.message.task_id, item.lease.token)
                mine.append(item.message.task_id)
        with claimed_lock:
            claimed.extend(mine)

    workers = [threading.Thread(target=pusher, args=(n,)) for n in range(threads)]
    workers += [threading.Thread(target=claimer) for _ in range(threads)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join(30)
    # whatever the claimers missed at the end is still there, exactly once
    for item in model.claim(count=threads * per_thread):
        model.finish(item.message.task_id, item.lease.token)
        claimed.append(item.message.task_id)
    assert len(claimed) == len(set(claimed)) == threads * per_thread
    stats = model.stats()
    assert stats["finished"] == threads * per_thread
    assert stats["ready"] == stats["leased"] == stats["active_tenants"] == 0


def test_a_waiter_does_not_block_other_calls() -> None:
    model = InMemoryBackend()
    woke = threading.Event()

    def waiter() -> None:
        if model.wait_for_work(10):
            woke.set()

    thread = threading.Thread(target=waiter)
    thread.start()
    model.push(_message("a", "alice"))  # would deadlock if the waiter held the model lock
    assert woke.wait(5)
    thread.join(5)
    assert model.get_state("a") is TaskState.QUEUED


def test_memory_url_factory_follows_the_queue_config() -> None:
    config = FairQueueConfig(queue=QueueConfig(name="jobs", lease_seconds=7.0))
    backend = backend_from_url("memory://", queue="jobs", config=config, cluster=False)
    assert isinstance(backend, InMemoryBackend)
    assert backend.queue == "jobs"
    assert backend.config.lease_seconds == 7.0
    other = backend_from_url("memory://", queue="jobs", config=config)
    assert other is not backend  # each call is a new, empty queue


def test_memory_url_factory_without_config_and_async() -> None:
    plain = backend_from_url("memory://")
    assert isinstance(plain, InMemoryBackend)
    assert plain.queue == "default"
    assert plain.config == QueueConfig(name="default")
    backend = backend_from_url("memory://", queue="q1", asyncio=True)
    assert isinstance(backend, AsyncInMemoryBackend)
    assert backend.queue == "q1"


def test_memory_url_factory_renames_a_differing_queue_config() -> None:
    config = FairQueueConfig(queue=QueueConfig(name="other", max_recoveries=9))
    backend = backend_from_url("memory://", queue="jobs", config=config)
    assert backend.queue == "jobs"
    assert backend.config.name == "jobs"
    assert backend.config.max_recoveries == 9


def test_memory_url_factory_passes_model_options() -> None:
    backend = backend_from_url("memory://", clock=lambda: 1000.0, token_source=lambda: "tok")
    assert isinstance(backend, InMemoryBackend)
    backend.push(_message("a", "alice"))
    (item,) = backend.claim()
    assert item.lease.token == "tok"
    assert item.lease.deadline == pytest.approx(1000.0 + backend.config.lease_seconds)


def test_the_model_sets_states_only_from_the_transition_table() -> None:
    package = Path(fairque_core.memory.__file__).parent
    writes = [
        (path.name, line.strip())
        for path in sorted(package.glob("*.py"))
        for line in path.read_text(encoding="utf-8").splitlines()
        if re.search(r"\.state\s*=[^=]|\bstate=[^=]", line)
        and "state=rec.state," not in line  # a copy into a returned value, not a move
    ]
    assert writes  # the check would be empty if the pattern rotted
    for name, line in writes:
        assert "next_state(" in line, f"{name}: {line}"


def test_an_impossible_move_is_a_model_bug() -> None:
    model = InMemoryBackend(clock=lambda: 100.0)
    model.push(_message("a", "alice"))
    (item,) = model.claim()
    model.finish("a", item.lease.token)
    record = model._records["a"]
    with pytest.raises(InvalidTransition):
        model._move(record, TaskEvent.CLAIM)
    assert model.get_state("a") is TaskState.FINISHED
