"""Ports: what the engine needs from a queue backend, a clock and an id source.

Backends satisfy these structurally (no inheritance). The contract suite in
``tests/contract`` is what proves a backend conforms; the semantics every backend must share
are written down here (the shared rules below) and on the port's methods, and
:class:`fairque_core.memory.model.InMemoryBackend` is their executable form.

The backend port is written once, async, in ``ports/backend_async.py``
(:class:`AsyncQueueBackend`, :class:`AsyncClaimsWhenReady`, :class:`AsyncFinishesAndClaims`,
with every method's documentation); ``ports/backend.py`` (:class:`QueueBackend`,
:class:`ClaimsWhenReady`, :class:`FinishesAndClaims`) is generated from it by
``tools/gen_sync.py`` (ADR 21). Import all of them from here.

Shared rules:

* Times inside a backend are integer milliseconds from the backend's clock (server ``TIME``
  for Redis, or an injected :class:`Clock`); :func:`fairque_core.domain.scoring.to_ms` converts.
* A tenant is *active* while it has ready work (critical list or scored set non-empty).
  Claims pick the active tenant with the lowest virtual time ("pass"), ties by tenant id
  (byte order). Serving a tenant sets the queue's virtual time to its pass and then adds the
  tenant's stride (``scoring.stride_for(weight)``). A tenant that becomes active starts at
  ``max(its stored pass, queue virtual time)``.
* In strict-tier mode the highest tier with an active tenant is served first; weights order
  tenants inside a tier. Otherwise tiers only carry weights. These fairness rules are code in
  :mod:`fairque_core.domain.fairness`.
* Inside a tenant, the critical FIFO comes first, then the lowest static score
  (``scoring.static_score``), ties by the per-queue push sequence number.
* Operations that need a lease (heartbeat, finish, fail, release) raise ``LeaseLostError``
  and change nothing when the token is not the live one.
"""

from __future__ import annotations

import secrets
from typing import Protocol, runtime_checkable

from fairque_core.ports.backend import (
    ClaimsWhenReady,
    FinishesAndClaims,
    QueueBackend,
    TakesIntake,
)
from fairque_core.ports.backend_async import (
    AsyncClaimsWhenReady,
    AsyncFinishesAndClaims,
    AsyncQueueBackend,
    AsyncTakesIntake,
)
from fairque_core.ports.values import FinishItem

__all__ = [
    "AsyncClaimsWhenReady",
    "AsyncFinishesAndClaims",
    "AsyncQueueBackend",
    "AsyncTakesIntake",
    "ClaimsWhenReady",
    "Clock",
    "FinishItem",
    "FinishesAndClaims",
    "QueueBackend",
    "TakesIntake",
    "TokenSource",
    "WatchesServer",
    "random_token",
]


class Clock(Protocol):
    """A source of the current time in epoch seconds."""

    def __call__(self) -> float: ...


class TokenSource(Protocol):
    """Makes lease tokens (random by default; deterministic in tests)."""

    def __call__(self) -> str: ...


@runtime_checkable
class WatchesServer(Protocol):
    """A backend that watches its server's settings after connect (issue 34): why the server
    is unsafe now (writes are refused until it is fixed), or None."""

    @property
    def server_problem(self) -> str | None: ...


def random_token() -> str:
    """The default :class:`TokenSource`: a 128-bit random lease token (32 hex digits)."""
    return secrets.token_hex(16)
