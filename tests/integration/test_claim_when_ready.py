"""``claim_when_ready`` (ADR 38): an idle client waits for work and claims it in ONE round trip,
on a real Valkey.

The round trips are counted on the client: its connections are a subclass that counts every
``send_packed_command`` (a command, or a whole pipeline, is one; ``Sends``, tests/conftest.py).
A wait that a push ends has sent everything before the push: the claim was pipelined behind
the BLPOP, so the task comes back with the pop's reply and nothing more leaves the client. The
two-step wait (``wait_for_work`` and then ``claim``) needs one more send, which the same
counter sees.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
import redis.asyncio

from conftest import Sends
from fairque_core import FairQueue, QueueConfig, Task, TaskState, TaskValidationError
from fairque_core.domain.enums import Priority
from fairque_core.domain.models import Message
from fairque_redis.backends.backend import RedisBackend
from fairque_redis.backends.backend_async import AsyncRedisBackend

pytestmark = [pytest.mark.redis, pytest.mark.timeout(60)]


def msg(task_id: str, user: str = "alice", *, delay: float = 0.0) -> Message:
    return Message(
        task_id=task_id,
        tenant=user,
        priority=Priority.NORMAL,
        body=b'{"n": 1}',
        delay=delay,
        created_at=time.time(),
    )


def wait_until(cond: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


@pytest.fixture
def env(valkey_server: Any) -> Iterator[tuple[Any, str, Sends, redis.Redis]]:
    """(server, a fresh queue name, a send counter, an admin client)."""
    admin = redis.Redis.from_url(valkey_server.url)
    yield valkey_server, f"cwr-{uuid.uuid4().hex[:8]}", Sends(), admin
    admin.close()


def counted_backend(url: str, queue: str, sends: Sends) -> RedisBackend:
    pool = redis.ConnectionPool.from_url(url, connection_class=sends.sync_class)
    return RedisBackend(redis.Redis(connection_pool=pool), queue=queue)


def blocked(admin: redis.Redis) -> int:
    return int(admin.info("clients")["blocked_clients"])


def test_a_push_wakes_the_wait_and_the_claim_comes_back_with_it(env: Any) -> None:
    server, queue, sends, admin = env
    waiter = counted_backend(server.url, queue, sends)
    pusher = RedisBackend.from_url(server.url, queue=queue)
    got: list[Any] = []
    try:
        assert waiter.claim() == []  # the claim script in the server's cache (else NOSCRIPT)
        before = blocked(admin)
        thread = threading.Thread(target=lambda: got.extend(waiter.claim_when_ready(5.0)))
        thread.start()
        wait_until(lambda: blocked(admin) > before)
        sent = sends.count
        started = time.monotonic()
        pusher.push(msg("t1"))
        thread.join(5.0)
        assert not thread.is_alive()
        assert time.monotonic() - started < 2.0  # the push ended the 5 s wait
        assert [c.message.task_id for c in got] == ["t1"]
        assert sends.count == sent, "no round trip after the wake: the claim rode with the pop"
        assert pusher.get_state("t1") == TaskState.STARTED
        pusher.heartbeat("t1", got[0].lease.token)  # the lease is a real, live one
        # the two-step wait needs a second round trip for the same task
        pusher.push(msg("t2"))
        sent = sends.count
        assert waiter.wait_for_work(1.0) is True
        [claimed] = waiter.claim()
        assert claimed.message.task_id == "t2"
        assert sends.count - sent == 3  # next_due, the pop, the claim
    finally:
        waiter.close()
        waiter.client.close()
        pusher.close()


def test_a_timed_out_wait_claims_once_and_returns_nothing(env: Any) -> None:
    server, queue, sends, _admin = env
    waiter = counted_backend(server.url, queue, sends)
    try:
        assert waiter.claim() == []  # the server checks and the script load, out of the count
        sent = sends.count
        started = time.monotonic()
        assert waiter.claim_when_ready(0.2) == []
        assert 0.15 < time.monotonic() - started < 2.0
        assert sends.count - sent == 2  # next_due, then the pop with the claim behind it
        sent = sends.count
        assert waiter.claim_when_ready(0) == []
        assert sends.count - sent == 1  # no wait: no next_due (the claim moves due tasks)
        sent = sends.count
        assert waiter.claim_when_ready(0.005) == []
        assert sends.count - sent == 1  # a claim within 10 ms anyway: no next_due either
    finally:
        waiter.close()
        waiter.client.close()


def test_a_ready_task_is_claimed_at_once(env: Any) -> None:
    server, queue, _sends, _admin = env
    backend = RedisBackend.from_url(server.url, queue=queue)
    try:
        backend.push_batch([msg("a1"), msg("a2")])
        started = time.monotonic()
        got = backend.claim_when_ready(5.0, count=5, worker_id="w1")
        assert time.monotonic() - started < 1.0
        assert sorted(c.message.task_id for c in got) == ["a1", "a2"]
    finally:
        backend.close()


def test_assigned_and_steal_tenants_are_honoured(env: Any) -> None:
    server, queue, _sends, _admin = env
    backend = RedisBackend.from_url(server.url, queue=queue)
    try:
        backend.push_batch([msg("a1", "alice"), msg("b1", "bob"), msg("c1", "carol")])
        [got] = backend.claim_when_ready(1.0, assigned=["bob"])
        assert got.message.task_id == "b1"
        [got] = backend.claim_when_ready(1.0, assigned=["bob"], steal=["carol"])
        assert got.message.task_id == "c1"
        assert backend.claim_when_ready(0.05, assigned=["bob"]) == []  # alice's is not taken
        assert backend.get_state("a1") == TaskState.QUEUED
    finally:
        backend.close()


def test_a_scheduled_task_coming_due_ends_the_wait(env: Any) -> None:
    server, queue, _sends, _admin = env
    backend = RedisBackend.from_url(server.url, queue=queue)
    try:
        backend.push(msg("later", delay=0.3))
        started = time.monotonic()
        got = backend.claim_when_ready(5.0)
        assert [c.message.task_id for c in got] == ["later"]
        assert 0.2 < time.monotonic() - started < 2.0
    finally:
        backend.close()


def test_a_wake_another_worker_won_waits_again_for_the_time_left(env: Any) -> None:
    server, queue, _sends, admin = env
    waiter = RedisBackend.from_url(server.url, queue=queue)
    other = RedisBackend.from_url(server.url, queue=queue)
    got: list[Any] = []
    try:
        other.push(msg("t1"))
        other.claim()  # the task is gone, its wake token is left behind: a stale hint
        before = blocked(admin)
        thread = threading.Thread(target=lambda: got.extend(waiter.claim_when_ready(5.0)))
        thread.start()
        wait_until(lambda: blocked(admin) > before)  # the stale token did not end the wait
        other.push(msg("t2"))
        thread.join(5.0)
        assert [c.message.task_id for c in got] == ["t2"]
    finally:
        waiter.close()
        other.close()


def test_bad_arguments_raise_typed_before_any_command(env: Any) -> None:
    server, queue, sends, _admin = env
    backend = counted_backend(server.url, queue, sends)
    try:
        for kwargs in ({"count": 0}, {"assigned": [""]}, {"lease_seconds": -1.0}):
            with pytest.raises(TaskValidationError):
                backend.claim_when_ready(1.0, **kwargs)
        for timeout in (-1.0, float("nan")):
            with pytest.raises(TaskValidationError):
                backend.claim_when_ready(timeout)
        assert sends.count == 0
    finally:
        backend.client.close()


def test_a_flushed_script_cache_is_reloaded_and_the_claim_sent_again(env: Any) -> None:
    server, queue, _sends, admin = env
    backend = RedisBackend.from_url(server.url, queue=queue)
    try:
        backend.push(msg("t1"))
        admin.script_flush()
        backend.push(msg("t2"))  # reloads push (and leaves the claim script unloaded)
        admin.script_flush()
        backend.stats()  # reloads only what stats runs
        got = backend.claim_when_ready(1.0, count=2)
        assert sorted(c.message.task_id for c in got) == ["t1", "t2"]
        assert backend.claim_when_ready(0.05) == []  # loaded again: the pipelined path works
    finally:
        backend.close()


def test_without_blpop_the_wait_polls_and_still_claims(env: Any) -> None:
    server, queue, _sends, admin = env
    user = f"fq-{uuid.uuid4().hex[:8]}"
    admin.execute_command("ACL", "SETUSER", user, "on", ">pw", "~*", "&*", "+@all", "-blpop")
    url = server.url.replace("redis://", f"redis://{user}:pw@")
    backend = RedisBackend.from_url(url, queue=queue)
    pusher = RedisBackend.from_url(server.url, queue=queue)
    try:
        assert backend.claim_when_ready(0.1) == []  # the refused pop; the claim ran anyway
        timer = threading.Timer(0.2, lambda: pusher.push(msg("t1")))
        timer.start()
        started = time.monotonic()
        got = backend.claim_when_ready(3.0)
        assert [c.message.task_id for c in got] == ["t1"]
        assert time.monotonic() - started < 1.5
        timer.join()
    finally:
        backend.close()
        pusher.close()
        admin.execute_command("ACL", "DELUSER", user)


def test_the_async_backend_wakes_and_claims_in_one_round_trip(env: Any) -> None:
    server, queue, sends, admin = env

    async def scenario() -> tuple[list[str], int]:
        pool = redis.asyncio.ConnectionPool.from_url(server.url, connection_class=sends.async_class)
        client = redis.asyncio.Redis(connection_pool=pool)
        waiter = AsyncRedisBackend(client, queue=queue)
        pusher = AsyncRedisBackend.from_url(server.url, queue=queue)
        try:
            assert await waiter.claim() == []  # loads the claim script
            before = await asyncio.to_thread(blocked, admin)
            waiting = asyncio.create_task(waiter.claim_when_ready(5.0))
            while await asyncio.to_thread(blocked, admin) <= before:
                await asyncio.sleep(0.005)
            sent = sends.count
            await pusher.push(msg("t1"))
            got = await asyncio.wait_for(waiting, 5.0)
            return [c.message.task_id for c in got], sends.count - sent
        finally:
            await pusher.close()
            await client.aclose()

    ids, extra = asyncio.run(scenario())
    assert ids == ["t1"]
    assert extra == 0


def test_the_engine_decodes_and_falls_back_on_a_backend_without_it(env: Any) -> None:
    from fairque_core import InMemoryBackend
    from fairque_redis.partitioned.backend import PartitionedBackend

    server, queue, _sends, _admin = env
    backends = (
        RedisBackend.from_url(server.url, queue=queue),
        InMemoryBackend(),
        PartitionedBackend.from_url(server.url, queue=f"{queue}-p", partitions=3),
    )
    for backend in backends:
        fq = FairQueue(backend, config=QueueConfig(name=backend.queue))
        try:
            fq.push(Task.create("alice", task_id=f"e-{type(backend).__name__}"))
            [task] = fq.claim_when_ready(4, timeout=1.0, worker_id="w")
            assert task.task_id == f"e-{type(backend).__name__}"
            assert task.lease is not None
            assert fq.claim_when_ready(4, timeout=0.05) == []
            with pytest.raises(TaskValidationError):
                fq.claim_when_ready(4, timeout=-1)
        finally:
            fq.close()


@pytest.mark.cluster
def test_on_a_cluster_the_wait_then_the_claim(valkey_cluster: Any) -> None:
    backend = RedisBackend.from_url(valkey_cluster.url, cluster=True, queue="cwr-cluster")
    try:
        assert backend.claim_when_ready(0.05) == []
        timer = threading.Timer(0.2, lambda: backend.push(msg(f"c-{uuid.uuid4().hex[:6]}")))
        timer.start()
        got = backend.claim_when_ready(3.0)
        timer.join()
        assert len(got) == 1
    finally:
        backend.purge_all()
        backend.close()


# ---------------------------------------------------------------------------- in the workers

WORKER_POLL = 30.0  # the idle wait: only a push (or a stop) can end it within a test


def worker_config(worker_id: str) -> Any:
    """One place and no prefetch: a claim of one task fills the worker, so nothing more is
    sent (no further claim or wait) until its handler has started."""
    from fairque_core import WorkerConfig

    return WorkerConfig(
        id=worker_id,
        poll_interval_seconds=WORKER_POLL,
        max_concurrent_tasks=1,
        graceful_shutdown_timeout=5.0,
        reaper_interval_seconds=WORKER_POLL,
    )


class SendsAtStart:
    """A handler that notes how many round trips its worker's client had sent when it ran."""

    def __init__(self, sends: Sends) -> None:
        from fairque_core import TaskHandler

        outer = self
        self.sends = sends
        self.at_start: dict[str, int] = {}
        self.ran = threading.Event()

        class Handler(TaskHandler):
            def process_task(self, task: Task) -> object:
                outer.at_start[task.task_id] = outer.sends.count
                outer.ran.set()
                return None

            async def process_task_async(self, task: Task) -> object:
                return self.process_task(task)

        self.handler = Handler()


@pytest.fixture
def no_adaptive_poll(monkeypatch: pytest.MonkeyPatch) -> None:
    """The idle poll starts at the whole poll interval: no claim of the loop's own can start a
    task within the tests below; only the listener's wait can."""
    from fairque_core.app.worker import pacing as worker_pacing

    monkeypatch.setenv("FAIRQUE_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.setattr(worker_pacing, "IDLE_POLL_MIN_SECONDS", WORKER_POLL)


@pytest.mark.usefixtures("no_adaptive_poll")
@pytest.mark.parametrize("listener_claims", [True, False], ids=["one-trip", "wake-then-claim"])
def test_an_idle_thread_workers_first_task_needs_no_claim_round_trip(
    env: Any, monkeypatch: pytest.MonkeyPatch, listener_claims: bool
) -> None:
    from fairque_core.app.worker.worker import Worker

    server, queue, sends, admin = env
    monkeypatch.setattr(Worker, "listener_claims", listener_claims)
    fq = FairQueue(counted_backend(server.url, queue, sends), config=QueueConfig(name=queue))
    pusher = RedisBackend.from_url(server.url, queue=queue)
    probe = SendsAtStart(sends)
    worker = Worker(worker_config("w1"), probe.handler, fq, prefetch=0)
    try:
        before = blocked(admin)
        worker.start()
        wait_until(lambda: blocked(admin) > before and worker.health()["waiting_for_work"])
        time.sleep(0.05)  # anything the loop still had to send after going idle
        sent = sends.count
        pusher.push(msg("t1"))
        assert probe.ran.wait(5.0), "the push woke the idle worker"
        extra = probe.at_start["t1"] - sent
        if listener_claims:
            assert extra == 0, "the task came back with the wait's own reply"
        else:
            assert extra >= 1, "the loop's claim after the wake"
    finally:
        assert worker.stop(10)
        pusher.close()
        fq.close()
        fq.backend.client.close()  # type: ignore[attr-defined]


@pytest.mark.usefixtures("no_adaptive_poll")
def test_an_idle_async_workers_first_task_needs_no_claim_round_trip(env: Any) -> None:
    from fairque_core import AsyncFairQueue
    from fairque_core.app.worker.worker_async import AsyncWorker

    server, queue, sends, admin = env
    probe = SendsAtStart(sends)

    async def scenario() -> int:
        pool = redis.asyncio.ConnectionPool.from_url(server.url, connection_class=sends.async_class)
        client = redis.asyncio.Redis(connection_pool=pool)
        fq = AsyncFairQueue(AsyncRedisBackend(client, queue=queue), config=QueueConfig(name=queue))
        pusher = AsyncRedisBackend.from_url(server.url, queue=queue)
        worker = AsyncWorker(worker_config("w1"), probe.handler, fq, prefetch=0)
        try:
            before = await asyncio.to_thread(blocked, admin)
            await worker.start()
            while not (
                await asyncio.to_thread(blocked, admin) > before
                and worker.health()["waiting_for_work"]
            ):
                await asyncio.sleep(0.005)
            await asyncio.sleep(0.05)
            sent = sends.count
            await pusher.push(msg("t1"))
            for _ in range(500):
                if probe.ran.is_set():
                    break
                await asyncio.sleep(0.01)
            assert probe.ran.is_set()
            return probe.at_start["t1"] - sent
        finally:
            assert await worker.stop(10)
            await pusher.close()
            await client.aclose()

    assert asyncio.run(scenario()) == 0


@pytest.mark.usefixtures("no_adaptive_poll")
def test_an_idle_worker_stops_at_once_and_loses_nothing(env: Any) -> None:
    """The listener's wait (30 s here) holds a connection; the stop does not wait for it. A
    push that ends that wait after the stop is claimed by it and given straight back."""
    from fairque_core import TaskHandler
    from fairque_core.app.worker.worker import Worker

    server, queue, _sends, admin = env
    fq = FairQueue(RedisBackend.from_url(server.url, queue=queue), config=QueueConfig(name=queue))
    worker = Worker(worker_config("w1"), TaskHandler(), fq)
    try:
        before = blocked(admin)
        worker.start()
        wait_until(lambda: blocked(admin) > before and worker.health()["waiting_for_work"])
        started = time.monotonic()
        assert worker.stop(10)
        assert time.monotonic() - started < 1.0
        pusher = RedisBackend.from_url(server.url, queue=queue)
        try:
            pusher.push(msg("late"))
            # the stopped worker's pending wait claims it and releases it at once
            wait_until(lambda: blocked(admin) == before, 5.0)
            wait_until(lambda: pusher.get_state("late") == TaskState.QUEUED, 5.0)
            stats = pusher.stats()
            assert (stats["claimed"], stats["released"]) == (1, 1)
            [got] = pusher.claim()
            assert got.message.task_id == "late"
        finally:
            pusher.close()
    finally:
        fq.close()


@pytest.mark.usefixtures("no_adaptive_poll")
def test_an_idle_async_worker_stops_at_once_and_loses_nothing(env: Any) -> None:
    from fairque_core import AsyncFairQueue, TaskHandler
    from fairque_core.app.worker.worker_async import AsyncWorker

    server, queue, _sends, admin = env

    async def scenario() -> float:
        fq = AsyncFairQueue(
            AsyncRedisBackend.from_url(server.url, queue=queue), config=QueueConfig(name=queue)
        )
        worker = AsyncWorker(worker_config("w1"), TaskHandler(), fq)
        try:
            before = await asyncio.to_thread(blocked, admin)
            await worker.start()
            while not (
                await asyncio.to_thread(blocked, admin) > before
                and worker.health()["waiting_for_work"]
            ):
                await asyncio.sleep(0.005)
            started = time.monotonic()
            assert await worker.stop(10)
            return time.monotonic() - started
        finally:
            await fq.close()

    assert asyncio.run(scenario()) < 1.0
    pusher = RedisBackend.from_url(server.url, queue=queue)
    try:
        pusher.push(msg("late"))
        time.sleep(0.2)
        [got] = pusher.claim()  # nobody took it: the stopped worker's wait was dropped
        assert got.message.task_id == "late"
    finally:
        pusher.close()
