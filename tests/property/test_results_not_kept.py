"""Properties of results you don't keep (ADR 78), on the model and on Valkey.

Random workloads of tasks (some with a parent among them, some with XCom values, unique keys
with or without a window, a waiter armed before the finish) are drained with every finish
asking ``keep=False``: afterwards exactly the records something needs are left (dependents,
XCom values, an armed waiter, a unique window), every other task reads as unknown, and on
Valkey no per-task key is left for those. The model and the server leave the same tasks.
"""

from __future__ import annotations

import uuid
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fairque_core import Message, Priority, QueueConfig, TaskState
from fairque_core.memory.model import InMemoryBackend
from fairque_testing.queues import FakeClock

PER_TASK = (":task:", ":children:", ":waits:", ":done:", ":xcom:")


@attrs.frozen
class Spec:
    parent: int | None  # index of an earlier task this one depends on
    xcom: bool
    unique: str  # "" none, "free" a key without window, "window" a key held 60 s
    waited: bool


specs = st.lists(
    st.builds(
        Spec,
        parent=st.none() | st.integers(0, 6),
        xcom=st.booleans(),
        unique=st.sampled_from(["", "", "free", "window"]),
        waited=st.booleans(),
    ),
    min_size=1,
    max_size=8,
)


def _messages(plan: list[Spec]) -> list[Message]:
    out: list[Message] = []
    for i, spec in enumerate(plan):
        deps = (f"t{spec.parent}",) if spec.parent is not None and spec.parent < i else ()
        # a dependency names a task of the same tenant (ADR 63): a child takes its parent's
        tenant = out[spec.parent].tenant if deps and spec.parent is not None else f"u{i % 3}"
        out.append(
            Message(
                task_id=f"t{i}",
                tenant=tenant,
                priority=Priority.NORMAL,
                body=b"{}",
                depends_on=deps,
                unique_key=f"k{i}" if spec.unique else "",
                unique_window=60.0 if spec.unique == "window" else 0.0,
                keep_result=False,
            )
        )
    return out


def _needed(plan: list[Spec], messages: list[Message]) -> set[str]:
    """The tasks whose records must stay: something needs them."""
    parents = {dep for m in messages for dep in m.depends_on}
    return {
        m.task_id
        for m, spec in zip(messages, plan, strict=True)
        if m.task_id in parents or spec.xcom or spec.waited or spec.unique == "window"
    }


def _drain(backend: Any, plan: list[Spec], messages: list[Message]) -> dict[str, TaskState | None]:
    backend.push_batch(messages)
    for m, spec in zip(messages, plan, strict=True):
        if spec.waited:
            assert backend.wait_done(m.task_id, 0) is False  # armed before the finish
    while claimed := backend.claim(count=3):
        items = []
        for c in claimed:
            i = int(c.message.task_id[1:])
            xcom = {"x": b"1"} if plan[i].xcom else None
            items.append((c.message.task_id, c.lease.token, b"r", xcom, False))
        assert all(backend.finish_batch(items))
    assert backend.stats()["finished"] == len(messages)
    states = {m.task_id: backend.get_state(m.task_id) for m in messages}
    # the browse index (ADR 70) lists exactly the records kept
    listed = {s.task_id for s in backend.list_tasks(state=TaskState.FINISHED, limit=50)[0]}
    assert listed == {t for t, state in states.items() if state is not None}
    return states


def _check(states: dict[str, TaskState | None], needed: set[str]) -> None:
    for task_id, state in states.items():
        assert state == (TaskState.FINISHED if task_id in needed else None), task_id


@settings(max_examples=60, deadline=None)
@given(specs)
def test_the_model_keeps_exactly_what_is_needed(plan: list[Spec]) -> None:
    messages = _messages(plan)
    model = InMemoryBackend(FakeClock(1_700_000_000.0), queue="q", config=QueueConfig())
    _check(_drain(model, plan, messages), _needed(plan, messages))


@pytest.mark.redis
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(plan=specs)
def test_valkey_agrees_and_leaves_no_per_task_key(plan: list[Spec], valkey_server: Any) -> None:
    import redis

    from fairque_redis.backends.backend import RedisBackend

    messages = _messages(plan)
    needed = _needed(plan, messages)
    clock = FakeClock(1_700_000_000.0)
    model = InMemoryBackend(clock, queue="q", config=QueueConfig())
    name = "p" + uuid.uuid4().hex[:12]
    real = RedisBackend.from_url(
        valkey_server.url, queue=name, config=QueueConfig(name=name), clock=clock
    )
    client = redis.Redis.from_url(valkey_server.url)
    try:
        states = _drain(real, plan, messages)
        assert states == _drain(model, plan, messages)
        _check(states, needed)
        keys = {k.decode() for k in client.scan_iter(match=f"fq:{{{name}}}:*")}
        left = {k.rsplit(":", 1)[-1] for k in keys if any(p in k for p in PER_TASK)}
        assert left <= needed, left - needed
    finally:
        for key in client.scan_iter(match=f"fq:{{{name}}}:*"):
            client.delete(key)
        client.close()
        real.close()
