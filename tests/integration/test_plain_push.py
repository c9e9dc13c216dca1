"""The plain push accelerator (ADR 80, ``push_plain.lua``, switch ``plain_push``) answers and
writes as push.lua does.

* The equivalence property: two Valkey servers, one queue of the same name on each, one backend
  with every accelerator on, the other with ``plain_push`` off (push.lua for every push), the
  same clock and lease tokens. Hypothesis drives both through the same sequence of pushes
  (plain and not: duplicates, ids another tenant holds, delays, unique keys, dependencies,
  priorities, bodies over the limit, results not kept, expiries, limit keys; by ``push`` and
  by the engine's ``push_batch_detailed``), limits and limits by key set, tenants paused and
  resumed, claims and finishes (tenants left without ready work, records with an expiry), the
  clock moved on, keys damaged (another type, a counter that is not a number) and repaired.
  After every step the two answers (or errors, type and text) are equal, and so is every key
  of the queue, byte for byte (``DUMP``). Each damage also alone,
  with the plain push run as a Redis Function and by EVALSHA.
* What it runs: push.lua's commands less one for a tenant with ready work (12 on the server's
  clock, 11 on the test's), push.lua never called, also from the async backend and engine; a
  referral (-1) writes nothing, push.lua then storing as it would have.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fairque_core import Message, Priority, QueueConfig
from fairque_core.settings.accel import Accelerators
from fairque_redis.backends.backend import RedisBackend
from fairque_redis.scripting.calls import Call
from fairque_redis.servers.embedded import EmbeddedValkey

pytestmark = [
    pytest.mark.redis,
    pytest.mark.timeout(300),
    pytest.mark.usefixtures("accelerators_on"),
]

IDS = tuple("abcdefghijklmn")
TENANTS = ("t1", "t2", "t3")
LIMIT = 64  # max_payload_bytes


@pytest.fixture(scope="module")
def second_valkey() -> Iterator[EmbeddedValkey]:
    with EmbeddedValkey() as server:
        yield server


class Side:
    """One server's queue and backend; ``plain`` says whether the accelerator is on."""

    def __init__(
        self,
        url: str,
        name: str,
        now: list[float],
        *,
        plain: bool,
        off: frozenset[str] = frozenset(),
    ) -> None:
        serial = iter(range(10**9))
        accel = Accelerators(off=off if plain else off | {"plain_push"})
        self.raw = redis.Redis.from_url(url)
        self.name = name
        self.backend = RedisBackend.from_url(
            url,
            queue=name,
            config=QueueConfig(name=name, max_payload_bytes=LIMIT, result_ttl_seconds=2.0),
            clock=lambda: now[0],
            token_source=lambda: f"tok{next(serial):08d}",
            accel=accel,
        )
        self.plain = plain
        self.leases: list[tuple[str, str]] = []

    def key(self, suffix: str) -> str:
        return f"fq:{{{self.name}}}:{suffix}"

    def snapshot(self) -> dict[bytes, Any]:
        """Every key of the queue: its DUMP; the events stream by its entries' fields (an
        entry's id is the server's clock, which differs between the two servers)."""
        match = f"fq:{{{self.name}}}:*"
        out: dict[bytes, Any] = {}
        for key in sorted(self.raw.scan_iter(match=match, count=500)):
            if key == self.key("events").encode():
                out[key] = [fields for _, fields in self.raw.xrange(key)]
            else:
                out[key] = self.raw.dump(key)
        return out

    def close(self) -> None:
        self.backend.close()
        self.raw.close()


def _message(draw: Any) -> Message:
    extra = draw(
        st.sampled_from(
            ["plain"] * 6 + ["delay", "past", "unique", "dep", "big", "nokeep", "expires", "keyed"]
        )
    )
    return Message(
        task_id=draw(st.sampled_from(IDS)),
        tenant=draw(st.sampled_from(TENANTS)),
        priority=draw(st.sampled_from(list(Priority))),
        body=b"x" * (LIMIT + 1) if extra == "big" else b'{"n": 1}',
        delay={"delay": 5.0, "past": -3.0}.get(extra, 0.0),
        unique_key="k1" if extra == "unique" else "",
        unique_window=1.0 if extra == "unique" else 0.0,
        depends_on=(draw(st.sampled_from(IDS)),) if extra == "dep" else (),
        keep_result=extra != "nokeep",
        expires_ms=1_800_000_060_000 if extra == "expires" else 0,
        limit_key="lk" if extra == "keyed" else "",
    )


DAMAGES = (
    "meta",
    "stats",
    "wake",
    "tiers",
    "delayed",
    "tenants",
    "active:0",
    "parked",
    "tenant:t1",
    "n:t1",
    "c:t1",
    "ts:t1",
    "task:a",
    "meta seq",
    "meta vtime",
    "meta vtime 5.0",
    "stats pushed",
)


@st.composite
def steps(draw: Any) -> tuple[Any, ...]:
    kind = draw(
        st.sampled_from(
            ["push"] * 10
            + ["engine"] * 5
            + ["limits", "keylimits", "pause", "resume", "claim", "claim"]
            + ["finish", "tick", "damage", "repair"]
        )
    )
    if kind in ("push", "engine"):
        return (kind, _message(draw))
    if kind == "limits":
        return (kind, draw(st.sampled_from(TENANTS)), draw(st.integers(1, 4)))
    if kind == "keylimits":
        return (kind, draw(st.integers(1, 2)))
    if kind in ("pause", "resume"):
        return (kind, draw(st.sampled_from(TENANTS)))
    if kind == "claim":
        return (kind, draw(st.integers(1, 3)))
    if kind == "finish":
        return (kind, draw(st.integers(0, 3)), draw(st.booleans()))
    if kind == "tick":
        return (kind, draw(st.sampled_from([1.0, 2.5])))
    if kind == "damage":
        return (kind, draw(st.sampled_from(DAMAGES)))
    return (kind,)


def _damage(side: Side, what: str) -> None:
    key, *field = what.split(" ")
    if not field:
        side.raw.delete(side.key(key))
        side.raw.set(side.key(key), "junk")
    elif len(field) == 1:
        side.raw.hset(side.key(key), field[0], "lots")
    else:
        side.raw.hset(side.key(key), field[0], field[1])


def _apply(side: Side, step: tuple[Any, ...]) -> Any:
    kind = step[0]
    backend = side.backend
    if kind in ("push", "engine"):
        backend._planner._plain_skip = 0  # every plain push tries push_plain.lua
        if kind == "push":
            return backend.push(step[1])
        return backend.push_batch_detailed([step[1]])
    if kind == "limits":
        return backend.set_limits({"max_queued": step[2]}, tenant=step[1])
    if kind == "keylimits":  # limits by key (ADR 79): meta `klim`, tasks parked by the claim
        return backend.set_key_limits("lk", max_running=step[1])
    if kind == "pause":
        return backend.pause(step[1])
    if kind == "resume":
        return backend.resume(step[1])
    if kind == "claim":
        got = backend.claim(worker_id="w", count=step[1])
        side.leases += [(c.message.task_id, c.lease.token) for c in got]
        return [c.message.task_id for c in got]
    if kind == "finish":
        if step[1] >= len(side.leases):
            return None
        task_id, token = side.leases.pop(step[1])
        return backend.finish(task_id, token, b"1", keep=step[2])
    if kind == "damage":
        return _damage(side, step[1])
    if kind == "repair":  # the damaged keys go (a queue-wide one is absent again)
        for what in DAMAGES:
            key = side.key(what.split(" ")[0])
            if side.raw.type(key) == b"string":
                side.raw.delete(key)
        for key, field in (("meta", "seq"), ("meta", "vtime"), ("stats", "pushed")):
            if side.raw.type(side.key(key)) == b"hash":
                value = side.raw.hget(side.key(key), field)
                if value is not None and not value.isdigit():
                    side.raw.hdel(side.key(key), field)
        return None
    raise AssertionError(kind)


def _outcome(side: Side, step: tuple[Any, ...]) -> Any:
    try:
        return ("ok", _apply(side, step))
    except Exception as exc:  # the answer to compare: type and text
        return ("error", type(exc).__name__, str(exc))


def _run_both(
    url_on: str, url_off: str, ops: list[tuple[Any, ...]], off: frozenset[str] = frozenset()
) -> None:
    name = f"pp-{uuid.uuid4().hex[:8]}"
    now = [1_800_000_000.0]
    on = Side(url_on, name, now, plain=True, off=off)
    off = Side(url_off, name, now, plain=False)
    try:
        for step in ops:
            if step[0] == "tick":
                now[0] += step[1]
                continue
            assert _outcome(on, step) == _outcome(off, step), step
            assert on.snapshot() == off.snapshot(), step
    finally:
        on.close()
        off.close()


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.lists(steps(), min_size=3, max_size=40))
def test_on_and_off_answer_and_write_alike(
    valkey_server: EmbeddedValkey, second_valkey: EmbeddedValkey, ops: list[tuple[Any, ...]]
) -> None:
    _run_both(valkey_server.url, second_valkey.url, ops)


def _plain(task_id: str, tenant: str, priority: Priority = Priority.NORMAL) -> Message:
    return Message(task_id=task_id, tenant=tenant, priority=priority, body=b"{}")


@pytest.mark.parametrize("scripts", ["functions", "eval"])
@pytest.mark.parametrize("damage", DAMAGES)
def test_each_damage_on_and_off(
    valkey_server: EmbeddedValkey, second_valkey: EmbeddedValkey, damage: str, scripts: str
) -> None:
    """Each damage, then plain pushes of a tenant with ready work (normal and critical), of
    one without, of a new one; then the repair and the same pushes again. The plain push run
    as a Redis Function and by EVALSHA (``functions`` off on the side with it on)."""
    warm = [("push", _plain("a", "t1")), ("push", _plain("b", "t1", Priority.CRITICAL))]
    pushes = [
        ("push", _plain("c", "t1")),
        ("engine", _plain("d", "t1", Priority.CRITICAL)),
        ("push", _plain("e", "t2")),
        ("engine", _plain("f", "t3", Priority.HIGH)),
    ]
    again = [(kind, _plain(m.task_id + "2", m.tenant, m.priority)) for kind, m in pushes]
    _run_both(
        valkey_server.url,
        second_valkey.url,
        [*warm, ("damage", damage), *pushes, ("repair",), *again],
        frozenset() if scripts == "functions" else frozenset({"functions"}),
    )


@pytest.fixture
def plain_side(valkey_server: EmbeddedValkey) -> Iterator[Side]:
    side = Side(valkey_server.url, f"pp-{uuid.uuid4().hex[:8]}", [1_800_000_000.0], plain=True)
    yield side
    side.close()


def _message_of(task_id: str, tenant: str = "t1") -> Message:
    return Message(task_id=task_id, tenant=tenant, priority=Priority.NORMAL, body=b"{}")


def test_a_tenant_with_ready_work_costs_twelve_commands(
    plain_side: Side, command_counter: Any
) -> None:
    backend = plain_side.backend
    backend.push(_message_of("warm"))
    before = command_counter(plain_side.raw)
    assert backend.push(_message_of("next")) is True
    # the FCALL and 11 commands inside it: push.lua's 12 less the stats hash's HLEN (the
    # test's clock: no TIME, which a server-clock push adds to both)
    assert command_counter(plain_side.raw) - before == 12
    assert plain_side.raw.hget(plain_side.key("stats"), "pushed") == b"2"


def test_a_referral_writes_nothing_and_push_lua_stores(plain_side: Side) -> None:
    backend = plain_side.backend
    backend.push(_message_of("warm"))
    backend.set_limits({"max_queued": 5}, tenant="t1")  # meta `lim`: every push referred
    before = plain_side.snapshot()
    call = backend._planner.plain([_message_of("next")])
    assert call is not None
    assert backend._run(call) is False
    assert plain_side.snapshot() == before
    assert backend._planner._plain_skip > 0  # the next pushes go to push.lua directly
    assert backend.push(_message_of("next")) is True
    assert plain_side.raw.exists(plain_side.key("task:next"))


@pytest.mark.parametrize(
    ("at", "value"),
    [(7, b"2"), (10, b"3.0"), (11, b"1"), (11, b"x"), (8, b"bad id!"), (9, b""), (14, b"k")],
)
def test_arguments_push_lua_would_judge_are_referred(
    plain_side: Side, at: int, value: bytes
) -> None:
    """Another count, priority or delay spelling, an id push.lua refuses, a unique key: -1,
    nothing read or written."""
    backend = plain_side.backend
    backend.push(_message_of("warm"))
    call = backend._planner.plain([_message_of("next")])
    assert call is not None
    args = list(call.args)
    args[at] = value
    before = plain_side.snapshot()
    assert backend._run(Call("push", args, call.parse, runs="push_plain")) is False
    assert plain_side.snapshot() == before


def test_the_async_backend_and_the_engine_use_it(
    valkey_server: EmbeddedValkey, command_counter: Any
) -> None:
    """``AsyncFairQueue.push`` (the coalescer's call of one) and ``AsyncRedisBackend.push`` run
    the plain push: the FCALL and 11 commands (with the test's clock), push.lua would run 12."""
    import asyncio

    from fairque_core import AsyncFairQueue, Task
    from fairque_redis.backends.backend_async import AsyncRedisBackend

    name = f"pp-{uuid.uuid4().hex[:8]}"
    raw = redis.Redis.from_url(valkey_server.url)

    async def scenario() -> None:
        backend = AsyncRedisBackend.from_url(
            valkey_server.url, queue=name, clock=lambda: 1_800_000_000.0
        )
        async with AsyncFairQueue(backend) as queue:
            await queue.push(Task.create("t1", payload={"n": 1}))  # activates t1
            before = command_counter(raw)
            handle = await queue.push(Task.create("t1", payload={"n": 2}))
            assert command_counter(raw) - before == 12
            assert not handle.duplicate
            before = command_counter(raw)
            assert await backend.push(_message_of("direct")) is True
            assert command_counter(raw) - before == 12

    try:
        asyncio.run(scenario())
        assert raw.hget(f"fq:{{{name}}}:stats", "pushed") == b"3"
    finally:
        raw.close()
