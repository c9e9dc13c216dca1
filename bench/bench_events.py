"""The cost of queue events (ADR 71) on a worker's drain: events on against off, side by side
in one run (prints numbers, not a test).

    uv run python bench/bench_events.py [--rounds 7] [--seconds 6] [--cap 8] [--url URL]

Each round fills two fresh queues with more no-op tasks (50 tenants) than a window can drain,
one with the default event log (``events_maxlen`` 10,000, trimmed as it goes) and one with
``events_maxlen=0``, starts one threaded worker (``--cap`` slots) on each at the same moment,
and counts the completions of each in the same window of ``--seconds``: the two drains share
the server, the machine and its load for the whole window, so their ratio is what events cost
a drain. Prints each round's rates and ratio on/off and the median ratio over the rounds (the
figure to read on a loaded machine; 1.000 = no cost, 0.950 = 5 % slower).
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from typing import Any

from fairque_core import FairQueue, Task, TaskHandler, WorkerConfig
from fairque_core.app.worker.worker import Worker
from fairque_redis import connect
from fairque_redis.servers.embedded import EmbeddedValkey

TENANTS = 50
#: tasks per queue per round: more than one window drains on this machine
TASKS = 60_000


class Noop(TaskHandler):
    def process_task(self, task: Task) -> object:
        return None


def filled(url: str, events: bool, tasks: int) -> FairQueue:
    name = f"be-{'on' if events else 'off'}-{uuid.uuid4().hex[:8]}"
    queue = connect(url, queue=name, **({} if events else {"events_maxlen": 0}))
    for start in range(0, tasks, 1000):
        queue.push_batch(
            [
                Task.create(f"tenant-{i % TENANTS}", payload={"n": i})
                for i in range(start, min(tasks, start + 1000))
            ]
        )
    return queue


def window(url: str, seconds: float, cap: int, tasks: int) -> tuple[float, float, int]:
    """(tasks/s with events, tasks/s without, events written) over one shared window."""
    queues = {events: filled(url, events, tasks) for events in (True, False)}
    workers = {
        events: Worker(WorkerConfig(id=q.name, max_concurrent_tasks=cap), Noop(), q)
        for events, q in queues.items()
    }
    for worker in workers.values():
        worker.start()
    time.sleep(1.0)  # both running at full speed before counting
    before = {events: q.get_stats()["finished"] for events, q in queues.items()}
    time.sleep(seconds)
    after = {events: q.get_stats()["finished"] for events, q in queues.items()}
    for worker in workers.values():
        worker.stop(10)
    rates = {events: (after[events] - before[events]) / seconds for events in queues}
    for events, q in queues.items():
        assert after[events] < tasks, "the queue ran dry: raise TASKS"
        client: Any = q.backend.client  # type: ignore[attr-defined]
        if events:
            written = int(client.xlen(f"fq:{{{q.name}}}:events"))
        client.delete(*client.keys(f"fq:{{{q.name}}}:*"))
        q.close()
    assert written > 0, "no events written"
    assert written <= 10_000 + 200, f"the log was not trimmed: {written}"
    return rates[True], rates[False], written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--cap", type=int, default=8)
    parser.add_argument("--tasks", type=int, default=TASKS)
    parser.add_argument("--url", default=None, help="a server (default: an embedded Valkey)")
    opts = parser.parse_args()
    server = None if opts.url else EmbeddedValkey()
    url = opts.url or server.__enter__().url  # type: ignore[union-attr]
    ratios: list[float] = []
    try:
        for n in range(opts.rounds):
            on, off, written = window(url, opts.seconds, opts.cap, opts.tasks)
            ratios.append(on / off)
            print(
                f"round {n + 1}: events on {on:7.0f} tasks/s  off {off:7.0f} tasks/s  "
                f"on/off {ratios[-1]:.3f}  (log length {written})",
                flush=True,
            )
    finally:
        if server is not None:
            server.__exit__(None, None, None)
    print(
        f"median on/off over {opts.rounds} windows of {opts.seconds:g} s: "
        f"{statistics.median(ratios):.3f} (1.000 = no cost; 0.950 = 5 % slower)"
    )


if __name__ == "__main__":
    main()
