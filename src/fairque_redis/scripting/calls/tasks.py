"""Calls that bring tasks in and hand them out: push (validated before anything is sent),
claim (fair pick and lease, with tokens drawn here) and cancel. No I/O."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from fairque_core.accel.builders import unchecked_claimed, unchecked_lease
from fairque_core.domain.enums import Priority
from fairque_core.domain.errors import (
    PayloadTooLargeError,
    TaskValidationError,
)
from fairque_core.domain.models import (
    Claimed,
    Lease,
    Message,
)
from fairque_core.domain.scoring import to_ms
from fairque_core.domain.validation import (
    MAX_EPOCH_SECONDS,
    MAX_ID_LENGTH,
    check_duration,
    check_expires_ms,
    id_fullmatch,
    validate_id,
)
from fairque_redis.scripting.calls.base import Call, CallsBase, contract, int_reply, to_text
from fairque_redis.scripting.calls.records import (
    UNREADABLE,
    decode_message,
    encode_meta,
    salvage_message,
    unreadable,
)

__all__ = ["TaskCalls", "plain_message"]

log = logging.getLogger("fairque.redis")

#: Pushes sent straight to push.lua after push_plain.lua referred one there (ADR 80): a queue
#: with limits refers every push, and pays the extra call once in this many.
PLAIN_PAUSE = 64


class TaskCalls(CallsBase):
    """push, claim, cancel."""

    def check_message(self, message: Message) -> None:
        """TaskValidationError (or PayloadTooLargeError) for a message the push refuses."""
        validate_id(message.task_id, "task_id")
        validate_id(message.tenant, "tenant")
        for dep in message.depends_on:
            validate_id(dep, "depends_on")
        if message.unique_key:
            validate_id(message.unique_key, "unique_key")
            check_duration(message.unique_window, "unique_window")
        if message.limit_key:  # (ADR 79: an id, so the claim's match of the meta finds it)
            validate_id(message.limit_key, "limit_key")
        check_duration(message.delay, "delay", -MAX_EPOCH_SECONDS)
        check_expires_ms(message.expires_ms)
        if not isinstance(message.priority, Priority):
            raise TaskValidationError("priority", message.priority, "must be a Priority")
        if len(message.body) > self.config.max_payload_bytes:
            raise PayloadTooLargeError(len(message.body), self.config.max_payload_bytes)

    def push(self, messages: Sequence[Message]) -> Call[list[bool]]:
        inner = self.push_detailed(messages)
        return Call(inner.script, inner.args, lambda r: [s for s, _ in inner.parse(r)])

    def push_one(self, message: Message) -> Call[list[bool]]:
        """``push([message])``: the same call and answer, built and read directly
        (``RedisBackend.push``'s path, issue 17)."""
        if not plain_message(message, self.config.max_payload_bytes):
            self.check_message(message)
        args = self.header()
        args.append(1)
        args += _fields(message)

        def parse(reply: Any) -> list[bool]:
            if type(reply) is list and len(reply) == 1:
                flag = reply[0]
                if flag in (0, 1):  # stored (1) or a known id (0)
                    return [flag == 1]
                if isinstance(flag, (bytes, str)):  # a unique duplicate: the holder's id
                    return [False]
            contract("push", False, reply)
            raise AssertionError("unreachable")  # pragma: no cover

        return Call("push", args, parse)

    #: The plain push accelerator is on (ADR 80, switch ``plain_push``; the backend sets it,
    #: and leaves it off where a write waits for a replica: a referral would wait too).
    plain_push = False
    # pushes sent to push.lua directly after push_plain.lua referred one there
    _plain_skip = 0

    def plain(self, messages: Sequence[Message]) -> Call[bool] | None:
        """The plain push accelerator's call (ADR 80) for ``messages`` when that is one
        message without dependency or unique key, not delayed, else None (``plain_push`` off
        too); a message ``push_one`` refuses raises here as there. ``push_one``'s arguments, run by
        ``push_plain.lua``; its answer: True (stored), or False when the script referred the
        push to ``push.lua`` (a condition only the server sees, nothing written): the caller
        sends it there. Named ``push``: its errors and registry entry are push's. After a
        referral the next :data:`PLAIN_PAUSE` pushes skip it (a queue with limits refers all)."""
        if not self.plain_push or len(messages) != 1:
            return None
        if self._plain_skip:
            self._plain_skip -= 1
            return None
        message = messages[0]
        if message.depends_on or message.unique_key:
            return None
        if not plain_message(message, self.config.max_payload_bytes):
            self.check_message(message)  # push_one's check (keep_result, expiry: plain here)
        fields = _fields(message)
        if fields[3] > 0:  # delayed: push.lua schedules it
            return None
        args = self.header()
        args.append(1)
        args += fields
        return Call("push", args, self._plain_reply, runs="push_plain")

    def _plain_reply(self, reply: Any) -> bool:
        """push_plain.lua's reply: {1} stored, -1 referred to push.lua (see ``plain``)."""
        if type(reply) is list and len(reply) == 1 and reply[0] == 1:
            return True
        if reply == -1:
            self._plain_skip = PLAIN_PAUSE
            return False
        contract("push", False, reply)
        raise AssertionError("unreachable")  # pragma: no cover

    def push_detailed(self, messages: Sequence[Message]) -> Call[list[tuple[bool, str]]]:
        """Per message ``(stored, holder)``: see the port's ``push_batch_detailed``."""
        limit = self.config.max_payload_bytes
        for message in messages:
            if not plain_message(message, limit):
                self.check_message(message)
        args: list[Any] = self.header()
        args.append(len(messages))
        for m in messages:
            args += _fields(m)
        ids = [m.task_id for m in messages]

        def parse(reply: Any) -> list[tuple[bool, str]]:
            if not (isinstance(reply, list) and len(reply) == len(ids)):
                contract("push", False, reply)
            out: list[tuple[bool, str]] = []
            for task_id, flag in zip(ids, reply, strict=True):
                if flag in (0, 1):  # stored (1) or a known id (0)
                    out.append((flag == 1, task_id))
                elif isinstance(flag, (bytes, str)):  # a unique duplicate: the holder's id
                    out.append((False, to_text(flag)))
                else:
                    contract("push", False, reply)
            return out

        return Call("push", args, parse)

    def claim(
        self,
        *,
        worker_id: str = "",
        assigned: Sequence[str] | None = None,
        steal: Sequence[str] | None = None,
        count: int = 1,
        lease_seconds: float | None = None,
    ) -> Call[list[Claimed]]:
        """The claim's call; its defaults are the port's (``finish_and_claim`` passes only
        the keywords it was given)."""
        for candidate in (*(assigned or ()), *(steal or ())):
            validate_id(candidate, "tenant")
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise TaskValidationError("count", count, "must be >= 1")
        if not isinstance(worker_id, str):
            raise TaskValidationError("worker_id", worker_id, "must be a str")
        lease_ms = self._lease_ms(lease_seconds)
        args: list[Any] = self.header()
        args += [worker_id, lease_ms, count]
        if not assigned and not steal:
            args.append("0")
        else:
            a, s = list(assigned or ()), list(steal or ())
            args += ["1", len(a), *a, len(s), *s]
        tokens = self._draw_tokens(count)
        args += tokens

        def parse(reply: Any) -> list[Claimed]:
            ok = isinstance(reply, list) and len(reply) >= 2
            contract("claim", ok, reply)
            now_ms, n = int(reply[0]), int(reply[1])
            contract("claim", len(reply) >= 2 + 7 * n and n <= count, reply)
            repaired = [to_text(what) for what in reply[2 + 7 * n :]]
            if repaired:
                # tenants (and keys) damaged behind the client's back that the claim skipped
                log.warning(
                    "claim repaired damaged queue structures (tenants deactivated or rebuilt, "
                    "keys skipped; run `fairque doctor`): %s",
                    ", ".join(repaired),
                )
            self._give_back(tokens[n:])
            deadline = (now_ms + lease_ms) / 1000
            out: list[Claimed] = []
            append = out.append
            for i in range(2, 2 + 7 * n, 7):
                fields = reply[i : i + 6]
                try:
                    message = decode_message(fields)  # read_message, without its layer
                except UNREADABLE as exc:
                    # leased already: handed out salvaged, for the engine to poison, so one
                    # damaged record neither fails the batch nor stalls the worker
                    message = salvage_message(fields, unreadable(fields, exc))
                recoveries = reply[i + 6]
                if type(recoveries) is not int:  # the script answers an integer
                    try:
                        recoveries = int(recoveries)
                    except UNREADABLE as exc:
                        recoveries = 0
                        problem = (
                            f"task {to_text(reply[i])} has an unreadable recovery count: {exc}"
                        )
                        message = salvage_message(fields, problem[:500])
                token = tokens[(i - 2) // 7]
                if type(token) is str:  # drawn here, worker_id checked above: no re-check
                    lease = unchecked_lease(token, deadline, worker_id)
                else:  # a token source's odd value: the validators judge it
                    lease = Lease(token=token, deadline=deadline, worker_id=worker_id)
                append(unchecked_claimed(message, lease, recoveries))
            return out

        return Call("claim", args, parse)

    def cancel(self, task_id: str, terminate: bool = False) -> Call[bool]:
        validate_id(task_id, "task_id")
        parse = int_reply("cancel")
        args = [*self.header(), task_id, "1" if terminate else "0"]
        return Call("cancel", args, lambda r: parse(r) == 1)


def plain_message(m: Message, limit: int) -> bool:
    """Whether ``check_message`` would pass ``m``, judged on plain types only (a str subclass,
    a dependency, a unique key or an expiry answers False: ``check_message`` then decides)."""
    task_id, tenant, delay, limit_key = m.task_id, m.tenant, m.delay, m.limit_key
    return (
        (type(delay) is float or type(delay) is int)
        and -MAX_EPOCH_SECONDS <= delay <= MAX_EPOCH_SECONDS  # NaN fails here too
        and type(task_id) is str
        and type(tenant) is str
        and len(task_id) <= MAX_ID_LENGTH
        and len(tenant) <= MAX_ID_LENGTH
        and id_fullmatch(task_id) is not None
        and id_fullmatch(tenant) is not None
        and not m.depends_on
        and not m.unique_key
        and m.keep_result is True
        and not m.expires_ms
        and (
            limit_key == ""
            or (
                type(limit_key) is str
                and len(limit_key) <= MAX_ID_LENGTH
                and id_fullmatch(limit_key) is not None
            )
        )
        and type(m.priority) is Priority
        and len(m.body) <= limit
    )


def _fields(m: Message) -> list[Any]:
    """One message's part of the push call's ARGV."""
    delay = m.delay
    unique_key = m.unique_key
    return [
        m.task_id,
        m.tenant,
        int(m.priority),
        0 if delay == 0 and (type(delay) is float or type(delay) is int) else to_ms(delay),
        encode_meta(m),
        m.body,
        unique_key,
        to_ms(m.unique_window) if unique_key else 0,
        len(m.depends_on),
        *m.depends_on,
    ]
