"""The accelerator ``prebuilt_builders`` equals the reference (attrs-built) models.

``test_client_fast_paths.test_decoding_matches_the_validated_constructor`` covers decoding
(valid and invalid fields, switch on and off); here: the pushed message field by field, the
switch plugged in by the engine constructor, and an engine round trip on and off.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairque_core import FairQueue, Priority, Task
from fairque_core.app.accel.builders import PREBUILT, PrebuiltBuild, model_build
from fairque_core.app.engine.messages import REFERENCE_BUILD, ModelBuild
from fairque_core.memory.model import InMemoryBackend
from fairque_core.settings.accel import Accelerators
from fairque_core.settings.config import QueueConfig

SWITCHES = [Accelerators(), Accelerators.none()]
ids = st.text("abcXYZ019_.:@/+=#-", min_size=1, max_size=12)
tasks = st.builds(
    Task,
    task_id=ids,
    tenant=ids,
    priority=st.sampled_from(list(Priority)),
    payload=st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    retry_count=st.integers(0, 5),
    max_retries=st.integers(0, 2**31 - 1),
    created_at=st.floats(0, 2e9),
    execute_after=st.floats(0, 2e9),
    depends_on=st.lists(ids, max_size=3),
    headers=st.dictionaries(st.text(max_size=4), st.text(max_size=4), max_size=2),
    name=st.text(max_size=5),
    unique_key=st.one_of(st.just(""), ids),
    unique_window_seconds=st.one_of(st.floats(0, 1e6), st.integers(0, 10**6)),
)


def _fields(model: Any) -> list[tuple[str, Any, type]]:
    return [
        (f.name, getattr(model, f.name), type(getattr(model, f.name)))
        for f in attrs.fields(type(model))
    ]


@settings(max_examples=200, deadline=None)
@given(
    task=tasks,
    body=st.binary(max_size=8),
    content_type=st.sampled_from(["application/json", "text/x"]),
    delay=st.one_of(st.floats(0, 1e6), st.integers(0, 10**6)),
)
def test_the_prebuilt_message_is_the_attrs_message(
    task: Task, body: bytes, content_type: str, delay: float
) -> None:
    headers = dict(task.headers)
    fast = PREBUILT.message(task, body, content_type, delay, headers)
    reference = REFERENCE_BUILD.message(task, body, content_type, delay, headers)
    assert fast == reference
    assert _fields(fast) == _fields(reference)


@settings(max_examples=200, deadline=None)
@given(task=tasks, delay=st.floats(0, 1e6))
def test_the_prebuilt_task_is_the_attrs_task(task: Task, delay: float) -> None:
    message = REFERENCE_BUILD.message(task, b"{}", "application/json", delay, dict(task.headers))
    fast = PREBUILT.task(message, task.payload, task.lease)
    reference = REFERENCE_BUILD.task(message, task.payload, task.lease)
    assert _fields(fast) == _fields(reference)


def test_the_switch_picks_the_builders() -> None:
    assert model_build(Accelerators()) is PREBUILT
    assert type(model_build(Accelerators.none())) is ModelBuild
    assert isinstance(PREBUILT, PrebuiltBuild)
    off = FairQueue(InMemoryBackend(config=QueueConfig(name="q")), accel=Accelerators.none())
    assert type(off._build) is ModelBuild
    on = FairQueue(InMemoryBackend(config=QueueConfig(name="q")), accel=Accelerators())
    assert on._build is PREBUILT


@pytest.mark.parametrize("accel", SWITCHES, ids=["on", "off"])
def test_a_round_trip_through_the_engine(accel: Accelerators) -> None:
    queue = FairQueue(InMemoryBackend(config=QueueConfig(name="q")), accel=accel)
    made = [
        Task.create("t", Priority.HIGH, {"n": 1}, task_id="a", headers={"h": "v"}, name="x"),
        Task.create("t", payload={"n": 2}, task_id="b", depends_on=["a"], unique_key="k"),
    ]
    queue.push_batch(made)
    claimed = queue.claim_batch(1, worker_id="w")
    [first] = claimed
    assert first.lease is not None
    assert attrs.evolve(first, execute_after=made[0].execute_after) == made[0]
    got = queue.get_task("b")
    assert got is not None
    assert got.task == attrs.evolve(made[1], execute_after=made[1].created_at)
