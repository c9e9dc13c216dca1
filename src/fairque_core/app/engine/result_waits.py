"""One piece of a result wait (``wait_result``): the backend's blocking ``wait_done``, and
its asyncio face, which a cancellation ends at once.

On Python 3.10 and 3.11 a cancellation that lands inside redis-py's own ``asyncio.wait_for``
(around a command's send or a connect) can be swallowed there (CPython gh-86296): the wait then
went on, and ``handle.get()`` given up by ``asyncio.wait_for`` kept waiting (for ever for a
task that never ends). :func:`async_wait_piece` does not start a piece once the caller was
asked to stop (Python 3.11+ counts the request even when it was swallowed), and runs the piece
as a task of its own that the caller only watches, so a cancellation while it runs ends the
caller at once and cancels the piece. The generated sync engine calls :func:`wait_piece` (a
thread's blocking call has no cancellation to lose).
"""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["async_wait_piece", "wait_piece"]


def wait_piece(backend: Any, task_id: str, seconds: float) -> None:
    """``backend.wait_done(task_id, seconds)``."""
    backend.wait_done(task_id, seconds)


async def async_wait_piece(backend: Any, task_id: str, seconds: float) -> None:
    """``await backend.wait_done(task_id, seconds)``, ended at once by a cancellation:
    one asked of the caller before the piece starts (and swallowed by an earlier call) or
    while it runs."""
    if getattr(asyncio.current_task(), "cancelling", lambda: 0)():
        raise asyncio.CancelledError
    piece = asyncio.ensure_future(backend.wait_done(task_id, seconds))
    try:
        await asyncio.wait({piece})
    except asyncio.CancelledError:
        piece.cancel()
        raise
    piece.result()  # its error, if it failed
