"""docs/operations.md's least-rights ACL user really runs a queue: the documented rules, taken
from the doc itself, on a real Valkey, for every operation a producer, a worker, the reaper, a
result waiter, an operator and a scheduler (its store and one firing round) perform. A script
that calls a command the doc forgot fails here with BackendPermissionError naming it."""

from __future__ import annotations

import contextlib
import re
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import redis

from fairque_core import Priority, Task
from fairque_core.app.scheduler.scheduler import Scheduler
from fairque_redis import connect

DOC = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def documented_rules(queue: str) -> list[str]:
    """The ACL rules of the doc's ``ACL SETUSER`` block, for ``queue`` instead of ``orders``."""
    text = DOC.read_text(encoding="utf-8")
    block = re.search(r"```\n(ACL SETUSER .*?)```", text, re.S)
    assert block is not None, "docs/operations.md lost its ACL SETUSER block"
    words = block.group(1).replace("{orders", "{" + queue).split()
    assert words[:3] == ["ACL", "SETUSER", "fairque"]
    return [w for w in words[3:] if not w.startswith(">")]


@contextlib.contextmanager
def documented_user(server: Any, queue: str) -> Iterator[str]:
    """A URL of a user with the doc's ACL for ``queue``, deleted on the way out."""
    user = f"fq-{uuid.uuid4().hex[:8]}"
    admin = redis.Redis.from_url(server.url)
    admin.execute_command("ACL", "SETUSER", user, *documented_rules(queue), ">pw-doc")
    host = admin.connection_pool.connection_kwargs["host"]
    try:
        yield f"redis://{user}:pw-doc@{host}:{server.port}/0"
    finally:
        admin.execute_command("ACL", "DELUSER", user)
        admin.close()


def test_the_documented_acl_user_runs_every_operation(valkey_server: Any) -> None:
    queue = f"acl-{uuid.uuid4().hex[:8]}"
    with (
        documented_user(valkey_server, queue) as url,
        connect(url, queue=queue, lease_seconds=0.2) as q,
    ):
        q.set_tenant_weight("acme", 2.0)
        handle = q.push(Task.create("acme", Priority.HIGH, {"n": 1}))
        q.push_batch([Task.create("bob", payload={"n": n}) for n in range(3)])
        q.push(Task.create("bob", payload={}, execute_after=1e10))  # scheduled
        first = q.claim_batch(2, worker_id="w")
        assert len(first) == 2
        renewed = q.heartbeat_batch(first)
        assert all(t is not None for t in renewed)
        assert q.finish_batch([(first[0], {"ok": True})]) == [True]
        q.fail(first[1], RuntimeError("boom"))
        more = q.claim_batch(5, ["bob"], worker_id="w")
        q.release(more[0])
        assert q.wait_for_work(0.01) in (True, False)
        q.requeue_expired()
        assert q.result(first[0].task_id).get(timeout=2) == {"ok": True}
        assert handle.task_id
        q.set_tenant_limits("bob", max_running=1, rate=100.0, burst=1, max_queued=100)
        q.push_batch([Task.create("bob", payload={"n": n}) for n in range(3)])
        q.claim_batch(3, worker_id="w")
        q.get_tenant_limits("bob")
        # limits by key (ADR 79): a cap, tasks parked and put back, a rate-held global key,
        # the listing, a purge that takes parked tasks, a clear
        q.set_key_limits("export", max_running=1)
        q.set_key_limits("pay", rate=0.001, per_tenant=False)
        q.push_batch([Task.create("dora", limit_key="export") for _ in range(3)])
        q.push_batch([Task.create("dora", limit_key="pay") for _ in range(2)])
        (held, _paid) = q.claim_batch(5, ["dora"], worker_id="w")  # an export, a payment
        q.finish(held, None)
        assert q.get_key_limits("export").parked == {"dora": 1}
        assert list(q.list_key_limits()) == ["export", "pay"]
        assert q.purge_tenant("dora") >= 2
        q.clear_key_limits("pay")
        # a waiter blocked before the finish (the notification path, not a read)
        waited = q.push(Task.create("carol", payload={}))
        got: list[object] = []
        waiter = threading.Thread(target=lambda: got.append(waited.get(timeout=5)))
        waiter.start()
        time.sleep(0.1)
        (task,) = q.claim_batch(1, ["carol"], worker_id="w")
        q.finish(task, "done")
        waiter.join(6)
        assert got == ["done"]
        q.cancel(more[-1].task_id)
        q.get_stats()
        # the fairness figures read the head of each tenant's ready list (LINDEX)
        assert {f.tenant for f in q.get_tenant_fairness(["acme", "bob"])} == {"acme", "bob"}
        q.get_tenant_stats("acme")
        q.get_queue_sizes_batch(["acme", "bob"])
        q.list_tenants()
        q.list_dlq()
        # the task record and the browse indexes (ADR 70): a page, then the next from its cursor
        assert q.get_task(first[0].task_id) is not None
        page = q.list_tasks(limit=1)
        assert page.cursor is not None
        q.list_tasks(limit=1, cursor=page.cursor)
        q.purge_dlq()
        # the scheduler (its store reads and deletes in MULTI/EXEC; the lock and the
        # fired mark are scripts): a schedule added, listed, fired once, removed
        q.add_schedule("every-minute", "* * * * *", {"tenant": "acme", "payload": {}})
        assert [s.schedule.name for s in q.list_schedules()] == ["every-minute"]
        scheduler = Scheduler(q, lock_seconds=2.0, poll_seconds=0.5)
        # one second after the next minute's tick: on time (within the misfire grace)
        fired = scheduler.run_once((int(time.time()) // 60 + 1) * 60 + 1.0)
        assert len(fired) == 1
        assert scheduler.holds_lock
        assert q.remove_schedule("every-minute")


def test_the_documented_acl_user_claims_on_a_partitioned_queue(valkey_server: Any) -> None:
    """A partition's summary samples its active tenants (ZRANDMEMBER) past 64 of them: every
    claim failed for the documented user once a partition had that many."""
    queue = f"aclp-{uuid.uuid4().hex[:8]}"
    with documented_user(valkey_server, queue) as url, connect(url, queue=queue, partitions=2) as q:
        q.push_batch([Task.create(f"t{n}") for n in range(200)])  # ~100 per partition
        claimed = q.claim_batch(20, worker_id="w")
        assert len(claimed) == 20
        assert q.finish_batch([(t, None) for t in claimed]) == [True] * 20
        assert len(q.get_tenant_fairness(limit=10)) == 10
