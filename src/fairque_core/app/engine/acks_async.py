"""AsyncAckMixin: acknowledging claimed tasks: ``finish``, ``finish_batch``, and
``finish_and_claim``, a worker's acknowledgements and its next claim in one backend call
(ADR 40).

Part of :class:`~fairque_core.app.engine.queue_async.AsyncFairQueue`, kept apart to keep modules
short; the claim side (decoding, poison, the ``started`` events) is the engine's.
"""

# acks.py (AckMixin) is generated from this file  # unasync: remove
# by tools/gen_sync.py: edit here, then run it.  # unasync: remove

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from fairque_core.app import context
from fairque_core.app.engine.arguments import (
    check_claim,
    check_finish_items,
    check_run_seconds,
    check_run_seconds_list,
    lease_of,
)
from fairque_core.app.engine.messages import encode_result
from fairque_core.domain.errors import LeaseLostError, NotReplicatedError
from fairque_core.domain.models import Task
from fairque_core.domain.validation import check_xcom_key
from fairque_core.ports import FinishItem

if TYPE_CHECKING:  # the engine's members used here (MixinHost), a base for mypy only
    from fairque_core.app.engine.host_async import MixinHost
else:
    MixinHost = object

__all__ = ["AsyncAckMixin"]


def _pushed(task: Task) -> dict[str, bytes]:
    """The XCom values ``task``'s handler pushed, their keys checked again (the context
    checks them as they enter): a key no server can store is a TaskValidationError before
    any write, for this task alone in a batch (the worker finishes the others, ADR 40)."""
    xcom = context.pushed(task)
    for key in xcom:
        check_xcom_key(key, "xcom key")
    return xcom


class AsyncAckMixin(MixinHost):
    """finish, finish_batch and finish_and_claim (see the engine)."""

    async def finish(
        self, task: Task, result: object = None, *, run_seconds: float | None = None
    ) -> None:
        """Mark a claimed task FINISHED with ``result`` (stored as JSON, at most
        ``max_payload_bytes``: a longer one is a TaskSerializationError and changes nothing).

        The task then keeps its state and result for ``result_ttl_seconds``; its payload is
        dropped (``get_task`` returns None for it). A task whose ``keep_result`` is False
        keeps nothing unless something needs its record (ADR 78).
        """
        lease = lease_of(task)
        run_seconds = check_run_seconds(run_seconds)
        body = encode_result(task.task_id, result, self._config.max_payload_bytes)
        xcom = _pushed(task)  # the handler's XCom values, stored in the same step
        try:
            if task.keep_result is False:  # the record goes unless needed (ADR 78)
                await self._backend.finish(task.task_id, lease.token, body, xcom, keep=False)
            elif xcom:
                await self._backend.finish(task.task_id, lease.token, body, xcom)
            else:
                await self._backend.finish(task.task_id, lease.token, body)
        except LeaseLostError:
            context.discard(task)
            raise
        context.discard(task)  # kept until here: a finish retried after an error stores them
        self._event("finished", task, run_seconds=run_seconds)

    async def finish_batch(
        self, items: Sequence[tuple[Task, object]], *, run_seconds: Sequence[float] | None = None
    ) -> list[bool]:
        """Finish many claimed tasks in one backend call; True per task finished.

        A task whose lease is lost (or that carries none) gets False and changes nothing.
        Results that are not JSON-serializable raise TaskSerializationError before any write.
        """
        items = check_finish_items(items)
        times = check_run_seconds_list(run_seconds, len(items))
        entries, positions = self._finish_entries(items)
        if not entries:
            return [False] * len(items)
        batch = getattr(self._backend, "finish_batch", None)
        if batch is not None:
            flags = list(await batch(entries))
        else:  # a third-party backend without the batch call: one call per task
            flags = []
            for entry in entries:
                try:
                    if len(entry) > 4:  # (id, token, result, xcom, keep): keep by name
                        await self._backend.finish(*entry[:4], keep=entry[4])
                    else:
                        await self._backend.finish(*entry)
                except LeaseLostError:
                    flags.append(False)
                else:
                    flags.append(True)
        return self._finished(items, positions, flags, times)

    @property
    def combines_finish_and_claim(self) -> bool:
        """Whether :meth:`finish_and_claim` is one backend call here (the backend has the
        optional ``finish_and_claim``, ADR 40), not a finish and then a claim."""
        return hasattr(self._backend, "finish_and_claim")

    async def finish_and_claim(
        self,
        items: Sequence[tuple[Task, object]],
        count: int,
        assigned: Sequence[str] | None = None,
        *,
        steal: Sequence[str] | None = None,
        worker_id: str = "",
        run_seconds: Sequence[float] | None = None,
    ) -> tuple[list[bool], list[Task]]:
        """:meth:`finish_batch` of ``items``, then :meth:`claim_batch` of up to ``count``
        tasks: ``(finished flags, claimed tasks)``. On a backend that has
        ``finish_and_claim`` (ADR 40) both are one backend call (one round trip), atomic, the
        claim seeing what the finish freed (a tenant's ``max_running``, dependents made
        ready); elsewhere the two calls, in that order. Every argument is checked before any
        I/O. An error of the one call fails both parts; a NotReplicatedError
        (``durability="replicated"``) comes after both were applied on the primary, and its
        ``result`` is then ``(flags, tasks)``: the claimed tasks are leased, the caller's to
        run."""
        items = check_finish_items(items)
        times = check_run_seconds_list(run_seconds, len(items))
        count, assigned, steal, worker_id = check_claim(count, assigned, steal, worker_id)
        both = getattr(self._backend, "finish_and_claim", None)
        if both is None:
            flags = await self.finish_batch(items, run_seconds=run_seconds)
            return flags, await self.claim_batch(count, assigned, steal=steal, worker_id=worker_id)
        entries, positions = self._finish_entries(items)
        claim = {"assigned": assigned or None, "steal": steal or None, "worker_id": worker_id}
        lease_seconds = self._config.lease_seconds
        try:
            done, claimed = await both(entries, count=count, lease_seconds=lease_seconds, **claim)
        except NotReplicatedError as exc:
            if not isinstance(exc.result, tuple):
                raise
            done, claimed = exc.result
            self._discard_contexts(items, positions)  # applied on the primary
            tasks = await self._claimed_tasks(claimed, count, assigned, steal, worker_id)
            exc.result = (self._flags(len(items), positions, done), tasks)
            raise
        flags = self._finished(items, positions, done, times)
        return flags, await self._claimed_tasks(claimed, count, assigned, steal, worker_id)

    def _finish_entries(
        self, items: Sequence[tuple[Task, object]]
    ) -> tuple[list[FinishItem], list[int]]:
        """The backend's finish items for ``items`` (results encoded: TaskSerializationError
        before any write; the handlers' XCom values taken) and the position of each in
        ``items``; a task that carries no lease has none."""
        entries: list[FinishItem] = []
        positions: list[int] = []
        for index, (task, result) in enumerate(items):
            body = encode_result(task.task_id, result, self._config.max_payload_bytes)
            if task.lease is None:
                continue
            xcom = _pushed(task)  # the handler's XCom values, stored in the same step
            if task.keep_result is False:  # the record goes unless needed (ADR 78)
                entries.append((task.task_id, task.lease.token, body, xcom, False))
            elif xcom:
                entries.append((task.task_id, task.lease.token, body, xcom))
            else:
                entries.append((task.task_id, task.lease.token, body))
            positions.append(index)
        return entries, positions

    @staticmethod
    def _discard_contexts(items: Sequence[tuple[Task, object]], positions: Sequence[int]) -> None:
        """Drop the contexts of the tasks a finish call went through for (their XCom values
        are stored, or their leases were lost): kept until then for a retried finish."""
        for index in positions:
            context.discard(items[index][0])

    @staticmethod
    def _flags(n: int, positions: Sequence[int], flags: Sequence[bool]) -> list[bool]:
        done = [False] * n
        for index, ok in zip(positions, flags, strict=True):
            done[index] = bool(ok)
        return done

    def _finished(
        self,
        items: Sequence[tuple[Task, object]],
        positions: Sequence[int],
        flags: Sequence[bool],
        times: Sequence[float | None] | None,
    ) -> list[bool]:
        """The backend's ``flags`` (one per finish entry) as one per item, with the
        ``finished`` events of those finished; the call went through, so the tasks'
        contexts go."""
        self._discard_contexts(items, positions)
        done = self._flags(len(items), positions, flags)
        if self._listening():
            for index in positions:
                if done[index]:
                    seconds = None if times is None else times[index]
                    self._event("finished", items[index][0], run_seconds=seconds)
        return done
