"""Light tenants' wait while one tenant floods, and where it goes (prints numbers; not a test).

    uv run --no-sync python bench/bench_flood.py [--rounds N] [--n 20000] [--kinds thread,async]
        [--prefetch N]
    uv run --no-sync python bench/bench_flood.py --compare OLD_SRC [--rounds N]

The scenario of bench/plots.py's ``flood`` plot: a producer PROCESS pushes a task of one of 5
light tenants every 10 ms for ``--seconds`` (default 8) and, one second in, ``--n`` no-op tasks
of a ``flood`` tenant (``push_batch`` of 1,000, from a second thread). One worker with
``WorkerConfig`` defaults (thread ``Worker`` or ``AsyncWorker``, no ``prefetch`` argument) runs
them on an embedded Valkey. Each light task's wait (handler start - push) is split where the
worker can see it:

- ``push``: the push call (the producer's round trip, behind the flood's ``push_batch``);
- ``queued``: from the push's return to the end of the claim that brought it (its time in
  the queue and the claim round trip);
- ``buffer``: claim to dispatch, in the worker's local buffer of claimed, unstarted tasks;
- ``handoff``: dispatch to the handler's first line (pool thread or asyncio task switch).

The split reads the worker's own record of the task (its ``Slot``, a private name): this is a
diagnosis, not an API. The worker's ``health()`` is sampled every 2 ms for the depth of that
buffer and the adaptive prefetch. Light tasks are grouped by when they were pushed:
``before`` the flood, ``during`` it (from the flood's first ``push_batch`` to the last flood
task's start), split into ``pushing`` (while the flood's ``push_batch`` calls run; each holds
the server for some milliseconds) and ``draining`` (after them), and ``after``.

The summary also judges the reliability plan's F1 criteria, with the light tasks pushed
before the flood as the baseline: during the flood their p99 wait within max(1.5 x baseline
p99, baseline p99 + 50 ms) and their p50 within 1.2 x baseline p50 (the plan's F1 runs 4
workers, 10 light tenants at 1 task / 50 ms each and a flood of 1,000,000; this is its
shape at one worker and a shorter flood).

``--compare OLD_SRC``: each run in a child process with ``OLD_SRC`` (e.g. a git worktree's
``src``) or this file's ``../src`` on its ``PYTHONPATH``, the order alternating by round, one
shared Valkey; medians per build.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from fairque_core import AsyncWorker, Task, TaskHandler, Worker, WorkerConfig
from fairque_redis import aconnect, connect
from fairque_redis.servers.embedded import EmbeddedValkey

LIGHT_TENANTS = 5
LIGHT_INTERVAL = 0.01
FLOOD_AT = 1.0
BATCH = 1000
SAMPLE_EVERY = 0.002


# ---------------------------------------------------------------------------- producer
def produce(url: str, queue_name: str, n: int, seconds: float) -> None:
    """The producer process: light trickle plus one flood (a thread), as in the plots."""
    queue = connect(url, queue=queue_name)
    queue.push(Task.create("light-0", payload={"t": -1.0}))  # connect and load the scripts
    print("ready", flush=True)
    sys.stdin.readline()
    started = time.perf_counter()
    flood_pushed: list[float] = []

    def flood() -> None:
        time.sleep(FLOOD_AT)
        flood_pushed.append(time.perf_counter())
        for s in range(0, n, BATCH):
            batch = min(BATCH, n - s)
            queue.push_batch([Task.create("flood", payload={"t": 0.0}) for _ in range(batch)])
        flood_pushed.append(time.perf_counter())

    flooder = threading.Thread(target=flood)
    flooder.start()
    next_at = started
    k = 0
    pushes: list[tuple[float, float]] = []
    while next_at - started < seconds - LIGHT_INTERVAL / 2:
        pause = next_at - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
        pushed = time.perf_counter()
        queue.push(Task.create(f"light-{k % LIGHT_TENANTS}", payload={"t": pushed}))
        pushes.append((pushed, time.perf_counter() - pushed))
        k += 1
        next_at += LIGHT_INTERVAL
    flooder.join()
    queue.close()
    out = {"started": started, "light": k, "flood_from": flood_pushed[0]}
    print(json.dumps({**out, "flood_to": flood_pushed[1], "pushes": pushes}), flush=True)


# ---------------------------------------------------------------------------- worker side
class Probe(TaskHandler):
    """Stamps each light task: push, claim and dispatch (the worker's slot), handler start."""

    def __init__(self) -> None:
        self.held: dict[str, Any] = {}
        self.light: list[tuple[float, float, float, float]] = []
        self.flood_done = 0
        self.flood_last = 0.0
        self.warm = threading.Event()

    def _stamp(self, task: Task) -> None:
        now = time.perf_counter()
        pushed = float(task.payload.get("t", 0.0))
        if task.tenant == "flood":
            self.flood_done += 1
            self.flood_last = now
        elif pushed < 0:
            self.warm.set()
        else:
            slot = self.held.get(task.task_id)
            claimed = slot.claimed_at if slot is not None else now
            started = slot.started_at if slot is not None and slot.started_at else now
            self.light.append((pushed, claimed, started, now))

    def process_task(self, task: Task) -> object:
        self._stamp(task)
        return None

    async def process_task_async(self, task: Task) -> object:
        self._stamp(task)
        return None


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _summary(
    rows: list[tuple[float, float, float, float]], push: dict[float, float]
) -> dict[str, Any]:
    parts: dict[str, list[float]] = {
        "wait": [(s - p) * 1000 for p, _, _, s in rows],
        "push": [push.get(p, 0.0) * 1000 for p, _, _, _ in rows],
        "queued": [(c - p - push.get(p, 0.0)) * 1000 for p, c, _, _ in rows],
        "buffer": [(d - c) * 1000 for _, c, d, _ in rows],
        "handoff": [(s - d) * 1000 for _, _, d, s in rows],
    }
    out: dict[str, Any] = {"count": len(rows)}
    for name, values in parts.items():
        out[name] = (_pct(values, 0.5), _pct(values, 0.99), max(values, default=float("nan")))
    return out


def one_run(
    url: str, kind: str, n: int, seconds: float, prefetch: int | None = None
) -> dict[str, Any]:
    """One flood against one worker with its defaults; returns the split by phase."""
    name = f"fl-{uuid.uuid4().hex[:8]}"
    probe = Probe()
    samples: list[tuple[float, int, int]] = []
    stop_sampling = threading.Event()
    box: dict[str, Any] = {}

    def sample(health: Any) -> None:
        while not stop_sampling.is_set():
            h = health()
            samples.append((time.perf_counter(), h["buffered"], h["prefetch"]))
            time.sleep(SAMPLE_EVERY)

    producer = subprocess.Popen(
        [sys.executable, __file__, "--produce", url, name, str(n), str(seconds)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert producer.stdin is not None
    assert producer.stdout is not None
    assert producer.stdout.readline().strip() == "ready"
    light_total = int(seconds / LIGHT_INTERVAL)

    def finished() -> bool:
        return probe.flood_done >= n and len(probe.light) >= light_total

    if kind == "thread":
        queue = connect(url, queue=name)
        worker = Worker(WorkerConfig(id="flood-probe"), probe, queue, prefetch=prefetch)
        probe.held = worker._loop.held  # the diagnosis reads the worker's own record
        worker.start()
        probe.warm.wait(10)
        sampler = threading.Thread(target=sample, args=(worker.health,), daemon=True)
        sampler.start()
        producer.stdin.write("go\n")
        producer.stdin.flush()
        deadline = time.perf_counter() + seconds + 120
        while not finished() and time.perf_counter() < deadline:
            time.sleep(0.01)
        worker.stop(10)
        queue.close()
    else:

        async def main() -> None:
            queue = await aconnect(url, queue=name)
            worker = AsyncWorker(WorkerConfig(id="flood-probe"), probe, queue, prefetch=prefetch)
            probe.held = worker._loop.held
            await worker.start()
            while not probe.warm.is_set():
                await asyncio.sleep(0.005)
            box["sampler"] = threading.Thread(target=sample, args=(worker.health,), daemon=True)
            box["sampler"].start()
            assert producer.stdin is not None
            producer.stdin.write("go\n")
            producer.stdin.flush()
            deadline = time.perf_counter() + seconds + 120
            while not finished() and time.perf_counter() < deadline:
                await asyncio.sleep(0.01)
            await worker.stop(10)
            await queue.close()

        asyncio.run(main())
    stop_sampling.set()
    info = json.loads(producer.stdout.readline())
    producer.wait(30)
    flood_from, flood_to, flood_end = info["flood_from"], info["flood_to"], probe.flood_last
    push = {float(t): float(d) for t, d in info["pushes"]}
    phases: dict[str, list[tuple[float, float, float, float]]] = {
        name: [] for name in ("before", "during", "pushing", "draining", "after")
    }
    for row in probe.light:
        if row[0] < flood_from:
            phases["before"].append(row)
        elif row[0] > flood_end:
            phases["after"].append(row)
        else:
            phases["during"].append(row)
            phases["pushing" if row[0] <= flood_to else "draining"].append(row)
    depth = [b for t, b, _ in samples if flood_from <= t <= flood_end]
    prefetch = [p for t, _, p in samples if flood_from <= t <= flood_end]
    return {
        "kind": kind,
        "load": os.getloadavg()[0],
        "drain_s": flood_end - flood_from,
        "flood_rate": n / max(1e-9, flood_end - flood_from),
        "push_s": flood_to - flood_from,
        "buffered_mean": statistics.fmean(depth) if depth else 0.0,
        "buffered_max": max(depth, default=0),
        "prefetch_mean": statistics.fmean(prefetch) if prefetch else 0.0,
        "missing_light": light_total - len(probe.light),
        **{phase: _summary(rows, push) for phase, rows in phases.items()},
    }


# ---------------------------------------------------------------------------- report
def _line(label: str, run: dict[str, Any]) -> str:
    d = run["during"]
    return (
        f"{label:<22} wait p50/p99 {d['wait'][0]:6.1f}/{d['wait'][1]:6.1f} ms  "
        f"push {d['push'][0]:4.1f}/{d['push'][1]:5.1f}  "
        f"queued {d['queued'][0]:5.1f}/{d['queued'][1]:6.1f}  "
        f"buffer {d['buffer'][0]:5.1f}/{d['buffer'][1]:6.1f}  "
        f"handoff {d['handoff'][0]:4.1f}/{d['handoff'][1]:5.1f}  "
        f"| pushing {run['pushing']['wait'][0]:4.1f}/{run['pushing']['wait'][1]:5.1f} "
        f"draining {run['draining']['wait'][0]:4.1f}/{run['draining']['wait'][1]:5.1f} "
        f"| before {run['before']['wait'][0]:4.1f}/{run['before']['wait'][1]:5.1f} "
        f"after {run['after']['wait'][0]:4.1f}/{run['after']['wait'][1]:5.1f}  "
        f"| buffered mean {run['buffered_mean']:5.1f} max {run['buffered_max']:3d} "
        f"prefetch {run['prefetch_mean']:5.1f}  flood {run['flood_rate']:6.0f}/s "
        f"(push {run['push_s']:.2f} s) load {run['load']:.2f}"
    )


def _child(
    src: str, url: str, kind: str, n: int, seconds: float, prefetch: int | None
) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=src)
    cmd = [sys.executable, __file__, "--one", kind, "--url", url]
    cmd += ["--n", str(n), "--seconds", str(seconds)]
    if prefetch is not None:
        cmd += ["--prefetch", str(prefetch)]
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


PARTS = ("wait", "push", "queued", "buffer", "handoff")


def _medians(runs: list[dict[str, Any]]) -> list[str]:
    """Per phase, each part's p50/p99 in ms: the median over the rounds."""

    def med(phase: str, key: str, i: int) -> float:
        return statistics.median(r[phase][key][i] for r in runs)

    lines = [
        f"    {phase:<9}"
        + "  ".join(f"{k} {med(phase, k, 0):5.1f}/{med(phase, k, 1):5.1f}" for k in PARTS)
        for phase in ("before", "during", "pushing", "draining", "after")
    ]
    rate = statistics.median(r["flood_rate"] for r in runs)
    depth = statistics.median(r["buffered_mean"] for r in runs)
    lines.append(f"    flood done at {rate:.0f} tasks/s, buffered mean {depth:.1f}")
    lines.extend(_f1_verdict(med("before", "wait", 0), med("before", "wait", 1), runs))
    return lines


def _f1_verdict(base50: float, base99: float, runs: list[dict[str, Any]]) -> list[str]:
    """The reliability plan's F1 criteria, with the light tasks pushed before the flood as
    the baseline: during the flood the light tenants' p99 wait <= max(1.5 x baseline p99,
    baseline p99 + 50 ms) and p50 <= 1.2 x baseline p50 (medians over the rounds)."""
    p50 = statistics.median(r["during"]["wait"][0] for r in runs)
    p99 = statistics.median(r["during"]["wait"][1] for r in runs)
    bound99 = max(1.5 * base99, base99 + 50.0)
    bound50 = 1.2 * base50

    def verdict(value: float, bound: float) -> str:
        return f"{value:.1f} ms <= {bound:.1f} ms: {'met' if value <= bound else 'NOT met'}"

    return [
        f"    F1, light tenants during the flood against before it: p99 {verdict(p99, bound99)};"
        f" p50 {verdict(p50, bound50)}"
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--kinds", default="thread,async")
    parser.add_argument("--compare", metavar="OLD_SRC", help="side by side with another build")
    parser.add_argument("--json", metavar="PATH", help="write every run's figures there")
    parser.add_argument(
        "--prefetch", type=int, help="a fixed prefetch for the worker (default: adaptive)"
    )
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a child of --compare
    parser.add_argument("--produce", nargs=4, help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.produce:
        url, name, n, seconds = opts.produce
        produce(url, name, int(n), float(seconds))
        return
    if opts.one:
        print(json.dumps(one_run(opts.url, opts.one, opts.n, opts.seconds, opts.prefetch)))
        return
    kinds = opts.kinds.split(",")
    builds = [("this", "")]
    if opts.compare:
        here = str(Path(__file__).resolve().parents[1] / "src")
        builds = [("old", str(Path(opts.compare).resolve())), ("new", here)]
    print(
        f"{os.cpu_count()} cpus, load {os.getloadavg()[0]:.2f}; light wait in ms, during the flood"
    )
    results: dict[tuple[str, str], list[dict[str, Any]]] = {}
    with EmbeddedValkey() as server:
        for r in range(opts.rounds):
            order = builds if r % 2 == 0 else builds[::-1]
            for kind in kinds:
                for label, src in order:
                    if opts.compare:
                        run = _child(src, server.url, kind, opts.n, opts.seconds, opts.prefetch)
                    else:
                        run = one_run(server.url, kind, opts.n, opts.seconds, opts.prefetch)
                    results.setdefault((label, kind), []).append(run)
                    print(_line(f"r{r + 1} {label} {kind}", run), flush=True)
    print(f"medians of {opts.rounds} rounds, p50/p99 in ms:")
    for (label, kind), runs in results.items():
        print(f"  {label} {kind}")
        print("\n".join(_medians(runs)))
    if opts.json:
        rows = [{"build": b, "kind": k, "runs": runs} for (b, k), runs in results.items()]
        Path(opts.json).write_text(json.dumps(rows))


if __name__ == "__main__":
    main()
