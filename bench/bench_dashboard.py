"""How long the dashboard's pages take on a big queue (issue 15: < 200 ms each).

    uv run python bench/bench_dashboard.py                      # model, 100k tenants, 1M tasks
    uv run python bench/bench_dashboard.py --url redis://...    # a real server
    uv run python bench/bench_dashboard.py --tenants 1000 --tasks 10000

Fills a fresh queue through the public API (push_batch), puts some tasks in the DLQ, then
requests every page through an ASGI test client (best and median of ``--repeat`` runs) and
prints a table. The sampler's one tick (its tenant pass reads the first 1000 tenants) is timed
apart: it runs in the background, not in a request.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from typing import Any

from starlette.testclient import TestClient

from fairque_core import (
    AsyncFairQueue,
    AsyncInMemoryBackend,
    FairQueue,
    FairQueueConfig,
    InMemoryBackend,
    Task,
)
from fairque_core.app.backend_loading import open_async_backend, open_backend
from fairque_dashboard import DashboardSettings, create_app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=None, help="Redis/Valkey URL (default: the model)")
    parser.add_argument("--tenants", type=int, default=100_000)
    parser.add_argument("--tasks", type=int, default=1_000_000)
    parser.add_argument("--dlq", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--queue", default=None, help="queue name (default: a fresh one)")
    parser.add_argument("--no-fill", action="store_true", help="use the queue as it is")
    args = parser.parse_args()

    name = args.queue or f"bench-dash-{uuid.uuid4().hex[:8]}"
    if args.url is None:
        model = InMemoryBackend(queue=name)
        queue = FairQueue(model)

        async def opener() -> AsyncFairQueue:
            return AsyncFairQueue(AsyncInMemoryBackend(model=model))

        where = "in-memory model"
    else:
        config = FairQueueConfig.from_dict({"redis": {"url": args.url}, "queue": {"name": name}})
        queue = FairQueue(open_backend(config))

        async def opener() -> AsyncFairQueue:
            return AsyncFairQueue(open_async_backend(config))

        where = "server"

    if not args.no_fill:
        fill(queue, args, where)
    run_pages(opener, args)
    queue.close()


def fill(queue: FairQueue, args: argparse.Namespace, where: str) -> None:
    started = time.perf_counter()
    batch: list[Task] = []
    for i in range(args.tasks):
        batch.append(Task.create(f"tenant-{i % args.tenants:06d}", task_id=f"t{i}"))
        if len(batch) == 5000:
            queue.push_batch(batch)
            batch.clear()
    if batch:
        queue.push_batch(batch)
    for i in range(args.dlq):
        queue.push(Task.create("dead", task_id=f"dead-{i}", max_retries=0))
        task = queue.claim(["dead"])
        assert task is not None
        queue.fail(task, RuntimeError("bench"))
    print(
        f"filled {args.tasks:,} tasks over {args.tenants:,} tenants ({where}) "
        f"in {time.perf_counter() - started:.1f} s"
    )


def run_pages(opener: Any, args: argparse.Namespace) -> None:
    app = create_app(opener, DashboardSettings(sample_interval=0))
    pages = [
        "/",
        "/?partial=live",
        "/tenants",
        "/tenants?size=200",
        f"/tenants?page={args.tenants // 50}&sort=depth",
        "/tenants?tenant=tenant-000042",
        "/tasks/t12345",
        "/tasks/dead-7",
        "/dlq",
        "/dlq?tenant=dead&failure_type=failed",
        "/workers",
        "/schedules",
    ]
    with TestClient(app) as client:
        board = app.state.dashboard
        ticks = []
        for _ in range(3):
            t0 = time.perf_counter()
            client.portal.call(board.sampler.sample)  # type: ignore[union-attr]
            ticks.append(time.perf_counter() - t0)
        print(f"{'page':<45} {'best ms':>8} {'median ms':>10}")
        print(
            f"{'(sampler tick, background)':<45} {min(ticks) * 1000:8.1f} "
            f"{statistics.median(ticks) * 1000:10.1f}"
        )
        worst = 0.0
        for path in pages:
            times = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                response = client.get(path)
                times.append(time.perf_counter() - t0)
                assert response.status_code == 200, (path, response.status_code)
            worst = max(worst, statistics.median(times))
            print(f"{path:<45} {min(times) * 1000:8.1f} {statistics.median(times) * 1000:10.1f}")
    print(f"slowest page median: {worst * 1000:.1f} ms (target < 200 ms)")


if __name__ == "__main__":
    main()
