"""The retry schedule and the retry decision, at the path the plugin docs name.

A ``fairque_retry_decide`` implementation returns a :class:`RetryDecision`
(``RetryDecision.retry(delay)`` or ``RetryDecision.dead(failure_type, reason)``), or None to let
the next plugin decide; :class:`RetrySchedule` and :func:`decide` compute the usual backoff.
They live in :mod:`fairque_core.domain.retry`; this module re-exports them and imports nothing
else. (``RetrySchedule`` was called ``RetryPolicy`` here before ADR 22; ``RetryPolicy`` is now
only the plugin, ``fairque_plugins.RetryPolicy``.)
"""

from __future__ import annotations

from fairque_core.domain.retry import RetryDecision, RetrySchedule, decide

__all__ = ["RetryDecision", "RetrySchedule", "decide"]
