"""Where the partitioned backend sends a call about one task (ADR 34): the partition a task
id or a lease token was last seen in, remembered for the tasks pushed or claimed through this
backend (oldest forgotten first), else found by asking each partition in turn.

:class:`AsyncPartitionRouting` is the part of ``AsyncPartitionedBackend`` that holds those
maps, kept apart to keep modules short; it stands between the backend and
:class:`~fairque_redis.partitioned.reads_async.AsyncPartitionReads`.
"""

# routing.py is generated from this file by tools/gen_sync.py.  # unasync: remove

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from fairque_core.domain.errors import LeaseLostError
from fairque_core.domain.validation import validate_id
from fairque_redis.backends.backend_async import AsyncRedisBackend
from fairque_redis.partitioned.reads_async import AsyncPartitionReads

__all__ = ["REMEMBERED_TASKS", "AsyncPartitionRouting"]

#: Task ids (and lease tokens) whose partition a backend remembers (oldest forgotten first).
REMEMBERED_TASKS = 100_000


class AsyncPartitionRouting(AsyncPartitionReads):
    """The partition of a task id or a lease token (see the module doc)."""

    _where: OrderedDict[str, int]
    _leases: OrderedDict[str, int]

    def _remember(self, task_id: str, partition: int) -> None:
        self._where[task_id] = partition
        self._where.move_to_end(task_id)
        if len(self._where) > REMEMBERED_TASKS:
            self._where.popitem(last=False)

    def _remember_lease(self, token: str, partition: int) -> None:
        self._leases[token] = partition
        if len(self._leases) > REMEMBERED_TASKS:
            self._leases.popitem(last=False)

    def _forget_leases(self, tokens: Iterable[str]) -> None:
        """The leases ``tokens`` ended (finished, failed, released, or found lost): their
        entries go, so the map holds the leases still in flight, not the last claims."""
        for token in tokens:
            self._leases.pop(token, None)

    @contextmanager
    def _ending(self, token: str) -> Iterator[None]:
        """Around a call that ends the lease ``token``: forget it when the call went through
        or found the lease lost; keep it on any other error (the caller may try again)."""
        try:
            yield
        except LeaseLostError:
            self._forget_leases((token,))
            raise
        self._forget_leases((token,))

    async def _lease_index(self, task_id: str, token: str) -> int:
        """The partition of the lease ``token`` on ``task_id``: where this backend claimed it,
        else (a lease claimed by another process) where the id is found."""
        known = self._leases.get(token)
        return known if known is not None else await self._locate(task_id)

    async def _locate(self, task_id: str) -> int:
        """The partition holding ``task_id``: remembered, else the first that knows it (0
        when none does, so an unknown id gets the one-slot backend's answer)."""
        validate_id(task_id, "task_id")
        known = self._where.get(task_id)
        if known is not None:
            return known
        await self._ready()
        for n, part in enumerate(self._parts):
            if await part.get_state(task_id) is not None:
                self._remember(task_id, n)
                return n
        return 0

    async def _task_part(self, task_id: str) -> AsyncRedisBackend:
        return self._parts[await self._locate(task_id)]

    async def tenant_backend(self, tenant: str) -> AsyncRedisBackend:
        """The partition that holds ``tenant``'s tasks. A handle that knows its tenant reads
        its task there (ADR 60), not in the first partition that knows the id: two tenants of
        different partitions may hold the same id, each in its own."""
        await self._ready()
        return self._parts[self._part_of(tenant)]
