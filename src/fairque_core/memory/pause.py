"""Pause and resume in the in-memory model: a tenant or the whole queue (``pause.lua``).

* A paused tenant leaves its active set as a capped tenant does (:func:`limits.admit` keeps
  it out while the store's ``_paused`` holds it), so a claim skips it from the next pick on;
  its pushes are still accepted and its leased tasks run to their end. On resume it enters
  again like a newcomer (``FairState.activate``: its pass lifted to the tier's virtual time),
  so it gets no credit for the time it was held out, and only if no limit holds it.
* A paused queue leases nothing: a claim still moves due scheduled tasks and parked tenants
  (time keeps its course), then returns no task. Pushes are accepted.

Resuming raises the wake signal, so idle workers claim at once.
"""

from __future__ import annotations

from fairque_core.domain.validation import validate_id
from fairque_core.memory import limits
from fairque_core.memory.store import ModelStore, locked

__all__ = ["PauseOps"]


class PauseOps(ModelStore):
    """pause, resume and is_paused of the port."""

    @locked
    def pause(self, tenant: str | None = None) -> None:
        if tenant is None:
            self._queue_paused = True
            self._events.add(self._now(), "paused", u="")
            return
        validate_id(tenant, "tenant")
        if tenant not in self._paused:
            self._pauses[tenant] = self._pauses.get(tenant, 0) + 1
        self._events.add(self._now(), "paused", u=tenant)
        self._paused.add(tenant)
        if self._fair.is_active(tenant):
            self._fair.deactivate(tenant)

    @locked
    def resume(self, tenant: str | None = None) -> None:
        if tenant is None:
            self._queue_paused = False
        else:
            validate_id(tenant, "tenant")
            self._paused.discard(tenant)
            queues = self._tenants.get(tenant)
            if queues is not None and queues.has_ready():
                limits.admit(self, tenant, self._now())  # unless a limit holds it
        self._events.add(self._now(), "resumed", u=tenant or "")
        self._wake.signal()

    @locked
    def is_paused(self, tenant: str | None = None) -> bool:
        if tenant is None:
            return self._queue_paused
        validate_id(tenant, "tenant")
        return tenant in self._paused
