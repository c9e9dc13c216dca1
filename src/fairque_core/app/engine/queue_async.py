"""AsyncFairQueue: the engine facade over the :class:`~fairque_core.ports.AsyncQueueBackend` port.

The engine owns what is the same for every backend: validation, the codec and header hooks,
the payload size limit, dependency checks of a batch, decoding of claimed tasks (a task that
cannot be decoded goes to the DLQ as POISONED and never escapes ``pop``), the retry decision
and the task events. Backends only store and move messages; the backend owns the queue
config (see :func:`~fairque_core.app.engine.support.resolve_config`). Plugin hooks are plain
calls (pluggy has no awaitable hooks).
"""

# queue.py (FairQueue) is generated from this file  # unasync: remove
# by tools/gen_sync.py: edit here, then run it.  # unasync: remove

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Sequence
from types import TracebackType
from typing import Any

from fairque_core.app import context
from fairque_core.app.accel import builders, plugin_shortcuts
from fairque_core.app.accel.push_coalescing import PushCoalescer  # unasync: remove
from fairque_core.app.backend_loading import open_async_backend
from fairque_core.app.engine import support as common
from fairque_core.app.engine.acks_async import AsyncAckMixin
from fairque_core.app.engine.arguments import (
    check_claim,
    check_error,
    check_run_seconds,
    check_tasks,
    lease_of,
)
from fairque_core.app.engine.batcher_async import AsyncPushBatcher
from fairque_core.app.engine.events_async import AsyncEventMixin
from fairque_core.app.engine.handles_async import AsyncTaskHandle
from fairque_core.app.engine.host_async import Coalescer  # unasync: remove
from fairque_core.app.engine.intake_async import AsyncIntakeMixin
from fairque_core.app.engine.messages import (
    decode_message,
    stub_task,
    to_message,
    wait_seconds,
)
from fairque_core.app.engine.reads_async import AsyncReadMixin
from fairque_core.app.engine.results_async import AsyncResultMixin
from fairque_core.app.engine.schedules_async import AsyncScheduleMixin
from fairque_core.domain.deps import check_batch
from fairque_core.domain.enums import FailureType, TaskState
from fairque_core.domain.errors import (
    LeaseLostError,
    QueueClosedError,
    TaskSerializationError,
)
from fairque_core.domain.limits import LIMIT_FIELDS, LimitStatus
from fairque_core.domain.models import Claimed, Message, Task
from fairque_core.domain.outcomes import LEASE_TERMINATE, error_record
from fairque_core.domain.validation import check_wait_timeout, validate_id
from fairque_core.ports import AsyncQueueBackend, WatchesServer
from fairque_core.settings.accel import Accelerators
from fairque_core.settings.config import FairQueueConfig, QueueConfig

__all__ = ["AsyncFairQueue"]

# A claim that returns only poisoned messages is retried this many times in one pop.
_MAX_POISON_ROUNDS = 16


class AsyncFairQueue(
    AsyncResultMixin,
    AsyncReadMixin,
    AsyncScheduleMixin,
    AsyncAckMixin,
    AsyncIntakeMixin,
    AsyncEventMixin,
):
    """A fair multi-tenant queue: push, claim with leases, finish, fail, inspect.

    ``plugins`` are hook implementations added to the defaults (JSON codec, retry policy);
    ``plugin_host`` replaces the whole plugin set (tests, or a host shared by several queues).
    ``accel`` turns accelerators off (default: ``$FAIRQUE_ACCEL_OFF``; docs/performance.md).
    The queue config is the backend's: ``config`` may only repeat it (a different one is a
    ConfigurationError), or stand in for it when the backend has none of its own.
    """

    # coalesce_pushes (ADR 35): concurrent pushes share push calls  # unasync: remove
    # (a group commit, push_coalescing.py); a lone push is sent at  # unasync: remove
    # once as before. On by default; False (the argument or the  # unasync: remove
    # attribute) sends every push on its own.  # unasync: remove

    def __init__(
        self,
        backend: AsyncQueueBackend,
        *,
        plugins: Sequence[object] = (),
        config: QueueConfig | None = None,
        plugin_host: common.PluginHostLike | None = None,
        coalesce_pushes: bool = True,  # unasync: remove
        accel: Accelerators | None = None,
    ) -> None:
        accel = Accelerators.from_env() if accel is None else accel
        self._accel = accel
        self._config = common.resolve_config(backend, config)
        self._given_backend = backend
        host_class = plugin_shortcuts.host_class(accel)
        self._plugins = common.make_host(plugins, plugin_host, self._config, host_class)
        self._build = builders.model_build(accel)
        self._queue_name = backend.queue
        self._closing = False
        self._closed = False  # set once close() settled what was in flight
        # the group commit (an accelerator, ADR 35) is plugged in here only  # unasync: remove
        on = coalesce_pushes and self._accel.on("push_coalescer")  # unasync: remove
        self.coalesce_pushes = bool(on)  # unasync: remove
        self._coalescer: Coalescer = PushCoalescer(self)  # unasync: remove
        self._intake_coalescer: Coalescer = PushCoalescer(self, intake=True)  # unasync: remove

    # ------------------------------------------------------------------ construction
    @classmethod
    async def from_config(
        cls,
        config_or_path: FairQueueConfig | str | os.PathLike[str],
        *,
        plugins: Sequence[object] = (),
        plugin_host: common.PluginHostLike | None = None,
        coalesce_pushes: bool = True,  # unasync: remove
        accel: Accelerators | None = None,
        **backend_options: Any,
    ) -> AsyncFairQueue:
        """A queue built from a config (or a YAML file path).

        The backend comes from the URL's scheme, looked up in the ``fairque.backends``
        entry-point group (``memory`` for the in-process reference model; ``redis``,
        ``rediss``, ``valkey``, ``valkeys`` by the Redis adapter); ``backend_options`` go to
        its factory. Tenant weights and tiers of the queue section are applied before the
        queue is returned.
        """
        if isinstance(config_or_path, FairQueueConfig):
            config = config_or_path
        else:
            config = FairQueueConfig.from_yaml(config_or_path)
        backend = open_async_backend(config, **backend_options)
        queue = cls(backend, plugins=plugins, plugin_host=plugin_host, accel=accel)
        queue.coalesce_pushes = queue.coalesce_pushes and bool(coalesce_pushes)  # unasync: remove
        try:
            await queue.apply_tenant_config()
            for schedule in config.schedule_values():
                await queue.save_schedule(schedule)
        except BaseException:
            await queue.close()
            raise
        return queue

    async def apply_tenant_config(self) -> None:
        """Set the weights, tiers and limits (ADR 28) named in the queue config on the backend
        (limits: only the fields the config gives)."""
        for tenant, (weight, tier) in self._config.tenant_weight_table().items():
            await self._backend.set_tenant_weight(tenant, weight, tier=tier)
        for setting in self._config.limit_settings():
            await self._backend.set_limits(
                setting.changes, tenant=setting.tenant, tier=setting.tier
            )

    # ------------------------------------------------------------------ properties
    @property
    def backend(self) -> AsyncQueueBackend:
        return self._given_backend

    @property
    def _backend(self) -> AsyncQueueBackend:
        """The backend until ``close()``; a call after it is a QueueClosedError (the
        backend's client would otherwise reopen its connections, unowned and never closed)."""
        if self._closed:
            raise QueueClosedError(self._queue_name)
        return self._given_backend

    @property
    def config(self) -> QueueConfig:
        return self._config

    @property
    def plugins(self) -> common.PluginHostLike:
        return self._plugins

    @property
    def name(self) -> str:
        return self._queue_name

    @property
    def server_problem(self) -> str | None:
        """Why the server's settings are unsafe now (pushes and claims are refused with
        UnsafeServerConfigError until they are fixed), or None: what the backend's watch
        found at its last check (issue 34). None for a backend that does not watch."""
        backend = self._given_backend
        return backend.server_problem if isinstance(backend, WatchesServer) else None

    def _event(self, event: str, task: Task, **info: Any) -> None:
        self._plugins.task_event(event, task, self._queue_name, **info)

    def _listening(self) -> bool:
        """False only when the plugin host says no plugin receives task events."""
        check = getattr(self._plugins, "has_event_listeners", None)
        return True if check is None else bool(check())

    # ------------------------------------------------------------------ push
    async def push(self, task: Task) -> AsyncTaskHandle:
        """Store ``task``; returns its handle: the id (a ``str``), ``.duplicate`` and
        ``await .get(timeout)`` for the result (ADR 27). A known id is a no-op (idempotent
        push); so is a task whose ``unique_key`` a live task holds: the handle is then that
        task's id, with ``duplicate`` True."""
        message = to_message(task, self._plugins, self._config, build=self._build)
        if self.coalesce_pushes:  # unasync: remove
            return await self._coalescer.push(task, message)  # unasync: remove
        [handle] = await self._store([task], [message])
        return handle

    def batcher(self, *, max_size: int = 100, max_delay_ms: float = 5.0) -> AsyncPushBatcher:
        """A producer buffer on this queue (ADR 35): its ``push`` takes a task as
        :meth:`push` does and returns a pending push, whose handle is there once the buffer
        was sent in one call: when it holds ``max_size`` tasks, ``max_delay_ms`` after its
        first one, on ``flush()`` and at the end of its ``with`` block (also when the block
        raised). Failed pushes raise BatchPushError from ``flush``/``close``. See
        docs/delivery.md, "Batched pushes"."""
        return AsyncPushBatcher(self, max_size=max_size, max_delay_ms=max_delay_ms)

    async def push_batch(self, tasks: Sequence[Task]) -> list[AsyncTaskHandle]:
        """Store many tasks in one backend call; handles (ids) in the order given.

        Dependency cycles inside the batch are rejected before anything is written, and the
        batch is sent parents first, so a task may depend on one later in ``tasks``.
        """
        tasks = check_tasks(tasks)
        if not tasks:
            return []
        check_batch(tasks)
        ordered = common.ordered_for_push(tasks)
        now = time.time()
        messages = [to_message(t, self._plugins, self._config, now, self._build) for t in ordered]
        handles = await self._store(ordered, messages)
        return common.in_given_order(tasks, ordered, handles)

    # ------------------------------------------------------------------ claim
    async def claim(
        self,
        assigned: Sequence[str] | None = None,
        *,
        steal: Sequence[str] | None = None,
        worker_id: str = "",
    ) -> Task | None:
        """Claim the next task fairly (with a lease), or None when nothing is ready.

        ``assigned`` tenants are served first (fairly among themselves), then ``steal`` ones;
        with neither, every tenant.
        """
        tasks = await self.claim_batch(1, assigned, steal=steal, worker_id=worker_id)
        return tasks[0] if tasks else None

    async def claim_batch(
        self,
        count: int,
        assigned: Sequence[str] | None = None,
        *,
        steal: Sequence[str] | None = None,
        worker_id: str = "",
    ) -> list[Task]:
        """Claim up to ``count`` tasks in one backend call (more only to replace poison;
        ``count`` is clamped to ``arguments.MAX_CLAIM_BATCH``)."""
        count, assigned, steal, worker_id = check_claim(count, assigned, steal, worker_id)
        out: list[Task] = []
        for _ in range(_MAX_POISON_ROUNDS):
            want = count - len(out)
            claimed = await self._backend.claim(
                worker_id=worker_id,
                assigned=assigned or None,
                steal=steal or None,
                count=want,
                lease_seconds=self._config.lease_seconds,
            )
            poisoned = await self._decode_into(out, claimed, worker_id)
            if not poisoned or len(claimed) < want:
                break
        context.register_all(out, self)  # the handlers' XCom contexts (ADR 27), built on use
        return out

    async def claim_when_ready(
        self,
        count: int,
        assigned: Sequence[str] | None = None,
        *,
        steal: Sequence[str] | None = None,
        worker_id: str = "",
        timeout: float,
    ) -> list[Task]:
        """Wait up to ``timeout`` s for work (:meth:`wait_for_work`), then claim up to ``count``
        tasks as :meth:`claim_batch` does, the claim made when the wait ends, woken or not:
        in one round trip on a backend that has ``claim_when_ready`` (ADR 38), else as the
        wait and then the claim. Empty when the time ran out with nothing ready."""
        count, assigned, steal, worker_id = check_claim(count, assigned, steal, worker_id)
        check_wait_timeout(timeout)
        both = getattr(self._backend, "claim_when_ready", None)
        if both is None:
            await self.wait_for_work(timeout)
            return await self.claim_batch(count, assigned, steal=steal, worker_id=worker_id)
        claimed = await both(
            timeout,
            worker_id=worker_id,
            assigned=assigned or None,
            steal=steal or None,
            count=count,
            lease_seconds=self._config.lease_seconds,
        )
        return await self._claimed_tasks(claimed, count, assigned, steal, worker_id)

    async def _claimed_tasks(
        self,
        claimed: Sequence[Claimed],
        count: int,
        assigned: Sequence[str] | None,
        steal: Sequence[str] | None,
        worker_id: str,
    ) -> list[Task]:
        """The tasks of a claim of ``count`` made by a combined call (``claim_when_ready``,
        ``finish_and_claim``): decoded (poison to the DLQ), their XCom contexts registered;
        when poison took places of a full claim, the rest claimed as :meth:`claim_batch` does."""
        out: list[Task] = []
        poisoned = await self._decode_into(out, claimed, worker_id)
        context.register_all(out, self)
        if poisoned and len(claimed) == count:  # poison took places: claim the rest as usual
            out += await self.claim_batch(
                count - len(out), assigned, steal=steal, worker_id=worker_id
            )
        return out

    async def _decode_into(
        self, out: list[Task], claimed: Sequence[Claimed], worker_id: str
    ) -> int:
        """Decode ``claimed`` into ``out`` (with the ``started`` events); a message that
        cannot be decoded goes to the DLQ as POISONED. How many did."""
        listening = self._listening()
        now = time.time()
        poisoned = 0
        for item in claimed:
            try:
                task = decode_message(item.message, self._plugins, item.lease, self._build)
            except TaskSerializationError as exc:
                poisoned += 1
                await self._poison(item.message, item.lease.token, exc)
                continue
            if listening:
                self._event(
                    "started",
                    task,
                    wait_seconds=wait_seconds(item.message, now),
                    recoveries=item.recoveries,
                    worker_id=worker_id,
                )
            out.append(task)
        return poisoned

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
        stub = stub_task(message)
        if stub is not None:
            self._event("dead", stub, error=reason, failure_type=FailureType.POISONED)

    # ------------------------------------------------------------------ acknowledge
    async def fail(
        self, task: Task, error: BaseException, *, run_seconds: float | None = None
    ) -> TaskState:
        """Record a failed attempt: retried after the policy's delay, or into the DLQ.

        Unknown task names and undecodable payloads go to the DLQ as POISONED at once.
        Returns the state the task is in afterwards (SCHEDULED when retried, FAILED in the DLQ).
        """
        lease = lease_of(task)
        error = check_error(error)
        decision = common.decide(self._plugins, task, error)
        run_seconds = check_run_seconds(run_seconds)
        context.discard(task)
        # every failed attempt keeps the error (type, message, traceback summary) in the
        # task's record (ADR 70); a final failure keeps it with the task for its handle too
        state = await self._backend.fail(
            task.task_id,
            lease.token,
            retry_delay=decision.retry_delay,
            failure_type=decision.failure_type,
            reason=decision.reason,
            error=error_record(error),
        )
        self._emit_failure(task, decision, run_seconds)
        return state

    def _emit_failure(
        self, task: Task, decision: common.Decision, run_seconds: float | None
    ) -> None:
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

    async def heartbeat(self, task: Task) -> Task:
        """Extend the task's lease; returns the task with the new deadline."""
        lease = lease_of(task)
        lease_seconds = self._config.lease_seconds
        deadline = await self._backend.heartbeat(task.task_id, lease.token, lease_seconds)
        return common.with_deadline(task, deadline)

    async def heartbeat_batch(self, tasks: Sequence[Task]) -> list[Task | None]:
        """Extend many leases in one backend call: per task, the task with its new deadline,
        or None when its lease is lost or it carries none (that task changes nothing; the
        others are extended), as ``finish_batch`` does.
        """
        renewed = await self.heartbeat_leases(tasks)
        return [task if isinstance(task, Task) else None for task in renewed]

    async def heartbeat_leases(self, tasks: Sequence[Task]) -> list[Task | float | None]:
        """``heartbeat_batch`` telling a canceled task apart (the worker's call, ADR 76): in
        its place ``LEASE_CANCELED``, or ``LEASE_TERMINATE`` after ``cancel(...,
        terminate=True)``; a ``canceled_running`` task event follows for each."""
        tasks = check_tasks(tasks)
        items, positions = common.leased_items(tasks)
        if not items:
            return [None] * len(tasks)
        lease_seconds = self._config.lease_seconds
        batch = getattr(self._backend, "heartbeat_batch", None)
        deadlines: list[float | None]
        if batch is not None:
            deadlines = list(await batch(items, lease_seconds))
        else:  # a third-party backend without the batch call: one call per task
            deadlines = []
            for task_id, token in items:
                try:
                    deadlines.append(await self._backend.heartbeat(task_id, token, lease_seconds))
                except LeaseLostError:
                    deadlines.append(None)
        out = common.renewed_leases(tasks, positions, deadlines)
        for task, entry in zip(tasks, out, strict=True):
            if isinstance(entry, float):
                self._event("canceled_running", task, terminate=entry == LEASE_TERMINATE)
        return out

    async def release(self, task: Task) -> None:
        """Give a claimed task back unstarted: at the head of its queue, no attempt counted."""
        lease = lease_of(task)
        context.discard(task)
        await self._backend.release(task.task_id, lease.token)
        self._event("released", task)

    # ------------------------------------------------------------------ other writes
    async def cancel(self, task_id: str, *, terminate: bool = False) -> bool:
        """Cancel the task ``task_id``; True when this call canceled it. With a plugin
        listening, a ``canceled`` task event follows for it (its dependents canceled with it
        count in the queue's ``canceled`` counter, not in events). A running task's worker
        learns it at its next heartbeat and stops the handler (ADR 76); with ``terminate``,
        a worker under ``fairque worker --processes`` ends the child process running it."""
        task = await self._task_for_event(task_id) if self._listening() else None
        if terminate:
            canceled = await self._backend.cancel(task_id, True)
        else:  # a third-party backend may not take the argument
            canceled = await self._backend.cancel(task_id)
        if canceled and task is not None:
            self._event("canceled", task)
        return canceled

    async def _task_for_event(self, task_id: str) -> Task | None:
        """The stored task as an event carries it; None when unknown or undecodable."""
        message = await self._backend.get_message(validate_id(task_id, "task_id"))
        if message is None:
            return None
        try:
            return decode_message(message, self._plugins, build=self._build)
        except TaskSerializationError:
            return None

    async def set_tenant_weight(self, tenant: str, weight: float, *, tier: int = 0) -> None:
        tenant = validate_id(tenant, "tenant")
        await self._backend.set_tenant_weight(tenant, weight, tier=tier)

    async def set_tenant_limits(
        self,
        tenant: str,
        *,
        max_running: int | None = None,
        rate: float | None = None,
        burst: int | None = None,
        max_queued: int | None = None,
    ) -> None:
        """Set ``tenant``'s own limits (ADR 28); a field left None keeps its value. The tenant
        need not exist yet; its id must be valid (None or another non-str is a TaskTypeError,
        never the queue-wide limits). Takes effect at once."""
        tenant = validate_id(tenant, "tenant")
        given = {"max_running": max_running, "rate": rate, "burst": burst}
        given["max_queued"] = max_queued
        changes = {name: value for name, value in given.items() if value is not None}
        await self._backend.set_limits(changes, tenant=tenant)

    async def get_tenant_limits(self, tenant: str) -> LimitStatus:
        """``tenant``'s limits (own, and in force with its tier's defaults) and where it
        stands: running, queued, capped, next start time and tokens, cap hits, throttles,
        refusals."""
        return await self._backend.limit_status(validate_id(tenant, "tenant"))

    async def clear_tenant_limits(self, tenant: str) -> None:
        """Drop every limit of ``tenant``'s own (its tier's defaults still apply)."""
        tenant = validate_id(tenant, "tenant")
        await self._backend.set_limits(dict.fromkeys(LIMIT_FIELDS), tenant=tenant)

    async def pause(self, tenant: str | None = None) -> None:
        """Stop claims serving ``tenant`` (or, None, anything of the queue) from the next claim
        on; pushes are still accepted and running tasks run to their end."""
        await self._backend.pause(None if tenant is None else validate_id(tenant, "tenant"))

    async def resume(self, tenant: str | None = None) -> None:
        """Undo :meth:`pause`; a resumed tenant is served again like a newcomer, with no
        credit for the time it was paused."""
        await self._backend.resume(None if tenant is None else validate_id(tenant, "tenant"))

    async def is_paused(self, tenant: str | None = None) -> bool:
        """Whether ``tenant`` (its own flag) or, None, the queue is paused."""
        return await self._backend.is_paused(tenant)

    async def purge_tenant(self, tenant: str) -> int:
        """Cancel every queued and scheduled task of ``tenant`` at once (reason ``"purged"``,
        counted as canceled); running tasks are left to finish. How many were purged."""
        return await self._backend.purge_tenant(tenant)

    async def purge_all(self) -> int:
        """:meth:`purge_tenant` for every tenant of the queue, in one atomic step."""
        return await self._backend.purge_all()

    async def requeue_expired(self, limit: int = 100) -> int:
        """The reaper: expired leases back to their queue (workers call this periodically)."""
        return await self._backend.requeue_expired(limit)

    async def wait_for_work(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for the queue's wake signal (``wait_for_work`` of the port).

        True when woken by the signal; a backend without one just sleeps and returns False.
        """
        wait = getattr(self._backend, "wait_for_work", None)
        if wait is None:
            await asyncio.sleep(check_wait_timeout(timeout))
            return False
        return bool(await wait(timeout))

    # ------------------------------------------------------------------ lifecycle
    async def close(self) -> None:
        if not self._closing:
            self._closing = True
            await self._coalescer.settle()  # unasync: remove
            await self._intake_coalescer.settle()  # unasync: remove
            self._closed = True
            await self._given_backend.close()

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
        kind = type(self._given_backend).__name__
        return f"AsyncFairQueue(queue={self._queue_name!r}, backend={kind})"
