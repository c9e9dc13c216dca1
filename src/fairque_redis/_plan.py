"""Pure planning for the Redis backends: build each script call's ARGV and parse its reply.

Both faces (:class:`~fairque_redis.backend.RedisBackend` and
:class:`~fairque_redis.async_backend.AsyncRedisBackend`) do "plan -> one script call -> parse";
everything except the call itself lives here, with no I/O. Validation happens while planning,
so a bad id or an oversized payload is refused before any command is sent.
"""

from __future__ import annotations

import json
import math
import secrets
import threading
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

import attrs

from fairque_core.app.config import QueueConfig
from fairque_core.domain.enums import FailureType, Priority, TaskState
from fairque_core.domain.errors import (
    PayloadTooLargeError,
    ScriptContractError,
    TaskSerializationError,
    TaskValidationError,
)
from fairque_core.domain.models import (
    UNREADABLE_HEADER,
    Claimed,
    DLQEntry,
    Lease,
    Message,
    QueueSizes,
)
from fairque_core.domain.scoring import STAT_COUNTERS, stride_for, to_ms
from fairque_core.domain.validation import check_tenant_page, validate_id
from fairque_core.ports import Clock, TokenSource, random_token
from fairque_redis.keys import KeySpace

__all__ = ["Call", "Planner", "decode_message", "read_message", "salvage_message"]

T = TypeVar("T")

_QUEUE_GAUGES = ("ready", "scheduled", "leased", "dlq", "active_tenants")
_TENANT_GAUGES = ("ready", "scheduled", "leased")
_DEFAULT_CT = "application/json"
_TOKEN_BYTES = 16  # as fairque_core.memory.model.random_token
_STATES = {state.value: state for state in TaskState}
_FAILURES = {ft.value: ft for ft in FailureType}


@attrs.frozen
class Call(Generic[T]):
    """One script call: which script, its ARGV, and how to read the reply."""

    script: str
    args: list[Any]
    parse: Callable[[Any], T]
    writes: bool = True


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    if isinstance(value, str):
        return value
    raise TypeError(type(value).__name__)


def _bytes(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8", "surrogateescape")
    raise TypeError(type(value).__name__)


def encode_meta(message: Message) -> str:
    """The immutable message fields Lua stores as one opaque JSON value."""
    if (
        message.content_type == _DEFAULT_CT
        and not message.depends_on
        and not message.headers
        and not message.name
        and type(message.max_retries) is int
        and type(message.created_at) is float
        and type(message.delay) in (int, float)
        and math.isfinite(message.created_at)
        and math.isfinite(message.delay)
    ):
        # the common shape, spelled directly (json.dumps writes floats with repr too)
        return (
            f'["{_DEFAULT_CT}",{message.max_retries},{message.created_at!r},'
            f'{message.delay!r},[],{{}},""]'
        )
    return json.dumps(
        [
            message.content_type,
            message.max_retries,
            message.created_at,
            message.delay,
            list(message.depends_on),
            dict(message.headers),
            message.name,
        ],
        separators=(",", ":"),
        allow_nan=False,
    )


def decode_message(fields: Sequence[Any]) -> Message:
    """A Message from the six fields a script returns: id, user, priority, retries, meta, body."""
    task_id, user_id, priority, retry_count, meta, body = fields
    content_type, max_retries, created_at, delay, deps, headers, name = json.loads(meta)
    return Message(
        task_id=_text(task_id),
        user_id=_text(user_id),
        priority=Priority(int(priority)),
        body=_bytes(body),
        content_type=content_type,
        retry_count=int(retry_count),
        max_retries=max_retries,
        created_at=created_at,
        delay=delay,
        depends_on=tuple(deps),
        headers=headers,
        name=name,
    )


# What a stored record that was written or damaged behind the client's back can raise while
# it is read: bad JSON or UTF-8, wrong shapes and types, absurd nesting, failed validators.
_UNREADABLE = (ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError)


def read_message(fields: Sequence[Any]) -> Message:
    """:func:`decode_message`, with an unreadable record as TaskSerializationError."""
    try:
        return decode_message(fields)
    except _UNREADABLE as exc:
        raise TaskSerializationError(
            f"task {_text(fields[0])} has an unreadable record: {type(exc).__name__}: {exc}"[:500]
        ) from exc


def salvage_message(fields: Sequence[Any], problem: str) -> Message:
    """The message of a record :func:`read_message` refuses, as far as it can be read: its id,
    tenant and body bytes, default metadata, and the problem in the header
    :data:`~fairque_core.domain.models.UNREADABLE_HEADER`. A claim hands such a message out
    (the engine poisons it, as it does an undecodable body), and a DLQ listing shows it, so
    that one damaged record neither fails the call nor hides the others."""
    task_id, user_id, priority, _retries, _meta, body = fields
    try:
        prio = Priority(int(priority))
    except _UNREADABLE:
        prio = Priority.NORMAL
    user = _text(user_id) if isinstance(user_id, (bytes, str)) and user_id else ""
    try:
        validate_id(user, "user_id")
    except TaskValidationError:
        user = "unknown"
    return Message(
        task_id=_text(task_id),
        user_id=user,
        priority=prio,
        body=body if isinstance(body, bytes) else b"",
        headers={UNREADABLE_HEADER: problem[:200]},
    )


def _contract(script: str, ok: bool, reply: Any) -> None:
    if not ok:
        shown = repr(reply)
        raise ScriptContractError(script, f"unexpected reply {shown[:200]}")


def _int_list(script: str, reply: Any) -> list[int]:
    _contract(script, isinstance(reply, list), reply)
    return [int(x) for x in reply]


def _pairs(script: str, reply: Any) -> dict[str, int]:
    _contract(script, isinstance(reply, list) and len(reply) % 2 == 0, reply)
    return {_text(reply[i]): int(reply[i + 1]) for i in range(0, len(reply), 2)}


class Planner:
    """Builds the calls of one queue for one backend instance (holds its clock and tokens)."""

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
        self._static = [
            "1" if config.strict_tiers else "0",
            str(to_ms(config.aging_horizon_seconds)),
            str(to_ms(config.result_ttl_seconds)),
            str(int(config.max_recoveries)),
            str(int(config.delayed_move_limit)),
            str(int(config.max_payload_bytes)),
        ]

    # ------------------------------------------------------------------ common
    def header(self) -> list[Any]:
        """ARGV[1..7]: now (empty = server TIME) and the queue's configuration."""
        now = "" if self.clock is None else str(to_ms(self.clock()))
        return [now, *self._static]

    def _lease_ms(self, lease_seconds: float | None) -> int:
        seconds = self.config.lease_seconds if lease_seconds is None else lease_seconds
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
            raise TaskValidationError("lease_seconds", seconds, "must be a number")
        if not math.isfinite(seconds) or to_ms(seconds) <= 0:
            raise TaskValidationError("lease_seconds", lease_seconds, "must be > 0")
        return to_ms(seconds)

    def _draw_tokens(self, count: int) -> list[str]:
        with self._lock:
            taken = self._spare[:count]
            del self._spare[:count]
        missing = count - len(taken)
        if missing > 0:
            if self.tokens is random_token:
                # the default source, drawn in one read of the OS's CSPRNG for the whole batch
                block = secrets.token_hex(_TOKEN_BYTES * missing)
                step = 2 * _TOKEN_BYTES
                taken.extend(block[i : i + step] for i in range(0, len(block), step))
            else:
                taken.extend(self.tokens() for _ in range(missing))
        return taken

    def _give_back(self, unused: list[str]) -> None:
        if unused:
            with self._lock:
                self._spare[:0] = unused

    # ------------------------------------------------------------------ push
    def check_message(self, message: Message) -> None:
        validate_id(message.task_id, "task_id")
        validate_id(message.user_id, "user_id")
        for dep in message.depends_on:
            validate_id(dep, "depends_on")
        if not isinstance(message.priority, Priority):
            raise TaskValidationError("priority", message.priority, "must be a Priority")
        if len(message.body) > self.config.max_payload_bytes:
            raise PayloadTooLargeError(len(message.body), self.config.max_payload_bytes)

    def push(self, messages: Sequence[Message]) -> Call[list[bool]]:
        for message in messages:
            self.check_message(message)
        args: list[Any] = self.header()
        args.append(len(messages))
        for m in messages:
            args += [
                m.task_id,
                m.user_id,
                int(m.priority),
                to_ms(m.delay),
                encode_meta(m),
                m.body,
                len(m.depends_on),
                *m.depends_on,
            ]
        n = len(messages)

        def parse(reply: Any) -> list[bool]:
            flags = _int_list("push", reply)
            _contract("push", len(flags) == n, reply)
            return [f == 1 for f in flags]

        return Call("push", args, parse)

    # ------------------------------------------------------------------ claim
    def claim(
        self,
        *,
        worker_id: str,
        assigned: Sequence[str] | None,
        steal: Sequence[str] | None,
        count: int,
        lease_seconds: float | None,
    ) -> Call[list[Claimed]]:
        for candidate in (*(assigned or ()), *(steal or ())):
            validate_id(candidate, "user_id")
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
            _contract("claim", ok, reply)
            now_ms, n = int(reply[0]), int(reply[1])
            _contract("claim", len(reply) == 2 + 7 * n and n <= count, reply)
            self._give_back(tokens[n:])
            deadline = (now_ms + lease_ms) / 1000
            out: list[Claimed] = []
            for k in range(n):
                i = 2 + 7 * k
                fields = reply[i : i + 6]
                try:
                    message = read_message(fields)
                except TaskSerializationError as exc:
                    # leased already: handed out salvaged, for the engine to poison, so one
                    # damaged record neither fails the batch nor stalls the worker
                    message = salvage_message(fields, str(exc))
                try:
                    recoveries = int(reply[i + 6])
                except _UNREADABLE as exc:
                    recoveries = 0
                    problem = f"task {_text(reply[i])} has an unreadable recovery count: {exc}"
                    message = salvage_message(fields, problem[:500])
                lease = Lease(token=tokens[k], deadline=deadline, worker_id=worker_id)
                out.append(Claimed(message=message, lease=lease, recoveries=recoveries))
            return out

        return Call("claim", args, parse)

    # ------------------------------------------------------------------ leases
    def heartbeat(
        self, items: Sequence[tuple[str, str]], lease_seconds: float | None, *, strict: bool
    ) -> Call[list[float | None]]:
        """New lease deadlines (epoch seconds) per ``(task_id, token)``, None = lease lost."""
        args: list[Any] = [*self.header(), "1" if strict else "0", self._lease_ms(lease_seconds)]
        args.append(len(items))
        for task_id, token in items:
            args += [task_id, token]
        n = len(items)

        def parse(reply: Any) -> list[float | None]:
            deadlines = _int_list("heartbeat", reply)
            _contract("heartbeat", len(deadlines) == n, reply)
            return [ms / 1000 if ms > 0 else None for ms in deadlines]

        return Call("heartbeat", args, parse)

    def finish(
        self, items: Sequence[tuple[str, str, bytes | None]], *, strict: bool
    ) -> Call[list[bool]]:
        args: list[Any] = [*self.header(), "1" if strict else "0", len(items)]
        for task_id, token, result in items:
            args += [
                task_id,
                token,
                "0" if result is None else "1",
                b"" if result is None else result,
            ]
        n = len(items)

        def parse(reply: Any) -> list[bool]:
            flags = _int_list("finish", reply)
            _contract("finish", len(flags) == n, reply)
            return [f == 1 for f in flags]

        return Call("finish", args, parse)

    def fail(
        self,
        task_id: str,
        token: str,
        retry_delay: float | None,
        failure_type: FailureType,
        reason: str,
    ) -> Call[TaskState]:
        if retry_delay is None:
            delay = ""
        else:
            if isinstance(retry_delay, bool) or not isinstance(retry_delay, (int, float)):
                raise TaskValidationError("retry_delay", retry_delay, "must be a number or None")
            if not math.isfinite(retry_delay):
                raise TaskValidationError("retry_delay", retry_delay, "must be finite")
            delay = str(to_ms(retry_delay))
        ftype = FailureType(failure_type).value
        args = [*self.header(), task_id, token, delay, ftype, str(reason)]

        def parse(reply: Any) -> TaskState:
            state = _STATES.get(_text(reply)) if isinstance(reply, (bytes, str)) else None
            _contract("fail", state is not None, reply)
            assert state is not None
            return state

        return Call("fail", args, parse)

    def release(self, task_id: str, token: str) -> Call[None]:
        return Call("release", [*self.header(), task_id, token], lambda _reply: None)

    def requeue_expired(self, limit: int) -> Call[int]:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise TaskValidationError("limit", limit, "must be an int >= 0")
        return Call("requeue_expired", [*self.header(), limit], self._int("requeue_expired"))

    @staticmethod
    def _int(script: str) -> Callable[[Any], int]:
        def parse(reply: Any) -> int:
            _contract(script, isinstance(reply, int), reply)
            return int(reply)

        return parse

    # ------------------------------------------------------------------ cancel and reads
    def cancel(self, task_id: str) -> Call[bool]:
        validate_id(task_id, "task_id")
        parse = self._int("cancel")
        return Call("cancel", [*self.header(), task_id], lambda r: parse(r) == 1)

    def get(self, task_id: str) -> Call[list[Any] | None]:
        validate_id(task_id, "task_id")

        def parse(reply: Any) -> list[Any] | None:
            _contract("get", isinstance(reply, list) and len(reply) in (0, 8), reply)
            return reply or None

        return Call("get", [*self.header(), task_id], parse, writes=False)

    def get_message(self, task_id: str) -> Call[Message | None]:
        inner = self.get(task_id)

        def parse(reply: Any) -> Message | None:
            fields = inner.parse(reply)
            if fields is None:
                return None
            return read_message([task_id, *fields[1:6]])

        return Call(inner.script, inner.args, parse, writes=False)

    def get_state(self, task_id: str) -> Call[TaskState | None]:
        inner = self.get(task_id)

        def parse(reply: Any) -> TaskState | None:
            fields = inner.parse(reply)
            if fields is None:
                return None
            state = _STATES.get(_text(fields[0]))
            _contract("get", state is not None, reply)
            return state

        return Call(inner.script, inner.args, parse, writes=False)

    def get_result(self, task_id: str) -> Call[bytes | None]:
        inner = self.get(task_id)

        def parse(reply: Any) -> bytes | None:
            fields = inner.parse(reply)
            if fields is None or int(fields[6]) == 0:
                return None
            return _bytes(fields[7])

        return Call(inner.script, inner.args, parse, writes=False)

    def queue_sizes(self, user_ids: Sequence[str]) -> Call[dict[str, QueueSizes]]:
        users = list(user_ids)
        for user_id in users:
            validate_id(user_id, "user_id")

        def parse(reply: Any) -> dict[str, QueueSizes]:
            values = _int_list("sizes", reply)
            _contract("sizes", len(values) == 4 * len(users), reply)
            out: dict[str, QueueSizes] = {}
            for k, user_id in enumerate(users):
                c, n, s, le = values[4 * k : 4 * k + 4]
                out[user_id] = QueueSizes(critical=c, normal=n, scheduled=s, leased=le)
            return out

        return Call("sizes", [*self.header(), len(users), *users], parse, writes=False)

    def stats(self) -> Call[dict[str, int]]:
        def parse(reply: Any) -> dict[str, int]:
            got = _pairs("stats", reply)
            out = {name: got.get(name, 0) for name in STAT_COUNTERS}
            for name in _QUEUE_GAUGES:
                out[name] = got.get(name, 0)
            return out

        return Call("stats", [*self.header(), ""], parse, writes=False)

    def tenant_stats(self, user_id: str) -> Call[dict[str, int]]:
        validate_id(user_id, "user_id")

        def parse(reply: Any) -> dict[str, int]:
            got = _pairs("stats", reply)
            out = {name: got.get(name, 0) for name in STAT_COUNTERS}
            for name in _TENANT_GAUGES:
                out[name] = got.get(name, 0)
            return out

        return Call("stats", [*self.header(), user_id], parse, writes=False)

    def list_tenants(self, limit: int, offset: int) -> Call[tuple[list[str], int]]:
        page, skip = check_tenant_page(limit, offset)

        def parse(reply: Any) -> tuple[list[str], int]:
            ok = isinstance(reply, list) and bool(reply) and isinstance(reply[0], int)
            _contract("tenants", ok and len(reply) - 1 <= page, reply)
            return [_text(u) for u in reply[1:]], int(reply[0])

        return Call("tenants", [*self.header(), skip, page], parse, writes=False)

    def next_due(self) -> Call[float | None]:
        """Seconds until the first scheduled task is due (0 = due now), None if none is."""

        def parse(reply: Any) -> float | None:
            _contract("next_due", isinstance(reply, int) and reply >= -1, reply)
            return None if reply == -1 else reply / 1000

        return Call("next_due", self.header(), parse, writes=False)

    def set_tenant_weight(self, user_id: str, weight: float, tier: int) -> Call[None]:
        validate_id(user_id, "user_id")
        stride = stride_for(weight)
        if isinstance(tier, bool) or not isinstance(tier, int) or not 0 <= tier <= 1000:
            raise TaskValidationError("tier", tier, "must be an int in [0, 1000]")
        args = [*self.header(), user_id, stride, tier]
        return Call("set_weight", args, lambda _reply: None)

    # ------------------------------------------------------------------ DLQ
    def list_dlq(
        self, limit: int, offset: int, failure_type: FailureType | None
    ) -> Call[list[DLQEntry]]:
        for name, value in (("limit", limit), ("offset", offset)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise TaskValidationError(name, value, "must be an int >= 0")
        want = "" if failure_type is None else FailureType(failure_type).value

        def parse(reply: Any) -> list[DLQEntry]:
            _contract("dlq_list", isinstance(reply, list) and len(reply) % 9 == 0, reply)
            out: list[DLQEntry] = []
            for i in range(0, len(reply), 9):
                task_id, user, prio, rc, meta, body, ftype, reason, moved = reply[i : i + 9]
                fields = [task_id, user, prio, rc, meta, body]
                try:
                    original = read_message(fields)
                except TaskSerializationError as exc:
                    original = salvage_message(fields, str(exc))
                out.append(
                    DLQEntry(
                        entry_id=_text(task_id),
                        original_task=original,
                        failure_type=_FAILURES.get(_text(ftype), FailureType.FAILED),
                        reason=_text(reason),
                        moved_at=int(moved) / 1000,
                    )
                )
            return out

        args = [*self.header(), limit, offset, want]
        return Call("dlq_list", args, parse, writes=False)

    def _dlq_ids(self, script: str, entry_ids: Sequence[str] | None) -> Call[int]:
        if entry_ids is None:
            args = [*self.header(), "1"]
        else:
            ids = list(entry_ids)
            for entry_id in ids:
                validate_id(entry_id, "entry_id")
            args = [*self.header(), "0", len(ids), *ids]
        return Call(script, args, self._int(script))

    def requeue_dlq(self, entry_ids: Sequence[str] | None) -> Call[int]:
        return self._dlq_ids("dlq_requeue", entry_ids)

    def purge_dlq(self, entry_ids: Sequence[str] | None) -> Call[int]:
        return self._dlq_ids("dlq_purge", entry_ids)
