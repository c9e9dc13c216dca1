"""Schedulers racing on real backends: each tick pushed exactly once, a dead scheduler's ticks
taken over per the misfire policy, a split brain still pushing each tick once.

Every test makes its own queue(s): on the model, the schedulers share one InMemoryBackend (as
threads of one process share it); on Valkey and the cluster each scheduler has a client of
its own, as separate processes would. The 20 s acceptance run with two ``fairque scheduler``
processes and a ``kill -9`` is marked slow.
"""

from __future__ import annotations

import itertools
import math
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from fairque_core import FairQueue, InMemoryBackend, Scheduler
from fairque_core.domain.schedules import tick_task_id
from fairque_core.ports.schedules import ScheduleStore

KINDS = [
    "memory",
    pytest.param("valkey", marks=pytest.mark.redis),
    pytest.param("cluster", marks=[pytest.mark.redis, pytest.mark.cluster]),
]
SCHEDULE = "every-second"
# The real-time scenarios (5 s each): on the model only in the slow run, since the lock and
# the tick logic they exercise are the same code on every store and the model's own lock is
# covered by the quick tests below
TIMED_KINDS = [pytest.param("memory", marks=pytest.mark.slow), *KINDS[1:]]


@pytest.fixture(params=KINDS)
def open_queue(request: pytest.FixtureRequest) -> Iterator[Callable[[], FairQueue]]:
    """``open_queue()``: a new FairQueue on the test's queue (shared state, own client)."""
    kind = str(request.param)
    name = "sched-" + uuid.uuid4().hex[:10]
    made: list[FairQueue] = []
    model = InMemoryBackend(queue=name)
    url = ""
    if kind != "memory":
        server = request.getfixturevalue("valkey_server" if kind == "valkey" else "valkey_cluster")
        url = str(server.url)

    def factory() -> FairQueue:
        if kind == "memory":
            queue = FairQueue(model)
        else:
            from fairque_redis.backends.backend import RedisBackend

            queue = FairQueue(RedisBackend.from_url(url, queue=name, cluster=kind == "cluster"))
        made.append(queue)
        return queue

    yield factory
    for queue in made:
        queue.close()


def _wait_for_next_second() -> None:
    time.sleep(math.ceil(time.time()) - time.time() + 0.05)


def _expected_ids(queue: FairQueue, since: float) -> list[str]:
    """The id of every tick after ``since`` up to the schedule's last fired tick."""
    [info] = queue.list_schedules()
    assert info.last_fired is not None
    first = math.floor(since) + 1
    return [tick_task_id(SCHEDULE, t) for t in range(first, int(info.last_fired) + 1)]


def _stored(queue: FairQueue, prefix: str = "cron:") -> Callable[[str], bool]:
    return lambda task_id: task_id.startswith(prefix) and queue.get_state(task_id) is not None


def _start(scheduler: Scheduler) -> threading.Thread:
    thread = threading.Thread(target=scheduler.run, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("open_queue", TIMED_KINDS, indirect=True)
def test_two_schedulers_push_each_tick_exactly_once(open_queue: Callable[[], FairQueue]) -> None:
    admin = open_queue()
    _wait_for_next_second()
    admin.add_schedule(SCHEDULE, "* * * * * *", {"tenant": "acme"}, misfire="catch_up")
    added_at = admin.list_schedules()[0].added_at
    schedulers = [
        Scheduler(open_queue(), lock_seconds=1.0, poll_seconds=0.1, token=f"s{i}") for i in range(2)
    ]
    threads = [_start(s) for s in schedulers]
    time.sleep(5.2)
    for s in schedulers:
        s.stop()
    for t in threads:
        t.join(5)
    expected = _expected_ids(admin, added_at)
    assert len(expected) >= 4
    assert all(map(_stored(admin), expected))
    # one holder pushed them all, once; the standby pushed nothing
    assert sum(s.fired for s in schedulers) == len(expected)
    assert sorted(s.fired for s in schedulers)[0] == 0
    assert admin.get_stats()["duplicates"] == 0
    assert admin.get_state(tick_task_id(SCHEDULE, math.floor(added_at))) is None  # not before


@pytest.mark.parametrize("policy", ["catch_up", "skip"])
@pytest.mark.parametrize("open_queue", TIMED_KINDS[:2], indirect=True)
def test_a_dead_scheduler_is_replaced_without_losing_or_doubling_ticks(
    open_queue: Callable[[], FairQueue], policy: str
) -> None:
    admin = open_queue()
    _wait_for_next_second()
    admin.add_schedule(SCHEDULE, "* * * * * *", {"tenant": "acme"}, misfire=policy)
    added_at = admin.list_schedules()[0].added_at
    # grace 0.5 s: with "skip", the ticks of the takeover gap (lease 1 s) are dropped
    schedulers = [
        Scheduler(
            open_queue(), lock_seconds=1.0, poll_seconds=0.1, misfire_grace=0.5, token=f"s{i}"
        )
        for i in range(2)
    ]
    threads = [_start(s) for s in schedulers]
    time.sleep(2.3)
    [holder] = [s for s in schedulers if s.holds_lock]
    holder._held = False  # dies: it will neither renew nor release the lock
    holder.stop()
    died_at = time.time()
    time.sleep(3.0)
    for s in schedulers:
        s.stop()
    for t in threads:
        t.join(5)
    [survivor] = [s for s in schedulers if s is not holder]
    assert survivor.fired > 0  # took over
    expected = _expected_ids(admin, added_at)
    present = [task_id for task_id in expected if _stored(admin)(task_id)]
    stats = admin.get_stats()
    # nothing doubled: every push beyond the distinct ticks was a no-op duplicate
    assert holder.fired + survivor.fired == len(present) + stats["duplicates"]
    if policy == "catch_up":
        assert present == expected  # none lost
    else:
        lost = [task_id for task_id in expected if task_id not in present]
        # only ticks of the takeover gap may be skipped: after the death, before the lease ran out
        limit = tick_task_id(SCHEDULE, math.floor(died_at + 1.0 + 0.2 + 1))
        assert all(task_id <= limit for task_id in lost)


def test_split_brain_still_pushes_each_tick_once(open_queue: Callable[[], FairQueue]) -> None:
    class NoLock:
        """A store whose lock is granted to everybody: the worst split brain."""

        def __init__(self, store: ScheduleStore) -> None:
            self._store = store

        def __getattr__(self, name: str) -> Any:
            return getattr(self._store, name)

        def acquire_lock(self, token: str, ttl: float) -> bool:
            return True

        def renew_lock(self, token: str, ttl: float) -> bool:
            return True

        def mark_fired(self, name: str, tick: float, token: str) -> bool:
            return True  # neither records: both fire the same ticks

    admin = open_queue()
    admin.add_schedule(SCHEDULE, "* * * * * *", {"tenant": "acme"}, misfire="catch_up")
    added_at = admin.list_schedules()[0].added_at
    queues = [open_queue(), open_queue()]
    schedulers = [
        Scheduler(q, NoLock(q.schedules), token=f"s{i}")  # type: ignore[arg-type]
        for i, q in enumerate(queues)
    ]
    now = math.floor(added_at) + 6.01
    for s in schedulers:  # both fire the same five-six ticks
        s.run_once(now)
    expected = [tick_task_id(SCHEDULE, t) for t in range(math.floor(added_at) + 1, int(now) + 1)]
    assert all(map(_stored(admin), expected))
    assert sum(s.fired for s in schedulers) == 2 * len(expected)
    assert admin.get_stats()["duplicates"] == len(expected)
    assert admin.get_stats()["pushed"] == len(expected)


def test_an_hour_down_follows_the_misfire_policy(open_queue: Callable[[], FairQueue]) -> None:
    admin = open_queue()
    for name, policy in [("skip", "skip"), ("once", "run_once"), ("all", "catch_up")]:
        admin.add_schedule(
            name, "*/5 * * * *", {"tenant": policy.replace("_", "-")}, misfire=policy
        )
    added_at = admin.list_schedules()[0].added_at
    scheduler = Scheduler(open_queue(), misfire_grace=30.0)
    # the first tick after adding, then an hour without any scheduler
    first_tick = (math.floor(added_at / 300) + 1) * 300
    back = first_tick + 3600 + 10  # the tick at +3600 is 10 s late: on time
    pushed = scheduler.run_once(back)
    by_schedule = {
        name: sorted(i for i in pushed if i.startswith(f"cron:{name}:"))
        for name in ("skip", "once", "all")
    }
    assert by_schedule["skip"] == [tick_task_id("skip", first_tick + 3600)]
    assert by_schedule["once"] == [
        tick_task_id("once", first_tick + 3300),
        tick_task_id("once", first_tick + 3600),
    ]
    assert by_schedule["all"] == [tick_task_id("all", first_tick + k * 300) for k in range(13)]
    assert scheduler.run_once(back + 1) == []  # recorded: nothing fires twice
    task = admin.get_task(by_schedule["once"][0])
    assert task is not None
    assert task.tenant == "run-once"


# ---------------------------------------------------------------------- the CLI, kill -9


def _scheduler_process(
    url: str, queue: str, stderr: Any = subprocess.DEVNULL
) -> subprocess.Popen[bytes]:
    """A ``fairque scheduler`` process (lock lease 2 s, rounds every 0.2 s); its stderr, where
    it prints its token first, to ``stderr``."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fairque_cli",
            "scheduler",
            "--url",
            url,
            "--queue",
            queue,
            "--lock-seconds",
            "2",
            "--poll",
            "0.2",
        ],
        stdout=subprocess.DEVNULL,
        stderr=stderr,
        env={**os.environ, "FAIRQUE_CONFIG": ""},
    )


@pytest.mark.slow
@pytest.mark.redis
@pytest.mark.chaos
def test_two_scheduler_processes_for_20_seconds_with_a_kill_9(valkey_server: Any) -> None:
    url = str(valkey_server.url)
    name = "sched-" + uuid.uuid4().hex[:10]
    from fairque_redis.backends.backend import RedisBackend

    admin = FairQueue(RedisBackend.from_url(url, queue=name))
    try:
        _wait_for_next_second()
        admin.add_schedule(SCHEDULE, "* * * * * *", {"tenant": "acme"}, misfire="catch_up")
        added_at = admin.list_schedules()[0].added_at
        procs = [_scheduler_process(url, name) for _ in range(2)]
        time.sleep(8)
        victim_token = admin.schedules.lock_holder()
        assert victim_token is not None
        # which process holds it is not known from outside: kill the first, -9
        os.kill(procs[0].pid, signal.SIGKILL)
        procs[0].wait(5)
        time.sleep(12)
        procs[1].send_signal(signal.SIGTERM)
        assert procs[1].wait(10) == 0
        expected = _expected_ids(admin, added_at)
        assert len(expected) >= 18
        assert all(map(_stored(admin), expected))  # catch_up: none lost
        stats = admin.get_stats()
        assert stats["pushed"] == len(
            [i for i in itertools.chain(expected) if admin.get_state(i) is not None]
        )
        assert stats["duplicates"] <= 1  # at most the tick the victim pushed but did not record
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        admin.close()
