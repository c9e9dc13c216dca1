"""What the two producer buffers share (ADR 35): their settings check and their error.

:class:`~fairque_core.app.batcher.PushBatcher` (threads) and
:class:`~fairque_core.app.batcher_async.AsyncPushBatcher` (asyncio) differ in how they wait
(a timer thread, a loop timer); what a batched push means is the same for both and is
described in docs/delivery.md, "Batched pushes". No I/O here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from fairque_core.domain.errors import FairQueueError, TaskValidationError

__all__ = [
    "MAX_BATCHER_DELAY_MS",
    "MAX_BATCHER_SIZE",
    "BatchPushError",
    "BatcherClosedError",
    "check_batcher_settings",
]

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
