"""PushBatcher: a producer-side buffer that stores many pushes in one call (ADR 35).

``queue.batcher(max_size=100, max_delay_ms=5)`` on
:class:`~fairque_core.app.engine.queue.FairQueue`.
A buffered push is sent (``push_batch``, one round trip for the whole buffer) when the buffer
holds ``max_size`` tasks, when ``max_delay_ms`` passed since its first task was buffered (a
timer thread of the batcher sends it), on :meth:`PushBatcher.flush` and on close (the end of
the ``with`` block, also when the block raised). The asyncio twin is
:mod:`fairque_core.app.engine.batcher_async`; it is written by hand, not generated, because the two
wait differently (a thread and a condition here, a loop timer there).

What a batched push means (docs/delivery.md, "Batched pushes"): a push is stored, and
acknowledged, only once the push call of its batch returned; until then it is in this
process's memory and is lost if the process dies.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from types import TracebackType
from typing import TYPE_CHECKING

from fairque_core.app.engine.batching import PendingState, PushBuffer, closing_after, log
from fairque_core.app.engine.handles import TaskHandle
from fairque_core.domain.models import Task

if TYPE_CHECKING:
    from fairque_core.app.engine.host import MixinHost as QueueHost

__all__ = ["PendingPush", "PushBatcher"]


class PendingPush(PendingState[TaskHandle, threading.Event]):
    """A push held by a :class:`PushBatcher`: its ``task_id`` at once, its outcome once the
    push call of its batch returned."""

    __slots__ = ()

    def result(self, timeout: float | None = None) -> TaskHandle:
        """The task's handle, as ``queue.push`` returns it (``duplicate``, ``get()``), once its
        batch was sent; waits up to ``timeout`` seconds (None: until it is sent, which the
        batcher's timer does within ``max_delay_ms``).

        Raises the push's own exception when it failed (the error of its batch's call, or its
        own refusal such as TenantQueueFullError), TimeoutError when it was not sent in time.
        """
        if not self._sent.wait(timeout):
            raise TimeoutError(f"the batch of task {self.task_id} was not sent in {timeout} s")
        return self._outcome()

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """The push's exception (None when it was stored), waiting as :meth:`result` does."""
        if not self._sent.wait(timeout):
            raise TimeoutError(f"the batch of task {self.task_id} was not sent in {timeout} s")
        return self._error


class PushBatcher(PushBuffer["QueueHost", PendingPush, threading.Event]):
    """Buffers pushes and stores them ``max_size`` at a time, or after ``max_delay_ms``.

    Use it as a context manager (``with queue.batcher() as b: b.push(task)``) or call
    :meth:`close` yourself. ``push`` checks and encodes the task at once (a bad task raises
    there and nothing is buffered) and returns a :class:`PendingPush`. Failures of a sent
    batch never raise from ``push``: they are recorded on the pending pushes and raised
    together, as :class:`~fairque_core.app.engine.batching.BatchPushError`, by the next
    :meth:`flush` or :meth:`close`. One batcher may be shared by threads: the buffer is
    guarded by a lock, and batches are sent one at a time, in the order they were filled.
    Close it (the ``with`` block does): until then its timer thread (a daemon, started by the
    first push) stays, still sending what is buffered when it is due.
    """

    def __init__(self, queue: QueueHost, *, max_size: int = 100, max_delay_ms: float = 5.0) -> None:
        super().__init__(queue, max_size, max_delay_ms, pending=PendingPush, signal=threading.Event)
        self._wake = threading.Condition(self._lock)  # the timer thread waits on it
        self._send_lock = threading.Lock()  # one batch in flight at a time, in buffer order
        self._deadline: float | None = None  # when the buffer is due (monotonic)
        self._timer: threading.Thread | None = None

    # ------------------------------------------------------------------ pushing
    def push(self, task: Task) -> PendingPush:
        """Buffer ``task``; its pending push. The same checks as ``queue.push`` run here (a
        TaskValidationError, a PayloadTooLargeError ... raises now, and nothing is buffered).
        When the buffer is full this call sends it and returns after the call returned."""
        pending, full = self._add(task)
        if full:
            self._send_buffered()
        return pending

    def flush(self) -> None:
        """Send everything buffered now and wait for it; then raise BatchPushError for every
        push that failed since the last flush (those the timer or a full buffer sent too)."""
        self._send_buffered()
        self._raise_failures()

    def close(self) -> None:
        """Refuse further pushes, send what is buffered, stop the timer thread; then raise
        BatchPushError as :meth:`flush` does. Closing again does nothing more."""
        with self._lock:
            self._closed = True
            timer, self._timer = self._timer, None
            self._wake.notify_all()
        try:
            self._send_buffered()
        finally:
            if timer is not None and timer is not threading.current_thread():
                timer.join()
        self._raise_failures()

    def __enter__(self) -> PushBatcher:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Close: what is buffered is sent also when the block raised. Then the block's own
        exception goes on (see :func:`~fairque_core.app.engine.batching.closing_after`)."""
        with closing_after(exc):
            self.close()

    # ------------------------------------------------------------------ sending
    def _start_delay(self) -> None:
        """The first push of a batch (``_lock`` held): the timer thread sends it when due."""
        self._deadline = time.monotonic() + self._max_delay
        if self._timer is None:
            self._timer = threading.Thread(
                target=self._run_timer, name="fairque-batcher", daemon=True
            )
            self._timer.start()
        self._wake.notify()

    def _stop_delay(self) -> None:
        self._deadline = None

    def _run_timer(self) -> None:
        """The timer thread: send the buffer when its first push has waited max_delay_ms."""
        while True:
            with self._lock:
                while not self._closed:
                    if self._deadline is None:
                        self._wake.wait()
                        continue
                    left = self._deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._wake.wait(left)
                if self._closed:
                    return
            try:
                self._send_buffered()
            except Exception:  # recorded on the pending pushes; the timer must go on
                log.exception("the batcher's timer could not send its buffer")

    def _send_buffered(self) -> None:
        with self._send_lock, self._sending() as chunks:
            for chunk in chunks:
                outcomes: Sequence[tuple[bool, str] | Exception] | Exception
                try:
                    outcomes = self._queue._send_each(chunk.messages)
                except Exception as exc:  # the whole call failed: every push of it fails
                    outcomes = exc
                chunk.settle(outcomes)
