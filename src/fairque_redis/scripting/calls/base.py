"""What every script call shares: the :class:`Call` value, reply checks, the ARGV header and
the lease-token supply of one backend instance (:class:`CallsBase`). No I/O."""

from __future__ import annotations

import os
import secrets
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import attrs

from fairque_core.domain.errors import ScriptContractError
from fairque_core.domain.scoring import lease_ms, to_ms
from fairque_core.ports import Clock, TokenSource, random_token
from fairque_core.settings.config import QueueConfig
from fairque_redis.keys import KeySpace

__all__ = ["Call", "CallsBase", "contract", "int_list", "int_reply", "pairs", "to_bytes", "to_text"]

T = TypeVar("T")

_TOKEN_BYTES = 16  # as fairque_core.ports.random_token
_TOKEN_HEX = 2 * _TOKEN_BYTES
# Randomness drawn per read of the OS's CSPRNG for the default token source: 256 tokens.
# os.urandom releases the GIL, and with handler threads busy getting it back can take up to
# the switch interval (5 ms) before the claim is even sent; one read per 256 tokens makes
# that wait rare (issue 17, ADR 55).
_BLOCK_BYTES = 4096

# Forks seen by this process: a child must not hand out the tokens its parent holds buffered
# (they would be used twice), so a buffer filled before the last fork is thrown away.
_forks = [0]


def _count_fork() -> None:
    _forks[0] += 1


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_count_fork)


#: The scripts that store something of the queue's own (a task, an intake entry, a tenant's
#: weight, limits or pause): the first call of one enters the queue in the registry
#: (``fq:queues``, ``fairque queues``). A claim, cancel, purge or DLQ requeue on a queue that
#: holds nothing stores nothing, and so does not list a mistyped name.
STORING_CALLS = frozenset({"push", "push_intake", "set_weight", "set_limits", "pause"})


@attrs.frozen
class Call(Generic[T]):
    """One script call: which script, its ARGV, and how to read the reply. ``stores`` is False
    for a call of a storing script that only takes something away (a resume, limits cleared):
    such a call does not list its queue in the registry."""

    script: str
    args: list[Any]
    parse: Callable[[Any], T]
    writes: bool = True
    stores: bool = True
    #: the script that runs the call when not ``script`` (the plain push, ADR 80: push_plain.lua
    #: runs it, and its errors and registry entry are push's)
    runs: str = ""

    @property
    def registers(self) -> bool:
        """Whether this call lists its queue in the registry (before it runs, once)."""
        return self.stores and self.script in STORING_CALLS


def to_text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    if isinstance(value, str):
        return value
    raise TypeError(type(value).__name__)


def to_bytes(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8", "surrogateescape")
    raise TypeError(type(value).__name__)


def contract(script: str, ok: bool, reply: Any) -> None:
    """ScriptContractError unless ``ok``: the reply does not have the shape the script promises."""
    if not ok:
        shown = repr(reply)
        raise ScriptContractError(script, f"unexpected reply {shown[:200]}")


def counted(script: str, value: Any) -> int:
    """``value`` of a reply as an int; a ScriptContractError for anything else (a counter
    changed behind the queue's back: it was a bare ValueError, a 500 on the dashboard)."""
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ScriptContractError(
            script, f"a count reads {value!r}, not a number (a damaged key? see fairque doctor)"
        ) from None


def int_list(script: str, reply: Any) -> list[int]:
    contract(script, isinstance(reply, list), reply)
    return [counted(script, x) for x in reply]


def pairs(script: str, reply: Any) -> dict[str, int]:
    contract(script, isinstance(reply, list) and len(reply) % 2 == 0, reply)
    return {to_text(reply[i]): counted(script, reply[i + 1]) for i in range(0, len(reply), 2)}


def int_reply(script: str) -> Callable[[Any], int]:
    """A parser for a script that answers one integer."""

    def parse(reply: Any) -> int:
        contract(script, isinstance(reply, int), reply)
        return int(reply)

    return parse


class CallsBase:
    """State of one backend instance's calls: keys, queue config, clock and token supply."""

    def __init__(
        self,
        keys: KeySpace,
        config: QueueConfig,
        clock: Clock | None,
        token_source: TokenSource,
    ) -> None:
        self.keys = keys
        self.config = config
        self.clock = clock
        self.tokens = token_source
        self.anchors = keys.anchors()
        self._spare: list[str] = []
        self._lock = threading.Lock()
        # the default source's buffered randomness: hex text, used from _hex_at on, filled
        # in the fork generation _hex_fork
        self._hex = ""
        self._hex_at = 0
        self._hex_fork = _forks[0]
        # bytes, as they go out: redis-py's asyncio client encodes each str argument of
        # every call in Python (several checks per argument); the server sees the same ARGV
        self._static = [
            # the strict-tiers flag, then the events cap (ADR 71; none = events off)
            (b"1" if config.strict_tiers else b"0")
            + (b"%d" % config.events_maxlen if config.events_maxlen > 0 else b""),
            b"%d" % to_ms(config.aging_horizon_seconds),
            b"%d" % to_ms(config.result_ttl_seconds),
            b"%d" % int(config.max_recoveries),
            b"%d" % int(config.delayed_move_limit),
            b"%d" % int(config.max_payload_bytes),
        ]

    def header(self) -> list[Any]:
        """ARGV[1..7]: now (empty = server TIME) and the queue's configuration."""
        if self.clock is None:
            return [b"", *self._static]
        return [b"%d" % to_ms(self.clock()), *self._static]

    def _lease_ms(self, lease_seconds: float | None) -> int:
        return lease_ms(self.config.lease_seconds if lease_seconds is None else lease_seconds)

    def _draw_tokens(self, count: int) -> list[str]:
        if self.tokens is not random_token:
            with self._lock:
                taken = self._spare[:count]
                del self._spare[:count]
            # a given source is called per token
            taken.extend(self.tokens() for _ in range(count - len(taken)))
            return taken
        with self._lock:
            if self._hex_fork != _forks[0]:  # forked since filled: nothing of the parent's
                self._hex, self._hex_at, self._hex_fork = "", 0, _forks[0]
                self._spare.clear()
            taken = self._spare[:count]
            del self._spare[:count]
            missing = count - len(taken)
            if missing > 0:
                # the default source: cut from a block of the OS's CSPRNG read 4 KB at a time
                at, end = self._hex_at, self._hex_at + missing * _TOKEN_HEX
                text = self._hex
                if end > len(text):
                    fresh = secrets.token_hex(max(_BLOCK_BYTES, missing * _TOKEN_BYTES))
                    text = self._hex = text[at:] + fresh
                    at, end = 0, missing * _TOKEN_HEX
                self._hex_at = end
                taken.extend(text[i : i + _TOKEN_HEX] for i in range(at, end, _TOKEN_HEX))
        return taken

    def _give_back(self, unused: list[str]) -> None:
        if unused:
            with self._lock:
                if self._hex_fork == _forks[0] or self.tokens is not random_token:
                    self._spare[:0] = unused
