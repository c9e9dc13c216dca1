"""R17, the differential state machine with crashes: "crash worker" and "restart server" steps.

A hypothesis ``RuleBasedStateMachine`` drives the same operations into the reference model
(``InMemoryBackend``) and a ``RedisBackend`` on a Valkey of its own with ``appendonly yes`` and
``appendfsync always``, on one shared fake clock with the same deterministic lease tokens.
Besides push / push_intake / ingest / claim / finish / fail / heartbeat / release / cancel /
advance / reap, two fault steps:

- *crash worker*: a worker claims up to three tasks and dies (its tokens are never used again);
  the clock passes the lease and the reaper runs: the tasks come back (or go to the DLQ past
  ``max_recoveries``), in both backends alike;
- *restart server*: ``kill -9`` or ``SHUTDOWN NOSAVE``, then a restart on the same port and
  directory (the AOF is loaded); the client's stale connections are dropped, the script cache is
  empty (the backend loads its scripts again).

After every step: every result equal (exceptions of the same type), the observable state equal
(stats, sizes, per-tenant stats, state and result of every id, the DLQ) and the invariant
checker holds on the raw keys. The number of restarts is printed.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest
import redis
from hypothesis import HealthCheck, note, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from fairque_core import Message, Priority, QueueConfig
from fairque_core.memory.model import InMemoryBackend
from fairque_redis.backends.backend import RedisBackend
from fairque_redis.servers.embedded import ServerProcess
from fairque_testing.queues import FakeClock

from .invariants import check as check_invariants
from .servers import durable_server, wait_loaded

pytestmark = [pytest.mark.chaos, pytest.mark.redis]

TASK_IDS = [f"t{i}" for i in range(6)]
TENANTS = ["a", "b", "c"]
LEASE = 5.0


class CountingTokens:
    def __init__(self) -> None:
        self.n = 0

    def __call__(self) -> str:
        self.n += 1
        return f"tok-{self.n:05d}"


messages = st.builds(
    lambda tid, tenant_id, prio, delay, retries: Message(
        task_id=tid,
        tenant=tenant_id,
        priority=prio,
        body=b'{"x": 1}',
        max_retries=retries,
        created_at=1_700_000_000.5,
        delay=delay,
    ),
    st.sampled_from(TASK_IDS),
    st.sampled_from(TENANTS),
    st.sampled_from([Priority.CRITICAL, Priority.HIGH, Priority.NORMAL, Priority.LOW]),
    st.sampled_from([0.0, 0.0, 0.0, 3.0]),
    st.integers(0, 2),
)
picks = st.integers(0, 31)


def _outcome(fn: Any) -> tuple[str, Any]:
    try:
        return ("ok", fn())
    except Exception as exc:
        return ("raised", type(exc))


class CrashMachine(RuleBasedStateMachine):
    server: ClassVar[Any] = None
    restarts: ClassVar[int] = 0
    crashes: ClassVar[int] = 0

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.queue = "r17-" + uuid.uuid4().hex[:12]
        self.tokens: dict[str, str] = {}
        self.raw = redis.Redis.from_url(self.server.url)
        self.model: Any = None
        self.real: Any = None

    @initialize(max_recoveries=st.integers(0, 2))
    def setup(self, max_recoveries: int) -> None:
        config = QueueConfig(name=self.queue, lease_seconds=LEASE, max_recoveries=max_recoveries)
        note(f"max_recoveries={max_recoveries}")
        self.model = InMemoryBackend(
            self.clock, queue=self.queue, config=config, token_source=CountingTokens()
        )
        self.real = RedisBackend(
            self.raw,
            queue=self.queue,
            config=config,
            clock=self.clock,
            token_source=CountingTokens(),
        )

    def teardown(self) -> None:
        self.raw.close()

    def ready(self) -> bool:
        return self.model is not None

    def both(self, label: str, call: Any) -> Any:
        expected = _outcome(lambda: call(self.model))
        actual = _outcome(lambda: call(self.real))
        note(f"{label}: model={expected!r} redis={actual!r}")
        assert actual == expected, f"{label}: model {expected!r} != redis {actual!r}"
        return expected[1] if expected[0] == "ok" else None

    def held(self, pick: int) -> tuple[str, str]:
        if not self.tokens:
            return TASK_IDS[pick % len(TASK_IDS)], "bogus"
        task_id = sorted(self.tokens)[pick % len(self.tokens)]
        return task_id, self.tokens[task_id]

    # ---- operations
    @precondition(ready)
    @rule(ms=st.lists(messages, min_size=1, max_size=3))
    def push(self, ms: list[Message]) -> None:
        self.both(f"push_batch({[(m.task_id, m.tenant) for m in ms]})", lambda b: b.push_batch(ms))

    @precondition(ready)
    @rule(ms=st.lists(messages.filter(lambda m: m.delay <= 0), min_size=1, max_size=3))
    def push_intake(self, ms: list[Message]) -> None:
        """The intake (ADR 47): stored at once, placed by the next claim or ingest; an entry
        must survive a restart as any other write does."""
        ids = [m.task_id for m in ms]
        self.both(f"push_intake({ids})", lambda b: b.push_intake(ms))

    @precondition(ready)
    @rule(limit=st.integers(1, 4))
    def ingest(self, limit: int) -> None:
        self.both(f"ingest({limit})", lambda b: b.ingest(limit))

    @precondition(ready)
    @rule(count=st.integers(1, 3))
    def claim(self, count: int) -> None:
        got = self.both(f"claim({count})", lambda b: b.claim(worker_id="w", count=count))
        for c in got or ():
            self.tokens[c.message.task_id] = c.lease.token

    @precondition(ready)
    @rule(pick=picks, action=st.sampled_from(["finish", "retry", "dead", "heartbeat", "release"]))
    def act(self, pick: int, action: str) -> None:
        tid, token = self.held(pick)
        calls = {
            "finish": lambda b: b.finish(tid, token, b'"r"'),
            "retry": lambda b: b.fail(tid, token, retry_delay=1.0, reason="retry"),
            "dead": lambda b: b.fail(tid, token, retry_delay=None, reason="dead"),
            "heartbeat": lambda b: b.heartbeat(tid, token),
            "release": lambda b: b.release(tid, token),
        }
        self.both(f"{action}({tid}, {token})", calls[action])
        if action != "heartbeat":
            self.tokens.pop(tid, None)

    @precondition(ready)
    @rule(tid=st.sampled_from(TASK_IDS))
    def cancel(self, tid: str) -> None:
        self.both(f"cancel({tid})", lambda b: b.cancel(tid))

    @precondition(ready)
    @rule(seconds=st.sampled_from([0.5, 2.0, 6.0]))
    def advance_and_reap(self, seconds: float) -> None:
        note(f"advance({seconds})")
        self.clock.advance(seconds)
        self.both("requeue_expired(100)", lambda b: b.requeue_expired(100))

    @precondition(ready)
    @rule(ids=st.none() | st.lists(st.sampled_from(TASK_IDS), max_size=2, unique=True))
    def requeue_dlq(self, ids: Any) -> None:
        self.both(f"requeue_dlq({ids})", lambda b: b.requeue_dlq(ids))

    # ---- faults
    @precondition(ready)
    @rule(count=st.integers(1, 3))
    def crash_worker(self, count: int) -> None:
        """A worker claims and dies: its leases expire and the reaper puts the tasks back."""
        got = self.both(f"claim({count}) by a doomed worker", lambda b: b.claim(count=count))
        type(self).crashes += 1
        dead = {c.message.task_id for c in got or ()}
        for task_id in dead:
            self.tokens.pop(task_id, None)
        note(f"worker crashed holding {sorted(dead)}; advance({LEASE + 0.5})")
        self.clock.advance(LEASE + 0.5)
        self.both("requeue_expired(100)", lambda b: b.requeue_expired(100))

    @precondition(ready)
    @rule(how=st.sampled_from(["kill -9", "SHUTDOWN NOSAVE"]))
    def restart_server(self, how: str) -> None:
        server: ServerProcess = self.server
        note(f"restart server ({how})")
        if how == "kill -9":
            server.kill()
        else:
            # the server closes the connection as it exits
            with contextlib.suppress(redis.ConnectionError):
                self.raw.shutdown(nosave=True)
            server.kill()  # reaps the exited process; port and directory stay
        server.start()
        self.raw.connection_pool.disconnect()
        wait_loaded(self.raw)
        type(self).restarts += 1

    # ---- after every step
    @invariant()
    def same_state_and_invariants(self) -> None:
        if self.model is None:
            return
        checks: dict[str, Any] = {
            "stats": lambda b: b.stats(),
            "queue_sizes": lambda b: b.queue_sizes(TENANTS),
            "list_dlq": lambda b: b.list_dlq(limit=100),
            "intake_size": lambda b: b.intake_size(),
        }
        for tenant_id in TENANTS:
            checks[f"tenant_stats({tenant_id})"] = lambda b, u=tenant_id: b.tenant_stats(u)
        for tid in TASK_IDS:
            checks[f"get_state({tid})"] = lambda b, t=tid: b.get_state(t)
            checks[f"get_result({tid})"] = lambda b, t=tid: b.get_result(t)
        for label, call in checks.items():
            expected = _outcome(lambda c=call: c(self.model))
            actual = _outcome(lambda c=call: c(self.real))
            assert actual == expected, f"after the step, {label}: model {expected!r} != {actual!r}"
        # the machine draws ids from one small pool for every tenant, so the intake sets aside
        # entries whose id another tenant's live task holds (ADR 60): the doctor names them,
        # and they are the only entries intake:bad can receive here (every message is valid)
        findings = check_invariants(self.raw, self.queue)
        assert [f for f in findings if "set aside in intake:bad" not in f] == []


@pytest.fixture(scope="module")
def durable() -> Iterator[ServerProcess]:
    server = durable_server("valkey")
    with server:
        yield server


def _run(server: ServerProcess, examples: int, steps: int) -> None:
    CrashMachine.server = server
    CrashMachine.restarts = CrashMachine.crashes = 0
    started = time.monotonic()
    run_state_machine_as_test(
        CrashMachine,
        settings=settings(
            max_examples=examples,
            stateful_step_count=steps,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
    print(
        f"R17: {examples} examples x <= {steps} steps in {time.monotonic() - started:.1f}s, "
        f"{CrashMachine.restarts} server restarts, {CrashMachine.crashes} worker crashes; "
        "model == Valkey and invariants held after every step"
    )


@pytest.mark.timeout(60)
def test_r17_crash_machine_short(durable: ServerProcess) -> None:
    _run(durable, examples=12, steps=20)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_r17_crash_machine(durable: ServerProcess) -> None:
    _run(durable, examples=150, steps=40)
