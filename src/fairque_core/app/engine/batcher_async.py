"""AsyncPushBatcher: the asyncio twin of :class:`~fairque_core.app.engine.batcher.PushBatcher` (ADR
35).

``aqueue.batcher(max_size=100, max_delay_ms=5)`` on
:class:`~fairque_core.app.engine.queue_async.AsyncFairQueue`. The same rules as the threaded one
(docs/delivery.md, "Batched pushes"); the delay is a loop timer (``call_later``) that starts
a task sending the buffer. Written by hand beside the threaded one, not generated from it:
the two wait differently. A batcher belongs to the event loop it was first used on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Generator, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

from fairque_core.app.engine.batching import PendingState, PushBuffer, closing_after, log
from fairque_core.app.engine.handles_async import AsyncTaskHandle
from fairque_core.domain.models import Task

if TYPE_CHECKING:
    from fairque_core.app.engine.host_async import MixinHost as AsyncQueueHost

__all__ = ["AsyncPendingPush", "AsyncPushBatcher"]


class AsyncPendingPush(PendingState[AsyncTaskHandle, asyncio.Event]):
    """A push held by an :class:`AsyncPushBatcher`: its ``task_id`` at once; ``await`` it for
    its handle, available once the push call of its batch returned."""

    __slots__ = ()

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


class AsyncPushBatcher(PushBuffer["AsyncQueueHost", AsyncPendingPush, asyncio.Event]):
    """Buffers pushes and stores them ``max_size`` at a time, or after ``max_delay_ms``.

    ``async with aqueue.batcher() as b: pending = await b.push(task)``. ``push`` checks and
    encodes the task at once (a bad task raises there and nothing is buffered); when the
    buffer is full it sends it and returns once that call returned. Failures of a sent batch
    never raise from ``push``: they are recorded on the pending pushes and raised together,
    as :class:`~fairque_core.app.engine.batching.BatchPushError`, by the next :meth:`flush` or
    :meth:`close`. Coroutines of one loop may share a batcher; batches are sent one at a time,
    in the order they were filled.
    """

    def __init__(
        self, queue: AsyncQueueHost, *, max_size: int = 100, max_delay_ms: float = 5.0
    ) -> None:
        super().__init__(
            queue, max_size, max_delay_ms, pending=AsyncPendingPush, signal=asyncio.Event
        )
        self._send_lock: asyncio.Lock | None = None  # made on first use, in the running loop
        self._timer: asyncio.TimerHandle | None = None
        self._background: set[asyncio.Task[None]] = set()  # sends the timer started

    # ------------------------------------------------------------------ pushing
    async def push(self, task: Task) -> AsyncPendingPush:
        """Buffer ``task``; its pending push. The same checks as ``queue.push`` run here (a
        TaskValidationError, a PayloadTooLargeError ... raises now, and nothing is buffered).
        When the buffer is full this call sends it and returns after the call returned."""
        pending, full = self._add(task)
        if full:
            await self._send_buffered()
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
        exception goes on (see :func:`~fairque_core.app.engine.batching.closing_after`)."""
        with closing_after(exc):
            await self.close()

    # ------------------------------------------------------------------ sending
    def _start_delay(self) -> None:
        """The first push of a batch: a loop timer sends it when due."""
        self._timer = asyncio.get_running_loop().call_later(self._max_delay, self._on_timer)

    def _stop_delay(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

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
            with self._sending() as chunks:
                for chunk in chunks:
                    outcomes: Sequence[tuple[bool, str] | Exception] | Exception
                    try:
                        outcomes = await self._queue._send_each(chunk.messages)
                    except Exception as exc:  # the whole call failed: every push of it fails
                        outcomes = exc
                    chunk.settle(outcomes)
