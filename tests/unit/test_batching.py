"""The buffer both producer batchers share (``fairque_core.app.engine.batching``): taking the buffer
as chunks, settling a chunk, an interrupted send, the close at the end of a ``with`` block,
and what ``len``/``repr`` say, on the reference model (no server)."""

from __future__ import annotations

import asyncio
import sys
import uuid

import pytest

from fairque_core import (
    AsyncFairQueue,
    AsyncInMemoryBackend,
    BatcherClosedError,
    BatchPushError,
    FairQueue,
    InMemoryBackend,
    OutcomeUnknownError,
    QueueConfig,
    Task,
    TaskHandle,
)
from fairque_core.app.engine.batching import closing_after

NEVER_MS = 60_000.0


def _queue() -> FairQueue:
    config = QueueConfig(name="bu-" + uuid.uuid4().hex[:10])
    return FairQueue(InMemoryBackend(queue=config.name, config=config))


def _async_queue() -> AsyncFairQueue:
    config = QueueConfig(name="bu-" + uuid.uuid4().hex[:10])
    return AsyncFairQueue(AsyncInMemoryBackend(queue=config.name, config=config))


def _tasks(n: int) -> list[Task]:
    return [Task.create("alice", payload={"i": i}) for i in range(n)]


def test_the_buffer_is_taken_in_chunks_of_max_size() -> None:
    queue = _queue()
    b = queue.batcher(max_size=2, max_delay_ms=NEVER_MS)
    pending = [b.push(t) for t in _tasks(1)]
    # a second push fills the buffer (max_size 2) and sends it; the fifth stays buffered
    pending += [b.push(t) for t in _tasks(3)]
    assert len(b) == 0
    assert all(p.done() for p in pending)
    pending += [b.push(t) for t in _tasks(1)]
    assert len(b) == 1
    assert not pending[-1].done()
    with b._sending() as chunks:
        assert [len(c.messages) for c in chunks] == [1]
        assert len(b) == 0  # taken out before the call
        chunks[0].settle(queue._send_each(chunks[0].messages))
    assert pending[-1].done()
    assert isinstance(pending[-1].result(timeout=0), TaskHandle)
    with b._sending() as chunks:  # an empty buffer: nothing to send, nothing signalled
        assert chunks == []
    b.close()
    queue.close()


def test_a_failed_call_fails_every_push_of_its_chunk_only() -> None:
    queue = _queue()
    b = queue.batcher(max_size=10, max_delay_ms=NEVER_MS)
    pending = [b.push(t) for t in _tasks(3)]
    b._max_size = 2  # take the three as two chunks
    error = ConnectionError("down")
    with b._sending() as chunks:
        assert [len(c.messages) for c in chunks] == [2, 1]
        chunks[0].settle(error)
        chunks[1].settle(queue._send_each(chunks[1].messages))
    assert [p.exception(timeout=0) for p in pending] == [error, error, None]
    with pytest.raises(BatchPushError) as failed:
        b.flush()
    assert set(failed.value.errors) == {pending[0].task_id, pending[1].task_id}
    b.flush()  # raised once: nothing more
    b.close()
    queue.close()


def test_an_interrupted_send_leaves_what_has_no_outcome_unknown() -> None:
    queue = _queue()
    b = queue.batcher(max_size=10, max_delay_ms=NEVER_MS)
    pending = [b.push(t) for t in _tasks(3)]
    b._max_size = 2

    def send_one_chunk_then_interrupt() -> None:
        with b._sending() as chunks:
            chunks[0].settle(queue._send_each(chunks[0].messages))
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        send_one_chunk_then_interrupt()
    assert all(p.done() for p in pending)
    assert isinstance(pending[0].result(timeout=0), TaskHandle)
    # the other callers' outcome is unknown; the interruption is its cause, not their error
    unknown = pending[2].exception(timeout=0)
    assert isinstance(unknown, OutcomeUnknownError)
    assert isinstance(unknown.__cause__, KeyboardInterrupt)
    with pytest.raises(BatchPushError) as failed:
        b.close()
    assert set(failed.value.errors) == {pending[2].task_id}
    queue.close()


def test_closing_after_notes_a_failed_close_only_when_the_block_raised() -> None:
    failed = BatchPushError({"t1": ConnectionError("down")})
    with pytest.raises(BatchPushError), closing_after(None):
        raise failed
    block = ValueError("the block's own error")
    with closing_after(block):
        raise failed
    if sys.version_info >= (3, 11):  # add_note is 3.11+; before, the failure is only logged
        assert block.__notes__ == [f"fairque batcher: {failed}"]
    with pytest.raises(RuntimeError), closing_after(block):  # any other error goes on
        raise RuntimeError("not a batch failure")


def test_len_repr_and_closed() -> None:
    queue = _queue()
    b = queue.batcher(max_size=5, max_delay_ms=NEVER_MS)
    b.push(Task.create("alice"))
    assert len(b) == 1
    assert repr(b) == (
        f"PushBatcher(queue={queue.name!r}, max_size=5, max_delay_ms=60000, buffered=1)"
    )
    b.close()
    with pytest.raises(BatcherClosedError):
        b.push(Task.create("alice"))
    queue.close()


def test_async_len_repr_interrupt_and_closed() -> None:
    async def main() -> None:
        queue = _async_queue()
        b = queue.batcher(max_size=5, max_delay_ms=NEVER_MS)
        pending = [await b.push(t) for t in _tasks(2)]
        assert len(b) == 2
        assert b._timer is not None
        assert repr(b) == (
            f"AsyncPushBatcher(queue={queue.name!r}, max_size=5, max_delay_ms=60000, buffered=2)"
        )
        with pytest.raises(asyncio.CancelledError), b._sending():
            raise asyncio.CancelledError
        assert b._timer is None
        assert len(b) == 0
        assert all(isinstance(p.exception(), OutcomeUnknownError) for p in pending)
        assert all(isinstance(p.exception().__cause__, asyncio.CancelledError) for p in pending)
        with pytest.raises(BatchPushError):
            await b.close()
        with pytest.raises(BatcherClosedError):
            await b.push(Task.create("alice"))
        await queue.close()

    asyncio.run(main())
