"""R10, server stall: the server process is SIGSTOPped for 3 s while leases of 1 s are held,
then SIGCONT; or the server holds every write for 3 s (``CLIENT PAUSE WRITE``) and runs them
late; or the server's one thread sleeps 3 s inside a command (``DEBUG SLEEP 3``).

A worker process (1 s leases, 1 s socket timeout, reaper every 0.5 s) serves tenant ``s``, whose
tasks run 0.4 s each, so it holds running leases through the stall. The test itself holds three
more leases (tenant ``h``) claimed just before the stall and never extended: a worker stalled
with the server. After SIGCONT: the worker survives, the expired leases are reclaimed by the
reaper, the stalled holder's late ``finish`` gets ``LeaseLostError`` and changes nothing, every
task ends FINISHED with exactly one FINISHED transition per id (the ``finished`` counter equals
the number of ids), no acknowledged push is lost and the structures are consistent.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from fairque_core import FairQueue, LeaseLostError, QueueConfig, Task, TaskState
from fairque_redis.backends.backend import RedisBackend
from fairque_redis.servers.embedded import EmbeddedValkey, ServerBinaryNotFoundError

from .history import History, check, read_history
from .invariants import check as check_invariants
from .procs import WorkerProcs, wait_until

pytestmark = [pytest.mark.chaos, pytest.mark.redis, pytest.mark.timeout(90)]

LEASE = 1.0
REAPER = 0.5
STALL = 3.0
STREAM = 40
HELD = 3
#: after SIGCONT the worker may still be backing off (cap 2 s) before its next reaper pass
RECLAIM_BOUND = 2.0 + REAPER + 1.0


@pytest.mark.parametrize("stall", ["sigstop", "pause-write", "debug-sleep"])
def test_r10_stall_the_server_past_the_leases(queue_name: str, tmp_path: Path, stall: str) -> None:
    """``sigstop``: the server process stops (nothing is read or answered). ``pause-write``:
    ``CLIENT PAUSE <ms> WRITE``: the server answers reads but holds every write, scripts
    included, and runs them when the pause ends, after their callers timed out: a claim or a
    finish then lands late, on a lease its caller gave up for unknown. ``debug-sleep``:
    ``DEBUG SLEEP 3`` (the server started with ``enable-debug-command yes``): the process runs,
    but its main thread is busy in one command, as in a slow script or a fork on a large
    data set; every other connection waits, then is served in arrival order."""
    import redis

    try:
        server = EmbeddedValkey(
            extra_args=("--enable-debug-command", "yes") if stall == "debug-sleep" else ()
        )
    except ServerBinaryNotFoundError as exc:
        pytest.skip(str(exc))
    history_path = tmp_path / "history.jsonl"
    with server:
        raw = redis.Redis.from_url(server.url)
        config = QueueConfig(name=queue_name, lease_seconds=LEASE)
        queue = FairQueue(RedisBackend.from_url(server.url, queue=queue_name, config=config))
        workers = WorkerProcs(server.url, queue_name, history_path)
        history = History(history_path)
        try:
            stream = [f"s-{k}" for k in range(STREAM)]
            held_ids = [f"h-{k}" for k in range(HELD)]
            tasks = [Task.create("s", task_id=i, payload={"sleep": 0.4}) for i in stream]
            tasks += [Task.create("h", task_id=i) for i in held_ids]
            for task in tasks:
                history.record("push:invoke", task.task_id)
            queue.push_batch(tasks)
            for task in tasks:
                history.record("push:ok", task.task_id)

            worker = workers.start(
                lease=LEASE, reaper=REAPER, concurrency=4, socket_timeout=1.0, tenants="s"
            )
            wait_until(
                lambda: sum(r["ev"] == "exec:start" for r in read_history(history_path)) >= 4,
                10,
                "the worker running 4 tasks",
            )
            held = queue.claim_batch(HELD, ["h"], worker_id="stalled")
            assert sorted(t.task_id for t in held) == held_ids
            for task in held:
                history.record("exec:start", task.task_id, token=task.lease and task.lease.token)

            stopped = time.monotonic()
            if stall == "sigstop":
                server.pause()
                time.sleep(STALL)
                server.resume()
            elif stall == "pause-write":  # the server lifts the pause itself when time is up
                raw.execute_command("CLIENT", "PAUSE", str(int(STALL * 1000)), "WRITE")
                time.sleep(STALL)
            else:  # the reply comes when the server's thread is done sleeping
                raw.execute_command("DEBUG", "SLEEP", str(STALL))
            resumed = time.monotonic()
            reclaimed = wait_until(
                lambda: all(queue.get_state(i) is TaskState.QUEUED for i in held_ids),
                RECLAIM_BOUND + 2,
                "the held leases back in the queue",
            )
            for task in held:  # the stalled holder wakes up and tries to finish
                with pytest.raises(LeaseLostError):
                    queue.finish(task, {"late": True})
                assert queue.get_state(task.task_id) is TaskState.QUEUED
            again = queue.claim_batch(HELD, ["h"], worker_id="rescuer")
            assert sorted(t.task_id for t in again) == held_ids
            assert all(
                t.lease and t.lease.token not in {h.lease and h.lease.token for h in held}
                for t in again
            )
            for task in again:
                history.record("exec:start", task.task_id)
                queue.finish(task, {"late": False})

            total = STREAM + HELD
            wait_until(lambda: queue.get_stats()["finished"] >= total, 30, "the drain", step=0.05)
            assert worker.poll() is None, workers.errors(worker)  # survived the stall
            health = workers.stop(worker)

            records = read_history(history_path)
            ids = stream + held_ids
            states = {i: str(queue.get_state(i)) for i in ids}
            verdict = check(records, states)
            stats = queue.get_stats()
            errors = [r for r in records if r["ev"] == "error"]
            print(
                f"R10 {stall} stall={resumed - stopped:.2f}s reclaimed_after={reclaimed:.2f}s "
                f"{verdict.summary()} dup_ids={sorted(verdict.dup_exec)} "
                f"worker_errors={sorted({(e['op'], e['error']) for e in errors})} "
                f"worker={ {k: health[k] for k in ('processed', 'lease_lost', 'backend_errors')} } "
                f"recovered={stats['recovered']}"
            )
            assert reclaimed <= RECLAIM_BOUND
            assert verdict.lost == set()
            assert verdict.unexpected == set()
            assert set(states.values()) == {"finished"}
            assert stats["finished"] == total  # exactly one FINISHED transition per id
            assert stats["pushed"] == total
            assert stats["recovered"] >= HELD
            assert all(queue.get_result(i) == {"late": False} for i in held_ids)
            assert errors, "the stall must surface in the worker (socket timeout 1 s)"
            assert all(e["typed"] for e in errors), errors[:5]
            assert {e["error"] for e in errors} <= {
                "OutcomeUnknownError",
                "RedisConnectionError",
                "LeaseLostError",
            }
            # the held tasks ran twice (stalled holder, rescuer); a stream task only when its
            # lease expired in the stall
            assert {i: verdict.dup_exec.get(i) for i in held_ids} == dict.fromkeys(held_ids, 1)
            assert set(verdict.dup_exec) <= set(stream) | set(held_ids)
            assert check_invariants(raw, queue_name) == []
        finally:
            history.close()
            workers.cleanup()
            queue.close()
            raw.close()
