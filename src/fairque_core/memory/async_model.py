"""AsyncInMemoryBackend: the reference model behind the async port.

Every method runs the matching :class:`~fairque_core.memory.model.InMemoryBackend` method at once
(the model does no I/O, so nothing would be gained by a thread), which makes
:class:`~fairque_core.AsyncFairQueue` and the async worker usable without
Redis.
Those methods are made by :func:`_at_once` from the model's own, so their signatures are written
once, in the model. The exceptions are ``wait_done`` and ``wait_for_work``, which block, so they
wait on a worker thread.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, TypeVar

from fairque_core.domain.events import QueueEvent
from fairque_core.domain.validation import check_wait_timeout
from fairque_core.memory.model import InMemoryBackend
from fairque_core.memory.schedules import AsyncScheduleOps
from fairque_core.ports import Clock, TokenSource
from fairque_core.settings.config import QueueConfig

__all__ = ["AsyncInMemoryBackend"]

P = ParamSpec("P")
R = TypeVar("R")


def _at_once(
    method: Callable[Concatenate[InMemoryBackend, P], R],
) -> Callable[Concatenate[AsyncInMemoryBackend, P], Coroutine[Any, Any, R]]:
    """The awaitable twin of a model ``method``: it runs the method on the backend's model at
    once, with the same arguments, and returns (or raises) what it does."""

    async def at_once(self: AsyncInMemoryBackend, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return method(self._model, *args, **kwargs)

    functools.update_wrapper(at_once, method)  # its name, doc and signature are the model's
    at_once.__qualname__ = f"AsyncInMemoryBackend.{method.__name__}"
    return at_once


class AsyncInMemoryBackend(AsyncScheduleOps):
    """Awaitable methods over one :class:`InMemoryBackend` (given, or built from the args)."""

    def __init__(
        self,
        clock: Clock | None = None,
        *,
        queue: str = "default",
        config: QueueConfig | None = None,
        token_source: TokenSource | None = None,
        model: InMemoryBackend | None = None,
    ) -> None:
        self._model = (
            model
            if model is not None
            else InMemoryBackend(clock, queue=queue, config=config, token_source=token_source)
        )

    @property
    def model(self) -> InMemoryBackend:
        """The synchronous model underneath (shared state)."""
        return self._model

    @property
    def queue(self) -> str:
        return self._model.queue

    @property
    def config(self) -> QueueConfig:
        return self._model.config

    push = _at_once(InMemoryBackend.push)
    push_batch = _at_once(InMemoryBackend.push_batch)
    push_batch_detailed = _at_once(InMemoryBackend.push_batch_detailed)
    claim = _at_once(InMemoryBackend.claim)
    heartbeat = _at_once(InMemoryBackend.heartbeat)
    finish = _at_once(InMemoryBackend.finish)
    heartbeat_batch = _at_once(InMemoryBackend.heartbeat_batch)
    finish_batch = _at_once(InMemoryBackend.finish_batch)
    fail = _at_once(InMemoryBackend.fail)
    release = _at_once(InMemoryBackend.release)
    requeue_expired = _at_once(InMemoryBackend.requeue_expired)
    cancel = _at_once(InMemoryBackend.cancel)
    get_message = _at_once(InMemoryBackend.get_message)
    get_state = _at_once(InMemoryBackend.get_state)
    get_result = _at_once(InMemoryBackend.get_result)
    get_outcome = _at_once(InMemoryBackend.get_outcome)
    get_record = _at_once(InMemoryBackend.get_record)
    list_tasks = _at_once(InMemoryBackend.list_tasks)

    async def wait_done(self, task_id: str, timeout: float) -> bool:
        return await asyncio.to_thread(self._model.wait_done, task_id, timeout)

    xcom_get = _at_once(InMemoryBackend.xcom_get)
    queue_sizes = _at_once(InMemoryBackend.queue_sizes)
    stats = _at_once(InMemoryBackend.stats)
    tenant_stats = _at_once(InMemoryBackend.tenant_stats)
    list_tenants = _at_once(InMemoryBackend.list_tenants)
    set_tenant_weight = _at_once(InMemoryBackend.set_tenant_weight)
    list_dlq = _at_once(InMemoryBackend.list_dlq)
    requeue_dlq = _at_once(InMemoryBackend.requeue_dlq)
    purge_dlq = _at_once(InMemoryBackend.purge_dlq)
    purge_tenant = _at_once(InMemoryBackend.purge_tenant)
    purge_all = _at_once(InMemoryBackend.purge_all)
    tenant_weights = _at_once(InMemoryBackend.tenant_weights)
    set_limits = _at_once(InMemoryBackend.set_limits)
    limit_status = _at_once(InMemoryBackend.limit_status)
    set_key_limits = _at_once(InMemoryBackend.set_key_limits)
    key_limit_status = _at_once(InMemoryBackend.key_limit_status)
    list_key_limits = _at_once(InMemoryBackend.list_key_limits)
    pause = _at_once(InMemoryBackend.pause)
    resume = _at_once(InMemoryBackend.resume)
    is_paused = _at_once(InMemoryBackend.is_paused)
    tenant_fairness = _at_once(InMemoryBackend.tenant_fairness)
    list_queues = _at_once(InMemoryBackend.list_queues)
    register_worker = _at_once(InMemoryBackend.register_worker)
    list_workers = _at_once(InMemoryBackend.list_workers)
    remove_workers = _at_once(InMemoryBackend.remove_workers)
    push_intake = _at_once(InMemoryBackend.push_intake)
    ingest = _at_once(InMemoryBackend.ingest)
    intake_size = _at_once(InMemoryBackend.intake_size)

    async def wait_for_work(self, timeout: float) -> bool:
        if check_wait_timeout(timeout) == 0:
            return self._model.wait_for_work(0)
        return await asyncio.to_thread(self._model.wait_for_work, timeout)

    events_end = _at_once(InMemoryBackend.events_end)
    set_progress = _at_once(InMemoryBackend.set_progress)

    async def read_events(
        self, after: str, *, count: int = 100, timeout: float = 0.0
    ) -> list[QueueEvent]:
        if check_wait_timeout(timeout) == 0:
            return self._model.read_events(after, count=count)
        return await asyncio.to_thread(self._model.read_events, after, count=count, timeout=timeout)

    close = _at_once(InMemoryBackend.close)
