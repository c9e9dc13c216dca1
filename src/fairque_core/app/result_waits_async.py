"""One piece of an asyncio result wait (``wait_result``), cancellable at once.

The wait's piece is the backend's blocking ``wait_done``. On Python 3.10 and 3.11 a
cancellation that lands inside redis-py's own ``asyncio.wait_for`` (around a command's send or
a connect) can be swallowed there (CPython gh-86296): the wait then went on, and
``handle.get()`` given up by ``asyncio.wait_for`` kept waiting (for ever for a task that never
ends). Here a piece does not start once the caller was asked to stop (Python 3.11+ counts the
request even when it was swallowed), and it runs as a task of its own that the caller only
watches, so a cancellation while it runs ends the caller at once and cancels the piece. The
sync face (``result_waits.py``, written by hand) calls ``wait_done`` directly.
"""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["wait_piece"]


async def wait_piece(backend: Any, task_id: str, seconds: float) -> None:
    """``await backend.wait_done(task_id, seconds)``, ended at once by a cancellation:
    one asked of the caller before the piece starts (and swallowed by an earlier call, which
    Python 3.11+ still counts) or while it runs."""
    if getattr(asyncio.current_task(), "cancelling", lambda: 0)():
        raise asyncio.CancelledError
    piece = asyncio.ensure_future(backend.wait_done(task_id, seconds))
    try:
        await asyncio.wait({piece})
    except asyncio.CancelledError:
        piece.cancel()
        raise
    piece.result()  # its error, if it failed
