"""One failover scenario for the chaos tests R18 (Sentinel) and R19 (cluster): producers
pushing through ``connect`` and ``chaos_worker.py`` processes, ``kill -9`` of the server that
holds the queue, then the verdict on every acknowledged push (see ``history.check``)."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fairque_core import Task
from fairque_redis import connect

from .history import History, check, push_until_acknowledged, read_history
from .procs import WorkerProcs, wait_until

__all__ = ["run_failover"]


def run_failover(
    url: str,
    tmp_path: Path,
    durability: str,
    *,
    kill: Callable[[str], int],
    wait_for_new: Callable[[str, int], int],
    cluster: bool = False,
    label: str = "R18 sentinel failover",
) -> dict[str, Any]:
    """Producers and worker processes on ``url``; ``kill(queue)`` kills the server holding
    the queue (returns its port) and ``wait_for_new(queue, old)`` waits for its successor;
    load runs on both sides. Returns the figures and the verdict."""
    name = f"fo-{uuid.uuid4().hex[:8]}"
    path = tmp_path / "history.jsonl"
    history = History(path)
    workers = WorkerProcs(url, name, path)
    stop = threading.Event()
    errors: list[BaseException] = []
    killed_at: list[float] = []

    def produce(n: int) -> None:
        try:
            with connect(url, queue=name, durability=durability, cluster=cluster) as queue:
                k = 0
                while not stop.is_set():
                    task = Task.create(f"t{k % 5}", task_id=f"p{n}-{k}")
                    push_until_acknowledged(
                        lambda task=task: queue.push(task),  # type: ignore[misc]
                        task.task_id,
                        history,
                        pause=0.05,
                        give_up_after=60.0,
                    )
                    k += 1
        except BaseException as exc:
            errors.append(exc)

    try:
        for _ in range(2):
            workers.start(concurrency=4, lease=2.0, reaper=0.5, poll=0.05, cluster=int(cluster))
        threads = [threading.Thread(target=produce, args=(n,)) for n in range(2)]
        for thread in threads:
            thread.start()
        time.sleep(2.0)  # load before the kill
        old = kill(name)
        killed_at.append(time.time())
        new = wait_for_new(name, old)
        time.sleep(3.0)  # load after the failover
        stop.set()
        for thread in threads:
            thread.join(90)
        assert not errors, errors
        records = read_history(path)
        ok_ids = {r["id"] for r in records if r["ev"] == "push:ok"}

        def end_states() -> dict[str, str]:
            with connect(url, queue=name, cluster=cluster) as reader:
                return {i: str(reader.get_state(i)) for i in ok_ids}

        def drained() -> bool:
            states = end_states()
            return all(s in ("finished", "TaskState.FINISHED") for s in states.values())

        with contextlib.suppress(AssertionError):  # the verdict below names what is missing
            wait_until(drained, 90.0, "the workers to finish every acknowledged task")
        states = {i: s.rsplit(".", 1)[-1].lower() for i, s in end_states().items()}
        verdict = check(read_history(path), states)
        after = [r["t"] for r in records if r["ev"] == "push:ok" and r["t"] > killed_at[0]]
        back = (min(after) - killed_at[0]) if after else float("inf")
        figures = {
            "durability": durability,
            "old_primary": old,
            "new_primary": new,
            "service_back_s": round(back, 2),
            "verdict": verdict,
        }
        print(f"{label} {durability}: back in {back:.2f} s; {verdict.summary()}")
        return figures
    finally:
        stop.set()
        workers.cleanup()
        history.close()
