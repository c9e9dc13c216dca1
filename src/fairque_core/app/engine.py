"""FairQueue: the synchronous engine facade over a :class:`~fairque_core.ports.QueueBackend`.

The engine owns what is the same for every backend: validation, the codec and header hooks,
the payload size limit, dependency checks of a batch, decoding of claimed tasks (a task that
cannot be decoded goes to the DLQ as POISONED and never escapes ``pop``), the retry decision
and the task events. Backends only store and move messages.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from types import TracebackType
from typing import Any, cast
from urllib.parse import urlsplit

from fairque_core.app import engine_support as common
from fairque_core.app.config import FairQueueConfig, QueueConfig
from fairque_core.domain.deps import check_batch
from fairque_core.domain.enums import FailureType, TaskState
from fairque_core.domain.errors import LeaseLostError, TaskSerializationError, TaskValidationError
from fairque_core.domain.models import DLQEntry, Message, Task
from fairque_core.domain.validation import check_tenant_page, check_wait_timeout
from fairque_core.memory.model import InMemoryBackend
from fairque_core.ports import QueueBackend

__all__ = ["FairQueue"]

# A claim that returns only poisoned messages is retried this many times in one pop.
_MAX_POISON_ROUNDS = 16


class FairQueue:
    """A fair multi-tenant queue: push, claim with leases, finish, fail, inspect.

    ``plugins`` are hook implementations added to the defaults (JSON codec, retry policy);
    ``plugin_host`` replaces the whole plugin set (tests, or a host shared by several queues).
    ``config`` defaults to the backend's own queue config.
    """

    def __init__(
        self,
        backend: QueueBackend,
        *,
        plugins: Sequence[object] = (),
        config: QueueConfig | None = None,
        plugin_host: common.PluginHostLike | None = None,
    ) -> None:
        self._config = common.resolve_config(backend, config)
        if isinstance(backend, InMemoryBackend):
            # The model is not thread-safe; workers use a queue from several threads.
            backend = cast(QueueBackend, _Synchronized(backend))
        self._backend = backend
        self._plugins = common.make_host(plugins, plugin_host, self._config)
        self._queue_name = backend.queue
        self._closed = False

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_config(
        cls,
        config_or_path: FairQueueConfig | str | os.PathLike[str],
        *,
        plugins: Sequence[object] = (),
        plugin_host: common.PluginHostLike | None = None,
        **backend_options: Any,
    ) -> FairQueue:
        """A queue built from a config (or a YAML file path).

        The backend comes from the URL's scheme: ``memory://`` is the in-process reference
        backend, any other scheme is looked up in the ``fairque.backends`` entry-point group
        (``redis``, ``rediss``, ``valkey``, ``valkeys`` by the Redis adapter). Tenant weights
        and tiers of the queue section are applied before the queue is returned.
        """
        if isinstance(config_or_path, FairQueueConfig):
            config = config_or_path
        else:
            config = FairQueueConfig.from_yaml(config_or_path)
        url = common.backend_url(config)
        scheme = urlsplit(url).scheme.lower()
        backend: QueueBackend
        if scheme == "memory":
            backend = common.memory_backend(config)
        else:
            factory = common.load_backend_factory(scheme)
            backend = factory(
                url,
                queue=config.queue.name,
                config=config,
                cluster=config.redis.cluster,
                **backend_options,
            )
        queue = cls(backend, plugins=plugins, config=config.queue, plugin_host=plugin_host)
        try:
            queue.apply_tenant_config()
        except BaseException:
            queue.close()
            raise
        return queue

    def apply_tenant_config(self) -> None:
        """Set the weights and tiers named in the queue config on the backend."""
        for user_id, (weight, tier) in self._config.tenant_weight_table().items():
            self._backend.set_tenant_weight(user_id, weight, tier=tier)

    # ------------------------------------------------------------------ properties
    @property
    def backend(self) -> QueueBackend:
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

    def _listening(self) -> bool:
        """False only when the plugin host says no plugin receives task events."""
        check = getattr(self._plugins, "has_event_listeners", None)
        return True if check is None else bool(check())

    # ------------------------------------------------------------------ push
    def push(self, task: Task) -> str:
        """Store ``task``; returns its id. A known id is a no-op (idempotent push)."""
        message = common.to_message(task, self._plugins, self._config)
        created = self._backend.push(message)
        self._event("pushed", task, duplicate=not created)
        return task.task_id

    def push_batch(self, tasks: Sequence[Task]) -> list[str]:
        """Store many tasks in one backend call; ids in the order given.

        Dependency cycles inside the batch are rejected before anything is written, and the
        batch is sent parents first, so a task may depend on one later in ``tasks``.
        """
        tasks = list(tasks)
        if not tasks:
            return []
        check_batch(tasks)
        ordered = common.ordered_for_push(tasks)
        now = time.time()
        messages = [common.to_message(t, self._plugins, self._config, now) for t in ordered]
        created = self._backend.push_batch(messages)
        for task, new in zip(ordered, created, strict=True):
            self._event("pushed", task, duplicate=not new)
        return [t.task_id for t in tasks]

    # ------------------------------------------------------------------ claim
    def pop(
        self,
        user_list: Sequence[str] | None = None,
        *,
        steal: Sequence[str] | None = None,
        worker_id: str = "",
    ) -> Task | None:
        """Claim the next task fairly (with a lease), or None when nothing is ready."""
        tasks = self.pop_batch(1, user_list, steal=steal, worker_id=worker_id)
        return tasks[0] if tasks else None

    def pop_batch(
        self,
        count: int,
        user_list: Sequence[str] | None = None,
        *,
        steal: Sequence[str] | None = None,
        worker_id: str = "",
    ) -> list[Task]:
        """Claim up to ``count`` tasks in one backend call (more only to replace poison)."""
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise TaskValidationError("count", count, "must be an int >= 1")
        out: list[Task] = []
        listening = self._listening()
        for _ in range(_MAX_POISON_ROUNDS):
            want = count - len(out)
            claimed = self._backend.claim(
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
                    self._poison(item.message, item.lease.token, exc)
                    continue
                if listening:
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

    def _poison(self, message: Message, token: str, error: TaskSerializationError) -> None:
        reason = common.describe(error)
        try:
            self._backend.fail(
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
    def finish(
        self, task: Task, result: object = None, *, run_seconds: float | None = None
    ) -> None:
        """Mark a claimed task FINISHED with ``result`` (stored as JSON)."""
        lease = common.require_lease(task)
        body = common.encode_result(task.task_id, result)
        self._backend.finish(task.task_id, lease.token, body)
        self._event("finished", task, run_seconds=run_seconds)

    def finish_many(
        self, items: Sequence[tuple[Task, object]], *, run_seconds: Sequence[float] | None = None
    ) -> list[bool]:
        """Finish many claimed tasks in one backend call; True per task finished.

        A task whose lease is lost (or that carries none) gets False and changes nothing.
        Results that are not JSON-serializable raise TaskSerializationError before any write.
        """
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
            flags = list(batch(entries))
        else:
            flags = []
            for task_id, token, body in entries:
                try:
                    self._backend.finish(task_id, token, body)
                except LeaseLostError:
                    flags.append(False)
                else:
                    flags.append(True)
        listening = self._listening()
        for index, ok in zip(positions, flags, strict=True):
            done[index] = bool(ok)
            if ok and listening:
                seconds = None if run_seconds is None else run_seconds[index]
                self._event("finished", items[index][0], run_seconds=seconds)
        return done

    def fail(
        self, task: Task, error: BaseException, *, run_seconds: float | None = None
    ) -> TaskState:
        """Record a failed attempt: retried after the policy's delay, or into the DLQ.

        Unknown task names and undecodable payloads go to the DLQ as POISONED at once.
        Returns the state the task is in afterwards (SCHEDULED when retried, FAILED in the DLQ).
        """
        lease = common.require_lease(task)
        decision = common.decide(self._plugins, task, error)
        state = self._backend.fail(
            task.task_id,
            lease.token,
            retry_delay=decision.retry_delay,
            failure_type=decision.failure_type,
            reason=decision.reason,
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

    def heartbeat(self, task: Task) -> Task:
        """Extend the task's lease; returns the task with the new deadline."""
        lease = common.require_lease(task)
        deadline = self._backend.heartbeat(task.task_id, lease.token, self._config.lease_seconds)
        return common.with_deadline(task, deadline)

    def heartbeat_many(self, tasks: Sequence[Task]) -> list[Task | None]:
        """Extend many leases in one backend call: per task, the task with its new deadline,
        or None when its lease is lost or it carries none (that task changes nothing; the
        others are extended), as ``finish_many`` does.
        """
        items, positions = common.leased_items(tasks)
        if not items:
            return [None] * len(tasks)
        batch = getattr(self._backend, "heartbeat_batch", None)
        deadlines: list[float | None]
        if batch is not None:
            deadlines = list(batch(items, self._config.lease_seconds))
        else:  # a third-party backend without the batch call: one call per task
            deadlines = []
            for task_id, token in items:
                try:
                    deadlines.append(
                        self._backend.heartbeat(task_id, token, self._config.lease_seconds)
                    )
                except LeaseLostError:
                    deadlines.append(None)
        return common.renewed_tasks(tasks, positions, deadlines)

    def release(self, task: Task) -> None:
        """Give a claimed task back unstarted: at the head of its queue, no attempt counted."""
        lease = common.require_lease(task)
        self._backend.release(task.task_id, lease.token)
        self._event("released", task)

    # ------------------------------------------------------------------ other writes
    def cancel(self, task_id: str) -> bool:
        return self._backend.cancel(task_id)

    def set_tenant_weight(self, user_id: str, weight: float, *, tier: int = 0) -> None:
        self._backend.set_tenant_weight(user_id, weight, tier=tier)

    def requeue_expired(self, limit: int = 100) -> int:
        """The reaper: expired leases back to their queue (workers call this periodically)."""
        return self._backend.requeue_expired(limit)

    def wait_for_work(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for the queue's wake signal (``QueueBackend.wait_for_work``).

        True when woken by the signal; a backend without one just sleeps and returns False.
        """
        wait = getattr(self._backend, "wait_for_work", None)
        if wait is None:
            time.sleep(check_wait_timeout(timeout))
            return False
        return bool(wait(timeout))

    # ------------------------------------------------------------------ reads
    def get_task(self, task_id: str) -> Task | None:
        """The stored task, decoded (TaskSerializationError if its payload is undecodable)."""
        message = self._backend.get_message(task_id)
        return None if message is None else common.decode_message(message, self._plugins)

    def get_state(self, task_id: str) -> TaskState | None:
        return self._backend.get_state(task_id)

    def get_result(self, task_id: str) -> Any:
        """The finished task's result (decoded JSON), or None."""
        return common.decode_result(self._backend.get_result(task_id))

    def get_queue_sizes(self, user_id: str) -> dict[str, int]:
        return self._backend.queue_sizes([user_id])[user_id].as_dict()

    def get_queue_sizes_batch(self, user_ids: Sequence[str]) -> dict[str, dict[str, int]]:
        sizes = self._backend.queue_sizes(list(user_ids))
        return {user_id: s.as_dict() for user_id, s in sizes.items()}

    def get_stats(self) -> dict[str, Any]:
        return dict(self._backend.stats())

    def get_tenant_stats(self, user_id: str) -> dict[str, int]:
        return dict(self._backend.tenant_stats(user_id))

    def list_tenants(self, *, limit: int = 100, offset: int = 0) -> tuple[list[str], int]:
        """A page of the tenants the queue has seen (first-push order) and their total
        (``QueueBackend.list_tenants``); ``limit`` at most 1000."""
        limit, offset = check_tenant_page(limit, offset)
        return self._backend.list_tenants(limit=limit, offset=offset)

    # ------------------------------------------------------------------ DLQ
    def list_dlq(
        self, *, limit: int = 100, offset: int = 0, failure_type: FailureType | None = None
    ) -> list[DLQEntry]:
        return self._backend.list_dlq(limit=limit, offset=offset, failure_type=failure_type)

    def requeue_dlq(self, entry_ids: Sequence[str] | None = None) -> int:
        return self._backend.requeue_dlq(entry_ids)

    def purge_dlq(self, entry_ids: Sequence[str] | None = None) -> int:
        return self._backend.purge_dlq(entry_ids)

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._backend.close()

    def __enter__(self) -> FairQueue:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"FairQueue(queue={self._queue_name!r}, backend={type(self._backend).__name__})"


class _Synchronized:
    """Serialises every call on a backend that is not thread-safe (the in-memory model)."""

    def __init__(self, backend: InMemoryBackend) -> None:
        self._wrapped = backend
        self._lock = threading.RLock()

    @property
    def queue(self) -> str:
        return self._wrapped.queue

    @property
    def config(self) -> QueueConfig:
        return self._wrapped.config

    @property
    def model(self) -> InMemoryBackend:
        return self._wrapped

    def wait_for_work(self, timeout: float) -> bool:
        # blocks, so never under the lock; the model guards its wake signal itself
        return self._wrapped.wait_for_work(timeout)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._wrapped, name)
        if not callable(attr):
            return attr
        lock = self._lock

        def locked(*args: Any, **kwargs: Any) -> Any:
            with lock:
                return attr(*args, **kwargs)

        return locked
