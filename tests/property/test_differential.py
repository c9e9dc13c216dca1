"""Differential test: the Redis backend must agree with the reference model step for step.

A hypothesis ``RuleBasedStateMachine`` drives the same random operations into
``InMemoryBackend`` and ``RedisBackend`` (the embedded Valkey of the session, a fresh queue per
example) on one shared fake clock, each backend with its own deterministic token counter that
starts at the same value. Every result must be equal (an exception must have the same type),
and after every step the whole observable state must be equal: stats, per-tenant stats and
sizes, state / message / result of every id in play, the DLQ and the tenant listing.

Expiry before start (ADR 77) has its own push (``push_expiring``): the claims find those
tasks stale as the clock advances.

Limits by key (ADR 79): messages may carry a limit key (``k1``, ``k2``); keys get limits
(valid and invalid), runs hit a key's cap and end a lease of it every way; every key's
``key_limit_status`` must agree after every step.

Flow control (ADR 28) has its own operations: limits set per tenant, per tier and queue-wide
(valid and invalid values), and runs that hit a cap, a throttle or a refusal; every tenant's
``limit_status`` and the parked set (members and times) must agree after every step.
"""

from __future__ import annotations

import functools
import uuid
from collections import defaultdict
from typing import Any, ClassVar

import attrs
import pytest
from hypothesis import event, note, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from fairque_core import FailureType, Message, Priority, QueueConfig, TaskState
from fairque_core.memory.model import InMemoryBackend
from fairque_testing.queues import FakeClock

TASK_IDS = [f"t{i}" for i in range(8)]
TENANTS = ["a", "b", "c"]
KNOWN_TENANTS = [*TENANTS, "z"]  # "z" never gets work


class CountingTokens:
    def __init__(self, start: int = 0) -> None:
        self.n = start

    def __call__(self) -> str:
        self.n += 1
        return f"tok-{self.n:05d}"


task_ids = st.sampled_from(TASK_IDS)
tenant_ids = st.sampled_from(TENANTS)
tenant_lists = st.none() | st.lists(st.sampled_from(KNOWN_TENANTS), max_size=3, unique=True)
LIMIT_KEYS = ["k1", "k2"]
limit_keys = st.sampled_from(LIMIT_KEYS)
messages = st.builds(
    lambda tid, tenant_id, prio, delay, deps, body, max_retries, limit_key: Message(
        task_id=tid,
        tenant=tenant_id,
        priority=prio,
        body=body,
        max_retries=max_retries,
        created_at=1_700_000_000.25,
        delay=delay,
        depends_on=tuple(deps),
        headers={"h": tid},
        limit_key=limit_key,
    ),
    task_ids,
    tenant_ids,
    st.sampled_from(list(Priority)),
    st.sampled_from([0.0, 0.0, 0.0, 2.0, 7.5]),
    st.one_of(*[st.just([])] * 5, st.lists(task_ids, min_size=1, max_size=2, unique=True)),
    st.binary(max_size=6),
    st.integers(0, 3),
    st.sampled_from(["", "", "", *LIMIT_KEYS]),  # limits by key (ADR 79)
)
# expiry before start (ADR 77): batches and their expiries, seconds from now (0: expired)
expiring_batches = st.lists(messages, min_size=1, max_size=3)
expiry_offsets = st.lists(st.sampled_from([0.0, 0.0, 0.5, 1.0, 2.5, 8.0]), min_size=3, max_size=3)
# flow control (ADR 28): a value sets, None clears; 0 and nan must be refused alike
limit_changes = st.fixed_dictionaries(
    {},
    optional={
        "max_running": st.sampled_from([None, 1, 1, 2, 3, 0]),
        "rate": st.sampled_from([None, 0.5, 2.0, 3.0, 1000.0, float("nan")]),
        "burst": st.sampled_from([None, 1, 2, 4]),
        "max_queued": st.sampled_from([None, 1, 2, 3, 5]),
    },
)
limit_scopes = st.sampled_from(["tenant", "tenant", "tenant", "tier", "queue"])
# 0: the latest token of the task, 1: the one before, 2: bogus
token_picks = st.sampled_from([0, 0, 0, 1, 2])
# A task to act on: an id, or (an int) preferably one that has been claimed at some point.
targets = st.one_of(task_ids, *[st.integers(0, 63)] * 3)


def _outcome(fn: Any) -> tuple[str, Any]:
    try:
        return ("ok", fn())
    except Exception as exc:
        return ("raised", type(exc))


class ModelVsRedis(RuleBasedStateMachine):
    redis_client: ClassVar[Any] = None
    redis_backend_cls: ClassVar[Any] = None

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.model: Any = None
        self.real: Any = None
        self.queue = "d" + uuid.uuid4().hex[:16]
        self.tokens: dict[str, list[str]] = defaultdict(list)

    # ------------------------------------------------------------------ plumbing
    def both(self, label: str, call: Any) -> Any:
        expected = _outcome(lambda: call(self.model))
        actual = _outcome(lambda: call(self.real))
        note(f"{label}: model={expected!r} redis={actual!r}")
        assert actual == expected, f"{label}: model {expected!r} != redis {actual!r}"
        return expected[1] if expected[0] == "ok" else None

    def token(self, task_id: str, pick: int) -> str:
        issued = self.tokens.get(task_id, [])
        if pick < len(issued) and pick < 2:
            return issued[-1 - pick]
        return "bogus-token"

    def target(self, choice: str | int) -> str:
        if isinstance(choice, str):
            return choice
        claimed = sorted(self.tokens)
        leased = [t for t in claimed if self.model.get_state(t) is TaskState.STARTED]
        pool = leased or claimed or TASK_IDS
        return pool[choice % len(pool)]

    def remember(self, claimed: list[Any] | None) -> None:
        for c in claimed or ():
            self.tokens[c.message.task_id].append(c.lease.token)

    @initialize(
        strict=st.booleans(),
        max_recoveries=st.integers(0, 2),
        lease=st.sampled_from([3.0, 10.0]),
        result_ttl=st.sampled_from([3600.0, 12.0]),
        first=st.lists(messages, max_size=6),
    )
    def setup(
        self,
        strict: bool,
        max_recoveries: int,
        lease: float,
        result_ttl: float,
        first: list[Message],
    ) -> None:
        config = QueueConfig(
            name=self.queue,
            lease_seconds=lease,
            max_recoveries=max_recoveries,
            strict_tiers=strict,
            result_ttl_seconds=result_ttl,
        )
        note(
            f"config: lease={lease} max_recoveries={max_recoveries} strict={strict} "
            f"result_ttl={result_ttl}"
        )
        self.model = InMemoryBackend(
            self.clock, queue=self.queue, config=config, token_source=CountingTokens()
        )
        self.real = self.redis_backend_cls(
            self.redis_client,
            queue=self.queue,
            config=config,
            clock=self.clock,
            token_source=CountingTokens(),
        )
        first = [attrs.evolve(m, depends_on=()) for m in first]
        self.both("push_batch(first)", lambda b: b.push_batch(first))

    def teardown(self) -> None:
        if self.real is not None:
            self.real.close()
        client = self.redis_client
        keys = list(client.scan_iter(match=f"fq:{{{self.queue}}}:*", count=1000))
        if keys:
            client.delete(*keys)

    def ready(self) -> bool:
        return self.model is not None

    # ------------------------------------------------------------------ rules
    @precondition(ready)
    @rule(m=messages)
    def push(self, m: Message) -> None:
        self.do_push(m)

    @precondition(ready)
    @rule(m=messages)
    def push_again(self, m: Message) -> None:
        self.do_push(m)

    @precondition(ready)
    @rule(m=messages)
    def push_in_the_parents_tenant(self, m: Message) -> None:
        """A push for the tenant of its first dependency (a dependency names a task of the
        same tenant, ADR 63; a random tenant would mostly be refused): waiting, release and
        cascades stay exercised."""
        if m.depends_on:
            parent = self.model.get_message(m.depends_on[0])
            if parent is not None:
                m = attrs.evolve(m, tenant=parent.tenant)
        self.do_push(m)

    @precondition(ready)
    @rule(ms=expiring_batches, after=expiry_offsets, intake=st.booleans())
    def push_expiring(self, ms: list[Message], after: list[float], intake: bool) -> None:
        self.do_push_expiring(ms, after, intake)

    @precondition(ready)
    @rule(ms=expiring_batches, after=expiry_offsets, intake=st.booleans())
    def push_expiring_again(self, ms: list[Message], after: list[float], intake: bool) -> None:
        self.do_push_expiring(ms, after, intake)

    def do_push_expiring(self, ms: list[Message], after: list[float], intake: bool) -> None:
        """Expiry before start (ADR 77): messages that expire ``after`` seconds from now (0:
        already expired), pushed or appended to the intake; the advances and claims of the
        other rules find them ready, due, waiting or retried, and dead-letter them as stale."""
        now = self.clock.now
        ms = [
            attrs.evolve(m, expires_ms=round((now + a) * 1000))
            for m, a in zip(ms, after, strict=False)
        ]
        label = ", ".join(
            f"{m.task_id}/{m.tenant}/{m.delay}/xp+{a}" for m, a in zip(ms, after, strict=False)
        )
        if intake:
            plain = [attrs.evolve(m, delay=0.0, depends_on=()) for m in ms]
            self.both(f"push_intake(expiring: {label})", lambda b: b.push_intake(plain))
        else:
            self.both(f"push_batch(expiring: {label})", lambda b: b.push_batch(ms))
        stats = self.model.stats()
        if stats.get("stale"):
            event("expiry: a stale task dead-lettered")

    def do_push(self, m: Message) -> None:
        self.both(
            f"push({m.task_id}, {m.tenant}, {m.priority.name}, delay={m.delay}, "
            f"deps={m.depends_on})",
            lambda b: b.push(m),
        )

    @precondition(ready)
    @rule(ms=st.lists(messages, min_size=0, max_size=4))
    def push_batch(self, ms: list[Message]) -> None:
        label = (
            "push_batch("
            + ", ".join(
                f"{m.task_id}/{m.tenant}/{int(m.priority)}/{m.delay}/{m.depends_on}" for m in ms
            )
            + ")"
        )
        self.both(label, lambda b: b.push_batch(ms))

    @precondition(ready)
    @rule(
        assigned=tenant_lists,
        steal=tenant_lists,
        count=st.integers(1, 3),
        lease=st.sampled_from([None, None, 4.0]),
        worker=st.sampled_from(["", "w1"]),
    )
    def claim(self, assigned: Any, steal: Any, count: int, lease: Any, worker: str) -> None:
        self.do_claim(assigned, steal, count, lease, worker)

    @precondition(ready)
    @rule(count=st.integers(1, 3), lease=st.sampled_from([None, 4.0]))
    def claim_any(self, count: int, lease: Any) -> None:
        self.do_claim(None, None, count, lease, "w2")

    @precondition(ready)
    @rule(count=st.integers(1, 2))
    def claim_any_again(self, count: int) -> None:
        self.do_claim(None, None, count, None, "")

    def do_claim(self, assigned: Any, steal: Any, count: int, lease: Any, worker: str) -> None:
        got = self.both(
            f"claim(assigned={assigned}, steal={steal}, count={count}, lease={lease})",
            lambda b: b.claim(
                worker_id=worker, assigned=assigned, steal=steal, count=count, lease_seconds=lease
            ),
        )
        self.remember(got)

    @precondition(ready)
    @rule(
        action=st.sampled_from(["finish", "retry", "dead", "heartbeat", "release", "cancel"]),
        retry_delay=st.sampled_from([0.0, 1.0, 4.0]),
        advance=st.sampled_from([0.0, 0.0, 1.0, 2.999, 3.0, 10.0]),
    )
    def claim_and_act(self, action: str, retry_delay: float, advance: float) -> None:
        got = self.both("claim()", lambda b: b.claim())
        self.remember(got)
        if not got:
            return
        tid, token = got[0].message.task_id, got[0].lease.token
        if advance:
            note(f"advance({advance})")
            self.clock.advance(advance)
        calls = {
            "finish": lambda b: b.finish(tid, token, b"result"),
            "retry": lambda b: b.fail(tid, token, retry_delay=retry_delay, reason="retry"),
            "dead": lambda b: b.fail(tid, token, retry_delay=None, reason="dead"),
            "heartbeat": lambda b: b.heartbeat(tid, token),
            "release": lambda b: b.release(tid, token),
            "cancel": lambda b: b.cancel(tid),
        }
        self.both(f"{action}({tid}, {token})", calls[action])

    @precondition(ready)
    @rule(terminate=st.booleans(), then=st.sampled_from(["finish", "retry", "heartbeat"]))
    def cancel_while_running(self, terminate: bool, then: str) -> None:
        """ADR 76: the canceled lease's heartbeat reports the cancel; nothing lands over it."""
        got = self.both("claim()", lambda b: b.claim())
        self.remember(got)
        if not got:
            return
        tid, token = got[0].message.task_id, got[0].lease.token
        self.both(f"cancel({tid}, {terminate})", lambda b: b.cancel(tid, terminate))
        self.both(
            f"heartbeat_batch([({tid}, {token})])", lambda b: b.heartbeat_batch([(tid, token)])
        )
        calls = {
            "finish": lambda b: b.finish_batch([(tid, token, b"late")]),
            "retry": lambda b: b.fail(tid, token, retry_delay=0.0, reason="late"),
            "heartbeat": lambda b: b.heartbeat(tid, token),
        }
        self.both(f"{then}({tid}, {token})", calls[then])

    @precondition(ready)
    @rule(
        tid=targets,
        pick=token_picks,
        result=st.none() | st.binary(max_size=4),
        keep=st.booleans(),
    )
    def finish(self, tid: Any, pick: int, result: bytes | None, keep: bool) -> None:
        tid = self.target(tid)
        token = self.token(tid, pick)
        self.both(
            f"finish({tid}, {token}, keep={keep})",
            lambda b: b.finish(tid, token, result, keep=keep),
        )

    @precondition(ready)
    @rule(items=st.lists(st.tuples(targets, token_picks, st.booleans()), max_size=3))
    def finish_batch(self, items: list[tuple[Any, int, bool]]) -> None:
        ids = [(self.target(choice), pick, keep) for choice, pick, keep in items]
        # keep=False items (ADR 78) as five-tuples, the others as the usual three
        batch: list[Any] = [
            (tid, self.token(tid, pick), b"r")
            if keep
            else (tid, self.token(tid, pick), b"r", None, False)
            for tid, pick, keep in ids
        ]
        self.both(f"finish_batch({batch})", lambda b: b.finish_batch(batch))

    @precondition(ready)
    @rule(
        tid=task_ids,
        pick=token_picks,
        retry_delay=st.sampled_from([None, 0.0, 1.5, 6.0]),
        failure_type=st.sampled_from(list(FailureType)),
        reason=st.sampled_from(["", "boom"]),
    )
    def fail(
        self, tid: Any, pick: int, retry_delay: Any, failure_type: FailureType, reason: str
    ) -> None:
        tid = self.target(tid)
        token = self.token(tid, pick)
        self.both(
            f"fail({tid}, {token}, retry_delay={retry_delay}, {failure_type.value})",
            lambda b: b.fail(
                tid, token, retry_delay=retry_delay, failure_type=failure_type, reason=reason
            ),
        )

    @precondition(ready)
    @rule(tid=targets, pick=token_picks, lease=st.sampled_from([None, 4.0]))
    def heartbeat(self, tid: Any, pick: int, lease: Any) -> None:
        tid = self.target(tid)
        token = self.token(tid, pick)
        self.both(f"heartbeat({tid}, {token}, {lease})", lambda b: b.heartbeat(tid, token, lease))

    @precondition(ready)
    @rule(
        items=st.lists(st.tuples(targets, token_picks), max_size=3),
        lease=st.sampled_from([None, 4.0]),
    )
    def heartbeat_batch(self, items: list[tuple[Any, int]], lease: Any) -> None:
        ids = [(self.target(choice), pick) for choice, pick in items]
        batch = [(tid, self.token(tid, pick)) for tid, pick in ids]
        self.both(f"heartbeat_batch({batch}, {lease})", lambda b: b.heartbeat_batch(batch, lease))

    @precondition(ready)
    @rule(tid=targets, pick=token_picks)
    def release(self, tid: Any, pick: int) -> None:
        tid = self.target(tid)
        token = self.token(tid, pick)
        self.both(f"release({tid}, {token})", lambda b: b.release(tid, token))

    @precondition(ready)
    @rule(seconds=st.sampled_from([0.001, 0.5, 1.0, 2.5, 5.0, 11.0]))
    def advance(self, seconds: float) -> None:
        note(f"advance({seconds})")
        self.clock.advance(seconds)

    @precondition(ready)
    @rule(limit=st.integers(1, 4))
    def requeue_expired(self, limit: int) -> None:
        self.both(f"requeue_expired({limit})", lambda b: b.requeue_expired(limit))

    @precondition(ready)
    @rule(seconds=st.sampled_from([3.0, 5.0, 11.0]))
    def advance_and_reap(self, seconds: float) -> None:
        note(f"advance({seconds})")
        self.clock.advance(seconds)
        self.both("requeue_expired(100)", lambda b: b.requeue_expired(100))

    @precondition(ready)
    @rule(tid=targets)
    def cancel(self, tid: Any) -> None:
        tid = self.target(tid)
        self.both(f"cancel({tid})", lambda b: b.cancel(tid))

    @precondition(ready)
    @rule(
        tenant_id=tenant_ids,
        others=st.lists(st.sampled_from(KNOWN_TENANTS), max_size=2, unique=True),
        count=st.integers(1, 3),
        then=st.sampled_from(["release", "expire", "heartbeat_expire", "keep"]),
    )
    def pinned_claim(self, tenant_id: str, others: list[str], count: int, then: str) -> None:
        """Claims pinned to a tenant (assigned list, maybe a steal list), then given back: a
        release, a lease expiring unstarted or after a heartbeat, or kept (ADR 4 refunds)."""
        got = self.both(
            f"claim(assigned=[{tenant_id}], steal={others}, count={count}, lease=2.0)",
            lambda b: b.claim(assigned=[tenant_id], steal=others, count=count, lease_seconds=2.0),
        )
        self.remember(got)
        if not got or then == "keep":
            return
        for c in got:
            tid, token = c.message.task_id, c.lease.token
            if then == "release":
                self.both(f"release({tid}, {token})", lambda b, t=tid, k=token: b.release(t, k))
            elif then == "heartbeat_expire":
                self.clock.advance(0.5)
                self.both(
                    f"heartbeat({tid}, {token}, 2.0)",
                    lambda b, t=tid, k=token: b.heartbeat(t, k, 2.0),
                )
        if then != "release":
            note("advance(3.0)")
            self.clock.advance(3.0)
            self.both("requeue_expired(100)", lambda b: b.requeue_expired(100))

    @precondition(ready)
    @rule(
        tenant_id=tenant_ids,
        weight=st.sampled_from([0.001, 0.3, 7.0, 1000.0]),
        tier=st.integers(0, 2),
    )
    def set_extreme_weight(self, tenant_id: str, weight: float, tier: int) -> None:
        self.both(
            f"set_tenant_weight({tenant_id}, {weight}, tier={tier})",
            lambda b: b.set_tenant_weight(tenant_id, weight, tier=tier),
        )

    @precondition(ready)
    @rule(
        tenant_id=tenant_ids, weight=st.sampled_from([0.5, 1.0, 2.0, 3.0]), tier=st.integers(0, 2)
    )
    def set_tenant_weight(self, tenant_id: str, weight: float, tier: int) -> None:
        self.both(
            f"set_tenant_weight({tenant_id}, {weight}, tier={tier})",
            lambda b: b.set_tenant_weight(tenant_id, weight, tier=tier),
        )

    @precondition(ready)
    @rule(ids=st.none() | st.lists(task_ids, max_size=3, unique=True))
    def requeue_dlq(self, ids: Any) -> None:
        self.both(f"requeue_dlq({ids})", lambda b: b.requeue_dlq(ids))

    @precondition(ready)
    @rule(ids=st.none() | st.lists(task_ids, max_size=2, unique=True))
    def purge_dlq(self, ids: Any) -> None:
        self.both(f"purge_dlq({ids})", lambda b: b.purge_dlq(ids))

    # ------------------------------------------------------------------ pause (issue 14)
    @precondition(ready)
    @rule(
        tenant_id=st.none() | st.sampled_from(KNOWN_TENANTS),
        pause=st.booleans(),
        count=st.integers(0, 3),
    )
    def pause_or_resume(self, tenant_id: str | None, pause: bool, count: int) -> None:
        # pause or resume a tenant (None: the queue), then claim: flags and claims must agree
        verb = "pause" if pause else "resume"
        self.both(f"{verb}({tenant_id})", lambda b: getattr(b, verb)(tenant_id))
        for who in (None, *KNOWN_TENANTS):
            self.both(f"is_paused({who})", lambda b, who=who: b.is_paused(who))
        if count:
            self.remember(self.both(f"claim(count={count})", lambda b: b.claim(count=count)))

    # ------------------------------------------------------------------ results (ADR 27)
    @precondition(ready)
    @rule(
        ms=st.lists(messages, min_size=1, max_size=3),
        keys=st.lists(st.sampled_from(["", "k1", "k2"]), min_size=3, max_size=3),
        window=st.sampled_from([0.0, 0.0, 2.0, 20.0]),
    )
    def push_unique(self, ms: list[Message], keys: list[str], window: float) -> None:
        batch = [
            attrs.evolve(m, unique_key=key, unique_window=window if key else 0.0)
            for m, key in zip(ms, keys, strict=False)
        ]
        label = ", ".join(f"{m.task_id}/{m.tenant}/{m.unique_key or '-'}" for m in batch)
        self.both(
            f"push_batch_detailed({label}, window={window})", lambda b: b.push_batch_detailed(batch)
        )

    @precondition(ready)
    @rule(
        result=st.none() | st.binary(max_size=4),
        xcom=st.dictionaries(st.sampled_from(["a", "b"]), st.binary(max_size=4), max_size=2),
        keep=st.booleans(),
    )
    def claim_and_finish_with_xcom(
        self, result: bytes | None, xcom: dict[str, bytes], keep: bool
    ) -> None:
        got = self.both("claim()", lambda b: b.claim())
        self.remember(got)
        if not got:
            return
        tid, token = got[0].message.task_id, got[0].lease.token
        self.both(
            f"finish({tid}, {token}, xcom={xcom}, keep={keep})",
            lambda b: b.finish(tid, token, result, xcom, keep=keep),
        )

    @precondition(ready)
    @rule(error=st.sampled_from(["", '{"type":"KeyError","message":"x","traceback":"t"}']))
    def claim_and_fail_for_good(self, error: str) -> None:
        got = self.both("claim()", lambda b: b.claim())
        self.remember(got)
        if not got:
            return
        tid, token = got[0].message.task_id, got[0].lease.token
        self.both(
            f"fail({tid}, {token}, dead, error={error!r})",
            lambda b: b.fail(tid, token, retry_delay=None, reason="dead", error=error),
        )

    # ------------------------------------------------------------------ flow control (ADR 28)
    @precondition(ready)
    @rule(
        scope=limit_scopes,
        tenant_id=st.sampled_from(KNOWN_TENANTS),
        tier=st.integers(0, 2),
        changes=limit_changes,
    )
    def set_limits(self, scope: str, tenant_id: str, tier: int, changes: dict[str, Any]) -> None:
        where = {"tenant": {"tenant": tenant_id}, "tier": {"tier": tier}, "queue": {}}[scope]
        self.both(f"set_limits({changes}, {where})", lambda b: b.set_limits(changes, **where))

    @precondition(ready)
    @rule(tenant_id=tenant_ids, cap=st.integers(1, 2), count=st.integers(1, 3), then=st.booleans())
    def hit_a_cap(self, tenant_id: str, cap: int, count: int, then: bool) -> None:
        """A cap, work beyond it, claims until it holds; then maybe a lease end lets the
        tenant in again."""
        self.both(
            f"set_limits(max_running={cap}, {tenant_id})",
            lambda b: b.set_limits({"max_running": cap}, tenant=tenant_id),
        )
        fresh = [t for t in TASK_IDS if self.model.get_state(t) is None][: cap + 1]
        batch = [
            Message(task_id=t, tenant=tenant_id, priority=Priority.NORMAL, body=b"") for t in fresh
        ]
        self.both(f"push_batch({fresh} for {tenant_id})", lambda b: b.push_batch(batch))
        for _ in range(2):
            got = self.both(f"claim(count={count})", lambda b: b.claim(count=count))
            self.remember(got)
        if then and self.tokens:
            tid = self.target(0)
            token = self.token(tid, 0)
            self.both(f"finish({tid}, {token})", lambda b: b.finish(tid, token, None))
            got = self.both("claim(count=2)", lambda b: b.claim(count=2))
            self.remember(got)

    @precondition(ready)
    @rule(
        tenant_id=tenant_ids,
        rate=st.sampled_from([0.5, 2.0, 4.0]),
        burst=st.sampled_from([None, 1, 2]),
        steps=st.lists(st.sampled_from([0.0, 0.1, 0.25, 0.5, 1.0]), min_size=1, max_size=4),
    )
    def throttle(self, tenant_id: str, rate: float, burst: Any, steps: list[float]) -> None:
        """A rate on a tenant with work, claims on a clock that moves by less than and more
        than the interval: parked, back by itself, tokens and next start time alike."""
        changes = {"rate": rate, "burst": burst}
        self.both(
            f"set_limits({changes}, {tenant_id})", lambda b: b.set_limits(changes, tenant=tenant_id)
        )
        fresh = [t for t in TASK_IDS if self.model.get_state(t) is None][:3]
        batch = [
            Message(task_id=t, tenant=tenant_id, priority=Priority.HIGH, body=b"") for t in fresh
        ]
        self.both(f"push_batch({fresh} for {tenant_id})", lambda b: b.push_batch(batch))
        for seconds in steps:
            got = self.both("claim(count=2)", lambda b: b.claim(count=2))
            self.remember(got)
            note(f"advance({seconds})")
            self.clock.advance(seconds)
            self.both(f"limit_status({tenant_id})", lambda b: b.limit_status(tenant_id))

    @precondition(ready)
    @rule(
        tenant_id=tenant_ids, cap=st.integers(1, 3), ms=st.lists(messages, min_size=1, max_size=4)
    )
    def refuse_a_push(self, tenant_id: str, cap: int, ms: list[Message]) -> None:
        """A queue cap, then single pushes and a batch that may go over it: refused whole
        (TenantQueueFullError), counted, nothing stored."""
        self.both(
            f"set_limits(max_queued={cap}, {tenant_id})",
            lambda b: b.set_limits({"max_queued": cap}, tenant=tenant_id),
        )
        batch = [attrs.evolve(m, tenant=tenant_id, depends_on=()) for m in ms]
        for m in batch[:2]:
            self.both(f"push({m.task_id}, {tenant_id}, delay={m.delay})", lambda b, m=m: b.push(m))
        label = ", ".join(f"{m.task_id}/{m.delay}" for m in batch)
        self.both(f"push_batch({label} for {tenant_id})", lambda b: b.push_batch(batch))

    @precondition(ready)
    @rule(
        ms=st.lists(messages, max_size=5),
        again=st.booleans(),
        cap=st.none() | st.integers(1, 2),
    )
    def push_intake(self, ms: list[Message], again: bool, cap: int | None) -> None:
        """The intake (ADR 47): plain messages appended, some ids repeated, and now and then
        a ``max_queued`` cap their ingest may run into (refused into the DLQ as REJECTED)."""
        plain = [attrs.evolve(m, delay=0.0, depends_on=()) for m in ms]
        if again and plain:
            plain.append(attrs.evolve(plain[0], body=b"again"))
        if cap is not None and plain:
            tenant_id = plain[0].tenant
            self.both(
                f"set_limits(max_queued={cap}, {tenant_id})",
                lambda b: b.set_limits({"max_queued": cap}, tenant=tenant_id),
            )
        label = ", ".join(f"{m.task_id}/{m.tenant}/{int(m.priority)}" for m in plain)
        self.both(f"push_intake({label})", lambda b: b.push_intake(plain))

    @precondition(ready)
    @rule(limit=st.sampled_from([0, 1, 2, 3, 1000]))
    def ingest(self, limit: int) -> None:
        report = self.both(f"ingest({limit})", lambda b: b.ingest(limit))
        if report is not None and report.rejected:
            event("intake: a message rejected at ingest")

    # ------------------------------------------------------------------ limits by key (ADR 79)
    @precondition(ready)
    @rule(
        key=limit_keys,
        cap=st.sampled_from([None, 1, 1, 2, 0]),
        rate=st.sampled_from([None, None, 0.5, 2.0]),
        burst=st.sampled_from([None, 2]),
        per_tenant=st.booleans(),
    )
    def set_key_limits(self, key: str, cap: Any, rate: Any, burst: Any, per_tenant: bool) -> None:
        limits = {"max_running": cap, "rate": rate, "burst": burst, "per_tenant": per_tenant}
        self.both(f"set_key_limits({key}, {limits})", lambda b: b.set_key_limits(key, **limits))

    @precondition(ready)
    @rule(
        key=limit_keys,
        cap=st.integers(1, 2),
        per_tenant=st.booleans(),
        count=st.integers(1, 3),
        then=st.sampled_from(["finish", "fail", "retry", "release", "cancel", "reap", "none"]),
    )
    def hit_a_key_cap(self, key: str, cap: int, per_tenant: bool, count: int, then: str) -> None:
        """A key's cap, keyed work of two tenants beyond it, claims until it holds (tasks
        parked); then a lease of the key ends one way or another."""
        self.both(
            f"set_key_limits({key}, max_running={cap}, per_tenant={per_tenant})",
            lambda b: b.set_key_limits(key, max_running=cap, per_tenant=per_tenant),
        )
        fresh = [t for t in TASK_IDS if self.model.get_state(t) is None][: cap + 2]
        batch = [
            Message(
                task_id=t, tenant=TENANTS[i % 2], priority=Priority.NORMAL, body=b"", limit_key=key
            )
            for i, t in enumerate(fresh)
        ]
        self.both(f"push_batch({fresh} with {key})", lambda b: b.push_batch(batch))
        got: Any = None
        for _ in range(2):
            got = self.both(f"claim(count={count})", lambda b: b.claim(count=count))
            self.remember(got)
        leased = [t for t in sorted(self.tokens) if self.model.get_state(t) is TaskState.STARTED]
        if then == "none" or not leased:
            return
        tid = leased[0]
        token = self.token(tid, 0)
        if then == "finish":
            self.both(f"finish({tid})", lambda b: b.finish(tid, token, None))
        elif then in ("fail", "retry"):
            delay = None if then == "fail" else 1.0
            self.both(f"fail({tid}, {delay})", lambda b: b.fail(tid, token, retry_delay=delay))
        elif then == "release":
            self.both(f"release({tid})", lambda b: b.release(tid, token))
        elif then == "cancel":
            self.both(f"cancel({tid})", lambda b: b.cancel(tid))
        else:
            self.clock.advance(11.0)
            self.both("requeue_expired()", lambda b: b.requeue_expired())
        got = self.both("claim(count=2)", lambda b: b.claim(count=2))
        self.remember(got)

    @precondition(ready)
    @rule(tenant_id=tenant_ids)
    def purge_tenant(self, tenant_id: str) -> None:
        """A tenant's waiting work canceled at once, the tasks its keys parked included."""
        self.both(f"purge_tenant({tenant_id})", lambda b: b.purge_tenant(tenant_id))

    @invariant()
    def same_key_limits(self) -> None:
        """Every limit key's status: its limits, per scope its leases and parked tasks."""
        if self.model is None:
            return
        for key in LIMIT_KEYS:
            expected = _outcome(lambda k=key: self.model.key_limit_status(k))
            actual = _outcome(lambda k=key: self.real.key_limit_status(k))
            assert actual == expected, f"key_limit_status({key}): model {expected} != {actual}"
            if expected[0] == "ok" and expected[1].parked:
                event("key limits: a task parked")

    # ------------------------------------------------------------------ state
    @invariant()
    def same_limits(self) -> None:
        """Every tenant's limit status, and the parked set: members and back-at times."""
        if self.model is None:
            return
        for tenant_id in KNOWN_TENANTS:
            expected = _outcome(lambda u=tenant_id: self.model.limit_status(u))
            actual = _outcome(lambda u=tenant_id: self.real.limit_status(u))
            assert actual == expected, f"limit_status({tenant_id}): model {expected} != {actual}"
        parked = self.redis_client.zrange(f"fq:{{{self.queue}}}:parked", 0, -1, withscores=True)
        real = {member.decode(): int(score) for member, score in parked}
        stats = self.model.stats()
        for counter in ("cap_hits", "throttles", "refusals"):
            if stats.get(counter):
                event(f"limits: {counter} seen")
        assert real == self.model._limits.parked, f"parked: {real} != {self.model._limits.parked}"

    @invariant()
    def same_fair_state(self) -> None:
        """The fairness state itself: every tenant's pass, each tier's virtual time and the
        order of each active set (Redis members decoded: activation number, `|`, tenant)."""
        if self.model is None:
            return
        fair = self.model._fair
        prefix = f"fq:{{{self.queue}}}:"
        client = self.redis_client
        for tenant_id in KNOWN_TENANTS:
            record = fair.tenants.get(tenant_id)
            expected = 0 if record is None else record.pass_
            stored = client.hget(prefix + f"tenant:{tenant_id}", "pass")
            assert int(stored or 0) == expected, (
                f"pass of {tenant_id}: model {expected}, {stored!r}"
            )
        meta = client.hgetall(prefix + "meta")
        for tier in range(3):
            raw = meta.get(b"vtime")
            if fair.strict_tiers:
                raw = meta.get(f"vtime:{tier}".encode(), raw)
            assert int(raw or 0) == fair.virtual_time(tier), f"virtual time of tier {tier}"
            members = fair.active.get(tier, {})
            model_order = sorted(members, key=members.__getitem__)
            real = client.zrange(prefix + f"active:{tier}", 0, -1)
            real_order = [m.decode().partition("|")[2] for m in real]
            assert real_order == model_order, f"active:{tier}: {real_order} != {model_order}"

    @invariant()
    def same_events(self) -> None:
        """The event logs tell the same story (ADR 71): every field but the ids (Redis's
        come from the server's clock, the model's from the fake one)."""
        if self.model is None:
            return

        def told(backend: Any) -> list[Any]:
            return [attrs.evolve(e, id="") for e in backend.read_events("0", count=10_000)]

        model, real = told(self.model), told(self.real)
        assert real == model, f"events: model {model!r} != redis {real!r}"

    @invariant()
    def same_state(self) -> None:
        if self.model is None:
            return
        checks = {
            "stats": lambda b: b.stats(),
            "queue_sizes": lambda b: b.queue_sizes(KNOWN_TENANTS),
            "list_dlq": lambda b: b.list_dlq(limit=100),
            "list_tenants": lambda b: b.list_tenants(limit=1000),
            "list_tenants(page)": lambda b: b.list_tenants(limit=2, offset=1),
            "intake_size": lambda b: b.intake_size(),
            # the fairness figures, holds and hold counters included (ADR 67)
            "tenant_fairness": lambda b: b.tenant_fairness(KNOWN_TENANTS),
        }
        for tenant_id in KNOWN_TENANTS:
            checks[f"tenant_stats({tenant_id})"] = lambda b, u=tenant_id: b.tenant_stats(u)
        for tid in TASK_IDS:
            checks[f"get_state({tid})"] = lambda b, t=tid: b.get_state(t)
            checks[f"get_message({tid})"] = lambda b, t=tid: b.get_message(t)
            checks[f"get_result({tid})"] = lambda b, t=tid: b.get_result(t)
            checks[f"get_outcome({tid})"] = lambda b, t=tid: b.get_outcome(t)
        for tenant_id in KNOWN_TENANTS:
            items = [(tid, key) for tid in TASK_IDS for key in ("return_value", "a", "b")]
            checks[f"xcom_get({tenant_id})"] = lambda b, u=tenant_id, i=items: b.xcom_get(u, i)
        for label, call in checks.items():
            expected = _outcome(lambda c=call: c(self.model))
            actual = _outcome(lambda c=call: c(self.real))
            assert actual == expected, (
                f"after the step, {label}: model {expected!r} != redis {actual!r}"
            )


@pytest.mark.redis
@pytest.mark.parametrize(
    "server", ["valkey", "valkey-ref", pytest.param("cluster", marks=pytest.mark.cluster)]
)
def test_model_and_redis_agree(server: str, request: pytest.FixtureRequest) -> None:
    """``valkey-ref``: every accelerator off (ADR 65): the plain claim include, EVALSHA, the
    reference intake encoder; the same model must agree with it (a quarter of the examples)."""
    try:
        from fairque_redis.backends.backend import RedisBackend
    except ImportError as exc:
        pytest.skip(f"fairque_redis.backends.backend is not importable yet ({exc})")
    import redis
    from redis.cluster import RedisCluster

    if server == "cluster":
        url = request.getfixturevalue("valkey_cluster").url
        client: Any = RedisCluster.from_url(url)
        # The cluster run is a cross-check of the same scripts: an eighth of the examples.
        examples = max(10, settings.default.max_examples // 8)
    else:
        client = redis.Redis.from_url(request.getfixturevalue("valkey_server").url)
        examples = settings.default.max_examples
    backend_cls: Any = RedisBackend
    if server == "valkey-ref":
        from fairque_core.settings.accel import Accelerators

        backend_cls = functools.partial(RedisBackend, accel=Accelerators.none())
        examples = max(10, settings.default.max_examples // 4)
    ModelVsRedis.redis_client = client
    ModelVsRedis.redis_backend_cls = backend_cls
    try:
        run_state_machine_as_test(
            ModelVsRedis, settings=settings(stateful_step_count=30, max_examples=examples)
        )
    finally:
        client.close()
