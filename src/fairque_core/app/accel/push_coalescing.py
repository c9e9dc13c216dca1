"""Concurrent ``AsyncFairQueue.push`` calls share push calls: a group commit (ADR 35).

A push that finds no push call of its queue in flight sends its own task at once, as before:
a lone or sequential producer waits for nothing new. A push that arrives while one is in
flight waits in a list instead; when the call in flight returns, one task sends everything
that waited (up to :data:`MAX_GROUP` per call) with one ``push_batch``, and goes on as long
as pushes keep arriving. Each caller still gets its own answer:

- the task is checked and encoded in the caller's coroutine before it waits (a bad task raises
  there and never joins a group);
- a call refused whole for one task's sake (a tenant over ``max_queued``, an unknown
  dependency, a damaged key) is sent again one task per call, so each caller gets the outcome
  its own push would have had (``_send_each`` of the engine);
- an error of the whole call (the connection, the server) is every caller's error, as it would
  have been for each of their own calls;
- the ``pushed`` event and the handle are made in the caller's coroutine (its context
  variables), after its outcome arrived;
- a caller canceled before its group was sent is left out of it (nothing stored), one canceled
  while its group is in flight may be stored, as a canceled push call may be.

The only visible difference from one call per push: a tenant refused by ``max_queued`` has one
more refusal counted (the refused group call) than the same pushes one by one would count.
Async only: the sync engine's callers are threads, whose pushes stay one call each.

The same machinery groups ``push_intake`` calls (ADR 47): the engine's second coalescer is
made with ``intake=True``, so its calls are the intake's append (the engine's ``_send_intake``)
and its handles the intake's (``_intake_handles``); the grouping, the cancellation and the
error rules above are the same.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING

from fairque_core.app.engine.handles_async import AsyncTaskHandle
from fairque_core.domain.models import Message, Task

if TYPE_CHECKING:
    from fairque_core.app.engine.host_async import MixinHost

__all__ = ["MAX_GROUP", "PushCoalescer"]

#: The most waiting pushes one group call carries: ~1.3 ms of server time (docs/operations.md,
#: "Batch sizes"), so a group never holds the server long enough to show in a 10 ms SLOWLOG.
MAX_GROUP = 100

#: What a waiting caller's future holds: its push's outcome (stored, holder).
_Outcome = tuple[bool, str]


class PushCoalescer:
    """The group commit of one :class:`AsyncFairQueue`: of its ``push`` calls, or, with
    ``intake``, of its ``push_intake`` calls (ADR 47)."""

    def __init__(
        self, queue: MixinHost, *, max_group: int = MAX_GROUP, intake: bool = False
    ) -> None:
        self._queue = queue
        self._max_group = max_group
        self._intake = intake
        # The loop a push call is in flight on (None: none is). An AsyncFairQueue belongs to
        # one event loop, as its client's connections do.
        self._busy: asyncio.AbstractEventLoop | None = None
        self._waiting: list[tuple[Message, asyncio.Future[_Outcome]]] = []
        self._drainer: asyncio.Task[None] | None = None
        #: group calls made (a leader's own call is not one)
        self.groups = 0

    async def push(self, task: Task, message: Message) -> AsyncTaskHandle:
        """Store ``task`` (already encoded as ``message``); its handle, or its own error."""
        loop = asyncio.get_running_loop()
        busy = self._busy
        if busy is loop:  # a call is in flight: wait for the next group's
            future: asyncio.Future[_Outcome] = loop.create_future()
            self._waiting.append((message, future))
            return self._handle(task, await future)
        if busy is None:  # nothing in flight: this push is its own call, sent at once
            self._busy = loop
            try:
                return self._handle(task, await self._own_call(message))
            finally:
                if self._waiting and not loop.is_closed():  # arrived meanwhile: a task sends them
                    self._drainer = loop.create_task(self._drain(), name="fairque-push-group")
                else:
                    self._busy = None
        if busy.is_closed():  # left busy by a loop closed mid-flight: start afresh
            self._busy = None
            self._waiting.clear()
            return await self.push(task, message)
        # used from a second running loop (not supported for grouping): its own call
        return self._handle(task, await self._own_call(message))

    async def settle(self) -> None:
        """Wait for the group call in flight, if any (``AsyncFairQueue.close`` does, before it
        closes the backend: a group sent after the close stored its pushes on connections
        that nothing closed). Its outcome is its callers' to read, not raised here."""
        drainer = self._drainer
        if drainer is not None and not drainer.done():
            await asyncio.wait({drainer})

    async def _own_call(self, message: Message) -> _Outcome:
        if self._intake:
            [outcome] = await self._queue._send_intake([message])
        else:
            [outcome] = await self._queue._send([message])
        return outcome

    def _handle(self, task: Task, answer: _Outcome) -> AsyncTaskHandle:
        """The caller's handle (and ``pushed`` event), made in its own coroutine."""
        queue = self._queue
        if self._intake:
            [handle] = queue._intake_handles([task], [answer])
        else:
            [handle] = queue._handles([task], [answer])
        return handle

    async def _drain(self) -> None:
        try:
            while self._waiting:
                group = self._waiting[: self._max_group]
                del self._waiting[: self._max_group]
                messages: list[Message] = []
                futures: list[asyncio.Future[_Outcome]] = []
                for message, future in group:
                    if not future.done():  # a canceled caller is out
                        messages.append(message)
                        futures.append(future)
                if futures:
                    await self._send(messages, futures)
                    # let the callers just answered push again before the next group is cut
                    await asyncio.sleep(0)
        finally:
            for _message, future in self._waiting:  # only when this task was canceled
                future.cancel()
            self._waiting.clear()
            self._busy = None
            self._drainer = None

    async def _send(self, messages: list[Message], futures: list[asyncio.Future[_Outcome]]) -> None:
        self.groups += 1
        answers: Sequence[_Outcome | Exception]
        try:
            answers = await self._queue._send_each(messages, intake=self._intake)
        except Exception as exc:  # the whole call failed: every caller's error
            answers = [exc] * len(messages)
        except BaseException:
            for future in futures:
                future.cancel()
            raise
        for future, answer in zip(futures, answers, strict=True):
            if future.done():  # its caller was canceled meanwhile
                continue
            if isinstance(answer, Exception):
                future.set_exception(answer)
            else:
                future.set_result(answer)
