"""The doctor's view of dependencies (``depends_on``): a deferred task that nothing will ever
release, and its repair.

A deferred task waits for the parents in its ``waits:<id>`` set; the end of a parent walks the
parent's ``children:<id>`` list (deps.lua): a finish removes the parent from each child's set and
releases a child whose set is then empty, a failure or cancel cancels the children. A link
deleted behind the client's back (a ``children:`` or ``waits:`` key) while the parent ended
leaves the child deferred for ever. So a deferred task is stuck when no parent it waits for is
still pending: each has finished, or its record is gone (a push ignores a parent it cannot find:
ADR 63), or one failed or was canceled (then the child should have been canceled). Its parents
are its ``waits:`` set, or, when that key is gone, the ``depends_on`` of its stored message.

:func:`stuck` names them; :func:`release` (a step of ``fairque doctor --repair``) applies the
rules the parent's end would have applied: released (ready now, or scheduled for what is left
of its delay) when every parent finished or is gone, canceled when one did not finish.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Protocol

from fairque_redis.keys import KeySpace

__all__ = ["release", "stuck"]

#: parent states that end a wait without releasing (the child is canceled)
_DEAD = ("failed", "canceled")
#: index of ``depends_on`` in a stored message's meta list (messages.py)
_META_DEPS = 4


class Parsed(Protocol):
    """What this module reads of a parsed snapshot (``examine.Parsed``, which imports this
    module: named here by its shape)."""

    now: int
    tasks: dict[str, dict[str, bytes]]
    waits: dict[str, set[str]]

    def live(self, task_id: str) -> dict[str, bytes] | None: ...


def _int(rec: Mapping[str, bytes], name: str) -> int:
    try:
        return int(float(_text(rec.get(name, b"0"))))
    except (ValueError, OverflowError):
        return 0


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _parents(p: Parsed, task_id: str, rec: dict[str, bytes]) -> list[str]:
    """What ``task_id`` waits for: its ``waits:`` set, else the message's ``depends_on``."""
    waits = p.waits.get(task_id)
    if waits:
        return sorted(_text(w) for w in waits)
    try:
        deps = json.loads(rec.get("m", b"[]"))[_META_DEPS]
    except (ValueError, TypeError, IndexError, KeyError):
        return []
    return sorted(str(d) for d in deps) if isinstance(deps, list) else []


def _verdict(p: Parsed, task_id: str, rec: dict[str, bytes]) -> tuple[str, str] | None:
    """(``"release"`` or ``"cancel"``, why) for a stuck deferred task, None otherwise."""
    parents = _parents(p, task_id, rec)
    states = {}
    for parent in parents:
        parent_rec = p.live(parent)
        states[parent] = "gone" if parent_rec is None else _text(parent_rec["st"])
    dead = [parent for parent, state in states.items() if state in _DEAD]
    if dead:
        return "cancel", f"dependency {dead[0]} did not finish"
    if any(state not in ("finished", "gone") for state in states.values()):
        return None  # a parent still pending: its end releases the child (if linked)
    ended = ", ".join(f"{parent} {state}" for parent, state in states.items()) or "none known"
    return "release", f"every task it waits for has ended ({ended})"


def stuck(p: Parsed) -> list[str]:
    """A sentence per deferred task that nothing will release."""
    bad: list[str] = []
    for task_id in sorted(p.tasks):
        rec = p.live(task_id)
        if rec is None or _text(rec["st"]) != "deferred":
            continue
        verdict = _verdict(p, task_id, rec)
        if verdict is not None:
            what, why = verdict
            bad.append(f"task {task_id} is deferred for ever: {why} (the doctor would {what} it)")
    return bad


def release(client: Any, keys: KeySpace, p: Parsed, done: list[str]) -> bool:
    """Release or cancel each stuck deferred task (its record only: the later steps of the
    repair put it where its new state says and recount the gauges; a canceled task's
    ``canceled`` counter is its tenant's, which the queue's is recounted from). True when
    it changed anything (a canceled task may leave its own children stuck: run it again)."""
    pipe = client.pipeline(transaction=True)
    changed = False
    for task_id in sorted(p.tasks):
        rec = p.live(task_id)
        if rec is None or _text(rec["st"]) != "deferred":
            continue
        verdict = _verdict(p, task_id, rec)
        if verdict is None:
            continue
        what, why = verdict
        changed = True
        tenant = _text(rec.get("u", b""))
        pipe.delete(keys.waits(task_id))
        if what == "cancel":
            pipe.hset(keys.task(task_id), mapping={"st": "canceled", "rs": why})
            if tenant:
                pipe.hincrby(keys.tenant_stats(tenant), "canceled", 1)
            done.append(f"task {task_id} canceled: {why}")
            continue
        due, delay = _int(rec, "due"), _int(rec, "dms")
        if delay > 0 and due > p.now:
            pipe.hset(keys.task(task_id), mapping={"st": "scheduled"})
            done.append(f"task {task_id} released (scheduled): {why}")
        else:
            pipe.hset(keys.task(task_id), mapping={"st": "queued", "rd": str(p.now)})
            done.append(f"task {task_id} released (ready): {why}")
    pipe.execute()
    return changed
