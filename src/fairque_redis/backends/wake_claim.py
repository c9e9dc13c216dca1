"""The round of an idle worker's wait-and-claim (ADR 38), without I/O: what goes into the
pipeline and how its two replies are read.

``claim_when_ready`` sends the pop of the wake signals and the claim script in ONE pipeline
(no MULTI). Redis runs a connection's commands in order, and a blocked BLPOP holds back the
commands queued behind it, so the claim runs server-side the moment the pop returns (a push
woke it, or its timeout passed), with no client round trip in between. Each command has its
own reply: an error in one leaves the other intact (that is why there is no MULTI, where a
blocking pop would not block either).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from typing import Any

from fairque_core.domain.errors import BackendPermissionError
from fairque_redis.backends.client_options import MIN_BLOCK_SECONDS
from fairque_redis.backends.errors import translate_errors
from fairque_redis.keys import KeySpace
from fairque_redis.scripting.loading import missing

__all__ = [
    "DUE_CHECK_SECONDS",
    "HAND_MARGIN_SECONDS",
    "POLL_SECONDS",
    "RESEND",
    "HandRound",
    "Refused",
    "claim_missed",
    "decode_handed",
    "hand_round",
    "note_polling",
    "queue_hand_round",
    "queue_round",
    "read_hand_round",
    "read_pop",
    "wall_ms",
]

log = logging.getLogger("fairque.redis")

#: Without BLPOP (an ACL that denies it) the wait for work polls the wake signal this often.
POLL_SECONDS = 0.05
#: A wait-and-claim with less than this left sends no ``next_due`` first: its claim comes
#: within this long anyway and moves every scheduled task that has come due, so such a task
#: starts at most this late (a round trip saved on each of the idle poll's short waits).
DUE_CHECK_SECONDS = 0.01
#: A waiting round (ADR 81) stays valid this long after its wait's end: a push after that
#: leaves it alone (the worker is gone, or its clock runs ahead of the server's by that much).
HAND_MARGIN_SECONDS = 2.0


class Refused:
    """A pop the server's ACL refused (the wait falls back to polling)."""

    __slots__ = ("error",)

    def __init__(self, error: BackendPermissionError) -> None:
        self.error = error


def queue_round(
    pipe: Any,
    keys: KeySpace,
    block: float,
    *,
    script: Any,
    anchors: Sequence[str],
    args: Sequence[Any],
) -> None:
    """Queue the pop (BLPOP of the wake and schedule signals for ``block`` seconds, LPOP of
    the wake signal under 1 ms) and then the claim on ``pipe`` (``script.queue``: its FCALL,
    or its EVALSHA when functions are off)."""
    if block < MIN_BLOCK_SECONDS:
        pipe.lpop(keys.wake)
    else:
        pipe.blpop([keys.wake, keys.sched], timeout=block)
    script.queue(pipe, anchors, args)


#: A pipelined claim's reply that says "send it again alone" (a round whose registration the
#: server refused, ADR 81: its claim answered as if a push had taken the round).
RESEND = object()


def claim_missed(reply: Any) -> bool:
    """True when the pipelined claim met NOSCRIPT or a missing function (it did not run: send
    it again alone, which loads it), or is :data:`RESEND`; raises the claim's other errors,
    typed."""
    if reply is RESEND or missing(reply):
        return True
    if isinstance(reply, Exception):
        with translate_errors("claim", writes=True):
            raise reply
    return False


def read_pop(popped: Any) -> Any:
    """The pop's reply; a :class:`Refused` for an ACL refusal; its other errors raised."""
    if not isinstance(popped, Exception):
        return popped
    try:
        with translate_errors("wait_for_work", writes=False):
            raise popped
    except BackendPermissionError as exc:
        return Refused(exc)


def note_polling(error: BackendPermissionError) -> bool:
    """Log that the wait falls back to polling; True (the backend's new polling flag)."""
    log.warning(
        "the server's ACL refuses a command of the wait for work (%s); this backend "
        "polls for work every %g s instead (grant +blpop and +lpop to wake at once)",
        error.command or "blpop",
        POLL_SECONDS,
    )
    return True


class HandRound:
    """A waiting round of the hand-off (ADR 81, accelerator ``wake_handoff``): the worker's
    own list for this round and the entry it registers in ``waiters`` (the claim's worker id,
    lease, count and tokens, read from the claim's arguments)."""

    __slots__ = ("entry", "keys", "own")

    def __init__(self, own: str, entry: bytes, keys: list[str]) -> None:
        self.own = own
        self.entry = entry
        self.keys = keys  # the claim's KEYS: the anchors, then waiters and own


def hand_round(
    keys: KeySpace, anchors: Sequence[str], args: Sequence[Any], block: float, now_ms: float
) -> HandRound | None:
    """The round for a claim with ``args`` (claim.lua's ARGV) waiting ``block`` seconds, or
    None where a push cannot make that claim (tenant groups, a pop under 1 ms, a value the
    entry cannot carry): then the round is today's (ADR 38)."""
    if block < MIN_BLOCK_SECONDS or len(args) < 11 or args[10] != "0":
        return None
    worker, lease_ms, count = args[7], args[8], args[9]
    tokens = args[11:]
    if len(tokens) != count or not isinstance(worker, str):
        return None
    fields = [
        b"%d" % int(now_ms + (block + HAND_MARGIN_SECONDS) * 1000),
        worker.encode(),
        b"%d" % int(lease_ms),
        b"%d" % count,
        *(t.encode() if isinstance(t, str) else t for t in tokens),
    ]
    if any(not isinstance(f, bytes) or b"\n" in f for f in fields):
        return None
    own = keys.hand(os.urandom(8).hex())
    return HandRound(own, b"\n".join(fields) + b"\n", [*anchors, keys.waiters, own])


def queue_hand_round(
    pipe: Any, keys: KeySpace, block: float, hand: HandRound, *, script: Any, args: Sequence[Any]
) -> None:
    """Queue a waiting round: its registration (HSET waiters), the BLPOP of its own list and
    the wake and schedule signals, and the claim with the round's keys (which ends it)."""
    pipe.hset(keys.waiters, hand.own, hand.entry)
    pipe.blpop([hand.own, keys.wake, keys.sched], timeout=block)
    script.queue(pipe, hand.keys, args)


def read_hand_round(hand: HandRound, wake: bytes, popped: Any, reply: Any) -> tuple[Any, Any]:
    """``(popped, claim reply)`` as a round of today's reads them: a pop of the own list reads
    as a wake, and the claim's reply is the one a push handed over (decoded) when there is one.
    The claim of a round whose registration failed answers as taken: the caller sends it again
    (see :func:`claim_missed`)."""
    handed: bytes | None = None
    if isinstance(popped, (list, tuple)) and popped and popped[0] == hand.own.encode():
        handed, popped = popped[1], [wake, b"1"]
    if isinstance(reply, list) and len(reply) == 3 and reply[1] == -1:
        blob = reply[2] if handed is None else handed
        reply = decode_handed(blob) if blob else [reply[0], 0]
    return popped, reply


def decode_handed(blob: bytes) -> list[Any]:
    """A claim's reply as the push wrote it on a round's list (``_include/fast/handoff.lua``):
    elements ``s<len>:<bytes>``, ``i<integer>:``, ``n:``; the same values as RESP gives."""
    out: list[Any] = []
    at, end = 0, len(blob)
    while at < end:
        kind = blob[at]
        colon = blob.index(b":", at + 1)
        if kind == 0x73:  # s
            start = colon + 1
            stop = start + int(blob[at + 1 : colon])
            out.append(blob[start:stop])
            at = stop
        else:
            out.append(int(blob[at + 1 : colon]) if kind == 0x69 else None)
            at = colon + 1
    return out


def wall_ms() -> float:
    """The client's wall clock in ms (a round's deadline when the scripts read server TIME)."""
    return time.time() * 1000
