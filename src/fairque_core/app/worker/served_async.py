"""AsyncServedQueues: the queues one worker serves, as the one queue its loop calls (ADR 69).

A worker given ``queues=[...]`` drives this in place of a single queue: its loop's decisions
do not change. A claim is shared between the queues by a
:class:`~fairque_core.domain.queue_picker.QueuePicker` (stride scheduling by weight, or strict
order) and each queue's part is that queue's own fair claim across its tenants. A queue whose
part comes back short is left out of the rest of that claim and its places go to the others
(a claim asks again, at most once per queue). The calls about a claimed task (finish, fail,
release, heartbeat) go to the queue that claimed it, known by the task's id and lease token;
the reaper runs on every queue. ``wait_for_work`` waits on every queue's wake signal at once.

``combines_finish_and_claim`` is False: the worker sends its acknowledgements and its next
claim as two calls (ADR 40's one call spans one queue). ``claim_when_ready`` is the wait, then
the claim.
"""

# served.py (ServedQueues) is generated from this file  # unasync: remove
# by tools/gen_sync.py: edit here, then run it.  # unasync: remove

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any

import attrs

from fairque_core.app.engine.queue_async import AsyncFairQueue
from fairque_core.app.worker.wake_any import AsyncWakeAny
from fairque_core.domain.enums import TaskState
from fairque_core.domain.models import Task
from fairque_core.domain.queue_picker import QueuePicker
from fairque_core.settings.config import QueueConfig

__all__ = ["AsyncServedQueues"]

logger = logging.getLogger("fairque.worker")


def _key(task: Task) -> tuple[str, str] | None:
    return None if task.lease is None else (task.task_id, task.lease.token)


class AsyncServedQueues:
    """``queues`` (distinct names) with their ``weights``, served in ``order`` (``weighted``
    or ``strict``): the queue calls of a worker, each routed to the right queue."""

    combines_finish_and_claim = False

    def __init__(
        self,
        queues: Sequence[AsyncFairQueue],
        weights: Sequence[float],
        order: str = "weighted",
    ) -> None:
        if len(queues) != len(weights):
            raise ValueError("one weight per queue")
        names = [q.name for q in queues]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"a worker serves each queue once: {', '.join(twice)} given twice")
        self.queues = tuple(queues)
        self.names = tuple(names)
        self.picker = QueuePicker(weights, order)
        self._owners: dict[tuple[str, str], int] = {}
        self._errors = [0] * len(queues)  # failed claims per queue, in a row
        self._lock = threading.Lock()  # the owners and the picker: any thread may call
        self._wake = AsyncWakeAny([q.wait_for_work for q in queues])
        #: every queue's wait blocks on its wake signal (the worker's listener then keeps
        #: the least wait of ADR 46 for its claims)
        self.blocks_on_wake = all(
            hasattr(getattr(q, "backend", None), "claim_when_ready") for q in queues
        )
        first = queues[0].config
        lease = min(q.config.lease_seconds for q in queues)
        self._config = attrs.evolve(first, lease_seconds=lease)

    @property
    def config(self) -> QueueConfig:
        """The first queue's settings, with the shortest lease of all (the worker's heartbeats
        and prefetch bound follow it)."""
        return self._config

    @property
    def name(self) -> str:
        return ",".join(self.names)

    @property
    def order(self) -> str:
        return self.picker.order

    def queue_of(self, task: Task) -> AsyncFairQueue:
        """The queue that claimed ``task`` (ValueError for a task not claimed here)."""
        return self.queues[self._index(task)]

    def _index(self, task: Task) -> int:
        key = _key(task)
        with self._lock:
            index = None if key is None else self._owners.get(key)
        if index is None:
            raise ValueError(f"task {task.task_id} was not claimed by this worker's queues")
        return index

    def _forget(self, tasks: Sequence[Task]) -> None:
        with self._lock:
            for task in tasks:
                key = _key(task)
                if key is not None:
                    self._owners.pop(key, None)

    def _groups(self, tasks: Sequence[Task]) -> dict[int, list[int]]:
        """Positions in ``tasks`` by the index of their queue."""
        out: dict[int, list[int]] = {}
        for position, task in enumerate(tasks):
            out.setdefault(self._index(task), []).append(position)
        return out

    def health(self) -> list[dict[str, Any]]:
        """Per queue: name, weight, tasks claimed, whether its last part came back short, and
        its failed claims in a row (a queue whose claims fail is left out of each claim; the
        worker serves the others, and reports an outage only when every queue fails)."""
        picker = self.picker
        with self._lock:
            return [
                {
                    "name": name,
                    "weight": picker.weights[i],
                    "claimed": picker.claimed[i],
                    "idle": picker.idle[i],
                    "failing": self._errors[i],
                }
                for i, name in enumerate(self.names)
            ]

    # ------------------------------------------------------------------ claims
    async def claim_batch(
        self,
        count: int,
        assigned: Sequence[str] | None = None,
        *,
        steal: Sequence[str] | None = None,
        worker_id: str = "",
    ) -> list[Task]:
        """Up to ``count`` tasks, shared between the queues as the picker plans: each queue's
        part is its own claim; the places of a part that came back short go to the queues
        still open. A queue whose claim raised is left out; the error is raised when no queue
        brought a task."""
        out: list[Task] = []
        open_ = [True] * len(self.queues)
        error: Exception | None = None
        while len(out) < count:
            with self._lock:
                asked = self.picker.plan(count - len(out), open_)
            if not any(asked):
                break
            got = [0] * len(asked)
            for index, want in enumerate(asked):
                if want <= 0:
                    continue
                try:
                    tasks = await self.queues[index].claim_batch(
                        want, assigned, steal=steal, worker_id=worker_id
                    )
                except Exception as exc:
                    self._failed(index, exc)
                    error = error or exc
                    tasks = []
                else:
                    self._errors[index] = 0
                self._own(tasks, index)
                got[index] = len(tasks)
                out += tasks
                if len(tasks) < want:
                    open_[index] = False
            with self._lock:
                self.picker.book(asked, got)
        if error is not None and not out:
            raise error
        return out

    def _failed(self, index: int, exc: Exception) -> None:
        """A claim on queue ``index`` raised: logged once per run of failures."""
        self._errors[index] += 1
        if self._errors[index] == 1:
            logger.warning("claim on queue %s failed: %s", self.names[index], exc)

    def _own(self, tasks: Sequence[Task], index: int) -> None:
        with self._lock:
            for task in tasks:
                key = _key(task)
                if key is not None:
                    self._owners[key] = index

    async def claim_when_ready(
        self,
        count: int,
        assigned: Sequence[str] | None = None,
        *,
        steal: Sequence[str] | None = None,
        worker_id: str = "",
        timeout: float,
    ) -> list[Task]:
        """Wait up to ``timeout`` s for any queue's wake signal, then claim as
        :meth:`claim_batch` does (woken or not)."""
        await self.wait_for_work(timeout)
        return await self.claim_batch(count, assigned, steal=steal, worker_id=worker_id)

    async def wait_for_work(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for the first wake signal of any queue."""
        return await self._wake.wait(timeout)

    # ------------------------------------------------------------------ leases
    async def finish_batch(
        self, items: Sequence[tuple[Task, object]], *, run_seconds: Sequence[float] | None = None
    ) -> list[bool]:
        """Each queue's share of ``items`` as one ``finish_batch`` of that queue; the flags in
        the order of ``items``. Every queue's share is sent; the first error is then raised
        (a finish sent again is idempotent, ADR 19)."""
        flags = [False] * len(items)
        error: Exception | None = None
        for index, positions in self._groups([task for task, _ in items]).items():
            part = [items[p] for p in positions]
            seconds = None if run_seconds is None else [run_seconds[p] for p in positions]
            try:
                done = await self.queues[index].finish_batch(part, run_seconds=seconds)
            except Exception as exc:
                error = error or exc
                continue
            for position, flag in zip(positions, done, strict=True):
                flags[position] = flag
            self._forget([task for task, _ in part])
        if error is not None:
            raise error
        return flags

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
        """:meth:`finish_batch`, then :meth:`claim_batch` (two calls, not one)."""
        flags = await self.finish_batch(items, run_seconds=run_seconds)
        tasks = await self.claim_batch(count, assigned, steal=steal, worker_id=worker_id)
        return flags, tasks

    async def fail(
        self, task: Task, error: BaseException, *, run_seconds: float | None = None
    ) -> TaskState:
        state = await self.queue_of(task).fail(task, error, run_seconds=run_seconds)
        self._forget([task])
        return state

    async def release(self, task: Task) -> None:
        await self.queue_of(task).release(task)
        self._forget([task])

    async def heartbeat_leases(self, tasks: Sequence[Task]) -> list[Task | float | None]:
        """Each queue's share as one ``heartbeat_leases`` of that queue (the first error is
        raised once every share was sent); a task whose lease is lost or canceled is
        forgotten."""
        out: list[Task | float | None] = [None] * len(tasks)
        error: Exception | None = None
        for index, positions in self._groups(tasks).items():
            try:
                renewed = await self.queues[index].heartbeat_leases([tasks[p] for p in positions])
            except Exception as exc:
                error = error or exc
                continue
            for position, task in zip(positions, renewed, strict=True):
                out[position] = task
            self._forget([tasks[p] for p in positions if not isinstance(out[p], Task)])
        if error is not None:
            raise error
        return out

    async def requeue_expired(self, limit: int = 100) -> int:
        """The reaper on every queue; how many leases it gave back in all."""
        total = 0
        error: Exception | None = None
        for queue in self.queues:
            try:
                total += await queue.requeue_expired(limit)
            except Exception as exc:
                error = error or exc
        if error is not None:
            raise error
        return total
