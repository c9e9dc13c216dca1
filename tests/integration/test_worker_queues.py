"""A worker that serves several queues (ADR 69), on Valkey: ``Worker`` and ``AsyncWorker``.

Weighted: two queues of weights 3 and 1, both backlogged; the worker's starts follow 3:1 to
within the stride bound plus what its places and prefetch hold, and each queue's tenants keep
their own weighted shares. Strict: the second queue is served only when the first is empty,
also when the first refills while the second is being served. The tenants' names say their
queue (``a*`` in A, ``b*`` in B), so the start order alone tells which queue served each task.
The handler stops the run at a count; the timeouts only bound a hang.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections import Counter
from collections.abc import Mapping
from typing import Any

import pytest

from fairque_core import AsyncWorker, Task, TaskHandler, Worker, WorkerConfig
from fairque_redis import aconnect, connect
from fairque_redis.servers.embedded import EmbeddedValkey
from fairque_testing import assert_fair, fairness_report

pytestmark = [pytest.mark.redis, pytest.mark.timeout(120)]

PLACES = 4
PREFETCH = 4
#: where a start can stand apart from its claim: the places and the prefetch buffer
HELD = PLACES + PREFETCH
A_WEIGHTS = {"a1": 1.0, "a2": 2.0}
B_WEIGHTS = {"b1": 1.0, "b2": 1.0, "b3": 3.0}


class Recorder(TaskHandler):
    """Records the tenant of every start; sets ``done`` at ``stop_at`` starts. ``on_start``
    (tenant, count) may act before the task returns (the strict test pushes from there)."""

    def __init__(self, stop_at: int, on_start: Any = None) -> None:
        self.order: list[str] = []
        self.lock = threading.Lock()
        self.stop_at = stop_at
        self.done = threading.Event()
        self.on_start = on_start

    def process_task(self, task: Task) -> object:
        with self.lock:
            self.order.append(task.tenant)
            count = len(self.order)
        if self.on_start is not None:
            self.on_start(task.tenant, count)
        if count >= self.stop_at:
            self.done.set()
        return None


def load(total: int, weights: Mapping[str, float], share: float) -> list[Task]:
    """Enough tasks per tenant to stay backlogged over ``total`` starts of which the queue
    gets ``share``: each tenant its weighted part, plus 10 %."""
    whole = sum(weights.values())
    out: list[Task] = []
    for tenant, weight in weights.items():
        out += [Task.create(tenant) for _ in range(int(total * share * weight / whole * 1.1) + 20)]
    return out


def config(name: str) -> WorkerConfig:
    return WorkerConfig(
        id=name,
        max_concurrent_tasks=PLACES,
        poll_interval_seconds=0.2,
        task_timeout_seconds=30.0,
    )


def check_weighted(order: list[str], total: int) -> dict[str, float]:
    """The run's checks: A's share within 2 % of 3/4 (and its count within the stride bound
    plus HELD of 3/4 at every prefix); each queue's tenants fair by their weights."""
    first = order[:total]
    in_a = 0
    worst = 0.0
    for n, tenant in enumerate(first, 1):
        in_a += tenant.startswith("a")
        worst = max(worst, abs(in_a - 0.75 * n))
    share = in_a / total
    assert abs(share - 0.75) <= 0.02, share
    # the picker's own bound is 2 * 3/4 (two queues); starts may stand HELD apart from claims
    assert worst <= 2 + HELD, worst
    figures: dict[str, float] = {"share_a": share, "worst_prefix_lag": worst}
    for queue, weights in (("a", A_WEIGHTS), ("b", B_WEIGHTS)):
        mine = [t for t in first if t in weights]
        report = fairness_report(mine, weights)
        # a single queue's worker bound: its own stride bound plus what it holds unstarted
        assert_fair(report, tolerance=0.05, max_lag=HELD + len(weights) + 1)
        figures[f"{queue}_jain"] = report.jain
        figures[f"{queue}_max_lag"] = report.max_lag
    return figures


def queue_names() -> tuple[str, str]:
    tag = uuid.uuid4().hex[:8]
    return f"mq-a-{tag}", f"mq-b-{tag}"


def run_sync(url: str, total: int) -> list[str]:
    name_a, name_b = queue_names()
    qa, qb = connect(url, queue=name_a), connect(url, queue=name_b)
    try:
        for q, weights in ((qa, A_WEIGHTS), (qb, B_WEIGHTS)):
            for tenant, weight in weights.items():
                q.set_tenant_weight(tenant, weight)
        pushed = {
            name_a: len(qa.push_batch(load(total, A_WEIGHTS, 0.75))),
            name_b: len(qb.push_batch(load(total, B_WEIGHTS, 0.25))),
        }
        recorder = Recorder(total)
        worker = Worker(config("mq-sync"), recorder, queues=[(qa, 3), (qb, 1)], prefetch=PREFETCH)
        worker.start()
        try:
            assert recorder.done.wait(90), len(recorder.order)
        finally:
            assert worker.stop(20)
        health = worker.health()
        # the stop gave the buffered tasks back, each to its own queue: nothing runs, nothing
        # is lost, and each queue finished exactly what its tenants started
        for q, weights in ((qa, A_WEIGHTS), (qb, B_WEIGHTS)):
            stats = q.get_stats()
            assert stats["leased"] == 0
            assert stats["finished"] == sum(1 for t in recorder.order if t in weights)
            assert stats["ready"] + stats["finished"] == pushed[q.name]
        assert [q["name"] for q in health["queues"]] == [name_a, name_b]
        assert health["queue_order"] == "weighted"
        assert health["state"] == "stopped"
        assert health["in_flight"] == 0
        return recorder.order
    finally:
        for q in (qa, qb):
            q.purge_all()
            q.close()


def run_async(url: str, total: int) -> list[str]:
    recorder = Recorder(total)

    async def scenario() -> None:
        name_a, name_b = queue_names()
        qa = await aconnect(url, queue=name_a)
        qb = await aconnect(url, queue=name_b)
        try:
            for q, weights in ((qa, A_WEIGHTS), (qb, B_WEIGHTS)):
                for tenant, weight in weights.items():
                    await q.set_tenant_weight(tenant, weight)
            await qa.push_batch(load(total, A_WEIGHTS, 0.75))
            await qb.push_batch(load(total, B_WEIGHTS, 0.25))
            worker = AsyncWorker(
                config("mq-async"), recorder, queues={qa: 3, qb: 1}, prefetch=PREFETCH
            )
            await worker.start()
            try:
                loop = asyncio.get_running_loop()
                assert await loop.run_in_executor(None, recorder.done.wait, 90)
            finally:
                assert await worker.stop(20)
            assert worker.health()["in_flight"] == 0
        finally:
            for q in (qa, qb):
                await q.purge_all()
                await q.close()

    asyncio.run(scenario())
    return recorder.order


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_weights_3_to_1_share_starts_and_keep_each_queue_fair(
    valkey_server: EmbeddedValkey, kind: str
) -> None:
    """1,000 starts (the default suite; ``-m slow`` runs the 4,000 of the acceptance)."""
    run = run_sync if kind == "sync" else run_async
    check_weighted(run(valkey_server.url, 1000), 1000)


def run_single(url: str, weights: Mapping[str, float], total: int) -> list[str]:
    """The same worker on one queue of ``weights``' tenants: the single-queue reference."""
    (name, _) = queue_names()
    queue = connect(url, queue=name)
    try:
        for tenant, weight in weights.items():
            queue.set_tenant_weight(tenant, weight)
        queue.push_batch(load(total, weights, 1.0))
        recorder = Recorder(total)
        worker = Worker(config("mq-single"), recorder, queue, prefetch=PREFETCH)
        worker.start()
        try:
            assert recorder.done.wait(90), len(recorder.order)
        finally:
            assert worker.stop(20)
        return recorder.order[:total]
    finally:
        queue.purge_all()
        queue.close()


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sync", "async"])
def test_weights_3_to_1_over_4000_tasks(valkey_server: EmbeddedValkey, kind: str) -> None:
    """The acceptance run; each queue's tenants are also held to what the same worker on that
    queue alone does with the same tenants (its largest lag, plus one)."""
    run = run_sync if kind == "sync" else run_async
    order = run(valkey_server.url, 4000)
    figures = check_weighted(order, 4000)
    for queue, weights, share in (("a", A_WEIGHTS, 0.75), ("b", B_WEIGHTS, 0.25)):
        alone = fairness_report(run_single(valkey_server.url, weights, int(4000 * share)), weights)
        figures[f"{queue}_alone_max_lag"] = alone.max_lag
        assert figures[f"{queue}_max_lag"] <= alone.max_lag + 1
    print(f"{kind}: {figures}")


def serve_strict(url: str, kind: str, names: tuple[str, str], recorder: Recorder) -> str:
    """Serve the two queues in strict order with one place and no prefetch until ``recorder``
    is done; the worker's ``queue_order`` as its health says."""
    cfg = WorkerConfig(id=f"mq-strict-{kind}", max_concurrent_tasks=1, poll_interval_seconds=0.2)
    if kind == "sync":
        qa, qb = connect(url, queue=names[0]), connect(url, queue=names[1])
        try:
            worker = Worker(cfg, recorder, queues=[qa, qb], queue_order="strict", prefetch=0)
            worker.start()
            try:
                assert recorder.done.wait(60), len(recorder.order)
            finally:
                assert worker.stop(20)
            return str(worker.health()["queue_order"])
        finally:
            qa.close()
            qb.close()

    async def scenario() -> str:
        qa, qb = await aconnect(url, queue=names[0]), await aconnect(url, queue=names[1])
        try:
            worker = AsyncWorker(cfg, recorder, queues=[qa, qb], queue_order="strict", prefetch=0)
            await worker.start()
            try:
                loop = asyncio.get_running_loop()
                assert await loop.run_in_executor(None, recorder.done.wait, 60)
            finally:
                assert await worker.stop(20)
            return str(worker.health()["queue_order"])
        finally:
            await qa.close()
            await qb.close()

    return asyncio.run(scenario())


@pytest.mark.usefixtures("handoff_on_and_off")  # ADR 65
@pytest.mark.parametrize("kind", ["sync", "async"])
def test_strict_order_serves_the_second_queue_only_when_the_first_is_empty(
    valkey_server: EmbeddedValkey, kind: str
) -> None:
    """One place, no prefetch: every claim takes one task, from B only when A had none. A
    refills twice while B is served (pushed from B's handlers): A's new tasks start next."""
    names = queue_names()
    qa, qb = connect(valkey_server.url, queue=names[0]), connect(valkey_server.url, queue=names[1])
    ready_a_at_b_start: list[int] = []

    def on_start(tenant: str, count: int) -> None:
        if tenant.startswith("b"):
            ready_a_at_b_start.append(int(qa.get_stats().get("ready", 0)))
            if count in (40, 60):  # A refills while B is served
                qa.push_batch([Task.create("a1") for _ in range(5)])

    recorder = Recorder(30 + 40 + 10, on_start)
    try:
        qb.push_batch([Task.create("b1") for _ in range(40)])
        qa.push_batch([Task.create(tenant) for tenant in ("a1", "a2") for _ in range(15)])
        assert serve_strict(valkey_server.url, kind, names, recorder) == "strict"
        order = recorder.order
        assert order[:30] == [t for t in order[:30] if t.startswith("a")]
        # after the pushes at the 40th and 60th start (B's), A's five run at once, then B again
        assert order[40:45] == ["a1"] * 5, order[35:50]
        assert order[60:65] == ["a1"] * 5, order[55:70]
        assert set(ready_a_at_b_start) == {0}
        assert Counter(order) == {"a1": 25, "a2": 15, "b1": 40}
    finally:
        for q in (qa, qb):
            q.purge_all()
            q.close()


@pytest.mark.usefixtures("handoff_on_and_off")  # ADR 65
def test_an_idle_worker_wakes_on_either_queue_and_does_not_spin(
    valkey_server: EmbeddedValkey,
) -> None:
    """Both queues empty: the worker waits (its claims do not spin); a push to the second
    queue wakes it well before its idle poll would have (a poll interval of 30 s)."""
    name_a, name_b = queue_names()
    qa, qb = connect(valkey_server.url, queue=name_a), connect(valkey_server.url, queue=name_b)
    recorder = Recorder(2)
    cfg = WorkerConfig(id="mq-idle", max_concurrent_tasks=2, poll_interval_seconds=30.0)
    worker = Worker(cfg, recorder, queues=[qa, qb])
    try:
        worker.start()
        sent = threading.Event()

        def settled() -> bool:
            health = worker.health()
            return bool(health["waiting_for_work"])

        for _ in range(200):
            if settled():
                break
            sent.wait(0.01)
        assert settled()
        sent.wait(0.6)  # the idle poll's backoff (from 0.5 ms, doubling) has grown past 0.3 s
        claims = worker.health()["claims_sent"]
        sent.wait(0.5)
        assert worker.health()["claims_sent"] - claims <= 2  # no busy loop
        qb.push(Task.create("b1"))
        qa.push(Task.create("a1"))
        assert recorder.done.wait(10)  # woken by a signal, not by the 30 s poll
        assert sorted(recorder.order) == ["a1", "b1"]
    finally:
        assert worker.stop(10)
        for q in (qa, qb):
            q.purge_all()
            q.close()


class Slow(TaskHandler):
    """Each task runs ``seconds``: longer than its queue's lease, so only heartbeats keep it."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.started: list[str] = []
        self.lock = threading.Lock()

    def process_task(self, task: Task) -> object:
        with self.lock:
            self.started.append(task.task_id)
        threading.Event().wait(self.seconds)
        return None


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_heartbeats_and_acks_go_to_each_tasks_queue(
    valkey_server: EmbeddedValkey, kind: str
) -> None:
    """Leases of 0.6 s, tasks of 1.5 s: each task lives on its heartbeats, which (with its
    finish) must reach the queue that holds its lease; a lost lease would run it twice."""
    name_a, name_b = queue_names()
    cfg = WorkerConfig(id=f"mq-hb-{kind}", max_concurrent_tasks=4, reaper_interval_seconds=0.2)
    handler = Slow(1.5)
    if kind == "sync":
        qa = connect(valkey_server.url, queue=name_a, lease_seconds=0.6)
        qb = connect(valkey_server.url, queue=name_b, lease_seconds=0.6)
        try:
            ids = [str(qa.push(Task.create("a1"))), str(qb.push(Task.create("b1")))]
            worker = Worker(cfg, handler, queues=[qa, qb])
            worker.start()
            for q in (qa, qb):
                for _ in range(400):
                    if q.get_stats()["finished"] == 1:
                        break
                    threading.Event().wait(0.01)
            assert worker.stop(10)
            assert [q.get_stats()["finished"] for q in (qa, qb)] == [1, 1]
        finally:
            for q in (qa, qb):
                q.purge_all()
                q.close()
    else:

        async def scenario() -> list[str]:
            qa = await aconnect(valkey_server.url, queue=name_a, lease_seconds=0.6)
            qb = await aconnect(valkey_server.url, queue=name_b, lease_seconds=0.6)
            try:
                handles = [await qa.push(Task.create("a1")), await qb.push(Task.create("b1"))]
                worker = AsyncWorker(cfg, handler, queues=[qa, qb])
                await worker.start()
                try:
                    for handle in handles:
                        await handle.get(timeout=20)
                finally:
                    assert await worker.stop(10)
                assert [(await q.get_stats())["finished"] for q in (qa, qb)] == [1, 1]
                return [h.task_id for h in handles]
            finally:
                for q in (qa, qb):
                    await q.purge_all()
                    await q.close()

        ids = asyncio.run(scenario())
    assert sorted(handler.started) == sorted(ids)  # each ran once: no lease was lost
