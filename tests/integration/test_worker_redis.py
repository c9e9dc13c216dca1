"""Worker processes against a real Valkey: SIGTERM, kill -9, and a server crash and restart.

Each scenario runs worker SUBPROCESSES (``worker_child.py``) whose handler writes an O_APPEND
JSON-lines execution log (task id, pid, event); the checks read that log and the queue.
Leases are 2 s and the reaper runs every 0.5 s, so the redelivery bound is
B = lease + reaper interval + 1 s = 3.5 s.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from fairque_core import FairQueue, QueueConfig, Task, TaskState
from fairque_redis.servers.embedded import EmbeddedValkey, ServerBinaryNotFoundError

pytestmark = [pytest.mark.redis, pytest.mark.timeout(60)]

CHILD = Path(__file__).with_name("worker_child.py")
LEASE = 2.0
REAPER = 0.5
BOUND = LEASE + REAPER + 1.0


def wait_until(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def read_log(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def events(path: Path, event: str, pid: int | None = None) -> list[dict[str, Any]]:
    return [e for e in read_log(path) if e["event"] == event and (pid is None or e["pid"] == pid)]


class Children:
    """Worker subprocesses started by a test, each killed by its own pid at teardown."""

    def __init__(self, url: str, queue: str, log: Path) -> None:
        self.url = url
        self.queue = queue
        self.log = log
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, **opts: Any) -> subprocess.Popen[bytes]:
        cmd = [sys.executable, str(CHILD), "--url", self.url, "--queue", self.queue]
        cmd += ["--log", str(self.log), "--lease", str(LEASE)]
        for key, value in opts.items():
            cmd += [f"--{key}", str(value)]
        env = {**os.environ, "FAIRQUE_DISABLE_PLUGIN_AUTOLOAD": "1"}
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == b"ready", proc.stderr.read() if proc.stderr else line
        self.procs.append(proc)
        return proc

    def cleanup(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
            proc.wait(5)


@pytest.fixture
def setup(valkey_server: Any, tmp_path: Path) -> Iterator[tuple[FairQueue, Children]]:
    from fairque_redis.backends.backend import RedisBackend

    name = f"it-{uuid.uuid4().hex[:10]}"
    config = QueueConfig(name=name, lease_seconds=LEASE)
    queue = FairQueue(RedisBackend.from_url(valkey_server.url, queue=name, config=config))
    children = Children(valkey_server.url, name, tmp_path / "exec.jsonl")
    try:
        yield queue, children
    finally:
        children.cleanup()
        queue.close()


def test_sigterm_finishes_running_and_releases_claimed(
    setup: tuple[FairQueue, Children],
) -> None:
    queue, children = setup
    ids = [f"t{i}" for i in range(10)]
    queue.push_batch([Task.create(f"u{n % 3}", task_id=i) for n, i in enumerate(ids)])
    proc = children.start(concurrency=4, prefetch=6, sleep=1.5, shutdown=8)
    wait_until(lambda: len(events(children.log, "start")) == 4, 5, "4 running tasks")
    running = {e["id"] for e in events(children.log, "start")}
    assert queue.get_stats()["leased"] == 10  # 4 running + 6 claimed, unstarted

    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    claimed = [i for i in ids if i not in running]
    wait_until(
        lambda: all(queue.get_state(i) is TaskState.QUEUED for i in claimed),
        1.0,
        "the unstarted claims back in the queue",
    )
    assert time.monotonic() - sent < 1.0  # at once, not after the lease
    proc.wait(8 + 1)
    assert proc.returncode == 0
    assert all(queue.get_state(i) is TaskState.FINISHED for i in running)

    children.start(concurrency=10, sleep=0.05)
    wait_until(lambda: all(queue.get_state(i) is TaskState.FINISHED for i in ids), 10, "the drain")
    starts = Counter(e["id"] for e in events(children.log, "start"))
    ends = Counter(e["id"] for e in events(children.log, "end"))
    assert starts == Counter(ids)  # each ran exactly once: nothing lost, nothing twice
    assert ends == Counter(ids)


def test_kill9_leases_are_redelivered_within_the_bound(
    setup: tuple[FairQueue, Children],
) -> None:
    queue, children = setup
    ids = [f"k{i}" for i in range(6)]
    queue.push_batch([Task.create(f"u{n % 2}", task_id=i) for n, i in enumerate(ids)])
    victim = children.start(id="victim", concurrency=6, sleep=30)
    wait_until(lambda: len(events(children.log, "start")) == 6, 5, "the victim holds 6 leases")
    rescuer = children.start(id="rescuer", concurrency=6, sleep=0.05)

    os.kill(victim.pid, signal.SIGKILL)
    killed_at = time.time()
    victim.wait(5)
    wait_until(
        lambda: all(queue.get_state(i) is TaskState.FINISHED for i in ids),
        BOUND + 3,
        "every task finished by the rescuer",
    )
    restarts = {e["id"]: e["t"] for e in events(children.log, "start", rescuer.pid)}
    assert set(restarts) == set(ids)  # none lost
    late = {i: round(t - killed_at, 2) for i, t in restarts.items() if t - killed_at > BOUND}
    assert not late, f"redelivered later than {BOUND} s after the kill: {late}"
    assert Counter(e["id"] for e in events(children.log, "end")) == Counter(ids)
    # a worker's death is no failure of its tasks: each lease came back as a recovery, and
    # the redelivered run is still the first attempt (no retry spent)
    assert all(e["attempt"] == 0 for e in events(children.log, "start", rescuer.pid))
    assert queue.get_stats()["recovered"] == len(ids)


@contextlib.contextmanager
def _durable_queue(tmp_path: Path) -> Iterator[tuple[EmbeddedValkey, FairQueue, Children, str]]:
    """An embedded Valkey with AOF and fsync always (a SIGKILL loses nothing acknowledged), a
    queue on it, and the worker children's launcher: (server, queue, children, queue name)."""
    from fairque_redis.backends.backend import RedisBackend

    try:
        server = EmbeddedValkey(appendonly=True, extra_args=["--appendfsync", "always"])
    except ServerBinaryNotFoundError as exc:
        pytest.skip(str(exc))
    with server:
        name = f"it-{uuid.uuid4().hex[:10]}"
        config = QueueConfig(name=name, lease_seconds=LEASE)
        queue = FairQueue(RedisBackend.from_url(server.url, queue=name, config=config))
        yield server, queue, Children(server.url, name, tmp_path / "exec.jsonl"), name


def _all_finished(queue: FairQueue, ids: list[str]) -> Callable[[], bool]:
    return lambda: all(queue.get_state(i) is TaskState.FINISHED for i in ids)


def _more_than(items: list[str], count: int) -> Callable[[], bool]:
    return lambda: len(items) > count


def test_three_server_crashes_under_load_lose_no_acknowledged_push(tmp_path: Path) -> None:
    """The reliability plan's R6: the server is killed (SIGKILL) three times while a producer
    pushes and a worker drains (AOF, fsync always). Every push the producer saw acknowledged
    runs; a push refused while the server was down raises a typed connection error; the
    worker stays up through every outage; nothing runs that was never pushed; and once the
    queue is quiet the doctor finds its structures sound (it reads a quiet queue: a snapshot
    taken while pushes land can see a queue entry before its record)."""
    import threading

    from fairque_core import RedisConnectionError
    from fairque_redis.doctor.examine import check

    with _durable_queue(tmp_path) as (server, queue, children, name):
        acked: list[str] = []
        unsure: list[str] = []  # sent, reply unknown (stored or not)
        untyped: list[BaseException] = []
        stop = threading.Event()

        def produce() -> None:
            n = 0
            while not stop.is_set():
                task_id = f"p{n}"
                n += 1
                try:
                    queue.push(Task.create(f"u{n % 4}", task_id=task_id))
                    acked.append(task_id)
                except RedisConnectionError:
                    unsure.append(task_id)
                    time.sleep(0.05)
                except BaseException as exc:  # reported by the test below
                    untyped.append(exc)
                time.sleep(0.005)

        producer = threading.Thread(target=produce, daemon=True)
        try:
            worker = children.start(concurrency=4, sleep=0.01)
            producer.start()
            for _cycle in range(3):
                wait_until(lambda: len(acked) >= 30, 15, "pushes before the crash")
                server.kill()
                time.sleep(0.5)
                assert worker.poll() is None  # the worker survives the outage
                server.start()
                wait_until(_more_than(acked, len(acked) + 30), 15, "pushes after it")
            stop.set()
            producer.join(10)
            wait_until(_all_finished(queue, acked), 60, "every acknowledged push finished")
            assert worker.poll() is None
            ends = {e["id"] for e in events(children.log, "end")}
            assert set(acked) <= ends  # nothing acknowledged was lost
            assert ends <= set(acked) | set(unsure)  # nothing ran that was never pushed
            assert untyped == []
            assert check(queue.backend.client, name) == []  # type: ignore[attr-defined]
        finally:
            stop.set()
            children.cleanup()
            queue.close()


def test_server_crash_and_restart_is_survived(tmp_path: Path) -> None:
    with _durable_queue(tmp_path) as (server, queue, children, _name):
        try:
            ids = [f"r{i}" for i in range(60)]
            queue.push_batch([Task.create(f"u{n % 4}", task_id=i) for n, i in enumerate(ids)])
            worker = children.start(concurrency=4, sleep=0.1)
            wait_until(lambda: len(events(children.log, "end")) >= 12, 10, "some progress")
            server.kill()  # crash: SIGKILL, AOF (fsync always) and port kept
            time.sleep(1.0)
            assert worker.poll() is None  # the worker survives the outage
            server.start()
            wait_until(_all_finished(queue, ids), 30, "every task finished after the restart")
            assert worker.poll() is None
            ends = {e["id"] for e in events(children.log, "end")}
            assert ends == set(ids)  # nothing acknowledged (pushed) was lost
            worker.send_signal(signal.SIGTERM)
            out, _err = worker.communicate(timeout=10)
            health = json.loads(out.decode().strip().splitlines()[-1])
            assert health["backend_errors"] >= 1
            assert health["last_error"]
            assert health["state"] == "stopped"
        finally:
            children.cleanup()
            queue.close()
