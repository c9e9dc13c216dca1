"""Where the time goes between a push and its handler's start (prints numbers; not a test).

    uv run --no-sync python bench/bench_latency_path.py [--count N] [--poll S] [--rounds N]
    uv run --no-sync python bench/bench_latency_path.py --compare OLD_SRC [--rounds N]
    uv run --no-sync python bench/bench_latency_path.py --accel-ab wake_handoff [--rounds N]

The latency measurement of ``bench_worker.py`` (a producer process pushes one task every 5 ms
to an idle thread ``Worker``, cap 10), with time stamps (``perf_counter``, system-wide on
Linux) along the path, per task:

- ``push``: from the producer's stamp (taken before the task is built, as the latency
  measurements take it) until its ``push`` call returned (client encoding, the push script,
  the reply);
- ``reply``: from the stamp until the listener's pipeline (the BLPOP of the wake signal and
  the claim, ADR 38) returned, before decoding (the server side: the push's wake token
  unblocks the BLPOP, the claim runs behind it; plus the listener thread's wake-up);
- ``decode``: the engine's decoding of the claimed task;
- ``book``: until the worker loop was told (``listener_claimed``);
- ``dispatch``: until the loop dispatched the task (``WorkerLoop._dispatch``: on the control
  thread after it woke and ran a cycle, or on the listener's, ADR 46);
- ``thread``: until a thread began the task (a pool thread's wake-up, or none when the
  listener's thread runs it, ADR 46);
- ``handler``: until the handler ran (plugin hooks).

It patches private methods of this build (or of ``OLD_SRC``'s, which has the same ones): a
measuring tool, not an API. ``--compare``: both builds, each run in a child process with that
build on its ``PYTHONPATH``, the order alternating by round; the medians over rounds of each
step's p50 and p90 are printed. The machine is a shared 2-core VM: read the medians, the
load averages are printed with them. ``--accel-ab NAME``: this build twice, as ``on`` and as
``off`` (``FAIRQUE_ACCEL_OFF=NAME`` in the child), the same way. With the hand-off of ADR 81
(``wake_handoff``) the push makes the claim: ``reply`` then ends when the BLPOP's reply is read.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from _child import run_child

from fairque_core import Task, TaskHandler, Worker, WorkerConfig
from fairque_redis import connect
from fairque_redis.servers.embedded import EmbeddedValkey

STEPS = ["push", "reply", "decode", "book", "dispatch", "thread", "handler"]
clock = time.perf_counter


class Marks:
    """Stamps per step and task number (the task's ``i``)."""

    def __init__(self) -> None:
        self.at: dict[str, dict[int, float]] = {step: {} for step in STEPS}
        self.pending: list[float] = []  # the last pipeline reply's time, until decoded
        self.threads: dict[str, dict[int, int]] = {"claim": {}, "run": {}}  # task -> thread

    def mark(self, step: str, task: Task) -> None:
        i = int(task.payload.get("i", -1))
        self.at[step].setdefault(i, clock())


class Stamp(TaskHandler):
    def __init__(self, marks: Marks) -> None:
        self.marks = marks

    def process_task(self, task: Task) -> object:
        self.marks.mark("handler", task)
        return None


def produce(url: str, queue: str, count: int, ready: Any, go: Any, out: Any) -> None:
    producer = connect(url, queue=queue)
    producer.push(Task.create("warm-up", payload={"t": -1.0, "i": -1}))
    ready.set()
    go.wait()
    stamps = []
    next_at = clock()
    for i in range(count):
        next_at += 0.005
        pause = next_at - clock()
        if pause > 0:
            time.sleep(pause)
        t0 = clock()
        producer.push(Task.create(f"tenant-{i % 100}", payload={"t": t0, "i": i}))
        stamps.append((t0, clock()))
    out.send(stamps)
    producer.close()


def instrument(queue: Any, marks: Marks) -> None:
    """Wrap the methods on the path (this process only)."""
    from fairque_core.app.worker import loop as worker_loop

    backend = queue.backend
    pop_and_claim = backend._pop_and_claim

    def timed_pop_and_claim(*args: Any) -> Any:
        got = pop_and_claim(*args)
        marks.pending.append(clock())
        return got

    backend._pop_and_claim = timed_pop_and_claim
    claim_when_ready = queue.claim_when_ready

    def timed_claim_when_ready(*args: Any, **kwargs: Any) -> Any:
        tasks = claim_when_ready(*args, **kwargs)
        replied = marks.pending[-1] if marks.pending else clock()
        marks.pending.clear()
        for task in tasks:
            marks.at["reply"].setdefault(int(task.payload.get("i", -1)), replied)
            marks.mark("decode", task)
            marks.threads["claim"][int(task.payload.get("i", -1))] = threading.get_ident()
        return tasks

    queue.claim_when_ready = timed_claim_when_ready
    listener_claimed = worker_loop.WorkerLoop.listener_claimed

    def timed_listener_claimed(self: Any, result: object) -> None:
        listener_claimed(self, result)
        for task in result if isinstance(result, list) else []:
            marks.mark("book", task)

    worker_loop.WorkerLoop.listener_claimed = timed_listener_claimed  # type: ignore[method-assign]
    dispatch = worker_loop.WorkerLoop._dispatch

    def timed_dispatch(self: Any, now: float, *args: Any, **kwargs: Any) -> Any:
        slots = dispatch(self, now, *args, **kwargs)  # most=1: a handler's thread (ADR 51)
        for slot in slots:
            marks.mark("dispatch", slot.task)
        return slots

    worker_loop.WorkerLoop._dispatch = timed_dispatch  # type: ignore[method-assign]
    execute = Worker._execute

    def timed_execute(self: Any, slot: Any) -> None:
        marks.mark("thread", slot.task)
        marks.threads["run"][int(slot.task.payload.get("i", -1))] = threading.get_ident()
        execute(self, slot)

    Worker._execute = timed_execute  # type: ignore[method-assign]


def measure(url: str, count: int, poll: float) -> dict[str, Any]:
    marks = Marks()
    queue = connect(url, queue=f"lp-{uuid.uuid4().hex[:8]}")
    instrument(queue, marks)
    config = WorkerConfig(id="lat-path", max_concurrent_tasks=10, poll_interval_seconds=poll)
    worker = Worker(config, Stamp(marks), queue)
    worker.start()
    spawn = multiprocessing.get_context("spawn")
    ready, go = spawn.Event(), spawn.Event()
    receive, send = spawn.Pipe(duplex=False)
    producer = spawn.Process(target=produce, args=(url, queue.name, count, ready, go, send))
    producer.start()
    if not ready.wait(60):
        raise RuntimeError("the producer did not start")
    time.sleep(max(0.3, 2 * poll))  # the warm-up task ran, the worker is idle again
    load = os.getloadavg()[0]
    go.set()
    stamps = receive.recv()
    producer.join(10)
    time.sleep(0.2)
    worker.stop(10)
    queue.close()
    spans: dict[str, list[float]] = {step: [] for step in [*STEPS, "total"]}
    for i, (t0, pushed) in enumerate(stamps):
        times = {"push": pushed, **{s: marks.at[s].get(i) for s in STEPS[1:]}}
        if any(t is None for t in times.values()):
            continue
        spans["push"].append(pushed - t0)
        spans["reply"].append(times["reply"] - t0)  # type: ignore[operator]
        prev = times["reply"]
        for step in STEPS[2:]:
            spans[step].append(times[step] - prev)  # type: ignore[operator]
            prev = times[step]
        spans["total"].append(prev - t0)  # type: ignore[operator]
    runs, claims = marks.threads["run"], marks.threads["claim"]
    own = sum(1 for i, t in runs.items() if claims.get(i) == t)
    out: dict[str, Any] = {"n": len(spans["total"]), "load": load, "own": own / max(1, len(runs))}
    # the slowest 2 % of the tasks: the median of each step among them (where the tail goes)
    order = sorted(range(len(spans["total"])), key=spans["total"].__getitem__)
    worst = order[-max(1, len(order) // 50) :]
    for step, values in spans.items():
        tail = sorted(values[i] for i in worst)
        values.sort()
        if values:
            out[step] = [
                values[len(values) // 2] * 1e6,
                values[int(len(values) * 0.9)] * 1e6,
                tail[len(tail) // 2] * 1e6,
            ]
    return out


def show(name: str, runs: list[dict[str, Any]]) -> None:
    loads = ", ".join(f"{r['load']:.2f}" for r in runs)
    own = statistics.median(r["own"] for r in runs)
    print(f"\n{name}: medians of {len(runs)} rounds (us), load {loads}")
    print(f"tasks run on the thread that claimed them: {own:.0%}")
    print(f"{'step':<8} {'p50':>7} {'p90':>7} {'slow 2%':>8}")
    for step in [*STEPS, "total"]:
        p50 = statistics.median(r[step][0] for r in runs)
        p90 = statistics.median(r[step][1] for r in runs)
        tail = statistics.median(r[step][2] for r in runs)
        print(f"{step:<8} {p50:>7.0f} {p90:>7.0f} {tail:>8.0f}")
    print(
        "(push and reply from the producer's stamp; the others from the step before; slow 2%: "
        "the median of each step among the slowest 2 % of the tasks by total)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=600)
    parser.add_argument("--poll", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--compare", metavar="OLD_SRC")
    parser.add_argument("--accel-ab", metavar="NAME", help="this build with NAME on and off")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.one:
        url, count, poll = json.loads(opts.one)
        print(json.dumps(measure(url, count, poll)))
        return
    builds: dict[str, str | None] = {"this": None}
    envs: dict[str, dict[str, str]] = {}
    if opts.compare:
        here = str(Path(__file__).resolve().parents[1] / "src")
        builds = {"old": str(Path(opts.compare).resolve()), "new": here}
    elif opts.accel_ab:
        builds = {"on": None, "off": None}
        envs = {"off": {"FAIRQUE_ACCEL_OFF": opts.accel_ab}}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in builds}
    print(f"cpus={os.cpu_count()} loadavg at start={os.getloadavg()}")
    with EmbeddedValkey() as server:
        for round_no in range(opts.rounds):
            names = list(builds) if round_no % 2 == 0 else list(builds)[::-1]
            for name in names:
                path = builds[name]
                spec = json.dumps([server.url, opts.count, opts.poll])
                got = run_child([__file__, "--one", spec], path, envs.get(name))
                runs[name].append(got)
                print(
                    f"round {round_no + 1} {name}: total p50 {got['total'][0]:.0f} us "
                    f"(n {got['n']}, load {got['load']:.2f})",
                    flush=True,
                )
    for name, got in runs.items():
        show(name, got)


if __name__ == "__main__":
    main()
