"""Fairness properties of the reference scheduler (InMemoryBackend), checked with hypothesis.

The same bars the architecture sets for every backend: equal tenants served evenly in every
window, weighted shares within 2%, Jain's index >= 0.99, a newly active tenant served within
(active tenants) pops, affinity order, critical-first, and leases never double-handed.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter, defaultdict

import pytest
from hypothesis import given, note
from hypothesis import strategies as st

from fairque_core import Message, Priority, QueueConfig
from fairque_core.memory.model import InMemoryBackend


class FakeClock:
    def __init__(self) -> None:
        self.now = float(int(time.time()))

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def _tokens():
    n = 0

    def make() -> str:
        nonlocal n
        n += 1
        return f"tok-{n}"

    return make


def _backend(clock=None, **config):
    return InMemoryBackend(
        clock or FakeClock(), config=QueueConfig(**config), token_source=_tokens()
    )


def _msg(task_id: str, user: str, priority: Priority = Priority.NORMAL) -> Message:
    return Message(task_id=task_id, user_id=user, priority=priority, body=b"{}")


def _pop_users(backend, n: int, counts: list[int], **kw) -> list[str]:
    """Claim ``n`` tasks in claims of the given sizes (cycled); the tenant of each."""
    out: list[str] = []
    i = 0
    while len(out) < n:
        want = min(counts[i % len(counts)], n - len(out))
        i += 1
        got = backend.claim(count=want, **kw)
        assert got, "a backlogged queue ran dry"
        out.extend(c.message.user_id for c in got)
    return out


def _jain(xs: list[int]) -> float:
    return sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs))


tenant_names = st.lists(
    st.text("abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=8),
    min_size=2,
    max_size=6,
    unique=True,
)


@given(
    users=tenant_names,
    m=st.integers(1, 5),
    rounds=st.integers(2, 6),
    order=st.randoms(use_true_random=False),
    counts=st.lists(st.integers(1, 7), min_size=1, max_size=4),
)
def test_equal_tenants_share_every_window(users, m, rounds, order, counts):
    k = len(users)
    pops = k * m * rounds
    backend = _backend()
    messages = [_msg(f"{u}-{i}", u) for u in users for i in range(pops)]
    order.shuffle(messages)
    backend.push_batch(messages)
    served = _pop_users(backend, pops, counts)
    window = k * m
    for start in range(len(served) - window + 1):
        got = Counter(served[start : start + window])
        for u in users:
            assert m - 1 <= got[u] <= m + 1, (start, u, got)
    totals = Counter(served)
    assert _jain([totals[u] for u in users]) >= 0.99


@given(
    weights=st.lists(st.sampled_from([0.5, 1, 1.5, 2, 3, 4]), min_size=2, max_size=4),
    extra=st.integers(0, 500),
    counts=st.lists(st.integers(1, 16), min_size=1, max_size=3),
)
def test_weighted_shares_within_two_percent(weights, extra, counts):
    users = [f"t{i}" for i in range(len(weights))]
    total_w = sum(weights)
    # Enough pops that the lightest tenant is owed at least 100: then one pop of rounding is
    # at most 1% of its share.
    pops = max(1000, int(100 * total_w / min(weights)) + 1) + extra
    backend = _backend()
    for u, w in zip(users, weights, strict=False):
        backend.set_tenant_weight(u, w)
        backend.push_batch([_msg(f"{u}-{i}", u) for i in range(pops)])
    served = Counter(_pop_users(backend, pops, counts))
    for u, w in zip(users, weights, strict=False):
        expected = pops * w / total_w
        note(f"{u}: weight {w}, served {served[u]}, expected {expected:.1f}")
        assert abs(served[u] - expected) <= 0.02 * expected


@given(
    n_old=st.integers(1, 6),
    weights=st.lists(st.sampled_from([0.25, 0.5, 1, 2, 5]), min_size=6, max_size=6),
    warmup=st.integers(0, 40),
    newcomer=st.sampled_from(["0first", "zlast", "mid"]),
    new_weight=st.sampled_from([0.25, 1, 4]),
)
def test_newly_active_tenant_served_within_active_count(
    n_old, weights, warmup, newcomer, new_weight
):
    users = [f"m{i}" for i in range(n_old)]
    backend = _backend()
    for u, w in zip(users, weights, strict=False):
        backend.set_tenant_weight(u, w)
        backend.push_batch([_msg(f"{u}-{i}", u) for i in range(100)])
    backend.set_tenant_weight(newcomer, new_weight)
    if warmup:
        _pop_users(backend, warmup, [1])
    backend.push(_msg("new-task", newcomer))
    active = backend.stats()["active_tenants"]
    assert active == n_old + 1
    served = _pop_users(backend, active, [1])
    assert newcomer in served, served


@given(
    backlog=st.dictionaries(
        st.sampled_from(["a", "b", "c", "d", "e"]), st.integers(0, 6), min_size=1
    ),
    assigned=st.lists(st.sampled_from(["a", "b", "c", "d", "e", "x"]), max_size=3, unique=True),
    steal=st.lists(st.sampled_from(["a", "b", "c", "d", "e", "x"]), max_size=3, unique=True),
    counts=st.lists(st.integers(1, 4), min_size=1, max_size=3),
)
def test_assigned_before_steal(backlog, assigned, steal, counts):
    backend = _backend()
    left = dict(backlog)
    for u, n in backlog.items():
        backend.push_batch([_msg(f"{u}-{i}", u) for i in range(n)])
    kw = {"assigned": assigned, "steal": steal}
    everyone = not assigned and not steal
    i = 0
    while True:
        got = backend.claim(count=counts[i % len(counts)], **kw)
        i += 1
        if not got:
            break
        for c in got:
            u = c.message.user_id
            if not everyone and u not in assigned:
                assert u in steal, (u, assigned, steal)
                assert all(left.get(a, 0) == 0 for a in assigned), (u, left)
            left[u] -= 1
    # Nothing claimable is left behind; nothing outside the lists was taken.
    for u, n in left.items():
        if everyone or u in assigned or u in steal:
            assert n == 0, (u, left)
        else:
            assert n == backlog[u]


@given(
    pushes=st.lists(
        st.tuples(st.sampled_from(["a", "b", "c"]), st.sampled_from(list(Priority))),
        min_size=1,
        max_size=40,
    ),
    ticks=st.lists(st.booleans(), min_size=1, max_size=40),
    counts=st.lists(st.integers(1, 5), min_size=1, max_size=3),
)
def test_critical_before_normal_within_a_tenant(pushes, ticks, counts):
    clock = FakeClock()
    backend = _backend(clock)
    critical_left: Counter[str] = Counter()
    for i, (u, p) in enumerate(pushes):
        backend.push(_msg(f"t{i}", u, p))
        if p is Priority.CRITICAL:
            critical_left[u] += 1
        if ticks[i % len(ticks)]:
            clock.advance(1.0)
    crit_order: dict[str, list[str]] = defaultdict(list)
    i = 0
    while got := backend.claim(count=counts[i % len(counts)]):
        i += 1
        for c in got:
            u = c.message.user_id
            if c.message.priority is Priority.CRITICAL:
                critical_left[u] -= 1
                crit_order[u].append(c.message.task_id)
            else:
                assert critical_left[u] == 0, (u, c.message.task_id)
    for ids in crit_order.values():
        assert ids == sorted(ids, key=lambda t: int(t[1:])), "critical is FIFO"


ops = st.lists(
    st.one_of(
        st.tuples(st.just("push"), st.sampled_from(["a", "b", "c"])),
        st.tuples(st.just("claim"), st.integers(1, 4)),
        st.tuples(st.just("advance"), st.sampled_from([0.5, 2.0, 4.9, 5.0, 7.5])),
        st.tuples(st.just("heartbeat"), st.integers(0, 50)),
        st.tuples(st.just("finish"), st.integers(0, 50)),
        st.tuples(st.just("reap"), st.integers(1, 5)),
    ),
    max_size=60,
)


@given(ops=ops)
def test_never_handed_out_twice_while_the_lease_is_live(ops):
    clock = FakeClock()
    backend = _backend(clock, lease_seconds=5.0, max_recoveries=100)
    live: dict[str, tuple[str, float]] = {}  # task id -> (token, deadline)
    n = 0
    for op, arg in ops:
        now = clock()
        if op == "push":
            backend.push(_msg(f"t{n}", arg))
            n += 1
        elif op == "claim":
            for c in backend.claim(count=arg):
                tid = c.message.task_id
                if tid in live:
                    assert live[tid][1] <= now, f"{tid} handed out twice under a live lease"
                live[tid] = (c.lease.token, c.lease.deadline)
        elif op == "advance":
            clock.advance(arg)
        elif op in ("heartbeat", "finish") and live:
            tid = sorted(live)[arg % len(live)]
            token, deadline = live[tid]
            if op == "heartbeat":
                try:
                    live[tid] = (token, backend.heartbeat(tid, token))
                except Exception:
                    assert deadline <= now  # only an expired (reaped) lease may be lost
                    del live[tid]
            else:
                try:
                    backend.finish(tid, token)
                except Exception:
                    assert deadline <= now
                del live[tid]
        elif op == "reap":
            backend.requeue_expired(limit=arg)


@given(
    n=st.integers(1, 20),
    users=st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=3, unique=True),
    over=st.sampled_from([0.0, 0.001, 3.0]),
)
def test_expired_lease_handed_out_again_after_requeue(n, users, over):
    clock = FakeClock()
    backend = _backend(clock, lease_seconds=10.0)
    ids = [f"t{i}" for i in range(n)]
    backend.push_batch([_msg(t, users[i % len(users)]) for i, t in enumerate(ids)])
    first = {c.message.task_id: c.lease.token for c in backend.claim(count=n)}
    assert sorted(first) == sorted(ids)
    assert backend.claim() == []
    clock.advance(10.0 + over)
    assert backend.requeue_expired(limit=n) == n
    again = {c.message.task_id: c for c in backend.claim(count=n)}
    assert sorted(again) == sorted(ids)
    for tid, c in again.items():
        assert c.recoveries == 1
        assert c.lease.token != first[tid]


@pytest.mark.redis
@pytest.mark.parametrize("weights", [(1, 1, 1, 1), (1, 3), (1, 2, 5)])
def test_redis_backend_meets_the_same_bars(valkey_server, weights):
    """The shares bar (and Jain for equal weights) on the real scripts, 1200 pops."""
    try:
        from fairque_redis.backend import RedisBackend
    except ImportError as exc:
        pytest.skip(f"fairque_redis.backend is not importable yet ({exc})")
    queue = "f" + uuid.uuid4().hex[:16]
    backend = RedisBackend.from_url(
        valkey_server.url, queue=queue, config=QueueConfig(), clock=FakeClock()
    )
    try:
        users = [f"t{i}" for i in range(len(weights))]
        pops = 1200
        for u, w in zip(users, weights, strict=True):
            backend.set_tenant_weight(u, w)
            backend.push_batch([_msg(f"{u}-{i}", u) for i in range(pops)])
        served = Counter(_pop_users(backend, pops, [1, 7, 16]))
        total_w = sum(weights)
        for u, w in zip(users, weights, strict=True):
            expected = pops * w / total_w
            assert abs(served[u] - expected) <= 0.02 * expected, (u, served)
        if len(set(weights)) == 1:
            assert _jain([served[u] for u in users]) >= 0.99
    finally:
        backend.close()
        import redis

        client = redis.Redis.from_url(valkey_server.url)
        keys = list(client.scan_iter(match=f"fq:{{{queue}}}:*", count=1000))
        if keys:
            client.delete(*keys)
        client.close()
