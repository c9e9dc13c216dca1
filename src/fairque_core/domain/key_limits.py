"""Limits by key: the executable specification (issue 32 item 4, ADR 79).

A task may carry a *limit key* (``Task.create(..., limit_key=)``; a task made by the ``@task``
decorator carries its name). ``set_key_limits(key, max_running=, rate=, burst=,
per_tenant=)`` caps the tasks of that key:

* ``max_running``: at most this many leases of the key at once;
* ``rate`` (starts per second) with ``burst``: the GCRA of :mod:`fairque_core.domain.limits`;
* ``per_tenant`` (default True): each tenant has its own cap and rate for the key (its
  *scope* is ``<key>|<tenant>``); False: one cap and rate for the key across every tenant
  (scope ``<key>|``). ``|`` is outside the id grammar, so a scope names one pair only.

The check runs in the claim, on the task the fair pick chose, after its expiry check: a task
whose scope is at its cap, or whose rate has no token yet, is *parked* (taken out of its
tenant's queue into the scope's parked list, FIFO), its tenant's turn given back (the pass
refund of a claim that started nothing) and the claim picks again. A parked task stays
``queued``. One parked task of a scope goes back to the head of its tenant's queue (its old
place) when a lease of the scope ends, when a start left the scope room (after the claim), and
when the scope's rate hold runs out (the scope waits in the queue's ``parked`` set under
``|k|<scope>``, as a rate-held tenant does). Changing or clearing a key's limits puts every
parked task of the key back.

This module holds the values, their checks and the encodings; the model
(:mod:`fairque_core.memory.key_limits`) and the Lua (``lua/_include/keylimits.lua``) apply
them step for step.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from fairque_core.domain.errors import TaskTypeError
from fairque_core.domain.limits import check_changes
from fairque_core.domain.validation import validate_id

__all__ = [
    "KEY_PARK_PREFIX",
    "KeyLimitStatus",
    "KeyLimits",
    "check_key_limits",
    "decode_key_limits",
    "encode_key_limits",
    "key_scope",
    "scope_key",
    "scope_tenant",
]

#: The parked-set member of a scope held by its rate: this prefix, then the scope.
KEY_PARK_PREFIX = "|k|"


@attrs.frozen
class KeyLimits:
    """The limits of one limit key (None: no such limit)."""

    max_running: int | None = None
    rate: float | None = None
    burst: int | None = None
    per_tenant: bool = True

    def as_dict(self) -> dict[str, object]:
        return {
            "max_running": self.max_running,
            "rate": self.rate,
            "burst": self.burst,
            "per_tenant": self.per_tenant,
        }


@attrs.frozen
class KeyLimitStatus:
    """What ``get_key_limits`` reports: the key's limits (None: none set) and, per tenant
    (``""`` for a global key's one scope), the leases counted and the tasks parked."""

    key: str
    limits: KeyLimits | None
    running: Mapping[str, int] = attrs.field(factory=dict)
    parked: Mapping[str, int] = attrs.field(factory=dict)


def check_key_limits(
    key: object,
    max_running: object = None,
    rate: object = None,
    burst: object = None,
    per_tenant: object = True,
) -> KeyLimits | None:
    """Check a ``set_key_limits`` call: the key an id, the numbers as tenant limits take them
    (:func:`~fairque_core.domain.limits.check_changes`), ``per_tenant`` a bool. None when
    every number is None (the key's limits are cleared)."""
    validate_id(key, "key")
    if type(per_tenant) is not bool:
        raise TaskTypeError("per_tenant", per_tenant, "must be True or False")
    given = {"max_running": max_running, "rate": rate, "burst": burst}
    checked = check_changes({k: v for k, v in given.items() if v is not None})
    if not checked:
        return None
    mr, r, b = checked.get("max_running"), checked.get("rate"), checked.get("burst")
    return KeyLimits(
        max_running=None if mr is None else int(mr),
        rate=r,
        burst=None if b is None else int(b),
        per_tenant=per_tenant,
    )


def encode_key_limits(limits: KeyLimits) -> str:
    """The stored form ``max_running,rate,burst,g``: empty parts for none, ``g`` 1 for a global
    key, empty for per tenant (the Lua reads it with ``FQ_KEYLIM.decode``)."""
    parts = [
        "" if limits.max_running is None else str(limits.max_running),
        "" if limits.rate is None else repr(float(limits.rate)),
        "" if limits.burst is None else str(limits.burst),
        "" if limits.per_tenant else "1",
    ]
    return ",".join(parts)


def decode_key_limits(text: str) -> KeyLimits | None:
    """The inverse of :func:`encode_key_limits` (an empty text: None)."""
    if not text:
        return None
    mr, rate, burst, glob = [*text.split(","), "", "", "", ""][:4]
    return KeyLimits(
        max_running=int(mr) if mr else None,
        rate=float(rate) if rate else None,
        burst=int(burst) if burst else None,
        per_tenant=glob != "1",
    )


def key_scope(key: str, tenant: str, per_tenant: bool) -> str:
    """The scope a task of ``tenant`` with limit key ``key`` counts in."""
    return f"{key}|{tenant}" if per_tenant else f"{key}|"


def scope_key(scope: str) -> str:
    """The limit key of ``scope``."""
    return scope.partition("|")[0]


def scope_tenant(scope: str) -> str:
    """The tenant of ``scope`` (``""`` for a global key's scope)."""
    return scope.partition("|")[2]
