"""R11, ``SCRIPT FLUSH`` under load: the server forgets every script while work flows.

Three producer threads (one shared FairQueue: single pushes and batches of 5) and a worker
process (``chaos_worker.py``, 8 handler threads) run while the test flushes the script cache
every second (short: 6 s; slow: 20 s on a server with AOF ``always`` and a ``kill -9`` +
restart half-way). Valkey 9 and Redis 7.

The backends here run with ``?scripts=eval`` (ADR 41: by default the scripts are Redis Functions,
which ``SCRIPT FLUSH`` does not touch; ``test_r11_function_flush.py`` flushes those): this is the
EVALSHA path, which every backend still takes where the server or ACL refuses functions. The
run (``flush_under_load``) takes what it flushes as a :class:`Flushing`; the function test
passes its own.

What a reload is: fairque runs its scripts by ``EVALSHA`` and on ``NOSCRIPT`` sends the text
once with ``SCRIPT LOAD`` (``fairque_redis.scripting.loading``); it never sends a script's text
with ``EVAL``. So a reload is one ``SCRIPT LOAD`` (or ``EVAL``) call, read from ``INFO
commandstats`` (``cmdstat_script|load``, ``cmdstat_eval``). The reading and the flush run in
one MULTI/EXEC, together with ``SCRIPT EXISTS`` of fairque's script SHAs, so every interval
between two flushes is counted exactly.

Pass: no exception reaches a producer or the worker (its handler never fails, its backend
records no error; slow: except typed connection errors while the server is down); ``lost = 0``
after a drain; in every interval the reloads are at most the fairque scripts in the cache at its
end, i.e. each script the run uses is loaded at most once per flush on the node, however many
threads meet ``NOSCRIPT`` at once (the producers' scripts and the worker's are disjoint: push vs
claim, finish, heartbeat, requeue_expired, next_due); invariants hold. ``CLIENT PAUSE`` makes
eight callers meet ``NOSCRIPT`` together: one ``SCRIPT LOAD`` (redis-py's own ``Script``
sends eight), threads and asyncio tasks alike.
"""

from __future__ import annotations

import hashlib
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fairque_core import FairQueue, QueueConfig, Task
from fairque_redis.backends.backend import RedisBackend
from fairque_redis.scripting.scripts import SOURCES

from ._r11 import RUNS, Herd, eight_callers_load_once
from .history import History, check, push_until_acknowledged, read_history
from .invariants import check as check_invariants
from .procs import WorkerProcs, wait_until
from .servers import durable_server, wait_loaded

pytestmark = [pytest.mark.chaos, pytest.mark.redis]

KINDS = ["valkey", "redis7"]
FIXTURES = {"valkey": "valkey_server", "redis7": "redis7_server"}
SHAS = [hashlib.sha1(source.encode()).hexdigest() for source in SOURCES.values()]
CONNECTION_ERRORS = {"OutcomeUnknownError", "RedisConnectionError"}
EVAL = "?scripts=eval"  # the EVALSHA path (ADR 41), for the backends and the worker process


def reading(raw: Any, *, flush: bool) -> tuple[int, int]:
    """``(reloads so far, fairque scripts cached)``, then a SCRIPT FLUSH: one MULTI/EXEC."""
    pipe = raw.pipeline(transaction=True)
    pipe.info("commandstats")
    pipe.script_exists(*SHAS)
    if flush:
        pipe.script_flush()
    stats, cached, *_ = pipe.execute()
    loads = sum(
        int(stats.get(name, {}).get("calls", 0)) for name in ("cmdstat_script|load", "cmdstat_eval")
    )
    return loads, sum(bool(c) for c in cached)


Intervals = list[tuple[int, int]]  # per interval between flushes: (reloads, what is cached)


def _script_intervals(intervals: Intervals, flushes: int) -> None:
    """Each script in use loaded at most once per flush, and the flushes bit."""
    assert all(loads <= cached for loads, cached in intervals), intervals
    # the flushes bit: after each one the scripts in use were loaded again
    assert all(cached >= 2 for _, cached in intervals[:-1]), intervals
    assert sum(loads for loads, _ in intervals) >= 2 * flushes


@dataclass(frozen=True)
class Flushing:
    """What an R11 run under load flushes (the script cache here; the function library in
    test_r11_function_flush.py) and how its intervals are read and judged."""

    label: str  # the printed line's
    url_suffix: str  # for the backends and the worker process
    queue_prefix: str
    period: float  # seconds between two flushes
    reading: Callable[..., tuple[int, int]]  # (raw, *, flush): (reloads so far, cached)
    check_intervals: Callable[[Intervals, int], None]  # (intervals, flushes): asserts


SCRIPTS = Flushing("R11", EVAL, "r11", 1.0, reading, _script_intervals)


class Producer(threading.Thread):
    """Pushes until stopped: a single task, then a batch of 5, ~50 tasks/s; each push retried
    only after fairque's typed connection errors (``push_until_acknowledged``)."""

    def __init__(self, name: str, queue: FairQueue, history: History) -> None:
        super().__init__(name=name, daemon=True)
        self.queue = queue
        self.history = history
        self.halt = threading.Event()
        self.failure: BaseException | None = None
        self.count = 0

    def run(self) -> None:
        try:
            while not self.halt.is_set():
                tasks = [
                    Task.create(f"u{(self.count + k) % 7}", task_id=f"{self.name}-{self.count + k}")
                    for k in range(1 if self.count % 2 == 0 else 5)
                ]
                if len(tasks) == 1:
                    push_until_acknowledged(
                        lambda t=tasks[0]: self.queue.push(t), tasks[0].task_id, self.history
                    )
                else:
                    for task in tasks:
                        self.history.record("push:invoke", task.task_id)
                    push_until_acknowledged(
                        lambda ts=tasks: self.queue.push_batch(ts), tasks[0].task_id, self.history
                    )
                    for task in tasks[1:]:
                        self.history.record("push:ok", task.task_id)
                self.count += len(tasks)
                self.halt.wait(0.05)
        except BaseException as exc:  # reported by the test
            self.failure = exc


def flush_under_load(
    kind: str,
    url: str,
    tmp_path: Path,
    *,
    seconds: float,
    flushing: Flushing = SCRIPTS,
    restart: Any = None,
) -> None:
    """The R11 run: producers and a worker process while ``flushing`` flushes what the server
    keeps of fairque's scripts every ``flushing.period`` s for ``seconds`` (with a ``kill -9``
    of ``restart`` and its restart half-way, when given), then the drain and the checks."""
    import redis

    queue = f"{flushing.queue_prefix}-{kind}-{uuid.uuid4().hex[:8]}"
    raw = redis.Redis.from_url(url)
    url = url + flushing.url_suffix
    config = QueueConfig(name=queue, lease_seconds=1.0)
    fq = FairQueue(RedisBackend.from_url(url, queue=queue, config=config))
    history_path = tmp_path / "history.jsonl"
    history = History(history_path)
    workers = WorkerProcs(url, queue, history_path)
    producers: list[Producer] = []
    intervals: Intervals = []
    down: tuple[float, float] | None = None
    after_restart = -1
    try:
        worker = workers.start(id="w1", lease=1.0, reaper=0.5, concurrency=8, socket_timeout=1.0)
        base, _ = flushing.reading(raw, flush=True)
        started = time.monotonic()
        producers = [Producer(f"p{i}", fq, history) for i in range(3)]
        for producer in producers:
            producer.start()
        flushes = 0
        while time.monotonic() - started < seconds:
            time.sleep(flushing.period)
            if restart is not None and down is None and time.monotonic() - started > seconds / 2:
                loads, cached = flushing.reading(raw, flush=False)
                intervals.append((loads - base, cached))
                down_at = time.time()
                restart.kill()  # kill -9: the AOF (fsync always) keeps every acknowledged push
                restart.start()
                raw.connection_pool.disconnect()
                wait_loaded(raw)
                down = (down_at, time.time())
                base = 0  # a restarted server counts from zero
                after_restart = len(intervals)  # the next interval's index
                continue
            loads, cached = flushing.reading(raw, flush=True)
            intervals.append((loads - base, cached))
            base = loads
            flushes += 1
        for producer in producers:
            producer.halt.set()
        for producer in producers:
            producer.join(30)
        loads, cached = flushing.reading(raw, flush=False)
        intervals.append((loads - base, cached))
        for producer in producers:
            assert producer.failure is None, f"{producer.name}: {producer.failure!r}"
        records = read_history(history_path)
        acknowledged = {r["id"] for r in records if r["ev"] == "push:ok"}
        wait_until(
            lambda: fq.get_stats()["finished"] >= len(acknowledged), 60, "the drain", step=0.1
        )
        health = workers.stop(worker)
        records = read_history(history_path)
        states = {i: str(fq.get_state(i)) for i in acknowledged}
        verdict = check(records, states)
        errors = [
            r for r in records if r["ev"] == "error" or r["ev"] in ("push:fail", "push:unknown")
        ]
        print(
            f"{flushing.label} {kind}: {seconds:.0f}s, {flushes} flushes"
            f"{', kill -9 + restart' if restart is not None else ''}; "
            f"{len(acknowledged)} tasks pushed, {health['processed']} processed; "
            f"reloads per interval {[n for n, _ in intervals]}, cached at its "
            f"end {[c for _, c in intervals]}; "
            f"errors {sorted({(r['ev'], r.get('error', '')) for r in errors})}; "
            f"{verdict.summary()}"
        )
        if down is None:
            assert errors == []
        else:  # only the restart's typed connection errors, only around it
            assert {r.get("error") for r in errors} <= CONNECTION_ERRORS, errors
            assert all(down[0] - 1.0 <= r["t"] <= down[1] + 5.0 for r in errors), (down, errors)
        if down is None:
            assert health["backend_errors"] == 0
        assert health["failed"] == 0
        assert verdict.lost == set()
        assert verdict.unexpected == set()
        # the interval right after the restart may end before the producers, backing off
        # from the outage, load their script again: it is left out of the reload checks
        checked = [iv for k, iv in enumerate(intervals) if k != after_restart]
        flushing.check_intervals(checked, flushes)
        assert check_invariants(raw, queue) == []
    finally:
        for producer in producers:
            producer.halt.set()
        history.close()
        workers.cleanup()
        fq.close()
        raw.close()


@pytest.mark.timeout(90)
# Redis 7 in the slow run only (test_r11_script_flush_under_load_with_a_restart runs it there
# too); the scenario is the same client code on both servers
@pytest.mark.parametrize("kind", ["valkey", pytest.param("redis7", marks=pytest.mark.slow)])
def test_r11_script_flush_under_load_short(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    server = request.getfixturevalue(FIXTURES[kind])
    flush_under_load(kind, str(server.url), tmp_path, seconds=6.0)


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize("kind", KINDS)
def test_r11_script_flush_under_load_with_a_restart(kind: str, tmp_path: Path) -> None:
    server = durable_server(kind)
    with server:
        flush_under_load(kind, server.url, tmp_path, seconds=20.0, restart=server)


# ---------------------------------------------------------------------- one load, many callers


HERD = Herd(
    label="R11 herd",
    missing="NOSCRIPT",
    load="SCRIPT LOAD",
    url_suffix=EVAL,
    queue="r11-herd",
    forget=lambda raw: raw.script_flush(),
    loads=lambda raw: reading(raw, flush=False)[0],
)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("callers", sorted(RUNS))
@pytest.mark.parametrize("kind", KINDS)
def test_eight_callers_meeting_noscript_load_the_script_once(
    kind: str, callers: str, request: pytest.FixtureRequest
) -> None:
    # every EVALSHA waits behind CLIENT PAUSE, so all eight get NOSCRIPT before any reload
    url = str(request.getfixturevalue(FIXTURES[kind]).url)
    eight_callers_load_once(kind, url, HERD, callers)
