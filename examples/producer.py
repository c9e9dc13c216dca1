"""Push a few tasks for several tenants.

    uv run python examples/producer.py                     # the shared local server
    uv run python examples/producer.py --url redis://localhost:6379/0 --per-tenant 20

``fairque_redis.connect`` takes the URL from ``--url``, else ``$FAIRQUE_REDIS_URL``; with
neither it uses the shared local server (one durable Valkey per user, started on first use and
left running: ``fairque server stop`` stops it), so a worker started later in another terminal
finds these tasks:

    cd examples && uv run fairque worker --handler tasks:registry
"""

from __future__ import annotations

import argparse

from tasks import send_report, thumbnail

from fairque_core import Priority
from fairque_redis import connect

TENANTS = {"acme": 4.0, "globex": 2.0, "initech": 1.0}  # tenant -> weight (its tier)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", default=None)
    parser.add_argument("--queue", default="default")
    parser.add_argument("--per-tenant", type=int, default=5)
    args = parser.parse_args()

    with connect(args.url, queue=args.queue) as queue:
        for tenant, weight in TENANTS.items():
            queue.set_tenant_weight(tenant, weight)
            tasks = [
                thumbnail(tenant, f"{tenant}/photo-{n}.jpg", width=256)
                for n in range(args.per_tenant)
            ]
            # One round trip for the whole batch.
            queue.push_batch(tasks)
            # One urgent task, served before the tenant's normal work.
            queue.push(send_report(tenant, f"ops@{tenant}.example", priority=Priority.CRITICAL))
        sizes = queue.get_queue_sizes_batch(list(TENANTS))
        for tenant, size in sizes.items():
            print(f"{tenant}: {size['total']} tasks waiting")
        print(f"pushed {len(TENANTS) * (args.per_tenant + 1)} tasks to queue {queue.name}")


if __name__ == "__main__":
    main()
