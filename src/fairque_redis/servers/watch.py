"""The server's settings, watched after connect (issue 34; ADR 26 amended). No I/O here.

``connect`` checks the ``maxmemory-policy`` once, but an operator can change it on a live
server (``CONFIG SET maxmemory-policy allkeys-lru``), and then acknowledged pushes can vanish
under memory pressure with no error. A backend therefore re-reads the policy:

* before its first call, then before the first call at least ``interval`` seconds after the
  last good check (default 10 s: ``redis.server_check_interval``);
* before the next call after any call the server refused or failed (a refusal can be the
  first sign of a change: an OOM error, a script error);
* before every call while the server is unsafe, so service resumes with the first call after
  the setting is restored.

While the server is unsafe, pushes, claims and every other writing call raise
:class:`~fairque_core.domain.errors.UnsafeServerConfigError` (a worker backs off and retries,
as for an outage); reads go on, so a dashboard can show what is queued and why it waits
(:attr:`ServerWatch.problem`). The change is logged once at ERROR, the recovery once at
WARNING.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

__all__ = ["DEFAULT_INTERVAL", "ServerWatch"]

log = logging.getLogger("fairque.redis")

#: Seconds between two checks of a server found safe.
DEFAULT_INTERVAL = 10.0


class ServerWatch:
    """When a backend must check its server again, and what it found last time. One per
    client: the partitions of a partitioned queue share their first partition's."""

    def __init__(
        self, interval: float = DEFAULT_INTERVAL, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if not interval > 0:
            raise ValueError(f"server_check_interval must be > 0 seconds, not {interval!r}")
        self.interval = float(interval)
        self._clock = clock
        self._checked_at: float | None = None
        self._ever_safe = False
        #: Why the server is unsafe now (the refusal's message), or None.
        self.problem: str | None = None

    @property
    def ever_safe(self) -> bool:
        """Whether a check ever found the server safe: until then every call is refused, reads
        included (a backend built without connect checks before its first command)."""
        return self._ever_safe

    def due(self) -> bool:
        """Whether the next call must check the server first."""
        if self._checked_at is None or self.problem is not None:
            return True
        return self._clock() - self._checked_at >= self.interval

    def passed(self, queue: str) -> None:
        """The check found the server safe (or could not read it: that only warns)."""
        if self.problem is not None:
            log.warning(
                "queue %s: the server's settings are safe again; pushes and claims resume",
                queue,
            )
        self.problem = None
        self._ever_safe = True
        self._checked_at = self._clock()

    def failed(self, queue: str, reason: str) -> None:
        """The check refused the server: every writing call is refused until it passes."""
        if self.problem is None and self._ever_safe:
            log.error(
                "queue %s: THE SERVER'S SETTINGS CHANGED SINCE CONNECT AND ARE NOT SAFE; "
                "refusing pushes and claims until they are restored: %s",
                queue,
                reason,
            )
        self.problem = reason
        self._checked_at = self._clock()

    def forget(self) -> None:
        """A call was refused or failed: check again before the next one."""
        self._checked_at = None

    def trust(self) -> None:
        """Never check (tests and callers that checked the server themselves)."""
        self._ever_safe = True
        self._checked_at = float("inf")
