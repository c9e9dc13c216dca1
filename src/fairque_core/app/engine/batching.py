"""What the two producer buffers share (ADR 35): their settings check, their error, the state
of a pending push, the buffer itself (:class:`PushBuffer`: adding a push, taking the buffer to
send it, and booking each sent chunk's outcomes on its pending pushes).

:class:`~fairque_core.app.engine.batcher.PushBatcher` (threads) and
:class:`~fairque_core.app.engine.batcher_async.AsyncPushBatcher` (asyncio) differ in how they wait
(a timer thread, a loop timer) and in how they make the push call; what a batched push means is
the same for both and is described in docs/delivery.md, "Batched pushes". No I/O here.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from fairque_core.app.engine.messages import to_message
from fairque_core.domain.errors import FairQueueError, OutcomeUnknownError, TaskValidationError
from fairque_core.domain.models import Message, Task
from fairque_core.settings.config import QueueConfig

if TYPE_CHECKING:
    from fairque_core.app.engine.support import PluginHostLike

__all__ = [
    "MAX_BATCHER_DELAY_MS",
    "MAX_BATCHER_SIZE",
    "BatchPushError",
    "BatcherClosedError",
    "BatcherSettings",
    "PendingState",
    "PushBuffer",
    "SentChunk",
    "check_batcher_settings",
    "closing_after",
    "fail_unsettled",
    "log",
    "raise_failures",
    "settle_chunk",
]

log = logging.getLogger("fairque.batcher")


class Signal(Protocol):
    """What a pending push reads of its batch's signal (a threading or an asyncio event)."""

    def is_set(self) -> bool: ...

    def set(self) -> None: ...


H = TypeVar("H")  # the handle type: TaskHandle or AsyncTaskHandle
S = TypeVar("S", bound=Signal)  # the signal type: threading.Event or asyncio.Event


class BufferedQueue(Protocol):
    """What :class:`PushBuffer` uses of its queue (a FairQueue or an AsyncFairQueue)."""

    @property
    def name(self) -> str: ...

    @property
    def plugins(self) -> PluginHostLike: ...

    @property
    def config(self) -> QueueConfig: ...

    def _handles(
        self, tasks: Sequence[Task], outcomes: Sequence[tuple[bool, str]]
    ) -> Sequence[Any]: ...


Q = TypeVar("Q", bound=BufferedQueue)

#: The largest ``max_size`` of a batcher: one push call must stay short on the server (a call
#: of 1,000 tasks takes ~12 ms of server time, during which every other client waits; see the
#: "Batch sizes" section of docs/operations.md, measured by the F5 chaos test: ~100 is best).
MAX_BATCHER_SIZE = 1_000
#: The longest ``max_delay_ms`` (one minute): a buffer is for milliseconds, not for storage.
MAX_BATCHER_DELAY_MS = 60_000.0


class BatchPushError(FairQueueError):
    """Pushes buffered by a batcher failed.

    ``errors`` maps the id of every task whose push failed to its exception: the error of the
    whole call (the connection, the server) for each task of that call, or the task's own
    refusal (a tenant over ``max_queued``, an unknown dependency) when only it was refused.
    The other tasks of the batch were stored. Each failed push's pending handle raises the
    same exception. Raised by ``flush()``, ``close()`` and the end of the ``with`` block.
    """

    def __init__(self, errors: Mapping[str, BaseException]) -> None:
        self.errors: dict[str, BaseException] = dict(errors)
        first_id, first = next(iter(self.errors.items()))
        count = len(self.errors)
        super().__init__(
            f"{count} batched push{'es' if count != 1 else ''} failed; the first, task "
            f"{first_id}: {type(first).__name__}: {first}"
        )

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.errors,))


class BatcherClosedError(FairQueueError, RuntimeError):
    """A push into a batcher after its ``close()`` (or the end of its ``with`` block)."""

    def __init__(self) -> None:
        super().__init__("this batcher is closed: make a new one with queue.batcher()")


def check_batcher_settings(max_size: object, max_delay_ms: object) -> tuple[int, float]:
    """``(max_size, max_delay seconds)`` when both are in range, else TaskValidationError."""
    if (
        isinstance(max_size, bool)
        or not isinstance(max_size, int)
        or not 1 <= max_size <= MAX_BATCHER_SIZE
    ):
        raise TaskValidationError(
            "max_size", max_size, f"must be an int in [1, {MAX_BATCHER_SIZE}]"
        )
    if (
        isinstance(max_delay_ms, bool)
        or not isinstance(max_delay_ms, (int, float))
        or not math.isfinite(max_delay_ms)
        or not 0 < max_delay_ms <= MAX_BATCHER_DELAY_MS
    ):
        raise TaskValidationError(
            "max_delay_ms", max_delay_ms, f"must be a number in (0, {MAX_BATCHER_DELAY_MS:g}]"
        )
    return max_size, float(max_delay_ms) / 1000.0


class BatcherSettings:
    """``max_size`` and ``max_delay_ms`` of a batcher, checked once."""

    def __init__(self, max_size: object, max_delay_ms: object) -> None:
        self._max_size, self._max_delay = check_batcher_settings(max_size, max_delay_ms)

    @property
    def max_size(self) -> int:
        return self._max_size

    @property
    def max_delay_ms(self) -> float:
        return self._max_delay * 1000.0


class PendingState(Generic[H, S]):
    """The outcome of one buffered push: its handle once stored, or its exception, and the
    signal ``sent`` of its batch, shared by every push of that batch and set once the push
    call returned. How a caller waits for it is the subclass's (a threading or an asyncio
    event)."""

    __slots__ = ("_error", "_handle", "_sent", "task_id")

    def __init__(self, task_id: str, sent: S) -> None:
        self.task_id = task_id
        self._sent = sent
        self._handle: H | None = None
        self._error: BaseException | None = None

    def done(self) -> bool:
        """True once the push call of this task's batch returned (or failed)."""
        return self._sent.is_set()

    def _outcome(self) -> H:
        """The handle, or the push's exception raised (call once it is done)."""
        if self._error is not None:
            raise self._error
        assert self._handle is not None
        return self._handle

    def __repr__(self) -> str:
        state = "pending" if not self.done() else "failed" if self._error else "stored"
        return f"{type(self).__name__}({self.task_id!r}, {state})"


def settle_chunk(
    chunk: Sequence[tuple[Task, Message, PendingState[H, Any]]],
    outcomes: Sequence[tuple[bool, str] | Exception],
    failures: dict[str, BaseException],
) -> tuple[list[Task], list[tuple[bool, str]], list[PendingState[H, Any]]]:
    """Give each failed push of a sent chunk its exception (also booked in ``failures``);
    the tasks, outcomes and pending pushes of the stored ones, for their handles."""
    tasks: list[Task] = []
    stored: list[tuple[bool, str]] = []
    waiting: list[PendingState[H, Any]] = []
    for (task, _message, pending), outcome in zip(chunk, outcomes, strict=True):
        if isinstance(outcome, Exception):
            pending._error = outcome
            failures[task.task_id] = outcome
        else:
            tasks.append(task)
            stored.append(outcome)
            waiting.append(pending)
    return tasks, stored, waiting


def fail_unsettled(
    items: Sequence[tuple[Task, Message, PendingState[H, Any]]],
    error: BaseException,
    failures: dict[str, BaseException],
) -> None:
    """A send interrupted by ``error``: every push of it without an outcome fails with it.

    When ``error`` is no ``Exception`` (a cancellation of the coroutine that sent the batch,
    a KeyboardInterrupt), the other pushes fail with OutcomeUnknownError instead, caused by
    it: only the cancelled caller should see CancelledError (a producer's ``except
    Exception`` retry would skip it and its task would end as cancelled), and the batch may
    or may not have been stored (push again: a push is idempotent by id)."""
    if not isinstance(error, Exception):
        stand_in = OutcomeUnknownError(
            f"the call carrying this push was interrupted ({type(error).__name__}) in "
            "another caller; it may or may not have been stored: push again (idempotent by id)"
        )
        stand_in.__cause__ = error
        error = stand_in
    for _task, _message, pending in items:
        if pending._handle is None and pending._error is None:
            pending._error = error
            failures[pending.task_id] = error


def raise_failures(failures: Mapping[str, BaseException]) -> None:
    """BatchPushError for ``failures`` (nothing when empty)."""
    if failures:
        raise BatchPushError(failures) from next(iter(failures.values()))


@contextmanager
def closing_after(error: BaseException | None) -> Iterator[None]:
    """Around the close at the end of a ``with`` block. When the block raised ``error``, a
    BatchPushError of the close's last send does not replace it: it is logged and added to
    ``error`` as a note (Python 3.11+; each failed push's pending push still says why)."""
    try:
        yield
    except BatchPushError as failed:
        if error is None:
            raise
        log.warning("sending the buffered pushes after an error failed: %s", failed)
        add_note = getattr(error, "add_note", None)
        if add_note is not None:
            add_note(f"fairque batcher: {failed}")


P = TypeVar("P", bound="PendingState[Any, Any]")  # the pending push type of a batcher


class SentChunk(Generic[P]):
    """Up to ``max_size`` pushes of a batch taken from the buffer, sent in one push call: its
    ``messages`` for that call, and :meth:`settle` for the call's outcome."""

    __slots__ = ("_failures", "_queue", "items", "messages")

    def __init__(
        self,
        items: Sequence[tuple[Task, Message, P]],
        failures: dict[str, BaseException],
        queue: BufferedQueue,
    ) -> None:
        self.items = items
        self.messages = [message for _task, message, _pending in items]
        self._failures = failures
        self._queue = queue  # makes the handles of the stored pushes

    def settle(self, outcomes: Sequence[tuple[bool, str] | Exception] | Exception) -> None:
        """The call's outcome, one per push, or the exception of the whole call (then every
        push of it fails with it): failed pushes get their exception (booked for ``flush``),
        stored ones their handle."""
        if isinstance(outcomes, Exception):
            outcomes = [outcomes] * len(self.items)
        tasks, stored, waiting = settle_chunk(self.items, outcomes, self._failures)
        for pending, handle in zip(waiting, self._queue._handles(tasks, stored), strict=True):
            pending._handle = handle


class PushBuffer(BatcherSettings, Generic[Q, P, S]):
    """The buffer of a batcher, without I/O: pushes are encoded and added here, taken out a
    batch at a time by :meth:`_sending`, and the failures of sent batches are booked here until
    ``flush``/``close`` raises them.

    ``_lock`` guards the buffer, the signal of the batch being filled, the closed flag and the
    booked failures. The threaded batcher shares it with its timer thread (its condition waits
    on it); the asyncio one holds it uncontended and never across an ``await``.

    ``pending`` makes a pending push (from its task id and its batch's signal), ``signal`` the
    signal of a new batch. A subclass starts its delay when a push is the first of a batch
    (:meth:`_start_delay`) and stops it when the buffer is taken (:meth:`_stop_delay`); both
    run with ``_lock`` held. It sends what :meth:`_sending` takes, its own way.
    """

    def __init__(
        self,
        queue: Q,
        max_size: object,
        max_delay_ms: object,
        *,
        pending: Callable[[str, S], P],
        signal: Callable[[], S],
    ) -> None:
        super().__init__(max_size, max_delay_ms)
        self._queue = queue
        self._new_pending = pending
        self._new_signal = signal
        self._lock = threading.Lock()
        self._buffer: list[tuple[Task, Message, P]] = []
        self._signal: S | None = None  # the signal of the batch being filled
        self._failures: dict[str, BaseException] = {}  # not yet raised by flush/close
        self._closed = False

    # ------------------------------------------------------------------ hooks
    def _start_delay(self) -> None:
        """The first push of a batch was buffered: send it within ``max_delay_ms``."""
        raise NotImplementedError

    def _stop_delay(self) -> None:
        """The buffer was taken to be sent: its delay no longer applies."""
        raise NotImplementedError

    # ------------------------------------------------------------------ shared
    def __len__(self) -> int:
        """How many pushes are buffered, not yet sent."""
        with self._lock:
            return len(self._buffer)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(queue={self._queue.name!r}, max_size={self._max_size}, "
            f"max_delay_ms={self.max_delay_ms:g}, buffered={len(self)})"
        )

    def _add(self, task: Task) -> tuple[P, bool]:
        """Check, encode and buffer ``task`` (a bad task raises here, and nothing is buffered;
        BatcherClosedError once closed): its pending push, and whether the buffer is now full
        (then the caller sends it)."""
        message = to_message(task, self._queue.plugins, self._queue.config)
        with self._lock:
            if self._closed:
                raise BatcherClosedError()
            if self._signal is None:
                self._signal = self._new_signal()
            pending = self._new_pending(task.task_id, self._signal)
            self._buffer.append((task, message, pending))
            size = len(self._buffer)
            if size == 1 and size < self._max_size:
                self._start_delay()
        return pending, size >= self._max_size

    @contextmanager
    def _sending(self) -> Iterator[list[SentChunk[P]]]:
        """Take everything buffered, as chunks of at most ``max_size`` pushes for the caller
        to send one by one (none when the buffer is empty). On leaving, the failures are
        booked for ``flush``/``close`` and the batch's pending pushes are signalled; when the
        sending was interrupted (an error, a cancellation) every push without an outcome yet
        fails with that exception."""
        with self._lock:
            items, self._buffer = self._buffer, []
            signal, self._signal = self._signal, None
            if items:
                self._stop_delay()
        if not items:
            yield []
            return
        assert signal is not None
        failures: dict[str, BaseException] = {}
        try:
            yield [
                SentChunk(items[start : start + self._max_size], failures, self._queue)
                for start in range(0, len(items), self._max_size)
            ]
        except BaseException as exc:
            fail_unsettled(items, exc, failures)
            raise
        finally:
            if failures:
                with self._lock:
                    self._failures.update(failures)
            signal.set()

    def _raise_failures(self) -> None:
        """BatchPushError for every push that failed since the last flush (nothing if none)."""
        with self._lock:
            failures, self._failures = self._failures, {}
        raise_failures(failures)
