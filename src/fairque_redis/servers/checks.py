"""What fairque checks on a server before its first command (no I/O here).

A backend reads ``INFO memory`` once (it works where ``CONFIG`` is forbidden) and hands the
reply to :func:`check_memory_policy`:

* ``maxmemory-policy noeviction`` is the only policy under which a queue never loses a key: the
  server refuses writes at ``maxmemory`` (a push gets ``BackendOutOfMemoryError``) instead.
* Every other policy is refused with :class:`UnsafeServerConfigError`. The ``allkeys-*``
  policies evict live task records and the queue's own structures (tasks vanish with no error);
  the ``volatile-*`` policies evict keys that carry a TTL, which in fairque are the records of
  finished and canceled tasks (results vanish early, and a push repeated with a finished task's
  id runs it again) and the scheduler's lock (two schedulers may fire the same run).
* ``allow_eviction=True`` accepts such a server: a warning is logged instead.
* A policy that cannot be read (``INFO`` refused by the ACL, a proxy that hides it) is logged
  as a warning and the backend goes on.

See docs/adr/0026-server-checks-and-finished-records.md.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from fairque_core.domain.errors import UnsafeServerConfigError

__all__ = ["OPT_OUT", "SAFE_POLICY", "check_memory_policy", "memory_policies"]

log = logging.getLogger("fairque.redis")

#: The one ``maxmemory-policy`` under which no key of a queue can be evicted.
SAFE_POLICY = "noeviction"
#: How a user accepts an evicting server, as the error message spells it.
OPT_OUT = "allow_eviction=True (redis.allow_eviction: true in a config file)"

_WHY = {
    "allkeys": "under memory pressure the server evicts any key, so queued tasks and the "
    "queue's own bookkeeping are lost without an error",
    "volatile": "under memory pressure the server evicts keys with a TTL, so finished tasks' "
    "results vanish early (a repeated push of their id runs them again) and the scheduler "
    "lock can be lost",
}


def memory_policies(reply: Any) -> dict[str, str | None]:
    """``maxmemory-policy`` per server from an ``INFO memory`` reply: one dict for a single
    server, or ``{node: dict}`` from a cluster client (None where the field is missing)."""
    if isinstance(reply, Mapping) and "maxmemory_policy" in reply:
        return {"server": str(reply["maxmemory_policy"])}
    if isinstance(reply, Mapping) and reply and all(isinstance(v, Mapping) for v in reply.values()):
        out: dict[str, str | None] = {}
        for node, info in reply.items():
            policy = info.get("maxmemory_policy")
            out[str(node)] = None if policy is None else str(policy)
        return out
    return {"server": None}


def check_memory_policy(
    policies: Mapping[str, str | None], *, allow_eviction: bool, unreadable: str = ""
) -> None:
    """Refuse an evicting ``maxmemory-policy`` (see the module docstring).

    ``policies`` comes from :func:`memory_policies`; ``unreadable`` says why INFO could not be
    read at all (then ``policies`` is empty and a warning is logged).
    """
    if unreadable or not policies:
        log.warning(
            "fairque could not read the server's maxmemory-policy (%s); make sure it is "
            "'noeviction', or tasks can be lost silently under memory pressure",
            unreadable or "no INFO reply",
        )
        return
    for node, policy in policies.items():
        if policy is None:
            log.warning(
                "fairque could not read maxmemory-policy from INFO memory on %s; make sure it "
                "is 'noeviction', or tasks can be lost silently under memory pressure",
                node,
            )
            continue
        if policy == SAFE_POLICY:
            continue
        why = _WHY.get(policy.split("-", 1)[0], "the server may evict keys of the queue")
        if allow_eviction:
            log.warning(
                "the server's maxmemory-policy is %r (allowed by allow_eviction): %s",
                policy,
                why,
            )
            continue
        raise UnsafeServerConfigError(
            "maxmemory-policy", policy, SAFE_POLICY, why=why, opt_out=OPT_OUT
        )
