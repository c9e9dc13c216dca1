"""Push a few tasks for several tenants.

    FAIRQUE_REDIS_URL=redis://localhost:6379/0 python examples/producer.py
    python examples/producer.py --url redis://localhost:6379/0 --per-tenant 20

``fairque_redis.connect`` takes the URL from ``--url``, else ``$FAIRQUE_REDIS_URL``; with
neither it starts an embedded Valkey that lives only as long as this script.
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
