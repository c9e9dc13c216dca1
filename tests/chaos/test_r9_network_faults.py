"""R9, network faults (shortened for CI): a worker process works off a stream of tasks while a
producer keeps pushing, both through the proxy, and the proxy adds 200 ms to every round trip
for 3 s, resets every connection every 0.5 s for 3 s, then blackholes everything for 3 s.

Both use fairque's client with a 0.5 s socket timeout (without one a blackholed call would wait
forever; the timeout is what turns a silent network into a typed error). Passes when: no process
dies, the errors that surfaced are all fairque's typed connection errors (or LeaseLostError),
after a drain with the faults off no acknowledged push is lost and no id was stored twice, the
worker is processing again within 5 s of the last fault and, in the last 2 s of those 5, completes
tasks at >= 90 % of the rate the producer pushes them in the same 2 s (it keeps up again; the
fault-free phases' rate is printed beside it), and the structures are consistent.

The blackhole is also the plan's ``half_open`` case: the proxy accepts and reads but never
answers, so every connection open through it is half open (the client's side believes it
alive). Those connections stay dead after the blackhole ends (bytes were lost, the proxy
forwards nothing on them again), so the recovery checks that the clients find them dead by
their timeouts and connect afresh.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from fairque_core import FairQueue, QueueConfig, Task
from fairque_redis.backends.backend import RedisBackend

from .faultproxy import FaultProxy
from .history import History, check, push_until_acknowledged, read_history
from .invariants import check as check_invariants
from .procs import WorkerProcs, wait_until

pytestmark = [pytest.mark.chaos, pytest.mark.redis, pytest.mark.timeout(120)]

LEASE = 2.0
REAPER = 0.5
SOCKET_TIMEOUT = 0.5
PHASE = 3.0
RECOVERY = 5.0
TYPED_CONNECTION_ERRORS = {"OutcomeUnknownError", "RedisConnectionError", "LeaseLostError"}


class Producer(threading.Thread):
    """Pushes one task every ``interval`` s until stopped, each until acknowledged."""

    def __init__(self, queue: FairQueue, history: History, interval: float = 0.01) -> None:
        super().__init__(name="r9-producer", daemon=True)
        self.queue = queue
        self.history = history
        self.interval = interval
        self.halt = threading.Event()
        self.failure: BaseException | None = None
        self.count = 0

    def run(self) -> None:
        try:
            while not self.halt.is_set():
                task = Task.create(f"u{self.count % 5}", task_id=f"r9-{self.count}")
                push_until_acknowledged(
                    lambda t=task: self.queue.push(t), task.task_id, self.history, pause=0.05
                )
                self.count += 1
                self.halt.wait(self.interval)
        except BaseException as exc:  # reported by the test
            self.failure = exc


# slow (issue 29): the longest scenario of the default run (18.8 s idle, 26.7 s busy). Its rate
# check compared the rate after the faults with the fault-free phases' (earlier, at another load:
# it failed at 58.5/s against 67.5/s at load 10-21, and in CI beside the other slow scenarios);
# it now compares the worker's rate with the producer's in the same window.
@pytest.mark.slow
def test_r9_delay_resets_and_blackhole(
    valkey_server: Any, raw: Any, queue_name: str, tmp_path: Path
) -> None:
    history_path = tmp_path / "history.jsonl"
    config = QueueConfig(name=queue_name, lease_seconds=LEASE)
    with FaultProxy(valkey_server.url) as proxy:
        queue = FairQueue(
            RedisBackend.from_url(
                proxy.url,
                queue=queue_name,
                config=config,
                socket_timeout=SOCKET_TIMEOUT,
                socket_connect_timeout=SOCKET_TIMEOUT,
            )
        )
        workers = WorkerProcs(proxy.url, queue_name, history_path)
        history = History(history_path)
        producer = Producer(queue, history)
        try:
            worker = workers.start(
                lease=LEASE, reaper=REAPER, concurrency=4, sleep=0.01, socket_timeout=0.5
            )
            producer.start()
            phases: dict[str, tuple[float, float]] = {}

            def phase(name: str, body: Any) -> None:
                started = time.time()
                body()
                phases[name] = (started, time.time())

            phase("warm-up", lambda: time.sleep(1.0))
            proxy.delay(200)
            phase("delay 200 ms", lambda: time.sleep(PHASE))
            proxy.pass_through()
            phase("pass", lambda: time.sleep(1.0))

            def resets() -> None:
                deadline = time.monotonic() + PHASE
                while time.monotonic() < deadline:
                    time.sleep(0.5)
                    proxy.reset_connections()

            phase("reset every 0.5 s", resets)
            phase("pass again", lambda: time.sleep(1.0))
            proxy.blackhole()
            phase("blackhole", lambda: time.sleep(PHASE))
            proxy.pass_through()
            faults_end = time.time()
            phase("after", lambda: time.sleep(RECOVERY))
            producer.halt.set()
            producer.join(30)
            assert not producer.is_alive()
            assert producer.failure is None, repr(producer.failure)

            records = read_history(history_path)
            ok_ids = {r["id"] for r in records if r["ev"] == "push:ok"}
            finished_key = f"fq:{{{queue_name}}}:stats"
            drained = wait_until(
                lambda: int(raw.hget(finished_key, "finished") or 0) >= len(ok_ids),
                60,
                "the drain with faults off",
                step=0.05,
            )
            assert worker.poll() is None, workers.errors(worker)  # survived every fault
            health = workers.stop(worker)

            records = read_history(history_path)
            states = {i: str(queue.get_state(i)) for i in ok_ids}
            verdict = check(records, states)
            stats = queue.get_stats()
            ends = sorted(r["t"] for r in records if r["ev"] == "exec:end")
            per_phase = {
                name: sum(1 for t in ends if start <= t < stop)
                for name, (start, stop) in phases.items()
            }
            recovered_after = min((t for t in ends if t > faults_end), default=1e9) - faults_end
            # throughput: the fault-free phases' median rate, against the rate over the last
            # 2 s of the RECOVERY after the faults' end, once any catch-up is over (the
            # producer paces both)
            baseline = statistics.median(
                per_phase[name] / (phases[name][1] - phases[name][0])
                for name in ("warm-up", "pass", "pass again")
            )
            tail = (faults_end + RECOVERY - 2.0, faults_end + RECOVERY)
            recovered_rate = sum(1 for t in ends if tail[0] <= t < tail[1]) / 2.0
            # what the producer offered in that same window: the worker keeps up with it once
            # the faults are over (a ratio within one window, so the machine's load, which
            # slows the paced producer as much as the worker, does not move it)
            pushes = sorted(r["t"] for r in records if r["ev"] == "push:ok")
            offered_rate = sum(1 for t in pushes if tail[0] <= t < tail[1]) / 2.0
            errors = [r for r in records if r["ev"] == "error"]
            producer_errors = Counter(
                r["error"] for r in records if r["ev"] in ("push:unknown", "push:fail")
            )
            print(
                f"R9 tasks={len(ok_ids)} drain={drained:.2f}s per_phase={per_phase} "
                f"recovered_after={recovered_after:.2f}s baseline={baseline:.0f}/s "
                f"after={recovered_rate:.0f}/s ({recovered_rate / baseline:.2f}x) "
                f"offered={offered_rate:.0f}/s "
                f"{verdict.summary()} "
                f"worker_errors={Counter((e['op'], e['error']) for e in errors)} "
                f"producer_errors={dict(producer_errors)} resets={proxy.resets} "
                f"worker={ {k: health[k] for k in ('processed', 'lease_lost', 'backend_errors')} }"
            )

            assert len(ok_ids) >= 200
            assert verdict.lost == set()
            assert verdict.unexpected == set()
            assert set(states.values()) == {"finished"}
            assert stats["pushed"] == len(ok_ids)  # retried pushes never stored an id twice
            assert stats["finished"] == len(ok_ids)
            # the faults bit, and every error that surfaced was a typed one
            assert errors, "no backend error in the worker: the faults did not reach it"
            assert producer_errors, "no push error: the faults did not reach the producer"
            assert {e["error"] for e in errors} <= TYPED_CONNECTION_ERRORS, errors[:5]
            assert all(e["typed"] for e in errors)
            assert set(producer_errors) <= TYPED_CONNECTION_ERRORS
            assert health["state"] == "stopped"
            assert recovered_after <= RECOVERY
            assert recovered_rate >= 0.9 * offered_rate
            assert check_invariants(raw, queue_name) == []
            assert proxy.errors == []
        finally:
            producer.halt.set()
            producer.join(30)
            history.close()
            workers.cleanup()
            queue.close()
