"""A claim without flow control reserves its serves and pops each tenant's tasks at once (one
LPOP and one ZPOPMIN of the count), and a tenant alone in its active set is served in one run
(ADR 52, claim.lua's fq_reserve, fq_reserve_run and fq_claim_flush). The picks, tasks, tokens
and every write must stay a pop per serve's: here few tenants (1-5, where a claim serves each
many times) and large claims (up to 200), some with CRITICAL work, mixed weights, strict tiers
or not, claims naming their tenants, finishes (alone and carried by the next claim) and
releases between claims, and new work. Every claim's tasks and tokens, in order, must equal
the InMemoryBackend's; so must the queue's figures, every tenant's, its stored pass and the
order of the active sets.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator

import pytest
import redis

from contract.helpers import CountingTokens, FakeClock
from fairque_core import Message, Priority, QueueConfig
from fairque_core.domain.models import Claimed
from fairque_core.memory.model import InMemoryBackend
from fairque_redis.backends.backend import RedisBackend

pytestmark = pytest.mark.redis

PRIORITIES = [Priority.LOW, Priority.NORMAL, Priority.NORMAL, Priority.HIGH]
WEIGHTS = [0.5, 1, 1, 2, 3]


def _seen(claimed: list[Claimed]) -> list[tuple[str, str, str, int]]:
    return [
        (c.message.task_id, c.message.tenant, c.lease.token, int(c.message.priority))
        for c in claimed
    ]


@pytest.fixture
def pair(valkey_server) -> Iterator[tuple[str, redis.Redis]]:
    queue = "b" + uuid.uuid4().hex[:12]
    client = redis.Redis.from_url(valkey_server.url)
    yield queue, client
    keys = list(client.scan_iter(match=f"fq:{{{queue}}}:*", count=1000))
    if keys:
        client.delete(*keys)
    client.close()


def _same_fair_state(
    client: redis.Redis, queue: str, model: InMemoryBackend, tenant_ids: list[str]
) -> None:
    fair = model._fair
    prefix = f"fq:{{{queue}}}:"
    for tenant_id in tenant_ids:
        record = fair.tenants.get(tenant_id)
        expected = 0 if record is None else record.pass_
        stored = client.hget(prefix + f"tenant:{tenant_id}", "pass")
        assert int(stored or 0) == expected, f"pass of {tenant_id}: model {expected}, {stored!r}"
    meta = client.hgetall(prefix + "meta")
    for tier in range(3):
        raw = meta.get(b"vtime")
        if fair.strict_tiers:
            raw = meta.get(f"vtime:{tier}".encode(), raw)
        assert int(raw or 0) == fair.virtual_time(tier), f"virtual time of tier {tier}"
        members = fair.active.get(tier, {})
        model_order = sorted(members, key=members.__getitem__)
        real = client.zrange(prefix + f"active:{tier}", 0, -1, withscores=True)
        assert [m.decode().partition("|")[2] for m, _ in real] == model_order, tier
        # each member scored by its pass, as the model holds it
        for member, score in real:
            tenant_id = member.decode().partition("|")[2]
            assert int(score) == members[tenant_id][0], f"active:{tier} score of {tenant_id}"


@pytest.mark.parametrize(
    ("seed", "tenants", "strict"),
    [(1, 1, False), (2, 2, False), (3, 3, True), (4, 5, False), (5, 1, True), (6, 4, True)],
)
def test_few_tenants_and_large_claims_follow_the_model(valkey_server, pair, seed, tenants, strict):
    queue, client = pair
    rng = random.Random(seed)
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
            for _ in range(rng.randint(most // 2, most)):
                n += 1
                critical = rng.random() < 0.1
                prio = Priority.CRITICAL if critical else rng.choice(PRIORITIES)
                batch.append(Message(task_id=f"t{n}", tenant=u, priority=prio, body=b"{}"))
        assert real.push_batch(batch) == model.push_batch(batch)

    try:
        tenant_ids = [f"u{i}" for i in range(tenants)]
        for u in tenant_ids:
            weight, tier = rng.choice(WEIGHTS), rng.randint(0, 1) if strict else 0
            model.set_tenant_weight(u, weight, tier=tier)
            real.set_tenant_weight(u, weight, tier=tier)
        push(tenant_ids, 150)
        held: list[Claimed] = []
        served = 0
        for step in range(40):
            clock.now += 0.01
            count = rng.choice([1, 8, 30, 50, 120, 200])
            how = rng.random()
            if how < 0.2:  # claims naming their tenants (no view, pinned virtual time)
                named = rng.sample(tenant_ids, max(1, len(tenant_ids) // 2))
                kw = {"assigned": named, "steal": [u for u in tenant_ids if u not in named]}
            else:
                kw = {}
            done = held[: len(held) // 2]
            held = held[len(held) // 2 :]
            items = [(c.message.task_id, c.lease.token, None) for c in done]
            if how > 0.6 and items:  # the acks carried by the claim (finish_claim.lua)
                flags, got = real.finish_and_claim(items, worker_id="w", count=count, **kw)
                assert flags == model.finish_batch(items)
            else:
                for item in items:
                    if rng.random() < 0.85:
                        assert real.finish_batch([item]) == model.finish_batch([item])
                    else:
                        model.release(item[0], item[1])
                        real.release(item[0], item[1])
                got = real.claim(worker_id="w", count=count, **kw)
            expected = model.claim(worker_id="w", count=count, **kw)
            assert _seen(got) == _seen(expected), (step, count, kw)
            served += len(got)
            held.extend(expected)
            rng.shuffle(held)
            if step % 8 == 3:
                push(rng.sample(tenant_ids, max(1, len(tenant_ids) // 2)), 60)
            _same_fair_state(client, queue, model, tenant_ids)
        assert served > 200  # the claims were large and did drain
        assert real.stats() == model.stats()
        assert real.queue_sizes(tenant_ids) == model.queue_sizes(tenant_ids)
        for u in tenant_ids:
            assert real.tenant_stats(u) == model.tenant_stats(u), u
    finally:
        real.close()


def test_a_damaged_task_key_in_a_reserved_run_is_skipped_and_the_claim_picks_again(
    valkey_server, pair
):
    """One tenant, a claim of 10 reserved at once: the fourth task's key is of another type,
    so its lease is refused (named, counted) and the claim serves once more; the tokens go to
    the tasks leased, in order, and the counters count the leases made."""
    queue, client = pair
    real = RedisBackend.from_url(
        valkey_server.url,
        queue=queue,
        config=QueueConfig(name=queue),
        clock=FakeClock(),
        token_source=CountingTokens(),
    )
    try:
        real.push_batch(
            [
                Message(task_id=f"t{k:02d}", tenant="solo", priority=Priority.NORMAL, body=b"{}")
                for k in range(20)
            ]
        )
        key = f"fq:{{{queue}}}:task:t03"
        client.delete(key)
        client.set(key, "damaged")
        got = real.claim(worker_id="w", count=10)
        assert [c.message.task_id for c in got] == [f"t{k:02d}" for k in range(11) if k != 3]
        assert [c.lease.token for c in got] == [f"tok-{k:06d}" for k in range(1, 11)]
        stats = real.tenant_stats("solo")
        assert stats["claimed"] == 10
        assert stats["leased"] == 10
        assert stats["repaired"] == 1
        assert client.zcard(f"fq:{{{queue}}}:n:solo") == 9
        assert client.zcard(f"fq:{{{queue}}}:leases") == 10
    finally:
        real.close()
