"""What the two producer buffers share (ADR 35): their settings check, their error, the state
of a pending push and how a sent chunk's outcomes are handed to its pending pushes.

:class:`~fairque_core.app.batcher.PushBatcher` (threads) and
:class:`~fairque_core.app.batcher_async.AsyncPushBatcher` (asyncio) differ in how they wait
(a timer thread, a loop timer); what a batched push means is the same for both and is
described in docs/delivery.md, "Batched pushes". No I/O here.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from typing import Generic, TypeVar

from fairque_core.domain.errors import FairQueueError, TaskValidationError
from fairque_core.domain.models import Message, Task

__all__ = [
    "MAX_BATCHER_DELAY_MS",
    "MAX_BATCHER_SIZE",
    "BatchPushError",
    "BatcherClosedError",
    "BatcherSettings",
    "PendingState",
    "check_batcher_settings",
    "fail_unsettled",
    "note_failed_close",
    "raise_failures",
    "settle_chunk",
]

H = TypeVar("H")  # the handle type: TaskHandle or AsyncTaskHandle

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


class PendingState(Generic[H]):
    """The outcome of one buffered push: its handle once stored, or its exception. How a
    caller waits for it is the subclass's (a threading or an asyncio event)."""

    __slots__ = ("_error", "_handle", "task_id")

    def __init__(self, task_id: str) -> None:
        self.task_id = task_id
        self._handle: H | None = None
        self._error: BaseException | None = None

    def done(self) -> bool:
        raise NotImplementedError

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
    chunk: Sequence[tuple[Task, Message, PendingState[H]]],
    outcomes: Sequence[tuple[bool, str] | Exception],
    failures: dict[str, BaseException],
) -> tuple[list[Task], list[tuple[bool, str]], list[PendingState[H]]]:
    """Give each failed push of a sent chunk its exception (also booked in ``failures``);
    the tasks, outcomes and pending pushes of the stored ones, for their handles."""
    tasks: list[Task] = []
    stored: list[tuple[bool, str]] = []
    waiting: list[PendingState[H]] = []
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
    items: Sequence[tuple[Task, Message, PendingState[H]]],
    error: BaseException,
    failures: dict[str, BaseException],
) -> None:
    """A send interrupted by ``error``: every push of it without an outcome fails with it."""
    for _task, _message, pending in items:
        if pending._handle is None and pending._error is None:
            pending._error = error
            failures[pending.task_id] = error


def raise_failures(failures: Mapping[str, BaseException]) -> None:
    """BatchPushError for ``failures`` (nothing when empty)."""
    if failures:
        raise BatchPushError(failures) from next(iter(failures.values()))


def note_failed_close(error: BaseException, failed: BatchPushError, log: logging.Logger) -> None:
    """The block raised ``error`` and the close's last send failed too: log that, and add it
    to ``error`` as a note instead of replacing it (Python 3.11+)."""
    log.warning("sending the buffered pushes after an error failed: %s", failed)
    add_note = getattr(error, "add_note", None)
    if add_note is not None:
        add_note(f"fairque batcher: {failed}")
