"""AsyncIntakeMixin: the intake (ADR 47), a push acknowledged once the task is stored.

Part of :class:`~fairque_core.app.engine.queue_async.AsyncFairQueue`, kept apart to keep modules
short. ``push_intake`` makes the message exactly as ``push`` does (plugin headers, tracing,
the codec, the size limit; every check before any I/O), refuses a task that is not plain
(:func:`~fairque_core.domain.intake.check_intake_message`: a delay, dependencies or a unique
key need their checks answered at push time) and hands it to the backend's optional
``push_intake`` (the port's ``AsyncTakesIntake``): one cheap append. The queue checks, numbers
and places it later, when a claim (or :meth:`AsyncIntakeMixin.ingest`) ingests it: see
docs/delivery.md, "The intake: when a push is acknowledged".

On a backend without the capability ``push_intake`` is ``push_batch`` (its checks answered at
once, the handle's ``duplicate`` true when the id was known), ``ingest`` reports nothing done
and ``intake_size`` is 0, so code written for the intake runs anywhere.
"""

# intake.py (IntakeMixin) is generated from this file  # unasync: remove
# by tools/gen_sync.py: edit here, then run it.  # unasync: remove

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from fairque_core.app.engine.arguments import check_tasks
from fairque_core.app.engine.handles_async import AsyncTaskHandle
from fairque_core.app.engine.messages import to_message
from fairque_core.domain.intake import IngestReport, check_ingest_limit, check_intake_message
from fairque_core.domain.models import Message, Task

if TYPE_CHECKING:  # the engine's members used here (MixinHost), a base for mypy only
    from fairque_core.app.engine.host_async import MixinHost
else:
    MixinHost = object

__all__ = ["AsyncIntakeMixin"]


class AsyncIntakeMixin(MixinHost):
    """push_intake, push_intake_batch, ingest and intake_size (see the engine)."""

    if TYPE_CHECKING:  # the result mixin's, which the handles made here wait with

        async def wait_result(
            self,
            task_id: str,
            timeout: float | None = None,
            *,
            intake: bool = False,
            tenant: str | None = None,
        ) -> Any: ...

    @property
    def takes_intake(self) -> bool:
        """Whether the backend has the intake (``push_intake``, ADR 47); without it
        :meth:`push_intake` is a push with its checks answered at once."""
        return hasattr(self._backend, "push_intake")

    async def push_intake(self, task: Task) -> AsyncTaskHandle:
        """Store ``task`` in the queue's intake; its handle once it is stored there (ADR 47).

        Only a plain task: ready now, without ``depends_on`` or ``unique_key``
        (TaskValidationError otherwise, before any I/O, as for every other bad input). The
        acknowledgement means the task is stored durably (per the queue's durability mode);
        the queue checks and places it at the next claim (or :meth:`ingest`), in intake order:
        until then ``get_state`` knows nothing of it, ``cancel`` cannot reach it and no size
        counts it. A known id or a tenant at ``max_queued`` shows then, not here: the handle's
        ``duplicate`` is False; a refused task goes to the dead-letter queue as REJECTED, with
        the reason, and the handle's ``get`` raises TaskFailedError for it. On a backend
        without the intake this is a push (its checks answered at once)."""
        message = self._intake_message(task)
        # concurrent calls share intake calls, as pushes do (ADR 35)  # unasync: remove
        if self.coalesce_pushes:  # unasync: remove
            return await self._intake_coalescer.push(task, message)  # unasync: remove
        append = getattr(self._backend, "push_intake", None)
        if append is None:  # a push, its checks answered at once
            [handle] = self._handles([task], await self._send([message]))
            return handle
        await append([message])
        if self._listening():
            self._event("pushed", task, duplicate=False, intake=True)
        return AsyncTaskHandle(message.task_id, self, intake=True, tenant=message.tenant)

    async def push_intake_batch(self, tasks: Sequence[Task]) -> list[AsyncTaskHandle]:
        """:meth:`push_intake` of many tasks in one backend call, in the order given (which
        is their order in the intake); handles in that order. Every task is checked before
        anything is sent: one bad task stores none."""
        tasks = check_tasks(tasks)
        if not tasks:
            return []
        now = time.time()
        messages = [self._intake_message(task, now) for task in tasks]
        append = getattr(self._backend, "push_intake", None)
        if append is None:  # a push, its checks answered at once
            return self._handles(tasks, await self._send(messages))
        await append(messages)
        if self._listening():
            for task in tasks:
                self._event("pushed", task, duplicate=False, intake=True)
        return [
            AsyncTaskHandle(message.task_id, self, intake=True, tenant=message.tenant)
            for message in messages
        ]

    async def ingest(self, limit: int = 1000) -> IngestReport:
        """Move up to ``limit`` (>= 1) tasks from the intake into the queue now, as the start
        of every claim does (up to ``INTAKE_CLAIM_LIMIT`` there), and report what became of
        them. Workers need not call it; it is for a queue nobody claims from yet, or to
        read the outcome. An empty report on a backend without the intake."""
        check_ingest_limit(limit)
        call = getattr(self._backend, "ingest", None)
        if call is None:
            return IngestReport()
        report: IngestReport = await call(limit)
        return report

    async def intake_size(self) -> int:
        """Tasks waiting in the intake (every partition); 0 on a backend without it."""
        call = getattr(self._backend, "intake_size", None)
        return 0 if call is None else int(await call())

    # ------------------------------------------------------------------ the engine's path
    def _intake_message(self, task: Task, now: float | None = None) -> Message:
        """``task`` made into a message as ``push`` makes it, then checked as plain."""
        message = to_message(task, self._plugins, self._config, now, self._build)
        if message.delay > 0 or message.depends_on or message.unique_key:  # not plain
            check_intake_message(message)  # which says why
        return message

    async def _send_intake(self, messages: Sequence[Message]) -> list[tuple[bool, str]]:
        """One intake call: the backend's append (every message stored there, its own id
        its holder), or, without the capability, one push call (``_send``)."""
        append = getattr(self._backend, "push_intake", None)
        if append is None:
            return await self._send(messages)
        await append(messages)
        return [(True, message.task_id) for message in messages]

    def _intake_handles(
        self, tasks: Sequence[Task], outcomes: Sequence[tuple[bool, str]]
    ) -> list[AsyncTaskHandle]:
        """The handles (and ``pushed`` events, marked ``intake``) of an intake call's outcomes
        (the coalescer's; ``push_intake`` and ``push_intake_batch`` make the same directly)."""
        return self._handles(tasks, outcomes, intake=self.takes_intake)
