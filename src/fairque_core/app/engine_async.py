"""AsyncFairQueue: the asyncio twin of :class:`~fairque_core.app.engine.FairQueue`.

Same method names and meaning, awaitable, over an :class:`~fairque_core.ports.AsyncQueueBackend`.
Everything that does no I/O (validation, codec, size limit, decoding, retry decision, batch
ordering) is shared with the sync engine through :mod:`fairque_core.app.engine_support`, so the two
faces differ only by ``await``. Plugin hooks are synchronous (pluggy has no async hooks).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Sequence
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

from fairque_core.app import engine_support as common
from fairque_core.app.config import FairQueueConfig, QueueConfig
from fairque_core.domain.deps import check_batch
from fairque_core.domain.enums import FailureType, TaskState
from fairque_core.domain.errors import LeaseLostError, TaskSerializationError, TaskValidationError
from fairque_core.domain.models import DLQEntry, Message, Task
from fairque_core.domain.validation import check_tenant_page, check_wait_timeout
from fairque_core.ports import AsyncQueueBackend

__all__ = ["AsyncFairQueue"]

_MAX_POISON_ROUNDS = 16


class AsyncFairQueue:
    """The asyncio fair queue; see :class:`~fairque_core.app.engine.FairQueue` for the semantics."""

    def __init__(
        self,
        backend: AsyncQueueBackend,
        *,
        plugins: Sequence[object] = (),
        config: QueueConfig | None = None,
        plugin_host: common.PluginHostLike | None = None,
    ) -> None:
        self._backend = backend
        self._config = common.resolve_config(backend, config)
        self._plugins = common.make_host(plugins, plugin_host, self._config)
        self._queue_name = backend.queue
        self._closed = False

    # ------------------------------------------------------------------ construction
    @classmethod
    async def from_config(
        cls,
        config_or_path: FairQueueConfig | str | os.PathLike[str],
        *,
        plugins: Sequence[object] = (),
        plugin_host: common.PluginHostLike | None = None,
        **backend_options: Any,
    ) -> AsyncFairQueue:
        """An async queue from a config or YAML path (``memory://`` or a registered scheme).

        The backend factory is called with ``asyncio=True``.
        """
        if isinstance(config_or_path, FairQueueConfig):
            config = config_or_path
        else:
            config = FairQueueConfig.from_yaml(config_or_path)
        url = common.backend_url(config)
        scheme = urlsplit(url).scheme.lower()
        backend: AsyncQueueBackend
        if scheme == "memory":
            from fairque_core.memory.async_model import AsyncInMemoryBackend

            backend = AsyncInMemoryBackend(model=common.memory_backend(config))
        else:
            factory = common.load_backend_factory(scheme)
            backend = factory(
                url,
                queue=config.queue.name,
                config=config,
                cluster=config.redis.cluster,
                asyncio=True,
                **backend_options,
            )
        queue = cls(backend, plugins=plugins, config=config.queue, plugin_host=plugin_host)
        try:
            await queue.apply_tenant_config()
        except BaseException:
            await queue.close()
            raise
        return queue

    async def apply_tenant_config(self) -> None:
        """Set the weights and tiers named in the queue config on the backend."""
        for user_id, (weight, tier) in self._config.tenant_weight_table().items():
            await self._backend.set_tenant_weight(user_id, weight, tier=tier)

    # ------------------------------------------------------------------ properties
    @property
    def backend(self) -> AsyncQueueBackend:
        return self._backend

    @property
    def config(self) -> QueueConfig:
        return self._config

    @property
    def plugins(self) -> common.PluginHostLike:
        return self._plugins

    @property
    def name(self) -> str:
        return self._queue_name

    def _event(self, event: str, task: Task, **info: Any) -> None:
        self._plugins.task_event(event, task, self._queue_name, **info)

    # ------------------------------------------------------------------ push
    async def push(self, task: Task) -> str:
        message = common.to_message(task, self._plugins, self._config)
        created = await self._backend.push(message)
        self._event("pushed", task, duplicate=not created)
        return task.task_id

    async def push_batch(self, tasks: Sequence[Task]) -> list[str]:
        tasks = list(tasks)
        if not tasks:
            return []
        check_batch(tasks)
        ordered = common.ordered_for_push(tasks)
        now = time.time()
        messages = [common.to_message(t, self._plugins, self._config, now) for t in ordered]
        created = await self._backend.push_batch(messages)
        for task, new in zip(ordered, created, strict=True):
            self._event("pushed", task, duplicate=not new)
        return [t.task_id for t in tasks]

    # ------------------------------------------------------------------ claim
    async def pop(
        self,
        user_list: Sequence[str] | None = None,
        *,
        steal: Sequence[str] | None = None,
        worker_id: str = "",
    ) -> Task | None:
        tasks = await self.pop_batch(1, user_list, steal=steal, worker_id=worker_id)
        return tasks[0] if tasks else None

    async def pop_batch(
        self,
        count: int,
        user_list: Sequence[str] | None = None,
        *,
        steal: Sequence[str] | None = None,
        worker_id: str = "",
    ) -> list[Task]:
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise TaskValidationError("count", count, "must be an int >= 1")
        out: list[Task] = []
        for _ in range(_MAX_POISON_ROUNDS):
            want = count - len(out)
            claimed = await self._backend.claim(
                worker_id=worker_id,
                assigned=user_list or None,
                steal=steal or None,
                count=want,
                lease_seconds=self._config.lease_seconds,
            )
            now = time.time()
            poisoned = 0
            for item in claimed:
                try:
                    task = common.decode_claimed(item, self._plugins)
                except TaskSerializationError as exc:
                    poisoned += 1
                    await self._poison(item.message, item.lease.token, exc)
                    continue
                self._event(
                    "started",
                    task,
                    wait_seconds=common.wait_seconds(item.message, now),
                    recoveries=item.recoveries,
                    worker_id=worker_id,
                )
                out.append(task)
            if not poisoned or len(claimed) < want:
                break
        return out

    async def _poison(self, message: Message, token: str, error: TaskSerializationError) -> None:
        reason = common.describe(error)
        try:
            await self._backend.fail(
                message.task_id,
                token,
                retry_delay=None,
                failure_type=FailureType.POISONED,
                reason=reason,
            )
        except LeaseLostError:
            return
        stub = common.stub_task(message)
        if stub is not None:
            self._event("dead", stub, error=reason, failure_type=FailureType.POISONED)

    # ------------------------------------------------------------------ acknowledge
    async def finish(
        self, task: Task, result: object = None, *, run_seconds: float | None = None
    ) -> None:
        lease = common.require_lease(task)
        body = common.encode_result(task.task_id, result)
        await self._backend.finish(task.task_id, lease.token, body)
        self._event("finished", task, run_seconds=run_seconds)

    async def finish_many(
        self, items: Sequence[tuple[Task, object]], *, run_seconds: Sequence[float] | None = None
    ) -> list[bool]:
        entries: list[tuple[str, str, bytes | None]] = []
        positions: list[int] = []
        done = [False] * len(items)
        for index, (task, result) in enumerate(items):
            body = common.encode_result(task.task_id, result)
            if task.lease is None:
                continue
            entries.append((task.task_id, task.lease.token, body))
            positions.append(index)
        if not entries:
            return done
        batch = getattr(self._backend, "finish_batch", None)
        if batch is not None:
            flags = list(await batch(entries))
        else:
            flags = []
            for task_id, token, body in entries:
                try:
                    await self._backend.finish(task_id, token, body)
                except LeaseLostError:
                    flags.append(False)
                else:
                    flags.append(True)
        for index, ok in zip(positions, flags, strict=True):
            done[index] = bool(ok)
            if ok:
                seconds = None if run_seconds is None else run_seconds[index]
                self._event("finished", items[index][0], run_seconds=seconds)
        return done

    async def fail(
        self, task: Task, error: BaseException, *, run_seconds: float | None = None
    ) -> TaskState:
        lease = common.require_lease(task)
        decision = common.decide(self._plugins, task, error)
        state = await self._backend.fail(
            task.task_id,
            lease.token,
            retry_delay=decision.retry_delay,
            failure_type=decision.failure_type,
            reason=decision.reason,
        )
        info: dict[str, Any] = {
            "error": decision.reason,
            "failure_type": decision.failure_type,
            "run_seconds": run_seconds,
        }
        self._event("failed", task, **info)
        if decision.retry_delay is not None:
            self._event("retried", task, retry_delay=decision.retry_delay, **info)
        else:
            self._event("dead", task, **info)
        return state

    async def heartbeat(self, task: Task) -> Task:
        lease = common.require_lease(task)
        deadline = await self._backend.heartbeat(
            task.task_id, lease.token, self._config.lease_seconds
        )
        return common.with_deadline(task, deadline)

    async def heartbeat_many(self, tasks: Sequence[Task]) -> list[Task | None]:
        """``FairQueue.heartbeat_many``: many leases in one backend call, None per lost one."""
        items, positions = common.leased_items(tasks)
        if not items:
            return [None] * len(tasks)
        batch = getattr(self._backend, "heartbeat_batch", None)
        deadlines: list[float | None]
        if batch is not None:
            deadlines = list(await batch(items, self._config.lease_seconds))
        else:  # a third-party backend without the batch call: one call per task
            deadlines = []
            for task_id, token in items:
                try:
                    deadlines.append(
                        await self._backend.heartbeat(task_id, token, self._config.lease_seconds)
                    )
                except LeaseLostError:
                    deadlines.append(None)
        return common.renewed_tasks(tasks, positions, deadlines)

    async def release(self, task: Task) -> None:
        lease = common.require_lease(task)
        await self._backend.release(task.task_id, lease.token)
        self._event("released", task)

    # ------------------------------------------------------------------ other writes
    async def cancel(self, task_id: str) -> bool:
        return await self._backend.cancel(task_id)

    async def set_tenant_weight(self, user_id: str, weight: float, *, tier: int = 0) -> None:
        await self._backend.set_tenant_weight(user_id, weight, tier=tier)

    async def requeue_expired(self, limit: int = 100) -> int:
        return await self._backend.requeue_expired(limit)

    async def wait_for_work(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for the queue's wake signal (see ``FairQueue``)."""
        wait = getattr(self._backend, "wait_for_work", None)
        if wait is None:
            await asyncio.sleep(check_wait_timeout(timeout))
            return False
        return bool(await wait(timeout))

    # ------------------------------------------------------------------ reads
    async def get_task(self, task_id: str) -> Task | None:
        message = await self._backend.get_message(task_id)
        return None if message is None else common.decode_message(message, self._plugins)

    async def get_state(self, task_id: str) -> TaskState | None:
        return await self._backend.get_state(task_id)

    async def get_result(self, task_id: str) -> Any:
        return common.decode_result(await self._backend.get_result(task_id))

    async def get_queue_sizes(self, user_id: str) -> dict[str, int]:
        sizes = await self._backend.queue_sizes([user_id])
        return sizes[user_id].as_dict()

    async def get_queue_sizes_batch(self, user_ids: Sequence[str]) -> dict[str, dict[str, int]]:
        sizes = await self._backend.queue_sizes(list(user_ids))
        return {user_id: s.as_dict() for user_id, s in sizes.items()}

    async def get_stats(self) -> dict[str, Any]:
        return dict(await self._backend.stats())

    async def get_tenant_stats(self, user_id: str) -> dict[str, int]:
        return dict(await self._backend.tenant_stats(user_id))

    async def list_tenants(self, *, limit: int = 100, offset: int = 0) -> tuple[list[str], int]:
        """A page of the tenants the queue has seen and their total (see ``FairQueue``)."""
        limit, offset = check_tenant_page(limit, offset)
        return await self._backend.list_tenants(limit=limit, offset=offset)

    # ------------------------------------------------------------------ DLQ
    async def list_dlq(
        self, *, limit: int = 100, offset: int = 0, failure_type: FailureType | None = None
    ) -> list[DLQEntry]:
        return await self._backend.list_dlq(limit=limit, offset=offset, failure_type=failure_type)

    async def requeue_dlq(self, entry_ids: Sequence[str] | None = None) -> int:
        return await self._backend.requeue_dlq(entry_ids)

    async def purge_dlq(self, entry_ids: Sequence[str] | None = None) -> int:
        return await self._backend.purge_dlq(entry_ids)

    # ------------------------------------------------------------------ lifecycle
    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            await self._backend.close()

    async def __aenter__(self) -> AsyncFairQueue:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"AsyncFairQueue(queue={self._queue_name!r}, backend={type(self._backend).__name__})"
