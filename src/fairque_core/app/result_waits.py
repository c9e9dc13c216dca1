"""One piece of a result wait (``wait_result``): the sync face of ``result_waits_async``,
written by hand (a thread's blocking call has no cancellation to lose)."""

from __future__ import annotations

from typing import Any

__all__ = ["wait_piece"]


def wait_piece(backend: Any, task_id: str, seconds: float) -> None:
    """``backend.wait_done(task_id, seconds)``."""
    backend.wait_done(task_id, seconds)
