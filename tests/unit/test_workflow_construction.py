"""Issue 34: ``Group``, ``Chord`` and ``Chain`` built directly check and wire themselves.

Before: a hand-built ``Chord(group, callback)`` skipped ``chord()``'s wiring, so its callback
ran at once, without its members' results; and bad values handed to the constructors raised
untyped errors (AttributeError, TypeError ...) or were stored. Now each constructor does what
its function does (the functions only call it): every bad input is a FairQueueError subclass
(TaskTypeError or TaskValidationError), and a directly built chord or chain waits.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fairque_core import FairQueue, FairQueueError, InMemoryBackend, Task, TaskState
from fairque_core.app.engine.workflows import INJECT_HEADER, Chain, Chord, Group, chain, chord

_TENANTS = st.sampled_from(["alice", "bob"])
_IDS = st.sampled_from(["t1", "t2", "t3"])
_TASKS = st.builds(lambda tenant, task_id: Task(task_id=task_id, tenant=tenant), _TENANTS, _IDS)
_JUNK = st.one_of(
    st.none(),
    st.integers(),
    st.floats(),
    st.text(max_size=5),
    st.binary(max_size=5),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
_ITEMS = st.one_of(_TASKS, _JUNK)
_SEQUENCES = st.one_of(
    st.lists(_TASKS, max_size=4),
    st.lists(_ITEMS, max_size=4),
    st.lists(_TASKS, max_size=4).map(tuple),
    st.lists(_TASKS, max_size=3).map(iter),
    _JUNK,
    _TASKS,
)


def _group_or_junk() -> st.SearchStrategy[Any]:
    def built(tasks: list[Task]) -> Any:
        try:
            return Group(tasks)
        except FairQueueError:
            return tasks

    return st.one_of(_SEQUENCES, st.lists(_TASKS, max_size=4).map(built))


def _only_typed(call: Any, *args: Any) -> Any:
    try:
        return call(*args)
    except FairQueueError:
        return None
    # any other exception fails the test: it is untyped


@given(_SEQUENCES)
def test_group_built_directly_raises_only_typed_errors(items: Any) -> None:
    made = _only_typed(Group, items)
    if made is not None:
        assert all(isinstance(t, Task) for t in made.tasks)
        assert len(set(made.task_ids)) == len(made.tasks)


@given(_group_or_junk(), st.one_of(_TASKS, _JUNK))
def test_chord_built_directly_raises_only_typed_errors(members: Any, callback: Any) -> None:
    made = _only_typed(Chord, members, callback)
    if made is not None:
        ids = made.group.task_ids
        assert ids
        assert made.callback.depends_on[: len(ids)] == tuple(ids)
        assert made.callback.headers[INJECT_HEADER] == f"chord:{len(ids)}"
        assert len({t.tenant for t in made.tasks}) == 1


@given(_SEQUENCES)
def test_chain_built_directly_raises_only_typed_errors(items: Any) -> None:
    made = _only_typed(Chain, items)
    if made is not None:
        steps = made.tasks
        for before, step in itertools.pairwise(steps):
            assert step.depends_on[0] == before.task_id
            assert step.headers[INJECT_HEADER] == "chain"


def test_built_directly_equals_built_by_the_functions() -> None:
    a, b, c = (Task.create("alice") for _ in range(3))
    assert Chord(Group((a, b)), c) == chord([a, b], c) == Chord([a, b], c)
    assert Chain((a, b, c)) == chain(a, b, c)
    made = chord([a, b], c)
    # wiring is done once: a chord or chain rebuilt from wired parts is the same
    assert attrs.evolve(made) == made == Chord(made.group, made.callback)
    wired = chain(a, b, c)
    assert Chain(wired.tasks) == wired
    assert attrs.evolve(wired).tasks == wired.tasks


@pytest.fixture(params=["memory", pytest.param("valkey", marks=pytest.mark.redis)])
def queue(request: pytest.FixtureRequest) -> Iterator[FairQueue]:
    name = "wf-" + uuid.uuid4().hex[:8]
    if request.param == "memory":
        made = FairQueue(InMemoryBackend(queue=name))
    else:
        from fairque_redis.backends.backend import RedisBackend

        server = request.getfixturevalue("valkey_server")
        made = FairQueue(RedisBackend.from_url(server.url, queue=name))
    with made:
        yield made


def test_a_directly_built_chord_waits_for_its_members(queue: FairQueue) -> None:
    a, b, callback = (Task.create("alice") for _ in range(3))
    queue.push_chord(Chord(Group((a, b)), callback))
    claimed = queue.claim_batch(10)
    assert sorted(t.task_id for t in claimed) == sorted([a.task_id, b.task_id])
    assert queue.get_state(callback.task_id) == TaskState.DEFERRED
    for task in claimed:
        queue.finish(task, task.task_id)
    [last] = queue.claim_batch(10)
    assert last.task_id == callback.task_id
    assert last.headers[INJECT_HEADER] == "chord:2"


def test_a_directly_built_chain_runs_in_order(queue: FairQueue) -> None:
    steps = [Task.create("alice") for _ in range(3)]
    queue.push_chain(Chain(tuple(steps)))
    for step in steps:
        [got] = queue.claim_batch(10)
        assert got.task_id == step.task_id
        queue.finish(got, 1)
