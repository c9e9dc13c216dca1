"""A claim reads the head of its active set once per call and picks from that window in Lua
(claim.lua's view, issue 17); its picks must stay exactly the reference scheduler's.

The differential test drives three tenants, so every window holds the whole active set. Here
the active set is larger than the claim's window (60-150 tenants, claims of 1-60), with
weights from 0.5 to 10 (a heavy tenant's new pass stays below the window's last member, a
light one's goes past it: the window is written back and read again), strict tiers or not,
some tenants with CRITICAL work (the window's one check of its tenants' critical lists finds
some), and between claims finishes, releases (a refund rescores a tenant outside any claim),
new tenants and new work. Every claim's tasks, in order, must equal the InMemoryBackend's, and
so must the queue's sizes and every tenant's figures at the end.
"""

from __future__ import annotations

import random
import uuid

import pytest
import redis

from fairque_core import Message, Priority, QueueConfig
from fairque_core.domain.models import Claimed
from fairque_core.memory.model import InMemoryBackend
from fairque_redis.backends.backend import RedisBackend
from fairque_testing.queues import FakeClock

pytestmark = pytest.mark.redis

PRIORITIES = [Priority.LOW, Priority.NORMAL, Priority.NORMAL, Priority.HIGH]
WEIGHTS = [0.5, 1, 1, 1, 2, 3, 10]


class CountingTokens:
    def __init__(self) -> None:
        self.n = 0

    def __call__(self) -> str:
        self.n += 1
        return f"tok-{self.n:06d}"


def _ids(claimed: list[Claimed]) -> list[tuple[str, str]]:
    return [(c.message.task_id, c.message.tenant) for c in claimed]


@pytest.mark.parametrize(
    ("seed", "tenants", "strict"),
    [(1, 150, False), (2, 60, False), (3, 80, True), (4, 130, True)],
)
def test_claims_follow_the_model_with_a_window_smaller_than_the_active_set(
    valkey_server, seed, tenants, strict
):
    rng = random.Random(seed)
    queue = "w" + uuid.uuid4().hex[:12]
    clock = FakeClock()
    config = QueueConfig(name=queue, strict_tiers=strict, lease_seconds=600.0)
    model = InMemoryBackend(clock, queue=queue, config=config, token_source=CountingTokens())
    real = RedisBackend.from_url(
        valkey_server.url, queue=queue, config=config, clock=clock, token_source=CountingTokens()
    )
    n = 0

    def push(tenant_ids: list[str], most: int) -> None:
        nonlocal n
        batch = []
        for u in tenant_ids:
            for _ in range(rng.randint(1, most)):
                n += 1
                critical = u.endswith("7") and rng.random() < 0.3
                prio = Priority.CRITICAL if critical else rng.choice(PRIORITIES)
                batch.append(Message(task_id=f"t{n}", tenant=u, priority=prio, body=b"{}"))
        assert real.push_batch(batch) == model.push_batch(batch)

    try:
        tenant_ids = [f"u{i}" for i in range(tenants)]
        for u in tenant_ids:
            weight, tier = rng.choice(WEIGHTS), rng.randint(0, 2) if strict else 0
            model.set_tenant_weight(u, weight, tier=tier)
            real.set_tenant_weight(u, weight, tier=tier)
        push(tenant_ids, 6)
        held: list[Claimed] = []
        for step in range(60):
            clock.now += 0.01
            count = rng.choice([1, 2, 7, 20, 50, 60])
            expected = model.claim(worker_id="w", count=count)
            got = real.claim(worker_id="w", count=count)
            assert _ids(got) == _ids(expected), (step, count)
            held.extend(expected)
            rng.shuffle(held)
            for c in held[: len(held) // 2]:
                if rng.random() < 0.8:
                    item = (c.message.task_id, c.lease.token, None)
                    assert real.finish_batch([item]) == model.finish_batch([item])
                else:
                    model.release(c.message.task_id, c.lease.token)
                    real.release(c.message.task_id, c.lease.token)
            held = held[len(held) // 2 :]
            if step % 10 == 5:  # newcomers and more work for some
                newcomers = [f"n{step}-{k}" for k in range(3)]
                push(newcomers + rng.sample(tenant_ids, 10), 4)
                tenant_ids += newcomers
        assert real.stats() == model.stats()
        assert real.queue_sizes(tenant_ids) == model.queue_sizes(tenant_ids)
        for u in tenant_ids:
            assert real.tenant_stats(u) == model.tenant_stats(u), u
    finally:
        real.close()
        client = redis.Redis.from_url(valkey_server.url)
        keys = list(client.scan_iter(match=f"fq:{{{queue}}}:*", count=1000))
        if keys:
            client.delete(*keys)
        client.close()


def test_a_window_used_up_by_repairs_is_read_again_in_order(valkey_server):
    """Stale members (tenants whose scored set was deleted behind the client's back) are
    repaired without serving anything, so a claim can use up its whole window on them; the
    tenants it served by then sit above the window's last member, below members not read yet:
    the window must be read again before they are served a second time."""
    queue = "w" + uuid.uuid4().hex[:12]
    real = RedisBackend.from_url(
        valkey_server.url, queue=queue, config=QueueConfig(name=queue), clock=FakeClock()
    )
    client = redis.Redis.from_url(valkey_server.url)
    try:
        tenant_ids = [f"u{i:02d}" for i in range(60)]
        real.push_batch(
            [
                Message(task_id=f"{u}-{k}", tenant=u, priority=Priority.NORMAL, body=b"{}")
                for u in tenant_ids
                for k in range(2)
            ]
        )
        live = tenant_ids[::4]
        for u in tenant_ids:
            if u not in live:
                client.delete(f"fq:{{{queue}}}:n:{u}")
        got = [c.message.task_id for c in real.claim(worker_id="w", count=10)]
        # one turn each for the first ten live tenants, in activation order, before any second
        assert got == [f"{u}-0" for u in live[:10]]
        got = [c.message.task_id for c in real.claim(worker_id="w", count=10)]
        assert got == [f"{u}-0" for u in live[10:]] + [f"{u}-1" for u in live[:5]]
    finally:
        real.close()
        keys = list(client.scan_iter(match=f"fq:{{{queue}}}:*", count=1000))
        if keys:
            client.delete(*keys)
        client.close()
