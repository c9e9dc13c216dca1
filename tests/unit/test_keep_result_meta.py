"""A message's ``keep_result`` (ADR 78) round-trips through the stored record's metadata and
stays out of the plain shapes (the common meta and the intake's plain entry)."""

from __future__ import annotations

import attrs
import pytest

from fairque_core import Message, Priority, QueueConfig, Task
from fairque_core.app.engine.messages import decode_message as engine_decode
from fairque_core.app.engine.messages import to_message
from fairque_core.app.plugins.host import PluginHost
from fairque_redis.accel.intake import plain_entry
from fairque_redis.scripting.calls.records import decode_message, encode_meta


def _message(**changes: object) -> Message:
    base = Message(
        task_id="t1", tenant="alice", priority=Priority.NORMAL, body=b"{}", created_at=1.5
    )
    return attrs.evolve(base, **changes)


@pytest.mark.parametrize("keep", [True, False])
@pytest.mark.parametrize("unique", [("", 0.0), ("k", 0.0), ("k", 60.0)])
def test_meta_round_trip(keep: bool, unique: tuple[str, float]) -> None:
    message = _message(keep_result=keep, unique_key=unique[0], unique_window=unique[1])
    meta = encode_meta(message)
    back = decode_message([b"t1", b"alice", b"3", b"0", meta.encode(), b"{}"])
    assert back == message
    assert (len(meta.split(",")) > 7) or keep  # a message not kept never has the short shape


def test_a_message_not_kept_is_not_plain() -> None:
    assert plain_entry(_message(), 1 << 20) is not None
    assert plain_entry(_message(keep_result=False), 1 << 20) is None


@pytest.mark.parametrize(
    ("results", "keep", "stored", "claimed"),
    [
        ("keep", None, True, None),
        ("none", None, False, False),
        ("none", True, True, None),
        ("keep", False, False, False),
    ],
)
def test_the_push_resolves_the_queue_default(
    results: str, keep: bool | None, stored: bool, claimed: bool | None
) -> None:
    host = PluginHost()
    task = Task.create("alice", payload={"n": 1}, keep_result=keep)
    message = to_message(task, host, QueueConfig(results=results))
    assert message.keep_result is stored
    assert engine_decode(message, host).keep_result is claimed


def test_keep_result_is_checked() -> None:
    with pytest.raises(TypeError):
        Task.create("alice", keep_result="no")  # type: ignore[arg-type]
