"""Fairness properties of the reference scheduler (InMemoryBackend), checked with hypothesis.

The same bars the architecture sets for every backend: equal tenants served evenly in every
window, weighted shares within 2%, Jain's index >= 0.99, a newly active tenant served within
(active tenants) pops, affinity order, critical-first, and leases never double-handed. Then
the bounds ADR 4 states, mode by mode (default, weighted, strict tiers, pinned workers mixed
with shared ones, weights changed mid-run, releases and lease expiries): the lag bound on the
pure state, the newcomer bound, weight-change settling and free unstarted claims on the model.
The differential test makes them hold on Redis too.
"""

from __future__ import annotations

import uuid
from collections import Counter, defaultdict

import pytest
from hypothesis import given, note
from hypothesis import strategies as st

from fairque_core import Message, Priority, QueueConfig
from fairque_core.domain.fairness import FairState
from fairque_core.domain.scoring import stride_for
from fairque_core.memory.model import InMemoryBackend
from fairque_testing.queues import FakeClock


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


def _msg(task_id: str, tenant_id: str, priority: Priority = Priority.NORMAL) -> Message:
    return Message(task_id=task_id, tenant=tenant_id, priority=priority, body=b"{}")


def _pop_tenants(backend, n: int, counts: list[int], **kw) -> list[str]:
    """Claim ``n`` tasks in claims of the given sizes (cycled); the tenant of each."""
    out: list[str] = []
    i = 0
    while len(out) < n:
        want = min(counts[i % len(counts)], n - len(out))
        i += 1
        got = backend.claim(count=want, **kw)
        assert got, "a backlogged queue ran dry"
        out.extend(c.message.tenant for c in got)
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
    tenant_ids=tenant_names,
    m=st.integers(1, 5),
    rounds=st.integers(2, 6),
    order=st.randoms(use_true_random=False),
    counts=st.lists(st.integers(1, 7), min_size=1, max_size=4),
)
def test_equal_tenants_share_every_window(tenant_ids, m, rounds, order, counts):
    k = len(tenant_ids)
    pops = k * m * rounds
    backend = _backend()
    messages = [_msg(f"{u}-{i}", u) for u in tenant_ids for i in range(pops)]
    order.shuffle(messages)
    backend.push_batch(messages)
    served = _pop_tenants(backend, pops, counts)
    window = k * m
    for start in range(len(served) - window + 1):
        got = Counter(served[start : start + window])
        for u in tenant_ids:
            assert m - 1 <= got[u] <= m + 1, (start, u, got)
    totals = Counter(served)
    assert _jain([totals[u] for u in tenant_ids]) >= 0.99


@given(
    weights=st.lists(st.sampled_from([0.5, 1, 1.5, 2, 3, 4]), min_size=2, max_size=4),
    extra=st.integers(0, 500),
    counts=st.lists(st.integers(1, 16), min_size=1, max_size=3),
)
def test_weighted_shares_within_two_percent(weights, extra, counts):
    tenant_ids = [f"t{i}" for i in range(len(weights))]
    total_w = sum(weights)
    # Enough pops that the lightest tenant is owed at least 100: then one pop of rounding is
    # at most 1% of its share.
    pops = max(1000, int(100 * total_w / min(weights)) + 1) + extra
    backend = _backend()
    for u, w in zip(tenant_ids, weights, strict=False):
        backend.set_tenant_weight(u, w)
        # more than the bar lets the tenant be served (2% over its share): a run within the
        # bars never empties a backlog, so it claims exactly what it would with a deeper one,
        # and a run that empties one served that tenant past the bar, which fails below
        over_the_bar = int(1.02 * pops * w / total_w) + 2
        backend.push_batch([_msg(f"{u}-{i}", u) for i in range(over_the_bar)])
    served = Counter(_pop_tenants(backend, pops, counts))
    for u, w in zip(tenant_ids, weights, strict=False):
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
    tenant_ids = [f"m{i}" for i in range(n_old)]
    backend = _backend()
    for u, w in zip(tenant_ids, weights, strict=False):
        backend.set_tenant_weight(u, w)
        backend.push_batch([_msg(f"{u}-{i}", u) for i in range(100)])
    backend.set_tenant_weight(newcomer, new_weight)
    if warmup:
        _pop_tenants(backend, warmup, [1])
    backend.push(_msg("new-task", newcomer))
    active = backend.stats()["active_tenants"]
    assert active == n_old + 1
    served = _pop_tenants(backend, active, [1])
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
            u = c.message.tenant
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
            u = c.message.tenant
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
    tenant_ids=st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=3, unique=True),
    over=st.sampled_from([0.0, 0.001, 3.0]),
)
def test_expired_lease_handed_out_again_after_requeue(n, tenant_ids, over):
    clock = FakeClock()
    backend = _backend(clock, lease_seconds=10.0)
    ids = [f"t{i}" for i in range(n)]
    backend.push_batch([_msg(t, tenant_ids[i % len(tenant_ids)]) for i, t in enumerate(ids)])
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
        from fairque_redis.backends.backend import RedisBackend
    except ImportError as exc:
        pytest.skip(f"fairque_redis.backends.backend is not importable yet ({exc})")
    queue = "f" + uuid.uuid4().hex[:16]
    backend = RedisBackend.from_url(
        valkey_server.url, queue=queue, config=QueueConfig(), clock=FakeClock()
    )
    try:
        tenant_ids = [f"t{i}" for i in range(len(weights))]
        pops = 1200
        for u, w in zip(tenant_ids, weights, strict=True):
            backend.set_tenant_weight(u, w)
            backend.push_batch([_msg(f"{u}-{i}", u) for i in range(pops)])
        served = Counter(_pop_tenants(backend, pops, [1, 7, 16]))
        total_w = sum(weights)
        for u, w in zip(tenant_ids, weights, strict=True):
            expected = pops * w / total_w
            assert abs(served[u] - expected) <= 0.02 * expected, (u, served)
        if len(set(weights)) == 1:
            assert _jain([served[u] for u in tenant_ids]) >= 0.99
    finally:
        backend.close()
        import redis

        client = redis.Redis.from_url(valkey_server.url)
        keys = list(client.scan_iter(match=f"fq:{{{queue}}}:*", count=1000))
        if keys:
            client.delete(*keys)
        client.close()


# ---------------------------------------------------------------------------------------------
# The bounds ADR 4 states for every mode (issue 11). Each run mixes the operations of one mode;
# the pure state's invariants are checked after every step, the dispatch bounds on the model.

STATE_TENANTS = ["a", "b", "c", "d", "e"]
state_ops = st.lists(
    st.one_of(
        st.tuples(st.just("activate"), st.sampled_from(STATE_TENANTS)),
        st.tuples(st.just("serve"), st.booleans()),
        st.tuples(st.just("pinned"), st.sampled_from(STATE_TENANTS), st.booleans()),
        st.tuples(st.just("refund"), st.sampled_from(STATE_TENANTS)),
        st.tuples(
            st.just("weight"),
            st.sampled_from(STATE_TENANTS),
            st.sampled_from([0.001, 0.5, 1.0, 3.0, 1000.0]),
            st.integers(0, 2),
        ),
        st.tuples(st.just("deactivate"), st.sampled_from(STATE_TENANTS)),
    ),
    max_size=80,
)


@given(ops=state_ops, strict=st.booleans())
def test_passes_stay_within_a_stride_of_their_tiers_virtual_time(ops, strict):
    """Every active pass is >= its tier's virtual time; without pinned service it is also
    <= virtual time + stride (the lag bound); a tier's virtual time never goes back."""
    state = FairState(strict_tiers=strict)
    pinned_served: set[str] = set()
    for op in ops:
        before = {tier: state.virtual_time(tier) for tier in range(3)}
        kind = op[0]
        if kind == "activate":
            state.activate(op[1])
        elif kind == "serve":
            tenant_id = state.pick([None])
            if tenant_id is not None:
                state.serve(tenant_id, still_ready=op[1])
        elif kind == "pinned":
            if state.is_active(op[1]):
                state.serve(op[1], still_ready=op[2], pinned=True)
                pinned_served.add(op[1])
        elif kind == "refund":
            state.refund(op[1])
        elif kind == "weight":
            state.set_weight(op[1], stride_for(op[2]), op[3])
        else:
            state.deactivate(op[1])
        for tier in range(3):
            assert state.virtual_time(tier) >= before[tier], (op, tier)
        for tier, members in state.active.items():
            vt = state.virtual_time(tier)
            for tenant_id, (pass_, _act) in members.items():
                assert pass_ >= vt, (op, tenant_id)
                if tenant_id not in pinned_served:
                    assert pass_ <= vt + state.tenants[tenant_id].stride, (op, tenant_id)


def _claim_one(backend, **kw):
    got = backend.claim(**kw)
    return got[0] if got else None


@given(
    n_old=st.integers(1, 6),
    weights=st.lists(st.sampled_from([0.25, 0.5, 1, 2, 5]), min_size=6, max_size=6),
    tiers=st.lists(st.integers(0, 1), min_size=6, max_size=6),
    strict=st.booleans(),
    warmup=st.integers(0, 30),
    pinned=st.integers(0, 60),
    new_tier=st.integers(0, 1),
    newcomer=st.sampled_from(["0first", "zlast", "mid"]),
)
def test_newcomer_bound_in_every_mode(
    n_old, weights, tiers, strict, warmup, pinned, new_tier, newcomer
):
    """A tenant with no history that becomes active is served within N unrestricted
    dispatches of its tier, N = the active tenants of its tier then (itself included), whatever
    the weights, its name, the strict mode and the pinned claims served before or meanwhile."""
    clock = FakeClock()
    backend = _backend(clock, strict_tiers=strict)
    tenant_ids = [f"m{i}" for i in range(n_old)]
    for u, w, t in zip(tenant_ids, weights, tiers, strict=False):
        backend.set_tenant_weight(u, w, tier=t)
        backend.push_batch([_msg(f"{u}-{i}", u) for i in range(200)])
    backend.set_tenant_weight(newcomer, 1, tier=new_tier)
    for _ in range(warmup):
        backend.claim()
    for i in range(pinned):  # pinned workers serve the first tenant, before and meanwhile
        if i % 2 == 0:
            backend.claim(assigned=[tenant_ids[0]])
    backend.push(_msg("new-task", newcomer))
    tier_of = dict(zip(tenant_ids, tiers, strict=False))
    tier_of[newcomer] = new_tier
    same_tier = [u for u in [*tenant_ids, newcomer] if not strict or tier_of[u] == new_tier]
    bound = len(same_tier)
    dispatches = 0
    for i in range(10_000):
        if i % 3 == 2 and pinned:
            backend.claim(assigned=[tenant_ids[0]])  # pinned claims mixed in
            continue
        c = _claim_one(backend)
        assert c is not None
        u = c.message.tenant
        if u == newcomer:
            break
        if not strict or tier_of[u] == new_tier:
            dispatches += 1
        assert dispatches < bound, (dispatches, bound)


def _most_served(tenant_id: str, strides: dict[str, int], total: int) -> int:
    """The most claims ``user`` can get out of ``total`` while every pair (i, j) of tenants
    keeps ``|n_i * s_i - n_j * s_j| <= s_i + s_j``: the largest n with
    ``n + sum over j != user of max(0, ceil((n * s_user - s_user - s_j) / s_j)) <= total``
    (the fewest claims the others must have had for n to keep the bar)."""
    s = strides[tenant_id]

    def needed(n: int) -> int:
        return n + sum(
            max(0, -(-(n * s - s - sj) // sj)) for j, sj in strides.items() if j != tenant_id
        )

    n = 0
    while n < total and needed(n + 1) <= total:
        n += 1
    return n


@given(
    weights=st.lists(st.sampled_from([0.5, 1, 2, 4]), min_size=2, max_size=4),
    strict=st.booleans(),
    change=st.tuples(st.integers(0, 3), st.sampled_from([0.001, 0.25, 1, 8, 1000])),
    before=st.integers(0, 40),
    counts=st.lists(st.integers(1, 5), min_size=1, max_size=3),
)
def test_weight_change_settles_at_once(weights, strict, change, before, counts):
    """After a weight change mid-run, between any two backlogged tenants i and j of a tier the
    service from the change on satisfies |n_i * s_i - n_j * s_j| <= s_i + s_j (strides after
    the change): the new weight holds from the next round, no old debt is carried."""
    tenant_ids = [f"t{i}" for i in range(len(weights))]
    who, new_weight = tenant_ids[change[0] % len(tenant_ids)], change[1]
    final = dict(zip(tenant_ids, weights, strict=False))
    final[who] = new_weight
    strides = {u: stride_for(w) for u, w in final.items()}
    total = min(2000, sum(int(40 * w / min(final.values())) for w in final.values()))
    # Every tenant stays backlogged while the bar below holds (the scheduler's choices do not
    # depend on how deep a backlog is, only on whether there is one). A tenant gets at most
    # `before` claims before the change and at most `_most_served(...)` after it while the bar
    # holds (the most one tenant can get in `total` claims with every pair within the bar), so
    # one more task than that each keeps this run claim for claim the one with every backlog
    # `before + total + 1` deep, up to and including the first claim that breaks the bar (the
    # first claim that finds a backlog empty comes after it): the same outcome, for a quarter
    # of the pushes with four tenants.
    backend = _backend(strict_tiers=strict)
    for u, w in zip(tenant_ids, weights, strict=False):
        depth = before + _most_served(u, strides, total) + 1
        backend.set_tenant_weight(u, w, tier=1)
        backend.push_batch([_msg(f"{u}-{i}", u) for i in range(depth)])
    if before:
        _pop_tenants(backend, before, counts)
    backend.set_tenant_weight(who, new_weight, tier=1)
    served: Counter[str] = Counter()
    for u in _pop_tenants(backend, total, counts):
        served[u] += 1
        for i in tenant_ids:
            for j in tenant_ids:
                gap = abs(served[i] * strides[i] - served[j] * strides[j])
                assert gap <= strides[i] + strides[j], (i, j, served)


@given(
    n=st.integers(2, 5),
    actions=st.lists(st.sampled_from(["release", "expire", "beat"]), min_size=1, max_size=30),
)
def test_unstarted_claims_cost_nothing(n, actions):
    """Claims given back unstarted (released, or expired with no heartbeat) leave the order
    of the shared workers exactly as if they never happened; a heartbeated claim that expires
    is paid for."""
    clock = FakeClock()
    backend = _backend(clock, lease_seconds=5.0, max_recoveries=1000)
    reference = _backend(FakeClock(), lease_seconds=5.0, max_recoveries=1000)
    tenant_ids = [f"u{i}" for i in range(n)]
    for b in (backend, reference):
        for u in tenant_ids:
            b.push_batch([_msg(f"{u}-{i}", u) for i in range(100)])
    paid = 0
    for action in actions:
        (c,) = backend.claim(assigned=[tenant_ids[0]])
        tid, token = c.message.task_id, c.lease.token
        if action == "release":
            backend.release(tid, token)
        else:
            if action == "beat":
                clock.advance(1.0)
                backend.heartbeat(tid, token)
                paid += 1
            clock.advance(10.0)
            assert backend.requeue_expired(10) == 1
    if paid:
        reference.claim(count=paid, assigned=[tenant_ids[0]])
    got = [c.message.tenant for c in backend.claim(count=3 * n)]
    want = [c.message.tenant for c in reference.claim(count=3 * n)]
    assert got == want
