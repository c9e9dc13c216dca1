"""Throughput and latency of ONE worker on an embedded Valkey (prints numbers; not a test).

    uv run --no-sync python bench/bench_worker.py [--quick] [--rounds N] [--profile]
    uv run --no-sync python bench/bench_worker.py --compare OLD_SRC [--rounds N] [--quick]
    uv run --no-sync python bench/bench_worker.py --combined-ab [--rounds N] [--quick]
    uv run --no-sync python bench/bench_worker.py --compare-latency OLD_SRC [--rounds N] [--quick]
    uv run --no-sync python bench/bench_worker.py --latency-ab [--rounds N] [--quick]

Throughput: 20,000 no-op tasks over 100 tenants are pushed beforehand (push_batch, 1,000 per
call) into a fresh queue; a ``fairque_core.Worker`` (leases and fair claims, as always) is
started and timed until ``get_stats()["finished"]`` reaches 20,000 (polled every 5 ms on a
separate connection). Settings: max_concurrent_tasks 10 / 50 / 100, with the default prefetch
(adaptive, "auto"), with none (0) and with a fixed one. The claim and finish round trips are
counted on the worker's backend, and the server's time in scripts during the drain (INFO
commandstats, EVALSHA and FCALL usec) is printed per task: it is what every worker of a queue
shares, so it sets the ceiling of the whole queue, not of one worker.

Latency: a producer PROCESS (as in production: producers are other processes, and one sharing
the worker's GIL would slow both) pushes one task every 5 ms (200 tasks/s) with its push time
(``perf_counter``, the system-wide monotonic clock on Linux, read before the task is built and
pushed, as ``bench/peers`` does for every library) in the payload, to a worker that is
already running and idle; the handler records start - push. The producer warms up (connects,
pushes one untimed task) and its clock starts only when the worker has run that task and is
idle again, so a slow process start is not a burst. Also printed: the worker process's CPU
time and the script calls and BLPOPs per task (the push included), which a busy host disturbs
far less than the times.

Every measurement runs ``--rounds`` times (interleaved); best and median are printed, with the
load average, since the machine (2 cores) is shared and its load changes from second to second.

``--compare OLD_SRC``: side by side, defaults (``WorkerConfig()``'s cap 10, no ``prefetch``
argument) against tuned (cap 100, prefetch 50), for ``Worker`` and ``AsyncWorker`` (async no-op
handler), for two builds: the one on ``OLD_SRC`` (e.g. a git worktree's ``src``) and this one.
Each drain runs in a child process with that build on its ``PYTHONPATH``, against one shared
Valkey; the order of the builds alternates from round to round. Medians and ratios are printed
(new/old per setting, defaults/tuned and async/thread per build): on a shared machine the ratios
measured side by side mean more than the rates.
``--compare-latency OLD_SRC``: the latency measurement above (poll 1.0 and 0.1, cap 10) for
the build on ``OLD_SRC`` and this one, each run in a child process with that build on its
``PYTHONPATH``, the order alternating by round; medians of p50 and p99 and of the per-round
new/old ratios, with the load averages. ``--latency-ab``: the same on this build with the
listener's early start and the listener's least wait (ADR 46) off, each alone and both on.
``--combined-ab``: the same four settings and small batches (4 places, no prefetch) on this
build, with the workers' combined
finish-and-claim call (ADR 40: a claim that carries acknowledgements is one script call) off,
on (the default: up to ``combined_acks_limit`` acks and places) and always (no limit), the
order rotating; rate, server script us per task and the worker's queue calls, medians and
the medians of the per-round ratios to off.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import multiprocessing
import os
import pstats
import statistics
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _child import run_child

# public names only: --compare runs this file against older builds too
from fairque_core import AsyncWorker, FairQueue, Task, TaskHandler, Worker, WorkerConfig
from fairque_redis import aconnect, connect
from fairque_redis.servers.embedded import EmbeddedValkey

TENANTS = 100
#: A drain that takes longer than this has hung (e.g. a script error): it fails, saying why.
DRAIN_TIMEOUT = 120.0


class Noop(TaskHandler):
    def process_task(self, task: Task) -> object:
        return None

    async def process_task_async(self, task: Task) -> object:
        return None


class Stamp(TaskHandler):
    """Records start - push time (the producer's perf_counter in the payload)."""

    def __init__(self) -> None:
        self.delays: list[float] = []
        self.warmed = False

    def process_task(self, task: Task) -> object:
        pushed_at = float(task.payload["t"])
        if pushed_at >= 0:  # not the warm-up task
            self.delays.append(time.perf_counter() - pushed_at)
        else:
            self.warmed = True
        return None


class Counter:
    """Counts calls of one backend method (set on the instance, so only this queue's)."""

    def __init__(self, target: Any, name: str) -> None:
        self.calls = 0
        inner: Callable[..., Any] = getattr(target, name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return inner(*args, **kwargs)

        setattr(target, name, counted)


def fresh_queue(url: str, tag: str) -> FairQueue:
    return connect(url, queue=f"bw-{tag}-{uuid.uuid4().hex[:8]}")


def fill(queue: FairQueue, total: int) -> None:
    for start in range(0, total, 1000):
        queue.push_batch(
            [
                Task.create(f"tenant-{i % TENANTS}", payload={"n": i})
                for i in range(start, min(total, start + 1000))
            ]
        )


def prefetch_kw(prefetch: int | None) -> dict[str, int]:
    """None: the worker's default (no ``prefetch`` argument)."""
    return {} if prefetch is None else {"prefetch": prefetch}


def drain(url: str, total: int, cap: int, prefetch: int | None) -> dict[str, Any]:
    queue = fresh_queue(url, f"d{cap}p{prefetch}")
    fill(queue, total)
    monitor = connect(url, queue=queue.name)
    claims = Counter(queue.backend, "claim")
    finishes = Counter(queue.backend, "finish_batch")
    heartbeats = Counter(queue.backend, "heartbeat")
    both = Counter(queue.backend, "finish_and_claim") if combines(queue) else None
    config = WorkerConfig(id=f"bench-{cap}", max_concurrent_tasks=cap, poll_interval_seconds=0.1)
    worker = Worker(config, Noop(), queue, **prefetch_kw(prefetch))
    server = monitor.backend.client  # type: ignore[attr-defined]
    server.config_resetstat()
    load = os.getloadavg()[0]
    cpu = time.process_time()
    start = time.perf_counter()
    worker.start()
    deadline = start + DRAIN_TIMEOUT
    while monitor.get_stats()["finished"] < total:
        if time.perf_counter() > deadline:
            raise RuntimeError(f"drain timed out: worker {worker.health()}")
        time.sleep(0.005)
    elapsed = time.perf_counter() - start
    cpu = time.process_time() - cpu  # this process: the worker's threads and the monitor
    worker.stop(10)
    # server time in scripts during the drain (claims, finishes, the monitor's stats reads)
    script_us = scripts_usec(server.info("commandstats"))
    stats = worker.health()
    queue.close()
    monitor.close()
    return {
        "rate": total / elapsed,
        "claims": claims.calls,
        "finishes": finishes.calls,
        "combined": 0 if both is None else both.calls,
        "heartbeats": heartbeats.calls,
        "processed": stats["processed"],
        "server_us": script_us / total,
        "cpu_us": cpu / total * 1e6,
        "load": load,
    }


def combines(queue: Any) -> bool:
    """Whether this build's backend has ``finish_and_claim`` (ADR 40; older builds: no)."""
    return hasattr(queue.backend, "finish_and_claim")


def scripts_usec(commandstats: dict[str, Any]) -> float:
    """The server's time in scripts: EVALSHA and FCALL (Redis Functions, ADR 41)."""
    calls = ("cmdstat_evalsha", "cmdstat_fcall")
    return sum(float(commandstats.get(name, {}).get("usec", 0)) for name in calls)


#: --combined-ab's modes: (combined_acks, combined_acks_limit); "on" is the default
COMBINED_MODES = {"off": (False, None), "on": (True, 40), "always": (True, None)}


def set_combined(mode: str) -> None:
    """The workers' combined finish-and-claim call (ADR 40) as ``mode`` says, for the A/B."""
    from fairque_core.app.worker.driver import WorkerDriver

    on, limit = COMBINED_MODES[mode]
    WorkerDriver.combined_acks = on  # type: ignore[misc]
    WorkerDriver.combined_acks_limit = limit  # type: ignore[misc]


async def drain_async(url: str, total: int, cap: int, prefetch: int | None) -> dict[str, Any]:
    """As :func:`drain`, with an ``AsyncWorker`` and an async no-op handler."""
    filler = fresh_queue(url, f"a{cap}p{prefetch}")
    fill(filler, total)
    filler.close()
    queue = await aconnect(url, queue=filler.name)
    monitor = await aconnect(url, queue=filler.name)
    claims = Counter(queue.backend, "claim")
    finishes = Counter(queue.backend, "finish_batch")
    heartbeats = Counter(queue.backend, "heartbeat")
    both = Counter(queue.backend, "finish_and_claim") if combines(queue) else None
    config = WorkerConfig(id=f"bench-a{cap}", max_concurrent_tasks=cap, poll_interval_seconds=0.1)
    worker = AsyncWorker(config, Noop(), queue, **prefetch_kw(prefetch))
    server = connect(url, queue=filler.name).backend.client  # type: ignore[attr-defined]
    server.config_resetstat()
    load = os.getloadavg()[0]
    start = time.perf_counter()
    cpu = time.process_time()
    await worker.start()
    deadline = start + DRAIN_TIMEOUT
    while (await monitor.get_stats())["finished"] < total:
        if time.perf_counter() > deadline:
            raise RuntimeError(f"drain timed out: worker {worker.health()}")
        await asyncio.sleep(0.005)
    elapsed = time.perf_counter() - start
    cpu = time.process_time() - cpu
    await worker.stop(10)
    script_us = scripts_usec(server.info("commandstats"))
    server.close()
    stats = worker.health()
    await queue.close()
    await monitor.close()
    return {
        "rate": total / elapsed,
        "claims": claims.calls,
        "finishes": finishes.calls,
        "combined": 0 if both is None else both.calls,
        "heartbeats": heartbeats.calls,
        "processed": stats["processed"],
        "server_us": script_us / total,
        "cpu_us": cpu / total * 1e6,
        "load": load,
    }


#: --compare: (name, worker kind, cap, prefetch); prefetch None: the worker's default
COMPARE = [
    ("thread defaults", "thread", 10, None),
    ("thread tuned", "thread", 100, 50),
    ("async defaults", "async", 10, None),
    ("async tuned", "async", 100, 50),
]
#: --combined-ab's settings: --compare's, and small batches (4 places, no prefetch)
COMBINED_SETTINGS = [
    *COMPARE,
    ("thread small", "thread", 4, 0),
    ("async small", "async", 4, 0),
]


def one_drain(url: str, kind: str, total: int, cap: int, prefetch: int | None) -> dict[str, Any]:
    if kind == "async":
        return asyncio.run(drain_async(url, total, cap, prefetch))
    return drain(url, total, cap, prefetch)


def compare(old_src: str, rounds: int, total: int) -> None:
    """Both builds side by side, each drain in a child process (see the module docstring)."""
    builds = {"old": str(Path(old_src).resolve()), "new": str(Path(__file__).parents[1] / "src")}
    rates: dict[tuple[str, str], list[float]] = {}
    cpus: dict[tuple[str, str], list[float]] = {}
    with EmbeddedValkey() as server:
        for round_no in range(rounds):
            order = ["old", "new"] if round_no % 2 == 0 else ["new", "old"]
            for name, kind, cap, prefetch in COMPARE:
                for build in order:
                    spec = json.dumps([server.url, kind, total, cap, prefetch])
                    result = run_child([__file__, "--one", spec], builds[build])
                    rates.setdefault((build, name), []).append(result["rate"])
                    # older copies of this file measured no CPU time
                    cpus.setdefault((build, name), []).append(result.get("cpu_us", 0.0))
                    print(
                        f"round {round_no + 1} {build:>3} {name:<16} {result['rate']:>8,.0f}/s "
                        f"cpu {result.get('cpu_us', 0.0):5.1f} us/task "
                        f"claims {result['claims']:>5} finishes {result['finishes']:>5} "
                        f"load {result['load']:.2f}",
                        flush=True,
                    )
    med = {key: statistics.median(values) for key, values in rates.items()}
    print(f"\nmedians of {rounds} rounds, {total:,} no-op tasks, tasks/s")
    print(
        f"{'setting':<16} {'old':>8} {'new':>8} {'new/old':>8} {'x round':>8}   "
        f"{'cpu old':>7} {'cpu new':>7} {'x round':>8}"
    )
    for name, *_ in COMPARE:
        old, new = med[("old", name)], med[("new", name)]
        olds, news = rates[("old", name)], rates[("new", name)]
        per_round = statistics.median(b / a for a, b in zip(olds, news, strict=True))
        cpu_old, cpu_new = cpus[("old", name)], cpus[("new", name)]
        cpu_round = statistics.median(
            b / a if a else 0.0 for a, b in zip(cpu_old, cpu_new, strict=True)
        )
        print(
            f"{name:<16} {old:>8,.0f} {new:>8,.0f} {new / old:>8.2f} {per_round:>8.2f}   "
            f"{statistics.median(cpu_old):>7.1f} {statistics.median(cpu_new):>7.1f} "
            f"{cpu_round:>8.2f}"
        )
    print(
        "(x round: median of the per-round new/old ratios; cpu: the drain's process CPU time "
        "per task in us, the worker's threads and the monitor's stats reads)"
    )
    print(f"\n{'ratio':<34} {'old':>6} {'new':>6}")
    for label, num, den in (
        ("thread defaults / thread tuned", "thread defaults", "thread tuned"),
        ("async defaults / async tuned", "async defaults", "async tuned"),
        ("async defaults / thread defaults", "async defaults", "thread defaults"),
        ("async tuned / thread tuned", "async tuned", "thread tuned"),
    ):
        cells = [med[(b, num)] / med[(b, den)] for b in ("old", "new")]
        print(f"{label:<34} {cells[0]:>6.2f} {cells[1]:>6.2f}")


def combined_ab(rounds: int, total: int) -> None:
    """``--combined-ab``: the workers' combined finish-and-claim call (ADR 40) off, on and
    always, in one run of this build: each drain in a child process, the order of the modes
    rotating from round to round. Drain rate and the server's script time (EVALSHA, FCALL) per
    task (INFO commandstats: scripts of the drain and of the monitor's stats reads)."""
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    modes = list(COMBINED_MODES)
    with EmbeddedValkey() as server:
        for round_no in range(rounds):
            order = modes[round_no % len(modes) :] + modes[: round_no % len(modes)]
            for name, kind, cap, prefetch in COMBINED_SETTINGS:
                for mode in order:
                    spec = json.dumps([server.url, kind, total, cap, prefetch, mode])
                    result = run_child([__file__, "--one", spec])
                    runs.setdefault((mode, name), []).append(result)
                    print(
                        f"round {round_no + 1} {mode:>6} {name:<16} {result['rate']:>8,.0f}/s "
                        f"server {result['server_us']:5.1f} us/task claims {result['claims']:>5} "
                        f"finishes {result['finishes']:>5} combined {result['combined']:>5} "
                        f"load {result['load']:.2f}",
                        flush=True,
                    )
    print(f"\nmedians of {rounds} rounds, {total:,} no-op tasks (2-core shared machine: noisy)")
    head = ("setting", "mode", "tasks/s", "x off", "us/task", "x off", "calls")
    print("{:<16} {:>6} {:>8} {:>6} {:>8} {:>6} {:>6}".format(*head))
    for name, *_ in COMBINED_SETTINGS:
        base = runs[("off", name)]
        for mode in modes:
            got = runs[(mode, name)]
            rate = statistics.median(r["rate"] for r in got)
            us = statistics.median(r["server_us"] for r in got)
            calls = statistics.median(r["claims"] + r["finishes"] + r["combined"] for r in got)
            rx = statistics.median(a["rate"] / b["rate"] for a, b in zip(got, base, strict=True))
            ux = statistics.median(
                a["server_us"] / b["server_us"] for a, b in zip(got, base, strict=True)
            )
            row = f"{name:<16} {mode:>6} {rate:>8,.0f} {rx:>6.2f} {us:>8.1f} {ux:>6.2f}"
            print(f"{row} {calls:>6,.0f}")
    print("(x off: median of the per-round ratios to the same round's off)")


#: The commands counted per task by the latency measurement: the script calls (push, claim,
#: finish, next_due, heartbeat ...) and the blocking pops (the commands scripts make inside
#: count in INFO commandstats too, so not every command is counted)
TOP_LEVEL = ("evalsha", "fcall", "fcall_ro", "blpop")


def produce(url: str, queue: str, count: int, ready: Any, go: Any) -> None:
    """The producer process: warm up (connect, load scripts), say ``ready``, wait for ``go``,
    then one push every 5 ms (on a clock started at ``go``: a slow start is no burst)."""
    producer_q = connect(url, queue=queue)
    producer_q.push(Task.create("warm-up", payload={"t": -1.0}))  # connect and load scripts
    ready.set()
    go.wait()
    next_at = time.perf_counter()
    for i in range(count):
        next_at += 0.005
        pause = next_at - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
        producer_q.push(Task.create(f"tenant-{i % TENANTS}", payload={"t": time.perf_counter()}))
    producer_q.close()


def latency(url: str, count: int, poll: float, cap: int) -> dict[str, float]:
    queue = fresh_queue(url, "lat")
    handler = Stamp()
    config = WorkerConfig(id="bench-lat", max_concurrent_tasks=cap, poll_interval_seconds=poll)
    worker = Worker(config, handler, queue)
    server = queue.backend.client  # type: ignore[attr-defined]
    worker.start()
    spawn = multiprocessing.get_context("spawn")
    ready, go = spawn.Event(), spawn.Event()
    producer = spawn.Process(target=produce, args=(url, queue.name, count, ready, go))
    producer.start()
    if not ready.wait(60):
        raise RuntimeError("the producer did not start")
    deadline = time.monotonic() + 10
    while not handler.warmed and time.monotonic() < deadline:  # its warm-up task ran
        time.sleep(0.01)
    # the worker is idle again (and its idle poll as long as it gets) when the first timed
    # task is pushed
    time.sleep(max(0.3, 2 * poll))
    load = os.getloadavg()[0]
    server.config_resetstat()
    cpu = time.process_time()
    go.set()
    deadline = time.monotonic() + 20 + poll
    while len(handler.delays) < count and time.monotonic() < deadline:
        time.sleep(0.01)
    # the worker process's CPU time (all its threads) and the server's calls, per task:
    # what the worker spends to wait and start, far less noisy than the times on a busy host
    cpu = time.process_time() - cpu
    stats = server.info("commandstats")
    calls = sum(int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in TOP_LEVEL)
    producer.join(10)
    worker.stop(10)
    queue.close()
    delays = sorted(handler.delays)
    return {
        "p50": delays[len(delays) // 2] * 1000,
        "p99": delays[int(len(delays) * 0.99)] * 1000,
        "n": float(len(delays)),
        "load": load,
        "cpu_us": cpu / max(1, len(delays)) * 1e6,
        "calls": calls / max(1, len(delays)),
    }


#: --latency-ab's modes: (the hand-off accelerator on, listen_floor or None: the default); "on":
#: defaults. The hand-off (ADR 46's listener start and ADR 51's chained starts, one switch since
#: ADR 65) is turned off through ``FAIRQUE_ACCEL_OFF=handoff`` in the child that measures.
LATENCY_MODES = {
    "off": (False, 0.0),
    "starts": (True, 0.0),
    "floor": (False, None),
    "on": (True, None),
}
#: --compare-latency / --latency-ab settings: (poll_interval_seconds, max_concurrent_tasks)
LATENCY_SETTINGS = [(1.0, 10), (0.1, 10)]


def set_latency_mode(mode: str) -> None:
    """The hand-off and the listener's least wait (ADR 46) as ``mode`` says, for the A/B."""
    from fairque_core.app.worker.driver import WorkerDriver

    starts, floor = LATENCY_MODES[mode]
    if not starts:
        os.environ["FAIRQUE_ACCEL_OFF"] = "handoff"  # read by the workers built after this
    if floor is not None:
        WorkerDriver.listen_floor = floor  # type: ignore[misc]


def latency_runs(
    url: str, builds: dict[str, tuple[str | None, str | None]], rounds: int, count: int
) -> dict[tuple[str, float, int], list[dict[str, float]]]:
    """Each build (name -> (PYTHONPATH or None: this one's, latency mode or None)) measured
    for every setting, each run in a child process, the order rotating by round."""
    names = list(builds)
    runs: dict[tuple[str, float, int], list[dict[str, float]]] = {}
    for round_no in range(rounds):
        order = names[round_no % len(names) :] + names[: round_no % len(names)]
        for poll, cap in LATENCY_SETTINGS:
            for name in order:
                path, mode = builds[name]
                spec = json.dumps([url, count, poll, cap, mode])
                got = run_child([__file__, "--one-latency", spec], path)
                runs.setdefault((name, poll, cap), []).append(got)
                print(
                    f"round {round_no + 1} {name:>6} poll {poll:>4} cap {cap:>3} "
                    f"p50 {got['p50']:6.2f} p99 {got['p99']:6.2f} ms  n {got['n']:.0f} "
                    f"cpu {got.get('cpu_us', 0):5.0f} us calls {got.get('calls', 0):4.1f} "
                    f"/task load {got['load']:.2f}",
                    flush=True,
                )
    return runs


def latency_table(
    runs: dict[tuple[str, float, int], list[dict[str, float]]], names: list[str], base: str
) -> None:
    """Medians of p50/p99 per build and setting, and the medians of the per-round ratios to
    ``base`` (same round, same setting)."""
    x = "x " + base
    print(
        f"\n{'poll_s':>6} {'cap':>4} {'build':>6} {'p50 ms':>7} {x:>7} {'p99 ms':>7} {x:>7} "
        f"{'cpu us':>7} {x:>7} {'calls':>7} {x:>7}  loads"
    )
    for poll, cap in LATENCY_SETTINGS:
        ref = runs[(base, poll, cap)]
        for name in names:
            got = runs[(name, poll, cap)]
            cells = []
            for key in ("p50", "p99", "cpu_us", "calls"):
                med = statistics.median(r[key] for r in got)
                ratio = statistics.median(a[key] / b[key] for a, b in zip(got, ref, strict=True))
                cells.append(f"{med:>7.2f} {ratio:>7.2f}")
            print(f"{poll:>6} {cap:>4} {name:>6} {' '.join(cells)}  {loads(got)}")
    print(
        "(x: median of the per-round ratios; 2-core shared machine: noisy, read the ratios; "
        "cpu: the worker process's CPU time per task; calls: script calls and BLPOPs per task, "
        "the producer's push included)"
    )


def loads(runs: list[dict[str, Any]] | list[dict[str, float]]) -> str:
    return ", ".join(f"{r['load']:.2f}" for r in runs)


def summary(values: list[float], high_is_best: bool = True) -> tuple[float, float]:
    best = max(values) if high_is_best else min(values)
    return best, statistics.median(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller runs")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="cProfile one drain (cap 50)")
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument(
        "--compare", metavar="OLD_SRC", help="defaults vs tuned, this build vs OLD_SRC's"
    )
    parser.add_argument(
        "--combined-ab",
        action="store_true",
        help="the workers' combined finish-and-claim call on vs off (ADR 40), this build",
    )
    parser.add_argument(
        "--compare-latency", metavar="OLD_SRC", help="latency, this build vs OLD_SRC's"
    )
    parser.add_argument(
        "--latency-ab",
        action="store_true",
        help="latency with the listener's early start and least wait (ADR 46) off / on",
    )
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a child of --compare
    parser.add_argument("--one-latency", help=argparse.SUPPRESS)  # a child of the above
    opts = parser.parse_args()
    total = 4_000 if opts.quick else 20_000
    lat_count = 300 if opts.quick else 1_000
    if opts.one_latency:
        url, count, poll, cap, mode = json.loads(opts.one_latency)
        if mode is not None:  # --latency-ab's children only (older builds have no switch)
            set_latency_mode(mode)
        print(json.dumps(latency(url, count, poll, cap)))
        return
    if opts.compare_latency or opts.latency_ab:
        builds: dict[str, tuple[str | None, str | None]]
        if opts.compare_latency:
            here = str(Path(__file__).parents[1] / "src")
            builds = {"old": (str(Path(opts.compare_latency).resolve()), None), "new": (here, None)}
        else:
            builds = {mode: (None, mode) for mode in LATENCY_MODES}
        print(f"cpus={os.cpu_count()} loadavg at start={os.getloadavg()}")
        with EmbeddedValkey() as server:
            runs = latency_runs(server.url, builds, opts.rounds, lat_count)
        print(
            f"\nenqueue-to-start latency at 200 tasks/s ({lat_count} tasks), {opts.rounds} rounds"
        )
        latency_table(runs, list(builds), "old" if opts.compare_latency else "off")
        print(f"loadavg at end={os.getloadavg()}")
        return
    if opts.one:
        url, kind, count, cap, prefetch, *combined = json.loads(opts.one)
        if combined:  # --combined-ab's children only (older builds have no switch)
            set_combined(combined[0])
        print(json.dumps(one_drain(url, kind, count, cap, prefetch)))
        return
    if opts.compare:
        compare(opts.compare, opts.rounds, total)
        return
    if opts.combined_ab:
        combined_ab(opts.rounds, total)
        return
    # prefetch None: the worker's default (adaptive, ADR 30)
    settings = [(10, None), (10, 0), (10, 10), (50, None), (50, 0), (100, None), (100, 50)]
    lat_settings = LATENCY_SETTINGS
    print(f"cpus={os.cpu_count()} loadavg at start={os.getloadavg()}")
    with EmbeddedValkey() as server:
        if opts.profile:
            profile_drain(server.url, total)
            return
        drains: dict[tuple[int, int | None], list[dict[str, Any]]] = {s: [] for s in settings}
        lats: dict[tuple[float, int], list[dict[str, float]]] = {s: [] for s in lat_settings}
        for _ in range(opts.rounds):
            if not opts.skip_throughput:
                for cap, prefetch in settings:
                    drains[(cap, prefetch)].append(drain(server.url, total, cap, prefetch))
            if not opts.skip_latency:
                for poll, cap in lat_settings:
                    lats[(poll, cap)].append(latency(server.url, lat_count, poll, cap))
    if not opts.skip_throughput:
        print(f"\nthroughput: {total:,} no-op tasks, {TENANTS} tenants, one worker")
        print(
            f"{'cap':>4} {'prefetch':>8} {'best/s':>8} {'median/s':>9}  claims finishes  "
            "srv us/task  load"
        )
        for (cap, prefetch), runs in drains.items():
            best, med = summary([r["rate"] for r in runs])
            top = max(runs, key=lambda r: r["rate"])
            shown = "auto" if prefetch is None else str(prefetch)
            print(
                f"{cap:>4} {shown:>8} {best:>8,.0f} {med:>9,.0f}  "
                f"{top['claims']:>6} {top['finishes']:>8}  {top['server_us']:>11.1f}  "
                f"{loads(runs)}"
            )
    if not opts.skip_latency:
        print(f"\nenqueue-to-start latency at 200 tasks/s ({lat_count} tasks), ms")
        print(
            f"{'poll_s':>6} {'cap':>4} {'p50 best':>9} {'p50 med':>8} {'p99 best':>9} "
            f"{'p99 med':>8}  load"
        )
        for (poll, cap), lat_runs in lats.items():
            p50b, p50m = summary([r["p50"] for r in lat_runs], high_is_best=False)
            p99b, p99m = summary([r["p99"] for r in lat_runs], high_is_best=False)
            print(
                f"{poll:>6} {cap:>4} {p50b:>9.2f} {p50m:>8.2f} {p99b:>9.2f} {p99m:>8.2f}  "
                f"{loads(lat_runs)}"
            )


def profile_drain(url: str, total: int) -> None:
    """cProfile of the worker's control loop and pool threads during one drain (cap 50)."""
    prof = cProfile.Profile()
    original = Worker._main

    def profiled(self: Worker) -> None:
        prof.enable()
        try:
            original(self)
        finally:
            prof.disable()

    Worker._main = profiled  # type: ignore[method-assign]
    try:
        result = drain(url, total, 50, 0)
    finally:
        Worker._main = original  # type: ignore[method-assign]
    print(result)
    pstats.Stats(prof).sort_stats("cumulative").print_stats(40)
    pstats.Stats(prof).sort_stats("tottime").print_stats(30)


if __name__ == "__main__":
    main()
