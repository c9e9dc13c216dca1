"""S10, the long soak (issue 34, item 5): mixed load for ``FQ_SOAK_SECONDS`` (default 90 s
under ``-m slow``; the 60-minute figures in docs/operations.md come from
``FQ_SOAK_SECONDS=3600``) on a Sentinel rig, with worker kills, a server restart and a failover.

Real processes throughout: a primary with two replicas (every server ``appendfsync always``),
three sentinels, two producer threads and worker processes (``chaos_worker.py``). The load:
single pushes and batches of 10 over 20 tenants and every priority, a tenth delayed by up to
2 s, a tenth failing once or twice before they succeed (retries). Events, spread over the run:

* every ``duration / 8`` seconds ``kill -9`` of one of the churn workers, replaced at once;
* at a third: ``kill -9`` of the primary and its immediate restart on its AOF;
* at two thirds: ``kill -9`` of the primary and a failover to a replica (the old primary is
  restarted and rejoins as a replica).

One steady worker is never killed: its RSS is sampled every 5 s. Verdict after the drain:

* 0 acknowledged pushes lost (producers use ``durability="replicated"``);
* the server's memory is back to its baseline once the finished records expired (result TTL
  5 s): no task key left, and ``used_memory_dataset`` (the keys, without the replication
  backlog and buffers, which differ between the first primary and the promoted one) within
  2 MB of the reading before the load;
* the steady worker's RSS is flat: the mean of the last third of the samples is within 20 MB
  and 25 % of the mean of the second third (the first third is warm-up).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis

from fairque_core import Priority, Task
from fairque_redis import connect

from .history import History, check, push_until_acknowledged, read_history
from .procs import WorkerProcs, wait_until
from .sentinels import SentinelRig

pytestmark = [pytest.mark.chaos, pytest.mark.redis, pytest.mark.slow, pytest.mark.timeout(7200)]

DURATION = float(os.environ.get("FQ_SOAK_SECONDS", "90"))
PAUSE = float(os.environ.get("FQ_SOAK_PAUSE", "0.01"))  # between a producer's pushes
RESULT_TTL = 5.0
TENANTS = 20


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


def _primary(rig: SentinelRig) -> redis.Redis:
    port = rig.primary_port()
    assert port is not None
    return redis.Redis(port=port, socket_timeout=5.0)


def _task_keys(rig: SentinelRig, name: str) -> int:
    with _primary(rig) as client:
        return sum(1 for _ in client.scan_iter(match=f"fq:{{{name}}}:task:*", count=1000))


@pytest.fixture
def rig() -> Any:
    rig = SentinelRig(durable_primary=True)
    try:
        yield rig
    finally:
        rig.close()


def test_soak_with_kills_a_restart_and_a_failover(rig: SentinelRig, tmp_path: Path) -> None:
    name = f"soak-{uuid.uuid4().hex[:8]}"
    path = tmp_path / "history.jsonl"
    history = History(path)
    workers = WorkerProcs(rig.url, name, path)
    stop = threading.Event()
    errors: list[BaseException] = []
    figures: dict[str, Any] = {"duration_s": DURATION}
    rng = random.Random(1234)
    options = {"concurrency": 4, "lease": 2.0, "reaper": 0.5, "poll": 0.05}
    options["result_ttl"] = RESULT_TTL

    def produce(n: int) -> None:
        local = random.Random(n)
        try:
            with connect(
                rig.url, queue=name, durability="replicated", result_ttl_seconds=RESULT_TTL
            ) as queue:
                k = 0
                while not stop.is_set():
                    batch = []
                    for _ in range(10 if local.random() < 0.3 else 1):
                        roll = local.random()
                        payload: dict[str, Any] = {"sleep": 0.002}
                        if roll < 0.1:
                            payload["fail_times"] = local.choice((1, 2))
                        after = time.time() + local.uniform(0.1, 2.0) if roll > 0.9 else None
                        batch.append(
                            Task.create(
                                f"t{local.randrange(TENANTS)}",
                                priority=local.choice(list(Priority)),
                                payload=payload,
                                task_id=f"p{n}-{k}",
                                execute_after=after,
                                max_retries=3,
                            )
                        )
                        k += 1
                    for task in batch if len(batch) == 1 else []:
                        push_until_acknowledged(
                            lambda task=task: queue.push(task),  # type: ignore[misc]
                            task.task_id,
                            history,
                            pause=0.05,
                            give_up_after=120.0,
                        )
                    if len(batch) > 1:
                        _push_batch(queue, batch, history)
                    time.sleep(PAUSE)
        except BaseException as exc:
            errors.append(exc)

    with _primary(rig) as client:
        baseline = int(client.info("memory")["used_memory_dataset"])
    figures["baseline_dataset_bytes"] = baseline
    try:
        steady = workers.start(id="steady", **options)
        churn = [workers.start(id=f"churn{n}", **options) for n in range(2)]
        threads = [threading.Thread(target=produce, args=(n,)) for n in range(2)]
        for thread in threads:
            thread.start()
        started = time.monotonic()
        rss: list[float] = []
        kills = 0
        next_kill = DURATION / 8
        restarted = failed_over = False
        while (elapsed := time.monotonic() - started) < DURATION:
            rss.append(_rss_mb(steady.pid))
            if elapsed >= next_kill:
                victim = churn.pop(rng.randrange(len(churn)))
                victim.kill()
                victim.wait(10)
                kills += 1
                churn.append(workers.start(id=f"churn{kills + 1}", **options))
                next_kill += DURATION / 8
            if not restarted and elapsed >= DURATION / 3:
                port = rig.kill_primary()
                rig.server_on(port).start()  # on its AOF
                restarted = True
            if not failed_over and elapsed >= 2 * DURATION / 3:
                old = rig.kill_primary()
                rig.wait_for_new_primary(old)
                rig.server_on(old).start()  # rejoins as a replica
                failed_over = True
            assert steady.poll() is None, workers.errors(steady)
            time.sleep(min(5.0, max(0.1, DURATION / 60)))
        stop.set()
        for thread in threads:
            thread.join(180)
        assert not errors, errors
        figures["worker_kills"] = kills
        records = read_history(path)
        ok_ids = {r["id"] for r in records if r["ev"] == "push:ok"}

        def drained() -> bool:
            with connect(rig.url, queue=name) as reader:
                stats = reader.get_stats()
            return all(stats.get(k, 0) == 0 for k in ("ready", "scheduled", "leased"))

        wait_until(drained, 300.0, "the drain")
        # a task is done once a run of it ended well (``exec:end``; a planned failure records
        # ``exec:fail`` instead): the records themselves expire 5 s after the finish
        records = read_history(path)
        ended = {r["id"] for r in records if r["ev"] == "exec:end"}
        verdict = check(records, dict.fromkeys(ended, "finished"))
        figures["verdict"] = verdict.summary()
        figures["pushed"] = len(ok_ids)
        figures["steady_worker_rss_mb"] = [round(v, 1) for v in rss[:: max(1, len(rss) // 12)]]
        third = max(1, len(rss) // 3)
        middle = sum(rss[third : 2 * third]) / max(1, len(rss[third : 2 * third]))
        last = sum(rss[2 * third :]) / max(1, len(rss[2 * third :]))
        figures["rss_middle_mb"], figures["rss_last_mb"] = round(middle, 1), round(last, 1)
        # memory back to the baseline once the finished records expired
        wait_until(lambda: _task_keys(rig, name) == 0, 120.0, "the task records to expire")
        with _primary(rig) as client:
            with contextlib.suppress(redis.RedisError):
                client.execute_command("MEMORY", "PURGE")
            after = int(client.info("memory")["used_memory_dataset"])
            figures["after_dataset_bytes"] = after
            figures["keys_left"] = int(client.dbsize())
        print("S10 soak " + json.dumps(figures))
        assert verdict.lost == set(), verdict.summary()
        assert len(ok_ids) > 100, figures
        assert after - baseline < 2 * 1024 * 1024, figures
        assert last - middle < max(20.0, 0.25 * middle), figures
        workers.stop(steady)
    finally:
        stop.set()
        workers.cleanup()
        history.close()


def _push_batch(queue: Any, batch: list[Task], history: History) -> None:
    """A batch, retried whole until acknowledged (a push is idempotent by task id)."""
    from fairque_core import OutcomeUnknownError, RedisConnectionError

    deadline = time.monotonic() + 120.0
    while True:
        for task in batch:
            history.record("push:invoke", task.task_id)
        try:
            queue.push_batch(batch)
        except (OutcomeUnknownError, RedisConnectionError) as exc:
            for task in batch:
                history.record("push:unknown", task.task_id, error=type(exc).__name__)
            assert time.monotonic() < deadline, "a batch never acknowledged"
            time.sleep(0.05)
            continue
        for task in batch:
            history.record("push:ok", task.task_id)
        return
