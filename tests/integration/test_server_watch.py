"""Issue 34, item 1: the server's settings are watched after connect, not assumed.

``CONFIG SET maxmemory-policy allkeys-lru`` on a live server let 30,000 pushes be
acknowledged and lost with no log line: the policy was read only at connect. Now a backend
reads it again every ``server_check_interval`` seconds (and after any failed call); while it is
unsafe pushes and claims raise UnsafeServerConfigError, an ERROR line says why, reads go on,
and service resumes once it is restored. Each test runs on a server of its own (Valkey 9 and
Redis 7): they change its configuration.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from fairque_core import (
    FairQueueConfig,
    Task,
    TaskHandler,
    UnsafeServerConfigError,
    WorkerConfig,
)
from fairque_core.app.worker.worker import Worker
from fairque_redis import connect
from fairque_redis.servers.embedded import (
    EmbeddedValkey,
    RedisServerProcess,
    ServerBinaryNotFoundError,
)
from fairque_redis.servers.watch import ServerWatch

pytestmark = [pytest.mark.redis, pytest.mark.timeout(120)]

KINDS = {"valkey": EmbeddedValkey, "redis7": RedisServerProcess}
INTERVAL = 0.5  # the stated interval of these tests (the default is 10 s)
HANG = 30.0  # only a hung worker or a missed refusal takes this long


@pytest.fixture(params=sorted(KINDS))
def own_server(request: pytest.FixtureRequest) -> Iterator[Any]:
    try:
        server = KINDS[request.param]()
    except ServerBinaryNotFoundError as exc:
        pytest.skip(f"{request.param} unavailable: {exc}")
    with server:
        yield server


def wait_until(cond: Callable[[], bool], timeout: float = HANG) -> bool:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


class Record(TaskHandler):
    def __init__(self) -> None:
        self.ran: set[str] = set()
        self.lock = threading.Lock()

    def process_task(self, task: Task) -> object:
        with self.lock:
            self.ran.add(task.task_id)
        return None

    def count(self) -> int:
        with self.lock:
            return len(self.ran)


def _config(url: str, name: str) -> FairQueueConfig:
    return FairQueueConfig.from_dict(
        {"redis": {"url": url, "server_check_interval": INTERVAL}, "queue": {"name": name}},
        env={},
    )


def test_an_evicting_policy_set_under_a_live_worker_is_refused_logged_and_recovered(
    own_server: Any, caplog: pytest.LogCaptureFixture
) -> None:
    name = f"watch-{uuid.uuid4().hex[:6]}"
    handler = Record()
    acked: list[str] = []
    with (
        connect(config=_config(str(own_server.url), name)) as producer,
        connect(config=_config(str(own_server.url), name)) as consumer,
        redis.Redis.from_url(str(own_server.url)) as raw,
    ):
        worker = Worker(
            WorkerConfig(id="w1", max_concurrent_tasks=4, poll_interval_seconds=0.2),
            handler,
            consumer,
        )
        worker.start()
        try:
            for n in range(20):
                acked.append(producer.push(Task.create("acme", task_id=f"before-{n}")))
            assert wait_until(lambda: handler.count() == 20), "the worker never drained"

            with caplog.at_level(logging.WARNING, logger="fairque.redis"):
                raw.config_set("maxmemory-policy", "allkeys-lru")
                changed = time.monotonic()
                refused_after: float | None = None
                refusal: UnsafeServerConfigError | None = None
                n = 0
                while refused_after is None and time.monotonic() - changed < HANG:
                    try:
                        acked.append(producer.push(Task.create("acme", task_id=f"during-{n}")))
                    except UnsafeServerConfigError as exc:
                        refused_after = time.monotonic() - changed
                        refusal = exc
                    n += 1
                    time.sleep(0.01)
                assert refused_after is not None, "pushes were never refused"
                assert refusal is not None
                assert (refusal.setting, refusal.value) == ("maxmemory-policy", "allkeys-lru")
                # the first push at least INTERVAL after the last good check is refused
                assert refused_after < INTERVAL + 5.0, refused_after
                loud = [r for r in caplog.records if "NOT SAFE" in r.getMessage()]
                assert loud
                assert loud[0].levelno == logging.ERROR
                # reads go on (a dashboard shows why the queue waits); the watch says why
                assert producer.get_stats()["pushed"] >= 20
                # the worker's claims are refused too: it backs off, it does not stop
                assert wait_until(
                    lambda: "maxmemory-policy" in str(worker.health().get("last_error"))
                ), worker.health()
                assert worker.health()["state"] == "running"
                # the metric's source: fairque_worker_server_unsafe reads this field
                assert wait_until(lambda: worker.health()["server_unsafe"] == 1)
                assert "allkeys-lru" in str(worker.health()["server_problem"])

                raw.config_set("maxmemory-policy", "noeviction")
                restored: str | None = None
                while restored is None:  # the first push after the restore goes through
                    try:
                        restored = producer.push(Task.create("acme", task_id="after-0"))
                    except UnsafeServerConfigError:
                        time.sleep(0.05)
                acked.append(restored)
            assert any("safe again" in r.getMessage() for r in caplog.records)
            assert wait_until(lambda: worker.health()["server_unsafe"] == 0)
            for n in range(1, 20):
                acked.append(producer.push(Task.create("acme", task_id=f"after-{n}")))
            assert wait_until(lambda: set(acked) <= handler.ran), sorted(set(acked) - handler.ran)
        finally:
            assert worker.stop()
    assert len(set(acked)) == len(acked)  # every acknowledged push ran: 0 lost


def test_reads_go_on_and_writes_wait_while_unsafe(own_server: Any) -> None:
    name = f"watch-{uuid.uuid4().hex[:6]}"
    with (
        connect(config=_config(str(own_server.url), name)) as queue,
        redis.Redis.from_url(str(own_server.url)) as raw,
    ):
        queue.push(Task.create("acme", task_id="t1"))
        raw.config_set("maxmemory-policy", "volatile-lru")
        assert wait_until(lambda: _refused(lambda: queue.push(Task.create("acme"))))
        assert _refused(lambda: queue.claim(["acme"]))  # claims are refused as well
        assert queue.get_state("t1") is not None  # reads are not
        raw.config_set("maxmemory-policy", "noeviction")
        claimed = queue.claim(["acme"])
        assert claimed is not None
        assert claimed.task_id == "t1"


def _refused(call: Callable[[], object]) -> bool:
    try:
        call()
    except UnsafeServerConfigError:
        return True
    return False


def test_the_watch_checks_on_its_interval_after_a_failure_and_while_unsafe() -> None:
    now = [100.0]
    watch = ServerWatch(2.0, clock=lambda: now[0])
    assert watch.due()  # before the first call
    watch.passed("q")
    assert not watch.due()
    now[0] += 1.9
    assert not watch.due()
    now[0] += 0.2
    assert watch.due()  # the interval went by
    watch.passed("q")
    watch.forget()  # a call failed
    assert watch.due()
    watch.failed("q", "allkeys-lru")
    assert watch.due()
    assert watch.problem == "allkeys-lru"
    watch.passed("q")
    assert watch.problem is None
    assert not watch.due()
    with pytest.raises(ValueError, match="server_check_interval"):
        ServerWatch(0)


def test_the_dashboard_shows_an_unsafe_server_in_a_banner(own_server: Any) -> None:
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    from fairque_core import AsyncFairQueue
    from fairque_core.app.backend_loading import open_async_backend
    from fairque_dashboard import DashboardSettings, create_app

    config = _config(str(own_server.url), f"watch-{uuid.uuid4().hex[:6]}")

    async def opener() -> AsyncFairQueue:
        return AsyncFairQueue(open_async_backend(config))

    app = create_app(opener, DashboardSettings(sample_interval=0))
    with TestClient(app) as client, redis.Redis.from_url(str(own_server.url)) as raw:
        assert 'id="server-unsafe"' not in client.get("/").text
        raw.config_set("maxmemory-policy", "allkeys-lfu")
        try:
            assert wait_until(lambda: 'id="server-unsafe"' in client.get("/").text)
            page = client.get("/tenants")
            assert page.status_code == 200  # the pages still render: reads go on
            assert "allkeys-lfu" in page.text
        finally:
            raw.config_set("maxmemory-policy", "noeviction")
        assert wait_until(lambda: 'id="server-unsafe"' not in client.get("/").text)
