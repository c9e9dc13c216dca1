"""The task record's engine side (ADR 70): decoding, cursors, arguments, a backend without the
record, and the CLI's refusals of ``fairque tasks`` (usage errors, before any I/O)."""

from __future__ import annotations

from typing import Any

import pytest

from fairque_cli.main import main
from fairque_core import FairQueue, InMemoryBackend, Task, TaskState
from fairque_core.domain.errors import TaskValidationError
from fairque_core.domain.task_records import (
    BODY_KEPT_BYTES,
    StoredAttempt,
    check_list_args,
    decode_cursor,
    encode_attempt,
    encode_cursor,
    parse_attempt,
)


def test_an_attempt_round_trips_through_its_text() -> None:
    attempt = StoredAttempt(
        number=3, outcome="retried", started_ms=5, ended_ms=9, worker_id="w|1:x", error='{"a":1}'
    )
    assert parse_attempt(3, encode_attempt(attempt)) == attempt
    assert parse_attempt(1, "not an attempt") is None
    assert parse_attempt(1, "failed|x|1|0|") is None


def test_cursors_and_arguments_are_checked() -> None:
    assert decode_cursor(encode_cursor(12, "a:b")) == (12, "a:b")
    assert decode_cursor(None) is None
    for bad in ("", "12", ":x", "x:y", "-1:y", "1" * 16 + ":y"):
        with pytest.raises(TaskValidationError):
            decode_cursor(bad)
    assert check_list_args("failed", None, 5) == (TaskState.FAILED, 5)
    for state, limit in (("queued", 5), ("nope", 5), (None, 0), (None, 1001), (None, True)):
        with pytest.raises(TaskValidationError):
            check_list_args(state, None, limit)
    with pytest.raises(TaskValidationError):
        check_list_args(None, "bad tenant", 5)


class _NoRecord:
    """A backend of the port without ``get_record`` (a third-party one, older)."""

    def __init__(self, inner: InMemoryBackend) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        if name == "get_record":
            raise AttributeError(name)
        return getattr(self._inner, name)


def test_get_task_falls_back_to_the_message_without_get_record() -> None:
    queue = FairQueue(_NoRecord(InMemoryBackend()))  # type: ignore[arg-type]
    queue.push(Task.create("acme", payload={"n": 1}, task_id="t", name="job"))
    rec = queue.get_task("t")
    assert rec is not None
    assert (rec.state, rec.payload, rec.name, rec.attempts) == (
        TaskState.QUEUED,
        {"n": 1},
        "job",
        (),
    )
    assert queue.get_task("nope") is None


def test_a_finished_long_payload_reads_as_its_size_and_preview() -> None:
    queue = FairQueue(InMemoryBackend())
    queue.push(Task.create("acme", payload={"p": "x" * BODY_KEPT_BYTES}, task_id="big"))
    claimed = queue.claim(worker_id="w")
    assert claimed is not None
    queue.finish(claimed, 7)
    rec = queue.get_task("big")
    assert rec is not None
    assert rec.payload is None
    assert rec.task is None
    assert rec.payload_size > BODY_KEPT_BYTES
    assert rec.payload_preview.startswith('{"p":"xxx')
    assert len(rec.payload_preview) == 256
    assert rec.result == 7
    assert rec.as_dict()["attempts"][0]["worker_id"] == "w"


@pytest.mark.parametrize(
    "args",
    [
        ["tasks", "--state", "queued"],
        ["tasks", "--limit", "0"],
        ["tasks", "--limit", "1001"],
        ["tasks", "--cursor", "nope"],
    ],
)
def test_fairque_tasks_refuses_bad_options_as_usage_errors(args: list[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(args)
    assert info.value.code == 2


def test_the_dlq_listing_attempts_are_split_by_their_lengths() -> None:
    from fairque_redis.scripting.calls.browse import joined_attempts

    first = encode_attempt(StoredAttempt(number=1, outcome="retried", started_ms=1, ended_ms=2))
    second = encode_attempt(
        StoredAttempt(number=2, outcome="failed", started_ms=3, ended_ms=4, error="é:x")
    )
    joined = b"".join(f"{len(t.encode())}:".encode() + t.encode() for t in (first, second))
    got = joined_attempts(b"2", joined)
    assert [(a.number, a.outcome, a.error) for a in got] == [
        (1, "retried", ""),
        (2, "failed", "é:x"),
    ]
    assert joined_attempts(b"0", b"") == ()
    assert [a.number for a in joined_attempts(b"2", joined + b"junk")] == [1, 2]
