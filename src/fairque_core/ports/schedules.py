"""The schedule store port: where cron schedules, their last fired tick and the scheduler
lock live (one store per queue; the backend hands it out as its ``schedules`` attribute).

A store keeps bytes (the schedule's JSON from :func:`~fairque_core.domain.schedules.
encode_schedule`) and numbers; what they mean is the domain's business. Rules every store
shares (the contract tests in ``tests/contract/test_schedules.py`` check them):

* ``save`` creates or replaces a definition and keeps the last fired tick; ``delete`` drops
  both.
* The scheduler lock is a lease with a token: ``acquire_lock`` takes it only when it is free
  or expired (``SET NX PX`` on Redis), ``renew_lock`` and ``release_lock`` act only while the
  token is the holder's (compare-and-set, atomically). Times are the store's own clock
  (server time on Redis), so schedulers on machines with skewed clocks agree on expiry.
* ``mark_fired`` records a tick only while ``token`` holds the lock and the schedule exists,
  and only forward (a smaller tick than the recorded one changes nothing); False otherwise.
"""

from __future__ import annotations

from typing import Protocol

import attrs

__all__ = ["AsyncScheduleStore", "ScheduleRecord", "ScheduleStore"]


@attrs.frozen
class ScheduleRecord:
    """A stored schedule: its name, its encoded definition and its last fired tick (epoch
    seconds, None before the first)."""

    name: str
    definition: bytes
    last_fired: float | None = None


class ScheduleStore(Protocol):
    """The synchronous schedule store."""

    def save(self, name: str, definition: bytes) -> None: ...

    def delete(self, name: str) -> bool:
        """Remove the schedule and its last fired tick; False if there was none."""
        ...

    def get(self, name: str) -> ScheduleRecord | None: ...

    def list(self) -> list[ScheduleRecord]:
        """Every schedule, by name."""
        ...

    def mark_fired(self, name: str, tick: float, token: str) -> bool: ...

    def acquire_lock(self, token: str, ttl: float) -> bool:
        """Take the lock for ``ttl`` seconds if nobody holds it; True when taken."""
        ...

    def renew_lock(self, token: str, ttl: float) -> bool:
        """Extend the lock to ``ttl`` seconds from now if ``token`` holds it."""
        ...

    def release_lock(self, token: str) -> bool:
        """Free the lock if ``token`` holds it."""
        ...

    def lock_holder(self) -> str | None:
        """The token holding the lock now, or None."""
        ...


class AsyncScheduleStore(Protocol):
    """The asynchronous twin of :class:`ScheduleStore`: same names and meaning, awaitable."""

    async def save(self, name: str, definition: bytes) -> None: ...

    async def delete(self, name: str) -> bool: ...

    async def get(self, name: str) -> ScheduleRecord | None: ...

    async def list(self) -> list[ScheduleRecord]: ...

    async def mark_fired(self, name: str, tick: float, token: str) -> bool: ...

    async def acquire_lock(self, token: str, ttl: float) -> bool: ...

    async def renew_lock(self, token: str, ttl: float) -> bool: ...

    async def release_lock(self, token: str) -> bool: ...

    async def lock_holder(self) -> str | None: ...
