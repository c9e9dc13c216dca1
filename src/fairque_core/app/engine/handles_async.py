"""AsyncTaskHandle: what ``AsyncFairQueue.push`` returns, a task id you can wait on (ADR 27).

A handle *is* the task id (a ``str`` subclass: code that stores, compares or prints push's
return value keeps working) and carries ``duplicate`` (the push stored nothing: the id was
known, or a live task holds the same unique key and this is its id) and :meth:`get`.
"""

# handles.py (TaskHandle) is generated from this file  # unasync: remove
# by tools/gen_sync.py: edit here, then run it.  # unasync: remove

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["AsyncResultSource", "AsyncTaskHandle"]


class AsyncResultSource(Protocol):
    """The engine's side of a handle."""

    async def wait_result(
        self,
        task_id: str,
        timeout: float | None = None,
        *,
        intake: bool = False,
        tenant: str | None = None,
    ) -> Any: ...

    async def get_task(self, task_id: str) -> Any: ...


class AsyncTaskHandle(str):
    """A pushed task's id, with ``duplicate`` and an awaitable :meth:`get`. ``intake``: the
    task was stored in the queue's intake (ADR 47) and may not be known to the queue yet."""

    _source: AsyncResultSource
    # the defaults live on the class: a handle stores only what differs (one push makes one
    # handle, so its cost is on the producer's path, issue 17)
    duplicate: bool = False
    intake: bool = False
    # the tenant the push was for (None: a handle made from a bare id, ``result``), checked
    # against the task's when it is read (ADR 60)
    _tenant: str | None = None

    def __new__(
        cls,
        task_id: str,
        source: AsyncResultSource,
        *,
        duplicate: bool = False,
        intake: bool = False,
        tenant: str | None = None,
    ) -> AsyncTaskHandle:
        handle = str.__new__(cls, task_id)
        handle._source = source
        if duplicate:
            handle.duplicate = duplicate
        if intake:
            handle.intake = intake
        if tenant is not None:
            handle._tenant = tenant
        return handle

    @property
    def task_id(self) -> str:
        return str(self)

    async def get(self, timeout: float | None = None) -> Any:
        """The task's result once it finished (None is a result), waiting up to ``timeout``
        seconds (None: as long as it takes) on the backend's end notification, not by polling.

        Raises TaskFailedError (the stored error type, message and traceback summary) for a
        task that failed for good, TaskCanceledError for a canceled one, ResultTimeoutError
        (a TimeoutError) when it has not ended in time, TaskNotFoundError when the queue
        knows no such task (never pushed, or its result TTL passed), TaskIdConflictError when
        the id is held by another tenant's task (ADR 60: an intake entry whose id was taken
        when the queue took it in). A task pushed through the intake is waited for while it
        is not ingested yet (:attr:`intake`).
        """
        return await self._source.wait_result(
            str(self), timeout, intake=self.intake, tenant=self._tenant
        )

    async def progress(self) -> Any:
        """The last progress the task's handler reported (``ctx.set_progress``), None when
        it reported none, or the task is unknown or its record expired."""
        record = await self._source.get_task(str(self))
        return None if record is None else record.progress

    def __repr__(self) -> str:
        return f"AsyncTaskHandle({str(self)!r}, duplicate={self.duplicate})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (str, (str(self),))  # pickles as the plain id
