"""AsyncPushBatcher: the asyncio twin of :class:`~fairque_core.app.batcher.PushBatcher` (ADR 35).

``aqueue.batcher(max_size=100, max_delay_ms=5)`` on
:class:`~fairque_core.app.engine_async.AsyncFairQueue`. The same rules as the threaded one
(docs/delivery.md, "Batched pushes"); the delay is a loop timer (``call_later``) that starts
a task sending the buffer. Written by hand beside the threaded one, not generated from it:
the two wait differently. A batcher belongs to the event loop it was first used on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Generator, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

from fairque_core.app.batching import (
    BatcherClosedError,
    BatcherSettings,
    BatchPushError,
    PendingState,
    fail_unsettled,
    note_failed_close,
    raise_failures,
    settle_chunk,
)
from fairque_core.app.handles_async import AsyncTaskHandle
from fairque_core.app.messages import to_message
from fairque_core.domain.models import Message, Task

if TYPE_CHECKING:
    from fairque_core.app.engine_async import AsyncFairQueue

__all__ = ["AsyncPendingPush", "AsyncPushBatcher"]

log = logging.getLogger("fairque.batcher")


class AsyncPendingPush(PendingState[AsyncTaskHandle]):
    """A push held by an :class:`AsyncPushBatcher`: its ``task_id`` at once; ``await`` it for
    its handle, available once the push call of its batch returned."""

    __slots__ = ("_sent",)

    def __init__(self, task_id: str, sent: asyncio.Event) -> None:
        super().__init__(task_id)
        self._sent = sent  # shared by every push of the same batch

    def done(self) -> bool:
        """True once the push call of this task's batch returned (or failed)."""
        return self._sent.is_set()

    def result(self) -> AsyncTaskHandle:
        """The task's handle, as ``queue.push`` returns it, without waiting: raises the push's
        exception when it failed, ``asyncio.InvalidStateError`` while it is not sent yet."""
        if not self._sent.is_set():
            raise asyncio.InvalidStateError(f"the batch of task {self.task_id} is not sent yet")
        return self._outcome()

    def exception(self) -> BaseException | None:
        """The push's exception (None when stored), without waiting, as :meth:`result`."""
        if not self._sent.is_set():
            raise asyncio.InvalidStateError(f"the batch of task {self.task_id} is not sent yet")
        return self._error

    async def wait(self) -> AsyncTaskHandle:
        """The handle once the batch was sent (the timer sends it within ``max_delay_ms``);
        raises the push's own exception when it failed. ``await pending`` is the same."""
        await self._sent.wait()
        return self.result()

    def __await__(self) -> Generator[Any, None, AsyncTaskHandle]:
        return self.wait().__await__()


class AsyncPushBatcher(BatcherSettings):
    """Buffers pushes and stores them ``max_size`` at a time, or after ``max_delay_ms``.

    ``async with aqueue.batcher() as b: pending = await b.push(task)``. ``push`` checks and
    encodes the task at once (a bad task raises there and nothing is buffered); when the
    buffer is full it sends it and returns once that call returned. Failures of a sent batch
    never raise from ``push``: they are recorded on the pending pushes and raised together,
    as :class:`~fairque_core.app.batching.BatchPushError`, by the next :meth:`flush` or
    :meth:`close`. Coroutines of one loop may share a batcher; batches are sent one at a time,
    in the order they were filled.
    """

    def __init__(
        self, queue: AsyncFairQueue, *, max_size: int = 100, max_delay_ms: float = 5.0
    ) -> None:
        self._queue = queue
        super().__init__(max_size, max_delay_ms)
        self._send_lock: asyncio.Lock | None = None  # made on first use, in the running loop
        self._buffer: list[tuple[Task, Message, AsyncPendingPush]] = []
        self._sent: asyncio.Event | None = None  # the signal of the batch being filled
        self._timer: asyncio.TimerHandle | None = None
        self._background: set[asyncio.Task[None]] = set()  # sends the timer started
        self._failures: dict[str, BaseException] = {}  # not yet raised by flush/close
        self._closed = False

    def __len__(self) -> int:
        """How many pushes are buffered, not yet sent."""
        return len(self._buffer)

    # ------------------------------------------------------------------ pushing
    async def push(self, task: Task) -> AsyncPendingPush:
        """Buffer ``task``; its pending push. The same checks as ``queue.push`` run here (a
        TaskValidationError, a PayloadTooLargeError ... raises now, and nothing is buffered).
        When the buffer is full this call sends it and returns after the call returned."""
        message = to_message(task, self._queue.plugins, self._queue.config)
        if self._closed:
            raise BatcherClosedError()
        if self._sent is None:
            self._sent = asyncio.Event()
        pending = AsyncPendingPush(task.task_id, self._sent)
        self._buffer.append((task, message, pending))
        size = len(self._buffer)
        if size >= self._max_size:
            await self._send_buffered()
        elif size == 1:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(self._max_delay, self._on_timer)
        return pending

    async def flush(self) -> None:
        """Send everything buffered now and wait for it; then raise BatchPushError for every
        push that failed since the last flush (those the timer or a full buffer sent too)."""
        await self._send_buffered()
        self._raise_failures()

    async def close(self) -> None:
        """Refuse further pushes, send what is buffered, wait for sends the timer started;
        then raise BatchPushError as :meth:`flush` does. Closing again does nothing more."""
        self._closed = True
        await self._send_buffered()
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
        self._raise_failures()

    async def __aenter__(self) -> AsyncPushBatcher:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Close: what is buffered is sent also when the block raised. Then the block's own
        exception goes on; a BatchPushError of that last send is logged and added to it as a
        note instead of replacing it (each failed push's pending push still says why)."""
        if exc is None:
            await self.close()
            return
        try:
            await self.close()
        except BatchPushError as failed:
            note_failed_close(exc, failed, log)

    def __repr__(self) -> str:
        return (
            f"AsyncPushBatcher(queue={self._queue.name!r}, max_size={self._max_size}, "
            f"max_delay_ms={self.max_delay_ms:g}, buffered={len(self)})"
        )

    # ------------------------------------------------------------------ sending
    def _on_timer(self) -> None:
        self._timer = None
        if not self._buffer:
            return
        task = asyncio.get_running_loop().create_task(self._send_buffered())
        self._background.add(task)
        task.add_done_callback(self._sent_by_timer)

    def _sent_by_timer(self, task: asyncio.Task[None]) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("the batcher's timer could not send its buffer: %r", task.exception())

    async def _send_buffered(self) -> None:
        if self._send_lock is None:
            self._send_lock = asyncio.Lock()
        async with self._send_lock:
            if not self._buffer:
                return
            items, self._buffer = self._buffer, []
            sent, self._sent = self._sent, None
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            assert sent is not None
            await self._send(items, sent)

    async def _send(
        self, items: Sequence[tuple[Task, Message, AsyncPendingPush]], sent: asyncio.Event
    ) -> None:
        failures: dict[str, BaseException] = {}
        try:
            for start in range(0, len(items), self._max_size):
                await self._send_chunk(items[start : start + self._max_size], failures)
        except BaseException as exc:  # canceled: what has no outcome yet fails with it
            fail_unsettled(items, exc, failures)
            raise
        finally:
            self._failures.update(failures)
            sent.set()

    async def _send_chunk(
        self,
        chunk: Sequence[tuple[Task, Message, AsyncPendingPush]],
        failures: dict[str, BaseException],
    ) -> None:
        outcomes: Sequence[tuple[bool, str] | Exception]
        try:
            outcomes = await self._queue._send_each([message for _t, message, _p in chunk])
        except Exception as exc:  # the whole call failed: every push of it fails with it
            outcomes = [exc] * len(chunk)
        tasks, stored, waiting = settle_chunk(chunk, outcomes, failures)
        for pending, handle in zip(waiting, self._queue._handles(tasks, stored), strict=True):
            pending._handle = handle

    def _raise_failures(self) -> None:
        failures, self._failures = self._failures, {}
        raise_failures(failures)
