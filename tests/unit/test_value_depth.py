"""Values nest at most MAX_DEPTH levels, refused typed where they enter (issue 34): a deeper
payload came out of the codec as a PluginError (RecursionError), and one just under Python's
stack limit was accepted by a producer and poisoned at claim in a worker's deeper stack."""

from __future__ import annotations

from typing import Any

import pytest

from fairque_core import FairQueue, InMemoryBackend, Task, TaskSerializationError
from fairque_core.ports.json_codec import MAX_DEPTH, decode_json, encode_json


def nested(levels: int) -> Any:
    value: Any = 1
    for n in range(levels):
        value = [value] if n % 2 else {"k": value}
    return value


@pytest.mark.parametrize("levels", [MAX_DEPTH, MAX_DEPTH + 1, 2_000, 50_000])
def test_payloads_nest_at_most_max_depth_levels(levels: int) -> None:
    payload = {"a": nested(levels - 1)}  # the payload itself is level 1
    if levels <= MAX_DEPTH:
        assert decode_json(encode_json(payload)) == payload
        return
    with pytest.raises(TaskSerializationError, match=f"deeper than {MAX_DEPTH} levels"):
        encode_json(payload)
    queue = FairQueue(InMemoryBackend(queue="depth"))
    with pytest.raises(TaskSerializationError, match="deeper"):
        queue.push(Task.create("t", payload=payload))
    assert queue.get_stats()["pushed"] == 0


def test_results_are_checked_as_payloads_are() -> None:
    queue = FairQueue(InMemoryBackend(queue="depth"))
    queue.push(Task.create("t", task_id="r1"))
    task = queue.claim(["t"])
    assert task is not None
    for bad in (nested(MAX_DEPTH + 1), {1: "int key"}, [nested(5_000)]):
        with pytest.raises(TaskSerializationError, match="the result of r1"):
            queue.finish(task, result=bad)
    queue.finish(task, result={"ok": nested(MAX_DEPTH - 2)})
    assert queue.get_result("r1") == {"ok": nested(MAX_DEPTH - 2)}
