"""F5, script cost on a big queue: no fairque script in SLOWLOG at 10 ms during a flood.

A fresh server (Valkey 9; slow: Valkey 9 and Redis 7) whose main thread runs SCHED_FIFO (see
``_realtime``) on one CPU (``_pin``), with ``slowlog-log-slower-than 10000`` (10 ms), an empty
SLOWLOG and reset command statistics. Tenant ``flood`` pushes 100 000 tasks (slow: 1 000 000)
with ``push_batch`` of ``FLOOD_BATCH`` tasks per call from two threads, while ten light tenants
each push one task every 50 ms (single pushes, as in F1) and a worker process (4 threads, 5 ms
tasks, ``chaos_worker.py``) drains the queue. Then, on the full queue, with the worker and the
light producers stopped, each script's cost is read from ``INFO commandstats`` in isolation
(``CONFIG RESETSTAT``, 20-200 calls of one operation; the server keeps one ``cmdstat_evalsha``
line whatever the script, so one script at a time is the only way to get a per-script figure
from it): single push, push of ``FLOOD_BATCH``, claim of 1 and of 10, heartbeat, finish of 1 and
of 10.

Pass: no EVALSHA / EVAL / FCALL in the SLOWLOG of the flood whose own time reaches 10 ms
(every call of every script); every script's ``usec_per_call`` under 2 ms; the light tenants'
tasks all run; the worker's backend saw no error. A call's own time is its SLOWLOG duration
minus the time taken from the server around it (``HostSteal``: the hypervisor's steal of its CPU,
and since issue 29 the time its main thread waited runnable but not running, which catches the
kernel's real-time throttling of the SCHED_FIFO server at full load: a push of 50 logged at 13-75
ms with no steal in two CI runs). SLOWLOG and
commandstats time a call by the wall clock, and on a virtual machine a call during which the
host runs something else on the server's vCPU logs that time too, whatever the guest's
scheduling (ADR 42: on this 2-vCPU KVM guest such stalls are ~10 ms, also hit a Lua loop that
touches no key, and every call of 5 ms or more in a measured flood fell in a second with stolen
time on the server's vCPU). On a machine with no steal accounting nothing is subtracted.
Printed: the SLOWLOG entries (with the stolen time around each), the flood's rate, the queue
size, each script's ``usec_per_call``, the light tenants' wait (start - push) p50/p99, and
a probe of push batch sizes (50, 100, 250, 1000: server time per call and per task, and how
many calls reached the SLOWLOG) that ``docs/operations.md`` ("Batch sizes") quotes. The probe
runs after the SLOWLOG reading and asserts nothing: it shows what size stays under the bounds.
"""

from __future__ import annotations

import hashlib
import os
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from fairque_core import FairQueue, QueueConfig, Task
from fairque_redis.backends.backend import RedisBackend
from fairque_redis.scripting.function_library import LIBRARY
from fairque_redis.scripting.scripts import SOURCES
from fairque_redis.servers.embedded import ServerBinaryNotFoundError

from .history import History, read_history
from .procs import WorkerProcs, wait_until
from .servers import KINDS, missing_server

pytestmark = [pytest.mark.chaos, pytest.mark.redis]

#: Tasks per push_batch call of the flood. A pushed task costs 11-22 us of server time (Valkey 9
#: and Redis 7, small payloads; the machine's speed moves it), so a call of 50 takes ~0.75-1.1
#: ms, under the 2 ms bound; a call of 100 (the batcher's default) 1.2-2.1 ms, 250 take 3-4.3
#: ms, and a call of ~500-800 or more reaches a 10 ms SLOWLOG (docs/operations.md's table).
FLOOD_BATCH = 50
LIGHT_TENANTS = 10
LIGHT_INTERVAL = 0.05
SLOWLOG_US = 10_000
BOUND_US = 2_000
PROBE_SIZES = (50, 100, 250, 1000)
# without real-time priority a preempted script can log this long (see _realtime)
NOISY_SLOWLOG_US = 200_000
SCRIPT_COMMANDS = {"EVALSHA", "EVAL", "EVALSHA_RO", "EVAL_RO", "FCALL", "FCALL_RO"}
NAMES = {hashlib.sha1(source.encode()).hexdigest(): name for name, source in SOURCES.items()}
NAMES.update({function: name for name, function in LIBRARY.functions.items()})  # FCALL (ADR 41)


def _realtime(pid: int) -> bool:
    """Run the server's main thread (the one that executes commands) SCHED_FIFO; False when
    the machine does not allow it (no CAP_SYS_NICE).

    SLOWLOG and commandstats time a command by the wall clock: on a loaded 2-core machine a
    server preempted in the middle of a 0.3 ms script logs it at 10-60 ms (plain HMGETs too).
    Above every ordinary process, the server is preempted only by the kernel, so the figures
    are the scripts' own, except for what the host takes on a virtual machine (``HostSteal``).
    Without it the SLOWLOG check cannot tell a slow script from a preempted one: the test then
    holds scripts to NOISY_SLOWLOG_US instead (and says so), and the usec_per_call bound, an
    average over many calls, still applies.
    """
    try:
        os.sched_setscheduler(pid, os.SCHED_FIFO, os.sched_param(1))
    except (PermissionError, AttributeError, OSError) as exc:
        print(f"F5: cannot run the server SCHED_FIFO ({exc}): SLOWLOG bound relaxed")
        return False
    return True


def _evalsha(raw: Any) -> tuple[int, float]:
    """Script calls and server µs per call: EVALSHA and FCALL together (ADR 41: functions by
    default, EVALSHA where refused)."""
    info = raw.info("commandstats")
    stats = [info.get(f"cmdstat_{name}", {}) for name in ("evalsha", "fcall")]
    calls = sum(int(s.get("calls", 0)) for s in stats)
    usec = sum(float(s.get("usec", 0)) for s in stats)
    return calls, usec / calls if calls else 0.0


class HostSteal(threading.Thread):
    """The time the hypervisor took away from one CPU (or from all of them together when
    ``cpu`` is None): the ``steal`` column of ``/proc/stat``, sampled every 50 ms.

    ``/proc/stat`` counts in clock ticks of 10 ms (USER_HZ 100), cumulative, so a stall
    shows once the CPU's stolen time crosses the next tick. Where there is no such column
    (not Linux, no steal accounting) every figure is 0: nothing is ever subtracted.
    """

    TICK_MS = 10
    PERIOD = 0.05

    def __init__(self, cpu: int | None, pid: int | None = None) -> None:
        super().__init__(name="f5-steal", daemon=True)
        self.cpu = cpu
        self.pid = pid
        self.halt = threading.Event()
        self.samples: list[tuple[float, int]] = []  # (unix time, stolen ms so far)

    def now(self) -> int:
        """Ms taken from the server so far (0 where unknown): the host's steal of its CPU, plus
        the time its main thread (``pid``) waited runnable but not running (``run_delay`` of
        ``/proc/<pid>/schedstat``: the kernel's real-time throttling of a SCHED_FIFO server
        that used its CPU flat out for most of a second, or anything scheduled before it)."""
        return self._steal() + self._waited()

    def _waited(self) -> int:
        if self.pid is None:
            return 0
        try:
            with open(f"/proc/{self.pid}/schedstat", encoding="ascii") as stat:
                return int(stat.read().split()[1]) // 1_000_000
        except (OSError, IndexError, ValueError):
            return 0

    def _steal(self) -> int:
        label = "cpu" if self.cpu is None else f"cpu{self.cpu}"
        try:
            with open("/proc/stat", encoding="ascii") as stat:
                for line in stat:
                    fields = line.split()
                    if fields and fields[0] == label:
                        return int(fields[8]) * self.TICK_MS if len(fields) > 8 else 0
        except OSError:
            pass
        return 0

    def run(self) -> None:
        while not self.halt.is_set():
            self.samples.append((time.time(), self.now()))
            self.halt.wait(self.PERIOD)

    def stolen(self, start: float, end: float) -> int:
        """Stolen ms seen from the last sample at or before ``start`` to the first at or after
        ``end`` (the whole record when either lies outside it)."""
        if not self.samples:
            return 0
        before = [ms for t, ms in self.samples if t <= start]
        after = [ms for t, ms in self.samples if t >= end]
        return (after[0] if after else self.samples[-1][1]) - (
            before[-1] if before else self.samples[0][1]
        )


def _pin(pid: int) -> int | None:
    """Keep the server's main thread on one CPU (the highest it may use) so that the steal of
    that CPU is the steal it suffered; None when the machine does not allow it."""
    try:
        cpu = max(os.sched_getaffinity(pid))
        os.sched_setaffinity(pid, {cpu})
    except (AttributeError, OSError, ValueError) as exc:
        print(f"F5: cannot pin the server to one CPU ({exc}): steal of all CPUs is subtracted")
        return None
    return cpu


def _measure(raw: Any, label: str, work: Any, costs: dict[str, float], steal: HostSteal) -> float:
    """``work()`` alone on the server; its script usec_per_call as ``costs[label]``. Returns
    the same less the time the host stole meanwhile, spread over the calls (the figure the
    bound applies to: the window includes the client's time, so this can only excuse more
    than the server lost, never less)."""
    raw.config_resetstat()
    before = steal.now()
    work()
    stolen_ms = steal.now() - before
    calls, per_call = _evalsha(raw)
    assert calls > 0, label
    costs[label] = per_call
    return per_call - stolen_ms * 1000 / calls


def _slowlog(raw: Any) -> list[tuple[str, str, int, int]]:
    """``(command, fairque script or '', microseconds, end second)`` for each SLOWLOG entry
    (the server stamps an entry with the unix second it was logged in, after the call)."""
    out = []
    for entry in raw.slowlog_get(1024):
        words = entry["command"].split(b" ")
        command = words[0].decode(errors="replace").upper()
        script = ""
        if command in SCRIPT_COMMANDS:
            sha = words[1].decode(errors="replace") if len(words) > 1 else ""
            script = NAMES.get(sha, "?")
        out.append((command, script, int(entry["duration"]), int(entry["start_time"])))
    return out


def _around(steal: HostSteal, end_second: int) -> int:
    """Stolen ms in the seconds around a SLOWLOG entry logged in ``end_second``: the call ran
    inside that second or ended there, and the stall shows in ``/proc/stat`` at the CPU's next
    tick, so one second either side is taken."""
    return steal.stolen(end_second - 1, end_second + 2)


def _flood(queue: FairQueue, batches: range, total: int) -> None:
    for b in batches:
        first = b * FLOOD_BATCH
        queue.push_batch(
            [
                Task.create("flood", task_id=f"f{i}", payload={"n": i})
                for i in range(first, min(total, first + FLOOD_BATCH))
            ]
        )


class Light(threading.Thread):
    """Ten tenants, one single push each every 50 ms, until stopped."""

    def __init__(self, queue: FairQueue, history: History) -> None:
        super().__init__(name="f5-light", daemon=True)
        self.queue = queue
        self.history = history
        self.halt = threading.Event()
        self.failure: BaseException | None = None
        self.count = 0

    def run(self) -> None:
        try:
            while not self.halt.is_set():
                for k in range(LIGHT_TENANTS):
                    task_id = f"l{k}-{self.count}"
                    self.queue.push(Task.create(f"light{k}", task_id=task_id))
                    self.history.record("push:ok", task_id)
                self.count += 1
                self.halt.wait(LIGHT_INTERVAL)
        except BaseException as exc:  # reported by the test
            self.failure = exc


def _scenario(kind: str, total: int, tmp_path: Path) -> None:
    import redis

    try:
        server = KINDS[kind]()
    except ServerBinaryNotFoundError as exc:
        missing_server(f"{kind} unavailable: {exc}")
    queue = "f5"
    history_path = tmp_path / "history.jsonl"
    with server:
        raw = redis.Redis.from_url(server.url)
        config = QueueConfig(name=queue, lease_seconds=10.0)
        fq = FairQueue(RedisBackend.from_url(server.url, queue=queue, config=config))
        history = History(history_path)
        workers = WorkerProcs(server.url, queue, history_path)
        light = Light(fq, history)
        steal = HostSteal(None)
        try:
            realtime = _realtime(server.pid)
            steal = HostSteal(_pin(server.pid), server.pid)
            steal.start()
            fq.get_stats()  # scripts loaded, the memory policy read: not part of the flood
            raw.config_set("slowlog-log-slower-than", SLOWLOG_US)
            raw.config_set("slowlog-max-len", 1024)
            raw.slowlog_reset()
            raw.config_resetstat()
            worker = workers.start(id="w1", concurrency=4, lease=10.0, reaper=1.0, sleep=0.005)
            light.start()
            started = time.monotonic()
            wall_started = time.time()
            # two flood threads: one encodes its next batch while the server runs the other's
            flooders = [
                threading.Thread(target=_flood, args=(fq, range(k, total // FLOOD_BATCH, 2), total))
                for k in range(2)
            ]
            for thread in flooders:
                thread.start()
            for thread in flooders:
                thread.join()
            flood_seconds = time.monotonic() - started
            light.halt.set()
            light.join(10)
            assert light.failure is None, repr(light.failure)
            light_ids = {r["id"] for r in read_history(history_path) if r["ev"] == "push:ok"}

            def light_started() -> int:
                return len(
                    {
                        r["id"]
                        for r in read_history(history_path)
                        if r["ev"] == "exec:start" and r["id"] in light_ids
                    }
                )

            wait_until(lambda: light_started() == len(light_ids), 60, "the light tasks", step=0.2)
            health = workers.stop(worker)
            mixed_calls, mixed_per_call = _evalsha(raw)
            slowlog = _slowlog(raw)
            records = read_history(history_path)
            pushed_at = {r["id"]: r["t"] for r in records if r["ev"] == "push:ok"}
            waits = sorted(
                r["t"] - pushed_at[r["id"]]
                for r in records
                if r["ev"] == "exec:start" and r["id"] in pushed_at
            )
            ready = int(fq.get_stats()["ready"])

            # ---- each script alone, on the full queue
            costs: dict[str, float] = {}
            own: dict[str, float] = {}  # less the stolen time (what BOUND_US applies to)
            n = iter(range(10**9))
            own["push (1 task)"] = _measure(
                raw,
                "push (1 task)",
                lambda: [
                    fq.push(Task.create(f"light{k % LIGHT_TENANTS}", task_id=f"s{next(n)}"))
                    for k in range(200)
                ],
                costs,
                steal,
            )
            own[f"push ({FLOOD_BATCH} tasks)"] = _measure(
                raw,
                f"push ({FLOOD_BATCH} tasks)",
                lambda: [
                    fq.push_batch(
                        [Task.create("flood", task_id=f"b{next(n)}") for _ in range(FLOOD_BATCH)]
                    )
                    for _ in range(20)
                ],
                costs,
                steal,
            )
            claimed: list[Task] = []
            own["claim (1)"] = _measure(
                raw,
                "claim (1)",
                lambda: [claimed.extend(fq.claim_batch(1)) for _ in range(200)],
                costs,
                steal,
            )
            batches: list[list[Task]] = []
            own["claim (10)"] = _measure(
                raw,
                "claim (10)",
                lambda: [batches.append(fq.claim_batch(10)) for _ in range(50)],
                costs,
                steal,
            )
            own["heartbeat (1)"] = _measure(
                raw, "heartbeat (1)", lambda: [fq.heartbeat(t) for t in claimed[:100]], costs, steal
            )
            own["finish (1)"] = _measure(
                raw,
                "finish (1)",
                lambda: [fq.finish_batch([(t, None)]) for t in claimed],
                costs,
                steal,
            )
            own["finish (10)"] = _measure(
                raw,
                "finish (10)",
                lambda: [fq.finish_batch([(t, None) for t in b]) for b in batches],
                costs,
                steal,
            )

            # ---- the batch size probe (after the SLOWLOG reading: large sizes land in it)
            probe: dict[int, tuple[float, int, int]] = {}  # us per call, calls, in SLOWLOG
            for size in PROBE_SIZES:
                raw.config_resetstat()
                raw.slowlog_reset()
                for _ in range(max(2, 2000 // size)):
                    fq.push_batch(
                        [Task.create("flood", task_id=f"p{next(n)}") for _ in range(size)]
                    )
                calls, per_call = _evalsha(raw)
                logged = sum(1 for e in _slowlog(raw) if e[1] == "push")
                probe[size] = (per_call, calls, logged)

            limit = SLOWLOG_US if realtime else NOISY_SLOWLOG_US
            # (script, us logged, ms the host stole around it): what the host took is not the
            # script's time (ADR 42); the rest must stay under the limit
            script_entries = [
                (e[1], e[2], _around(steal, e[3])) for e in slowlog if e[0] in SCRIPT_COMMANDS
            ]
            scripts_in_slowlog = [e for e in script_entries if e[1] - e[2] * 1000 >= limit]
            stolen_flood = steal.stolen(wall_started, wall_started + flood_seconds)
            print(
                f"F5 {kind}: {total} tasks flooded in batches of {FLOOD_BATCH} in "
                f"{flood_seconds:.1f}s ({total / flood_seconds:.0f}/s) beside {len(light_ids)} "
                f"light pushes and a worker ({health['processed']} processed); queue then "
                f"{ready} ready; script calls (FCALL, EVALSHA) over the flood: {mixed_calls}, "
                f"{mixed_per_call:.0f} us/call; SLOWLOG >= {SLOWLOG_US} us: {slowlog}; "
                f"script entries (script, us, ms stolen around it): {script_entries}; the host "
                f"stole {stolen_flood} ms of the server's CPU (cpu {steal.cpu}) during the "
                f"flood; "
                f"light wait p50 {statistics.median(waits) * 1000:.0f} ms p99 "
                f"{waits[int(len(waits) * 0.99)] * 1000:.0f} ms"
            )
            print(
                "F5 usec_per_call per script on the full queue: "
                + ", ".join(
                    f"{k} {v:.0f}" + (f" ({own[k]:.0f} less stolen time)" if own[k] < v else "")
                    for k, v in costs.items()
                )
            )
            print(
                "F5 push batch probe (tasks per call: server time per call, per task): "
                + "; ".join(
                    f"{size}: {us:.0f} us, {us / size:.1f} us/task, {logged}/{calls} in SLOWLOG"
                    for size, (us, calls, logged) in probe.items()
                )
            )
            assert scripts_in_slowlog == [], (
                f"script calls whose own time (SLOWLOG duration less the host's steal around "
                f"them) reached {limit} us: (script, us, ms stolen) {scripts_in_slowlog}"
            )
            assert all(v < BOUND_US for v in own.values()), (costs, own)
            assert health["backend_errors"] == 0
            assert health["failed"] == 0
        finally:
            light.halt.set()
            steal.halt.set()
            history.close()
            workers.cleanup()
            fq.close()
            raw.close()


# slow too: F5 is a measurement (SLOWLOG entries of 10 ms, usec_per_call < 2 ms), bound to the
# CPU time the server gets. 7.8 s on an idle 2-core machine; in one default run with the CPU
# shared by four xdist workers and other jobs a push call sat 190 ms in the SLOWLOG with no
# steal measured. No event can stand in for a server-time bound, so it runs with `-m slow`.
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_f5_no_script_in_slowlog_during_a_100k_flood(tmp_path: Path) -> None:
    _scenario("valkey", 100_000, tmp_path)


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_f5_no_script_in_slowlog_during_a_1m_flood(kind: str, tmp_path: Path) -> None:
    _scenario(kind, 1_000_000, tmp_path)
