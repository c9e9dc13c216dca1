"""``fairque demo``: fair scheduling under a flood, measured live on a real server.

Two phases run on one Valkey server (embedded unless ``--url`` is given), each on its own
queue so neither sees the other's leftovers:

1. *baseline*: busy tenants keep a standing backlog, light tenants trickle a few tasks a
   second; no flood. This records the light tenants' normal wait.
2. *flood*: the same, plus the ``flood`` tenant pushing twenty times as many tasks as the
   others on average (with ``push_batch``), so its backlog grows without bound.

A pool of worker threads drains the queue with ``claim_batch`` / ``finish_batch``; every task
"works" for ``--work-ms`` milliseconds, which bounds the service rate and keeps the queue
contended (fairness only shows when there is contention). The figures (service shares, Jain's
index, waits) are computed by the pure functions of :mod:`fairque_cli.metrics`.
"""

from __future__ import annotations

import contextlib
import functools
import json
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TextIO

import attrs

from fairque_cli import metrics
from fairque_cli.metrics import PhaseResult, TenantResult, TenantSpec
from fairque_cli.term import LiveView, bold, color, format_table
from fairque_core import Priority, Task
from fairque_core.app.engine.queue import FairQueue
from fairque_core.settings.config import mask_url

__all__ = ["DemoOptions", "phase_plan", "run_demo"]

_TICK = 0.005
_SAMPLE_EVERY = 0.05
_PUSH_CHUNK = 50  # a push_batch runs as one script: big ones hold up every claim
_PHASE_GAP = 0.2  # teardown allowance per phase, inside the duration
_SWITCH_INTERVAL = 0.0005


@attrs.define(kw_only=True)
class DemoOptions:
    """Knobs of the demo (the CLI flags)."""

    tenants: int = 6
    duration: float = 15.0
    workers: int = 4
    work_ms: float = 2.0
    batch: int = 2
    light_rate: float = 15.0  # tasks per second per light tenant
    flood_factor: float = 20.0
    standing_backlog: int = 200  # busy tenants are topped up below this many waiting tasks
    url: str | None = None
    json_path: str | None = None
    baseline_fraction: float = 0.3
    #: run both phases on this queue (so ``fairque dashboard --queue NAME`` can follow them);
    #: it must be empty, and it is emptied after each phase. None: a fresh name per phase.
    queue: str | None = None


def phase_plan(duration: float, baseline_fraction: float = 0.3) -> tuple[float, float]:
    """``(baseline seconds, flood seconds)`` that fit in ``duration`` with teardown time."""
    if duration < 2.0:
        raise ValueError("--duration must be at least 2 seconds")
    usable = duration - 2 * _PHASE_GAP
    baseline = max(0.75, usable * baseline_fraction)
    return baseline, usable - baseline


class _Tally:
    """Per-tenant counters shared by the threads of one phase (guarded by ``lock``)."""

    def __init__(self, specs: Sequence[TenantSpec]) -> None:
        self.lock = threading.Lock()
        self.specs = list(specs)
        self.pushed = dict.fromkeys((s.name for s in specs), 0)
        self.started = dict.fromkeys((s.name for s in specs), 0)
        self.done = dict.fromkeys((s.name for s in specs), 0)
        self.waits: dict[str, list[float]] = {s.name: [] for s in specs}
        # Tasks started by anyone between a light task's push and its start ("served ahead").
        self.ahead: dict[str, list[int]] = {s.name: [] for s in specs}
        self.started_total = 0
        self.mark: dict[str, int] = {}  # light task id -> started_total just before its push
        self.samples = 0
        self.waiting_samples = dict.fromkeys((s.name for s in specs), 0)

    def add_pushed(self, name: str, count: int) -> None:
        with self.lock:
            self.pushed[name] += count

    def waiting(self, name: str) -> int:
        return self.pushed[name] - self.started[name]

    def sample(self) -> None:
        with self.lock:
            self.samples += 1
            for spec in self.specs:
                if self.waiting(spec.name) > 0:
                    self.waiting_samples[spec.name] += 1

    def result(self, phase: str, seconds: float) -> PhaseResult:
        with self.lock:
            tenants = tuple(
                TenantResult(
                    name=s.name,
                    tier=s.tier,
                    weight=s.weight,
                    role=s.role,
                    pushed=self.pushed[s.name],
                    done=self.done[s.name],
                    waits=tuple(self.waits[s.name]),
                    ahead=tuple(self.ahead[s.name]),
                    backlogged_fraction=(
                        self.waiting_samples[s.name] / self.samples if self.samples else 0.0
                    ),
                )
                for s in self.specs
            )
        return PhaseResult(name=phase, seconds=seconds, tenants=tenants)


class _Phase:
    """One measured run: producers and workers as threads around one FairQueue."""

    def __init__(
        self, name: str, queue: FairQueue, specs: Sequence[TenantSpec], opts: DemoOptions
    ) -> None:
        self.name = name
        self.queue = queue
        self.specs = list(specs)
        self.opts = opts
        self.tally = _Tally(specs)
        self.stop = threading.Event()
        self.errors: list[BaseException] = []
        self._threads: list[threading.Thread] = []

    # ---- threads ---------------------------------------------------------------------------
    def _guard(self, target: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                target()
            except BaseException as exc:
                self.errors.append(exc)
                self.stop.set()

        return run

    def _spawn(self, name: str, target: Callable[[], None]) -> None:
        thread = threading.Thread(target=self._guard(target), name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _push(self, name: str, count: int) -> None:
        for start in range(0, count, _PUSH_CHUNK):
            n = min(_PUSH_CHUNK, count - start)
            tasks = [
                Task.create(name, Priority.NORMAL, {"n": start + i}, name="demo.work")
                for i in range(n)
            ]
            self.queue.push_batch(tasks)
            self.tally.add_pushed(name, n)

    def _heavy_producer(self) -> None:
        busy = [s.name for s in self.specs if s.role == "busy"]
        flood = [s.name for s in self.specs if s.role == "flood"]
        others = [s.name for s in self.specs if s.role != "flood"]
        low = self.opts.standing_backlog
        while not self.stop.is_set():
            for name in busy:
                with self.tally.lock:
                    short = low - self.tally.waiting(name)
                if short > low // 2:
                    self._push(name, short + low)
            for name in flood:
                with self.tally.lock:
                    mean = sum(self.tally.pushed[o] for o in others) / max(1, len(others))
                    behind = int(self.opts.flood_factor * mean) - self.tally.pushed[name]
                if behind > 0:
                    self._push(name, min(behind, 4 * _PUSH_CHUNK))
            self.stop.wait(_TICK)

    def _light_producer(self) -> None:
        light = [s.name for s in self.specs if s.role == "light"]
        if not light or self.opts.light_rate <= 0:
            return
        period = 1.0 / self.opts.light_rate
        next_at = time.monotonic()
        while not self.stop.is_set():
            tasks = [Task.create(name, Priority.NORMAL, {"light": True}) for name in light]
            with self.tally.lock:
                for task in tasks:
                    self.tally.mark[task.task_id] = self.tally.started_total
            self.queue.push_batch(tasks)
            for name in light:
                self.tally.add_pushed(name, 1)
            next_at += period
            self.stop.wait(max(0.0, next_at - time.monotonic()))

    def _worker(self, index: int) -> None:
        worker_id = f"demo-{index}"
        work = self.opts.work_ms / 1000.0
        tally = self.tally
        while not self.stop.is_set():
            tasks = self.queue.claim_batch(self.opts.batch, worker_id=worker_id)
            if not tasks:
                self.stop.wait(_TICK)
                continue
            for task in tasks:
                began = time.time()
                with tally.lock:
                    tally.started[task.tenant] += 1
                    tally.waits[task.tenant].append(max(0.0, began - task.created_at))
                    mark = tally.mark.pop(task.task_id, None)
                    if mark is not None:
                        tally.ahead[task.tenant].append(tally.started_total - mark)
                    tally.started_total += 1
                time.sleep(work)  # the "work"
            flags = self.queue.finish_batch([(task, None) for task in tasks])
            with tally.lock:
                for task, ok in zip(tasks, flags, strict=False):
                    if ok:
                        tally.done[task.tenant] += 1

    # ---- the run ---------------------------------------------------------------------------
    def run(self, seconds: float, on_tick: Callable[[_Phase, float], None]) -> PhaseResult:
        for spec in self.specs:
            self.queue.set_tenant_weight(spec.name, spec.weight)
        self._spawn(f"{self.name}-heavy", self._heavy_producer)
        self._spawn(f"{self.name}-light", self._light_producer)
        started = time.monotonic()
        for index in range(self.opts.workers):
            self._spawn(f"{self.name}-worker-{index}", functools.partial(self._worker, index))
        deadline = started + seconds
        while not self.stop.is_set():
            now = time.monotonic()
            if now >= deadline:
                break
            self.tally.sample()
            on_tick(self, now - started)
            self.stop.wait(min(_SAMPLE_EVERY, max(0.0, deadline - now)))
        elapsed = time.monotonic() - started
        self.stop.set()
        for thread in self._threads:
            thread.join(timeout=5.0)
        if self.errors:
            raise self.errors[0]
        return self.tally.result(self.name, elapsed)


# ---- rendering -------------------------------------------------------------------------------


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.1f}"


def _table(result: PhaseResult) -> list[str]:
    heavy = metrics.backlogged(result.tenants)
    share = metrics.shares(heavy)
    rows = []
    for t in result.tenants:
        svc, wshare = share.get(t.name, (None, None))
        rows.append(
            [
                t.name,
                t.tier,
                f"{t.weight:g}",
                t.role,
                str(t.pushed),
                str(t.done),
                str(t.pushed - len(t.waits)),
                "-" if svc is None else f"{svc:.1%}",
                "-" if wshare is None else f"{wshare:.1%}",
                _ms(t.p50),
                _ms(t.p99),
            ]
        )
    header = [
        "tenant",
        "tier",
        "w",
        "role",
        "pushed",
        "done",
        "waiting",
        "svc share",
        "w share",
        "p50 ms",
        "p99 ms",
    ]
    return format_table(header, rows, right=(2, 4, 5, 6, 7, 8, 9, 10))


def _headline(result: PhaseResult, total: float | None = None) -> str:
    heavy = metrics.backlogged(result.tenants)
    jain = metrics.weighted_jain(heavy) if len(heavy) >= 2 else None
    clock = f"{result.seconds:4.1f}s" + (f"/{total:.1f}s" if total else "")
    jain_text = "-" if jain is None else f"{jain:.4f}"
    return (
        f"[{result.name}] {clock}  done {result.done}  ({result.throughput:,.0f} tasks/s)  "
        f"backlogged {len(heavy)}  Jain {jain_text}"
    )


EXPLANATION = """\
What the numbers mean
  svc share  a backlogged tenant's share of the tasks completed by all backlogged tenants;
  w share    its weight divided by the weights of all backlogged tenants. Weighted fair
             queuing promises that the two agree, whatever the size of each backlog:
             the flood tenant pushes ~20x more than the others and still gets only its
             weight's share.
  Jain       Jain's fairness index over done/weight of the backlogged tenants: 1.0 is
             perfectly weight-proportional, 1/n means one tenant got everything.
  p50/p99    wait from push to start of work. Light tenants (a trickle of tasks, never
             backlogged) should wait about as long with the flood as without it: they are
             served as soon as they have work, not after the flood's backlog."""


def _summary(
    opts: DemoOptions, baseline: PhaseResult, flood: PhaseResult, checks: list[metrics.Check]
) -> dict[str, Any]:
    heavy = metrics.backlogged(flood.tenants)
    base_light = baseline.light_waits()
    flood_light = flood.light_waits()
    flood_tenant = next((t for t in flood.tenants if t.role == "flood"), None)
    fifo = metrics.fifo_wait_estimate(
        flood_tenant.pushed - flood_tenant.done if flood_tenant else 0, flood.throughput
    )

    def phase(result: PhaseResult) -> dict[str, Any]:
        share = metrics.shares(metrics.backlogged(result.tenants))
        return {
            "seconds": round(result.seconds, 3),
            "done": result.done,
            "throughput": round(result.throughput, 1),
            "tenants": [
                {
                    "name": t.name,
                    "tier": t.tier,
                    "weight": t.weight,
                    "role": t.role,
                    "pushed": t.pushed,
                    "done": t.done,
                    "backlogged_fraction": round(t.backlogged_fraction, 3),
                    "service_share": share[t.name][0] if t.name in share else None,
                    "weight_share": share[t.name][1] if t.name in share else None,
                    "p50_wait": t.p50,
                    "p99_wait": t.p99,
                }
                for t in result.tenants
            ],
        }

    return {
        "ok": all(c.ok for c in checks),
        "options": attrs.asdict(opts),
        "backlogged": [t.name for t in heavy],
        "jain": metrics.weighted_jain(heavy) if heavy else None,
        "shares": {
            name: {"service": s, "weight": w} for name, (s, w) in metrics.shares(heavy).items()
        },
        "light": {
            "baseline_p50": metrics.percentile(base_light, 50.0),
            "baseline_p99": metrics.percentile(base_light, 99.0),
            "flood_p50": metrics.percentile(flood_light, 50.0),
            "flood_p99": metrics.percentile(flood_light, 99.0),
            "baseline_samples": len(base_light),
            "flood_samples": len(flood_light),
            "baseline_ahead_p50": metrics.percentile(baseline.light_ahead(), 50.0),
            "baseline_ahead_p99": metrics.percentile(baseline.light_ahead(), 99.0),
            "flood_ahead_p50": metrics.percentile(flood.light_ahead(), 50.0),
            "flood_ahead_p99": metrics.percentile(flood.light_ahead(), 99.0),
        },
        "fifo_wait_estimate": fifo,
        "bars": {
            "jain": metrics.JAIN_BAR,
            "share_tolerance": metrics.SHARE_TOLERANCE,
            "wait_factor": metrics.WAIT_FACTOR,
            "wait_slack_seconds": metrics.WAIT_SLACK_SECONDS,
        },
        "checks": [{"name": c.name, "ok": c.ok, "detail": c.detail} for c in checks],
        "phases": {"baseline": phase(baseline), "flood": phase(flood)},
    }


def _report(
    out: TextIO, summary: dict[str, Any], checks: list[metrics.Check], styled: bool
) -> None:
    light = summary["light"]
    lines = [
        "",
        bold("Verdict", styled),
    ]
    for check in checks:
        mark = color("PASS", "32", styled) if check.ok else color("FAIL", "31", styled)
        lines.append(f"  {mark}  {check.name}: {check.detail}")
    lines.append(
        f"  light tenants' wait p50/p99: baseline {_ms(light['baseline_p50'])}/"
        f"{_ms(light['baseline_p99'])} ms, with the flood {_ms(light['flood_p50'])}/"
        f"{_ms(light['flood_p99'])} ms"
    )
    if light["baseline_ahead_p99"] is not None and light["flood_ahead_p99"] is not None:
        lines.append(
            f"  tasks served ahead of a light task (p50/p99): baseline "
            f"{light['baseline_ahead_p50']:.0f}/{light['baseline_ahead_p99']:.0f}, with the "
            f"flood {light['flood_ahead_p50']:.0f}/{light['flood_ahead_p99']:.0f}"
        )
    fifo = summary["fifo_wait_estimate"]
    if fifo is not None:
        lines.append(
            f"  in one FIFO queue a new task would now wait ~{fifo:.1f} s behind the "
            "flood's backlog"
        )
    lines += ["", EXPLANATION, ""]
    out.write("\n".join(lines) + "\n")
    out.flush()


# ---- orchestration ---------------------------------------------------------------------------


@contextlib.contextmanager
def _server(url: str | None) -> Iterator[str]:
    if url:
        yield url
        return
    from fairque_redis.servers.embedded import EmbeddedValkey

    with EmbeddedValkey() as server:  # stopped (and its files removed) on the way out
        yield server.url


def _drop_queue(queue: FairQueue, url: str, embedded: bool) -> None:
    """Delete a demo queue's keys from a server the demo does not own."""
    queue.close()
    if embedded:
        return
    import redis

    from fairque_redis.keys import QUEUES_KEY

    client = redis.Redis.from_url(url)
    try:
        pattern = f"fq:{{{queue.name}}}:*"
        batch: list[bytes] = []
        for key in client.scan_iter(match=pattern, count=1000):
            batch.append(key)
            if len(batch) >= 500:
                client.unlink(*batch)
                batch.clear()
        if batch:
            client.unlink(*batch)
        client.srem(QUEUES_KEY, queue.name)  # `fairque queues` listed every run's queues
    finally:
        client.close()


def _open_queue(url: str, name: str) -> FairQueue:
    if url.startswith("memory:"):
        from fairque_core.memory.model import InMemoryBackend

        return FairQueue(InMemoryBackend(queue=name))
    from fairque_redis import connect

    return connect(url, queue=name)


def run_demo(opts: DemoOptions, out: TextIO) -> dict[str, Any]:
    """Run both phases, print the live table and the verdict; returns the summary dict."""
    # Threads that wait on the network hand the GIL back and forth; a short switch interval
    # keeps a producer building thousands of tasks from delaying a worker's claim by 5 ms hops.
    previous = sys.getswitchinterval()
    sys.setswitchinterval(min(previous, _SWITCH_INTERVAL))
    try:
        return _run_demo(opts, out)
    finally:
        sys.setswitchinterval(previous)


def _run_demo(opts: DemoOptions, out: TextIO) -> dict[str, Any]:
    base_seconds, flood_seconds = phase_plan(opts.duration, opts.baseline_fraction)
    if not opts.url:  # its own server: without the 'local' extra, say so before anything else
        from fairque_redis.servers.embedded import find_valkey_binary

        find_valkey_binary()
    specs = metrics.plan_tenants(opts.tenants)
    view = LiveView(out)
    styled = view.tty
    run_id = uuid.uuid4().hex[:8]
    out.write(
        bold("fairque demo", styled)
        + f": {len(specs)} tenants, {opts.workers} workers x {opts.work_ms:g} ms per task, "
        f"baseline {base_seconds:.1f}s then flood {flood_seconds:.1f}s\n"
    )
    results: list[PhaseResult] = []
    with _server(opts.url) as url:
        out.write(f"server: {mask_url(url)}{'' if opts.url else ' (embedded Valkey)'}\n\n")
        out.flush()
        plan = [
            ("baseline", [s for s in specs if s.role != "flood"], base_seconds),
            ("flood", specs, flood_seconds),
        ]
        if opts.queue is not None:
            probe = _open_queue(url, opts.queue)
            try:
                if probe.list_tenants(limit=1)[1]:
                    raise ValueError(
                        f"queue {opts.queue!r} is not empty; the demo empties its queue after "
                        "each phase, so give it a queue of its own"
                    )
            finally:
                probe.close()
        # the embedded server goes away with the demo; a named queue is emptied between phases
        keep = url.startswith("memory:") or (not opts.url and opts.queue is None)
        for name, phase_specs, seconds in plan:
            queue = _open_queue(url, opts.queue or f"demo-{run_id}-{name}")
            try:
                phase = _Phase(name, queue, phase_specs, opts)

                def tick(p: _Phase, elapsed: float, total: float = seconds) -> None:
                    if view.due():
                        partial = p.tally.result(p.name, elapsed)
                        view.update([_headline(partial, total), *_table(partial)], force=True)

                result = phase.run(seconds, tick)
            finally:
                _drop_queue(queue, url, embedded=keep)
            view.finish([_headline(result), *_table(result)])
            results.append(result)
    baseline, flood = results
    checks = metrics.evaluate(baseline, flood)
    summary = _summary(opts, baseline, flood, checks)
    _report(out, summary, checks, styled)
    if opts.json_path:
        with open(opts.json_path, "w", encoding="utf-8") as handle:
            json.dump(summary, handle, indent=2)
    return summary
