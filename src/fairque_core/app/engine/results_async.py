"""AsyncResultMixin: results you can wait for, XCom reads, unique pushes and workflows (ADR 27).

Part of :class:`~fairque_core.app.engine.queue_async.AsyncFairQueue`, kept apart to keep modules
short. ``push`` answers with :class:`~fairque_core.app.engine.handles_async.AsyncTaskHandle`
values built here; a handle's ``get`` is :meth:`AsyncResultMixin.wait_result`, which blocks on
the backend's end notification (``wait_done``), never polls.
"""

# results.py (ResultMixin) is generated from this file  # unasync: remove
# by tools/gen_sync.py: edit here, then run it.  # unasync: remove

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from fairque_core.app.engine import support as common
from fairque_core.app.engine.arguments import check_xcom_items
from fairque_core.app.engine.handles_async import AsyncTaskHandle
from fairque_core.app.engine.messages import decode_result, encode_progress, to_message
from fairque_core.app.engine.result_waits import async_wait_piece
from fairque_core.app.engine.workflows import Chain, Chord, Group, check_workflow
from fairque_core.domain.deps import check_batch
from fairque_core.domain.enums import TaskState
from fairque_core.domain.errors import (
    DamagedKeyError,
    FairQueueError,
    LeaseLostError,
    ResultTimeoutError,
    TaskCanceledError,
    TaskFailedError,
    TaskIdConflictError,
    TaskNotFoundError,
    TaskSerializationError,
    TaskValidationError,
    XComTooLargeError,
)
from fairque_core.domain.limits import TenantQueueFullError
from fairque_core.domain.models import Message, Task
from fairque_core.domain.outcomes import RETURN_VALUE, TaskOutcome, decode_error_record
from fairque_core.domain.validation import check_wait_timeout, validate_id

if TYPE_CHECKING:  # the engine's members used here (MixinHost), a base for mypy only
    from fairque_core.app.engine.host_async import MixinHost
else:
    MixinHost = object

__all__ = ["PUSH_REFUSALS", "AsyncResultMixin", "settle"]

# A wait without a timeout blocks in pieces this long, reading the state between them.
_WAIT_PIECE_SECONDS = 30.0
# A task still in the intake (ADR 47) has no end to wait on: looked for at these intervals.
_INTAKE_FIRST_LOOK = 0.01
_INTAKE_LAST_LOOK = 0.5
# An XCom value is stored as "<content type>\n<body>" (the queue's codec made the body).
_XCOM_SEPARATOR = b"\n"
_XCOM_FIELD = "value"

#: Errors with which a push call refuses the whole call for one message's sake, before its
#: first write (so sending the messages again one by one is safe).
PUSH_REFUSALS: tuple[type[Exception], ...] = (
    TaskValidationError,
    TaskSerializationError,
    TenantQueueFullError,
    DamagedKeyError,
)


def settle(task_id: str, outcome: TaskOutcome) -> Any:
    """The value of an ended task, or the exception that stands for its end."""
    if outcome.state is TaskState.FINISHED:
        return decode_result(outcome.result)
    if outcome.state is TaskState.CANCELED:
        raise TaskCanceledError(task_id, outcome.reason)
    error = decode_error_record(outcome.error)
    raise TaskFailedError(
        task_id,
        error_type=error["type"],
        error_message=error["message"],
        traceback=error["traceback"],
        failure_type=outcome.failure_type or "failed",
        reason=outcome.reason,
    )


class AsyncResultMixin(MixinHost):
    """Handles, waiting for results, XCom values and workflow pushes (see the engine)."""

    # ------------------------------------------------------------------ storing
    async def _store(
        self, tasks: Sequence[Task], messages: Sequence[Message]
    ) -> list[AsyncTaskHandle]:
        """Push ``messages`` (made from ``tasks``) in one call; a handle per task, in order."""
        return self._handles(tasks, await self._send(messages))

    async def _send(self, messages: Sequence[Message]) -> list[tuple[bool, str]]:
        """One push call: per message ``(stored, holder)`` (the port's ``push_batch_detailed``)."""
        detailed = getattr(self._backend, "push_batch_detailed", None)
        if detailed is not None:
            return list(await detailed(messages))
        # a third-party backend without it: a known id is its own holder
        flags = await self._backend.push_batch(messages)
        return [(bool(f), m.task_id) for f, m in zip(flags, messages, strict=True)]

    async def _send_each(
        self, messages: Sequence[Message], *, intake: bool = False
    ) -> list[tuple[bool, str] | Exception]:
        """Like :meth:`_send` (``intake``: like ``_send_intake``, the intake's append, ADR 47),
        but every message gets its own outcome (ADR 35).

        One call first. A push call is refused whole, before its first write, when one message
        cannot be stored (PUSH_REFUSALS: a tenant over ``max_queued``, an unknown dependency,
        a damaged key); then each message is sent again on its own, so that one message's
        refusal is its exception in the list and the others are stored as single pushes would
        store them. Any other error of the first call (the connection, the server) is raised:
        it is every message's.
        """
        call = self._send_intake if intake else self._send
        try:
            return list(await call(messages))
        except PUSH_REFUSALS as exc:
            if len(messages) == 1:
                return [exc]
        out: list[tuple[bool, str] | Exception] = []
        for message in messages:
            try:
                out.extend(await call([message]))
            except Exception as exc:  # the message's own outcome
                out.append(exc)
        return out

    def _handles(
        self, tasks: Sequence[Task], outcomes: Sequence[tuple[bool, str]], *, intake: bool = False
    ) -> list[AsyncTaskHandle]:
        """The handles of stored pushes (and their ``pushed`` events, when a plugin listens);
        ``intake``: stored in the intake (ADR 47), the event says so (``intake=True``)."""
        handles: list[AsyncTaskHandle] = []
        listening = self._listening()  # no hook dispatch per task when no plugin listens
        info = {"intake": True} if intake else {}
        for task, (stored, holder) in zip(tasks, outcomes, strict=True):
            if listening:
                self._event("pushed", task, duplicate=not stored, **info)
            handles.append(
                AsyncTaskHandle(
                    holder, self, duplicate=not stored, intake=intake, tenant=task.tenant
                )
            )
        return handles

    def result(self, task_id: str) -> AsyncTaskHandle:
        """A handle on the task ``task_id`` (pushed here or elsewhere): ``get`` waits for it."""
        validate_id(task_id, "task_id")
        return AsyncTaskHandle(task_id, self)

    async def wait_result(
        self,
        task_id: str,
        timeout: float | None = None,
        *,
        intake: bool = False,
        tenant: str | None = None,
    ) -> Any:
        """``TaskHandle.get``: the result once the task ended, or its end as an exception.

        ``intake``: the task was pushed through the intake (ADR 47), so the queue may not know
        it yet: until it is ingested it is looked for again at growing intervals (from
        10 ms to 0.5 s), not refused as unknown. ``tenant``: the tenant the handle's push was
        for; a task of another tenant under the id (an intake entry whose id was taken, set
        aside at ingest) raises TaskIdConflictError rather than give its result (ADR 60). On a
        backend that routes by tenant (a partitioned queue's ``tenant_backend``), the task is
        read where that tenant's tasks live."""
        validate_id(task_id, "task_id")
        limit = None if timeout is None else check_wait_timeout(timeout)
        deadline = None if limit is None else time.monotonic() + limit
        look_again = _INTAKE_FIRST_LOOK
        backend = self._backend
        route = getattr(backend, "tenant_backend", None) if tenant is not None else None
        if route is not None:
            backend = await route(tenant)
        while True:
            outcome = await backend.get_outcome(task_id)
            if outcome is not None and tenant is not None and outcome.tenant not in ("", tenant):
                raise TaskIdConflictError(task_id)
            if outcome is not None and outcome.ended:
                return settle(task_id, outcome)
            if outcome is None and not intake:
                raise TaskNotFoundError(task_id)
            left = _WAIT_PIECE_SECONDS if deadline is None else deadline - time.monotonic()
            if left <= 0:
                raise ResultTimeoutError(task_id, limit if limit is not None else 0.0)
            if outcome is None:  # still in the intake
                await asyncio.sleep(min(left, look_again))
                look_again = min(look_again * 2, _INTAKE_LAST_LOOK)
                continue
            await async_wait_piece(backend, task_id, min(left, _WAIT_PIECE_SECONDS))

    # ------------------------------------------------------------------ progress
    async def set_progress(self, task: Task, value: object) -> None:
        """Report how far the running ``task`` got: ``value`` (JSON, at most
        :data:`~fairque_core.app.engine.messages.MAX_PROGRESS_BYTES` encoded) replaces its
        progress on its record (``get_task``, ``handle.progress()``, the CLI and the
        dashboard show it) and is told as a ``progress`` event (``queue.events()``), in one
        step. A value JSON cannot hold, or too large, is a TaskSerializationError; a task
        whose lease is gone a LeaseLostError (nothing changed). Handlers call it through
        ``current_task_context().set_progress(value)``."""
        body = encode_progress(task.task_id, value)
        lease = task.lease
        if lease is None:
            raise LeaseLostError(task.task_id)
        if not await self._backend.set_progress(task.tenant, task.task_id, lease.token, body):
            raise LeaseLostError(task.task_id)

    # ------------------------------------------------------------------ XCom
    def encode_xcom(self, task: Task, key: str, value: object) -> bytes:
        """``value`` encoded by the queue's codec for XCom ``key`` of ``task``; typed errors
        name the key (TaskSerializationError, XComTooLargeError over ``max_payload_bytes``)."""
        stub = Task(task_id=task.task_id, tenant=task.tenant, payload={_XCOM_FIELD: value})
        try:
            body, content_type = self._plugins.encode(stub)
            data = content_type.encode() + _XCOM_SEPARATOR + bytes(body)
        except Exception as exc:
            raise TaskSerializationError(
                f"xcom[{key}] of task {task.task_id} cannot be encoded: {exc}"
            ) from exc
        if len(data) > self._config.max_payload_bytes:
            raise XComTooLargeError(key, len(data), self._config.max_payload_bytes)
        return data

    def _decode_xcom(self, key: str, raw: bytes | None) -> Any:
        if raw is None:
            return None
        if key == RETURN_VALUE:
            return decode_result(raw)
        content_type, _, body = raw.partition(_XCOM_SEPARATOR)
        try:
            return self._plugins.decode(content_type.decode(), body).get(_XCOM_FIELD)
        except (FairQueueError, UnicodeDecodeError) as exc:
            raise TaskSerializationError(f"xcom[{key}] cannot be decoded: {exc}") from exc

    async def xcom_get_values(self, tenant: str, items: Sequence[tuple[str, str]]) -> list[Any]:
        """Decoded XCom values ``(task_id, key)`` of ``tenant``'s tasks, None when absent."""
        tenant, pairs = check_xcom_items(tenant, items)
        if not pairs:
            return []
        raw = await self._backend.xcom_get(tenant, pairs)
        return [
            self._decode_xcom(key, value) for (_tid, key), value in zip(pairs, raw, strict=True)
        ]

    async def xcom_pull(self, task_id: str, key: str = RETURN_VALUE, *, tenant: str) -> Any:
        """The XCom value ``key`` (default the result) of ``tenant``'s task ``task_id``, or
        None (absent, expired, or the task is another tenant's)."""
        [value] = await self.xcom_get_values(tenant, [(task_id, key)])
        return value

    # ------------------------------------------------------------------ workflows
    async def push_group(self, members: Group) -> list[AsyncTaskHandle]:
        """Every task of the group in one round trip; a handle per task."""
        return await self._push_all(check_workflow(members, Group))

    async def push_chord(self, workflow: Chord) -> AsyncTaskHandle:
        """The members and the callback in one round trip; the callback's handle."""
        handles = await self._push_all(check_workflow(workflow, Chord))
        return handles[-1]

    async def push_chain(self, workflow: Chain) -> AsyncTaskHandle:
        """Every step in one round trip; the last step's handle (its result is the chain's)."""
        handles = await self._push_all(check_workflow(workflow, Chain))
        return handles[-1]

    async def _push_all(self, tasks: Sequence[Task]) -> list[AsyncTaskHandle]:
        check_batch(list(tasks))
        ordered = common.ordered_for_push(list(tasks))
        now = time.time()
        messages = [to_message(t, self._plugins, self._config, now, self._build) for t in ordered]
        handles = await self._store(ordered, messages)
        return common.in_given_order(tasks, ordered, handles)
