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
from collections.abc import Sequence
from typing import Any

from fairque_core.domain.errors import BackendPermissionError
from fairque_redis.backends.client_options import MIN_BLOCK_SECONDS
from fairque_redis.backends.errors import translate_errors
from fairque_redis.keys import KeySpace
from fairque_redis.scripting.loading import missing

__all__ = [
    "DUE_CHECK_SECONDS",
    "POLL_SECONDS",
    "Refused",
    "claim_missed",
    "note_polling",
    "queue_round",
    "read_pop",
]

log = logging.getLogger("fairque.redis")

#: Without BLPOP (an ACL that denies it) the wait for work polls the wake signal this often.
POLL_SECONDS = 0.05
#: A wait-and-claim with less than this left sends no ``next_due`` first: its claim comes
#: within this long anyway and moves every scheduled task that has come due, so such a task
#: starts at most this late (a round trip saved on each of the idle poll's short waits).
DUE_CHECK_SECONDS = 0.01


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


def claim_missed(reply: Any) -> bool:
    """True when the pipelined claim met NOSCRIPT or a missing function (it did not run: send
    it again alone, which loads it); raises the claim's other errors, typed."""
    if missing(reply):
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
