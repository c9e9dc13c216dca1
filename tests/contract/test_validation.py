"""Bad ids and oversized payloads are refused before anything reaches a server."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager

import pytest

from fairque_core import PayloadTooLargeError, QueueConfig, TaskValidationError

from .conftest import probe_of
from .helpers import BAD_IDS, msg

NOT_STR = (None, 123, b"bytes", ("a",))

OPS: dict[str, Callable] = {
    "push.task_id": lambda b, bad: b.push(msg(bad)),
    "push.tenant": lambda b, bad: b.push(msg("ok", tenant=bad)),
    "push.depends_on": lambda b, bad: b.push(msg("ok", depends_on=["fine", bad])),
    "push_batch": lambda b, bad: b.push_batch([msg("ok1"), msg("ok2"), msg(bad)]),
    "push_batch.tenant": lambda b, bad: b.push_batch([msg("ok1", tenant=bad), msg("ok2")]),
    "claim.assigned": lambda b, bad: b.claim(assigned=["alice", bad]),
    "claim.steal": lambda b, bad: b.claim(assigned=["alice"], steal=[bad]),
    "cancel": lambda b, bad: b.cancel(bad),
    "get_state": lambda b, bad: b.get_state(bad),
    "get_message": lambda b, bad: b.get_message(bad),
    "get_result": lambda b, bad: b.get_result(bad),
    "queue_sizes": lambda b, bad: b.queue_sizes(["alice", bad]),
    "tenant_stats": lambda b, bad: b.tenant_stats(bad),
    "set_tenant_weight": lambda b, bad: b.set_tenant_weight(bad, 2.0),
    "requeue_dlq": lambda b, bad: b.requeue_dlq(["fine", bad]),
    "purge_dlq": lambda b, bad: b.purge_dlq(["fine", bad]),
}


@contextmanager
def no_commands(make_backend, backend):
    """Asserts the server ran no command inside the block (Redis params; a no-op for memory)."""
    probe = probe_of(make_backend, backend)
    if probe is None:
        yield
        return
    backend.stats()  # warm up: connection open, scripts loaded
    before = probe.command_count()
    yield
    assert probe.command_count() - before == 0, "a command reached the server"


@pytest.mark.parametrize("op", sorted(OPS))
def test_bad_ids_rejected_before_any_command(make_backend, op):
    backend = make_backend()
    backend.push(msg("fine"))
    before = backend.stats()
    with no_commands(make_backend, backend):
        for bad in (*BAD_IDS, *NOT_STR):
            with pytest.raises(TaskValidationError):
                OPS[op](backend, bad)
    assert backend.stats() == before
    assert backend.get_state("ok") is None
    assert backend.get_state("ok1") is None


def test_good_ids_at_the_limits_accepted(backend):
    longest = "x" * 128
    odd = "a_b.c:d@e/f+g=h#i-j"
    assert backend.push(msg(longest, tenant=odd))
    assert backend.get_message(longest).tenant == odd
    assert backend.queue_sizes([odd])[odd].normal == 1
    assert [c.message.task_id for c in backend.claim(assigned=[odd])] == [longest]
    with pytest.raises(TaskValidationError):
        backend.push(msg("x" * 129))


def test_payload_too_large_rejected_before_any_command(make_backend):
    backend = make_backend(QueueConfig(max_payload_bytes=1024))
    with no_commands(make_backend, backend):
        with pytest.raises(PayloadTooLargeError) as info:
            backend.push(msg("big", body=b"x" * 1025))
        assert isinstance(info.value, TaskValidationError)
        with pytest.raises(PayloadTooLargeError):
            backend.push_batch([msg("small", body=b"x"), msg("big", body=b"y" * 5000)])
    assert backend.get_state("big") is None
    assert backend.get_state("small") is None
    assert backend.stats()["pushed"] == 0
    assert backend.push(msg("exact", body=b"z" * 1024))
    assert backend.get_message("exact").body == b"z" * 1024


def test_default_payload_limit_is_one_mib(backend):
    with pytest.raises(PayloadTooLargeError):
        backend.push(msg("big", body=b"x" * (1_048_576 + 1)))
    assert backend.push(msg("ok", body=b"x" * 1_048_576))
    assert len(backend.get_message("ok").body) == 1_048_576
