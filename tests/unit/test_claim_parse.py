"""The claim's reply, read (issue 17, ADR 55): the parse builds each Claimed, Message and Lease
without their constructors' keyword calls; these tests pin that what it builds equals what the
validated constructors build, for common, unique-key, non-ASCII and damaged records."""

from __future__ import annotations

from typing import Any

import pytest

from fairque_core import TaskSerializationError
from fairque_core.app.engine.messages import decode_claimed
from fairque_core.app.plugins.host import PluginHost
from fairque_core.domain.enums import Priority
from fairque_core.domain.models import Claimed, Lease, Message, Task
from fairque_core.ports import random_token
from fairque_core.settings.config import QueueConfig
from fairque_redis.keys import KeySpace
from fairque_redis.scripting.calls import ScriptCalls

NOW_MS = 1_764_190_000_123
COMMON = b'["application/json",3,1764190000.5,0.0,[],{},""]'
UNIQUE = b'["application/json",2,1764190000.5,1.5,["a","b"],{"h":"v"},"n\xc3\xa9","k1",60.0]'
HOST = PluginHost(load_entrypoints=False)


def _claim(reply: list[Any], count: int) -> tuple[list[Claimed], list[str], ScriptCalls]:
    calls = ScriptCalls(KeySpace("q"), QueueConfig(lease_seconds=30), None, random_token)
    call = calls.claim(worker_id="w-1", count=count)
    tokens = [a for a in call.args if isinstance(a, str) and len(a) == 32]
    return call.parse(reply), tokens, calls


def test_claimed_records_equal_what_the_constructors_build() -> None:
    records = [
        [b"t-1", b"alice", b"5", b"0", COMMON, b'{"x":1}', 0],
        [b"t-2", b"bob", b"6", b"2", UNIQUE, b'{"y":[1,2]}', b"3"],  # recoveries as bytes
    ]
    claimed, tokens, calls = _claim([NOW_MS, 2, *[f for r in records for f in r]], count=3)
    deadline = (NOW_MS + 30_000) / 1000
    expected = [
        Claimed(
            message=Message(
                task_id="t-1",
                tenant="alice",
                priority=Priority(5),
                body=b'{"x":1}',
                content_type="application/json",
                retry_count=0,
                max_retries=3,
                created_at=1764190000.5,
                delay=0.0,
            ),
            lease=Lease(token=tokens[0], deadline=deadline, worker_id="w-1"),
            recoveries=0,
        ),
        Claimed(
            message=Message(
                task_id="t-2",
                tenant="bob",
                priority=Priority(6),
                body=b'{"y":[1,2]}',
                retry_count=2,
                max_retries=2,
                created_at=1764190000.5,
                delay=1.5,
                depends_on=("a", "b"),
                headers={"h": "v"},
                name="n\u00e9",
                unique_key="k1",
                unique_window=60.0,
            ),
            lease=Lease(token=tokens[1], deadline=deadline, worker_id="w-1"),
            recoveries=3,
        ),
    ]
    assert claimed == expected
    for got, want in zip(claimed, expected, strict=True):
        assert got.lease == want.lease  # (a Task's lease takes no part in equality; this does)
        assert type(got.recoveries) is int
        assert type(got.message.depends_on) is tuple
    assert calls._draw_tokens(1) == [tokens[2]]  # the unused token is given back

    tasks = [decode_claimed(c, HOST) for c in claimed]
    assert tasks[0] == Task(
        task_id="t-1",
        tenant="alice",
        priority=Priority(5),
        payload={"x": 1},
        max_retries=3,
        created_at=1764190000.5,
        execute_after=1764190000.5,
    )
    assert tasks[1] == Task(
        task_id="t-2",
        tenant="bob",
        priority=Priority(6),
        payload={"y": [1, 2]},
        retry_count=2,
        max_retries=2,
        created_at=1764190000.5,
        execute_after=1764190002.0,
        depends_on=("a", "b"),
        headers={"h": "v"},
        name="n\u00e9",
        unique_key="k1",
        unique_window_seconds=60.0,
    )
    assert tasks[1].lease is claimed[1].lease


@pytest.mark.parametrize(
    ("record", "problem"),
    [
        ([b"t-3", b"carol", b"5", b"0", b"[not json", b"{}", 0], "unreadable record"),
        ([b"t-3", b"carol", b"5", b"0", b'"a string of length 7+"', b"{}", 0], "unreadable"),
        ([b"t-3", b"carol", b"5", b"0", b'["application/json",3]', b"{}", 0], "unreadable"),
        ([b"t-3", b"carol", b"5", b"0", b"\xef\xbb\xbf" + COMMON, b"{}", b"x"], "recovery count"),
        ([b"t-3", b"carol", b"5", b"0", COMMON + b" ", b"{}", None], "recovery count"),
    ],
)
def test_damaged_records_are_salvaged_and_refused_typed(record: list[Any], problem: str) -> None:
    good = [b"t-4", b"dave", b"5", b"0", COMMON, b"{}", 1]
    claimed, _tokens, _calls = _claim([NOW_MS, 2, *record, *good], count=2)
    assert [c.message.task_id for c in claimed] == ["t-3", "t-4"]
    damaged = claimed[0]
    assert damaged.recoveries == 0
    assert problem in damaged.message.headers["x-fairque-unreadable"]
    with pytest.raises(TaskSerializationError, match=problem):
        decode_claimed(damaged, HOST)
    assert decode_claimed(claimed[1], HOST).tenant == "dave"


def test_a_bom_meta_is_read_as_json_loads_reads_it() -> None:
    """json.loads takes a UTF-8 BOM in bytes: a record so stored stays readable."""
    record = [b"t-5", b"erin", b"5", b"0", b"\xef\xbb\xbf" + COMMON, b"{}", 0]
    [claimed], _tokens, _calls = _claim([NOW_MS, 1, *record], count=1)
    assert claimed.message.max_retries == 3
    assert "x-fairque-unreadable" not in claimed.message.headers
