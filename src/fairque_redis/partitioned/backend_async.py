"""AsyncPartitionedBackend: one queue over P hash-tag partitions (ADR 34).

A queue opened with ``partitions=P > 1`` keeps P complete copies of the one-slot layout, each
under its own tag (``KeySpace(queue, partition=n, partitions=P)``, placed in the n-th of P
equal slot ranges, so on a cluster they spread over the masters). A tenant lives in exactly
one partition, ``partition_for(tenant, P)``, so everything about one tenant (its order, caps,
rate, unique keys, XCom, pause) is the unchanged one-slot logic. This backend implements the
same port by routing:

- pushes by tenant (a batch is split per partition, one script call each);
- per-task calls (finish, heartbeat, fail, release, cancel, reads by id) to the partition the
  task is in: remembered for tasks pushed or claimed through this backend, else found by
  asking each partition in turn;
- claims to the partition the :class:`~fairque_redis.partitioned.picker.PartitionPicker` chooses
  in proportion to the weight of its active tenants, falling through to the next when one is
  dry;
- queue-wide reads and operator calls to every partition, merged
  (:mod:`fairque_redis.partitioned.reads_async`).

Per tenant every guarantee is exact; across tenants of different partitions fairness is
approximate within the bound ADR 34 states. The number of partitions is recorded in the queue's
``partitions`` key; opening a non-empty queue with another P is a ConfigurationError.
"""

# backend.py (PartitionedBackend) is generated from this file  # unasync: remove
# by tools/gen_sync.py: edit here, then run it.  # unasync: remove

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from fairque_core.domain.enums import FailureType, TaskState
from fairque_core.domain.errors import ConfigurationError, TaskValidationError
from fairque_core.domain.intake import IngestReport, check_ingest_limit
from fairque_core.domain.models import Claimed, Message
from fairque_core.domain.outcomes import TaskOutcome
from fairque_core.domain.task_records import StoredRecord
from fairque_core.domain.validation import check_wait_timeout
from fairque_core.ports import AsyncQueueBackend, Clock, FinishItem, TokenSource, random_token
from fairque_core.settings.accel import Accelerators
from fairque_core.settings.config import FairQueueConfig, QueueConfig, RedisConfig
from fairque_redis.backends.client_options import config_url, open_client, plan_client
from fairque_redis.backends.schedules_async import AsyncRedisScheduleStore
from fairque_redis.keys import KeySpace, partition_for
from fairque_redis.partitioned.events_async import AsyncPartitionEvents
from fairque_redis.partitioned.picker import PartitionPicker
from fairque_redis.partitioned.reads_async import AsyncPartition, settle_layout
from fairque_redis.partitioned.routing_async import AsyncPartitionRouting
from fairque_redis.scripting.calls.intake import EntryEncoder
from fairque_redis.servers.watch import DEFAULT_INTERVAL, ServerWatch

__all__ = ["AsyncPartitionedBackend", "settle_layout"]

T = TypeVar("T")

#: An idle wait blocks on one partition this long, then looks at the others again.
_WAIT_SLICE_SECONDS = 0.05


class AsyncPartitionedBackend(AsyncPartitionRouting, AsyncPartitionEvents):
    """The queue backend of a queue split in ``partitions`` hash-tag partitions.

    Build it with :meth:`from_url` or :meth:`from_config` (``connect(..., partitions=P)`` does),
    or around a bytes client. ``partitions`` defaults to the queue config's. The recorded
    number of partitions is checked before the first command (:meth:`check_layout`).
    ``scripts``, ``accel`` and ``intake_entries`` are every partition's (as AsyncRedisBackend's).
    """

    def __init__(
        self,
        client: Redis | RedisCluster,
        *,
        queue: str = "default",
        partitions: int | None = None,
        config: QueueConfig | None = None,
        clock: Clock | None = None,
        token_source: TokenSource | None = None,
        allow_eviction: bool = False,
        scripts: str = "functions",
        accel: Accelerators | None = None,
        intake_entries: EntryEncoder | None = None,
        server_check_interval: float = DEFAULT_INTERVAL,
    ) -> None:
        config = config if config is not None else QueueConfig(name=queue)
        accel = accel if accel is not None else Accelerators.from_env()  # read once, here
        count = config.partitions if partitions is None else partitions
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ConfigurationError(
                "partitions must be an int >= 1", path="queue.partitions", value=count
            )
        self._config = config
        self._client = client
        self._owns_client = False
        self._clock = clock
        self._count = count
        tokens = token_source if token_source is not None else random_token
        self._parts = [
            AsyncPartition(
                client,
                queue=queue,
                partition=n,
                partitions=count,
                config=config,
                clock=clock,
                token_source=tokens,
                allow_eviction=allow_eviction,
                scripts=scripts,
                accel=accel,
                intake_entries=intake_entries,
            )
            for n in range(count)
        ]
        watch = ServerWatch(server_check_interval)  # one for the queue's client (issue 34)
        for part in self._parts:
            part.share_watch(watch)
        self._picker = PartitionPicker(count)
        self._where: OrderedDict[str, int] = OrderedDict()
        # lease token -> partition, from the claims of this backend: a lease call goes where
        # its claim came from, also when two tenants of different partitions hold the same id
        self._leases: OrderedDict[str, int] = OrderedDict()
        self._layout_checked = False
        self._home = 0
        self._closed = False

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        queue: str | None = None,
        partitions: int | None = None,
        cluster: bool = False,
        config: QueueConfig | FairQueueConfig | None = None,
        clock: Clock | None = None,
        token_source: TokenSource | None = None,
        allow_eviction: bool = False,
        accel: Accelerators | None = None,
        intake_entries: EntryEncoder | None = None,
        **redis_opts: Any,
    ) -> AsyncPartitionedBackend:
        """A backend on a client of its own (as ``AsyncRedisBackend.from_url``; every
        partition runs its scripts as ``scripts=``, ``?scripts=`` or ``redis.scripts`` say)."""
        plan = plan_client(
            url,
            queue=queue,
            cluster=cluster,
            config=config,
            allow_eviction=allow_eviction,
            redis_opts=redis_opts,
        )
        client: Redis | RedisCluster = open_client(
            plan, cluster=cluster, redis_class=Redis, cluster_class=RedisCluster
        )
        redis_section = config.redis if isinstance(config, FairQueueConfig) else None
        backend = cls(
            client,
            queue=plan.queue,
            partitions=partitions,
            config=plan.config if plan.config is not None else QueueConfig(name=plan.queue),
            clock=clock,
            token_source=token_source,
            allow_eviction=plan.allow_eviction,
            scripts=plan.scripts or "functions",
            accel=accel,
            intake_entries=intake_entries,
            server_check_interval=(
                redis_section.server_check_interval if redis_section else DEFAULT_INTERVAL
            ),
        )
        backend._owns_client = True
        return backend

    @classmethod
    def from_config(
        cls,
        redis_config: RedisConfig,
        queue_config: QueueConfig | None = None,
        *,
        clock: Clock | None = None,
        token_source: TokenSource | None = None,
        accel: Accelerators | None = None,
        intake_entries: EntryEncoder | None = None,
    ) -> AsyncPartitionedBackend:
        """A backend from the ``redis`` and ``queue`` sections of a FairQueueConfig."""
        queue_config = queue_config if queue_config is not None else QueueConfig()
        if redis_config.durability != "default":  # as connect() refuses it (ADR 33)
            raise ConfigurationError(
                "durability='replicated' does not support a partitioned queue yet",
                path="redis.durability",
                value=redis_config.durability,
            )
        return cls.from_url(
            config_url(redis_config),
            cluster=redis_config.cluster,
            config=FairQueueConfig(redis=redis_config, queue=queue_config),
            clock=clock,
            token_source=token_source,
            accel=accel,
            intake_entries=intake_entries,
        )

    def __repr__(self) -> str:
        kind = "cluster" if isinstance(self._client, RedisCluster) else "server"
        return f"AsyncPartitionedBackend(queue={self.queue!r}, partitions={self._count}, {kind})"

    # ------------------------------------------------------------------ plumbing
    @property
    def queue(self) -> str:
        return self._parts[0].queue

    @property
    def config(self) -> QueueConfig:
        return self._config

    @property
    def partitions(self) -> int:
        return self._count

    @property
    def script_mode(self) -> str:
        """How every partition runs its scripts: ``"functions"`` or ``"eval"`` (ADR 41)."""
        return self._parts[0].script_mode

    @property
    def client(self) -> Redis | RedisCluster:
        return self._client

    @property
    def schedules(self) -> AsyncRedisScheduleStore:
        """The queue's cron schedules: kept in partition 0."""
        return self._parts[0].schedules

    def partition_keys(self) -> list[KeySpace]:
        """The key space of each partition, in order."""
        return [part.keys for part in self._parts]

    @property
    def server_problem(self) -> str | None:
        """Why the server is unsafe now (writes refused), or None (one watch per queue)."""
        return self._parts[0].watch.problem

    async def check_server(self) -> None:
        """The server check of ``AsyncRedisBackend.check_server``, then :meth:`check_layout`."""
        await self._parts[0].check_server()
        await self.check_layout()

    async def check_layout(self) -> None:
        """Record this queue's number of partitions, or refuse (ConfigurationError) when the
        queue holds tasks under another number (see :func:`settle_layout`)."""
        if not self._layout_checked:
            await settle_layout(
                self._client,
                self.queue,
                self._count,
                config=self._config,
                scripts=self.script_mode,
            )
            self._layout_checked = True

    async def _ready(self) -> None:
        if not self._layout_checked:
            await self.check_layout()

    def _part_of(self, tenant: str) -> int:
        """``tenant``'s partition; an invalid id goes to partition 0, whose call then refuses
        it (typed, naming its own field) before sending anything."""
        try:
            return partition_for(tenant, self._count)
        except TaskValidationError:
            return 0

    # ------------------------------------------------------------------ push
    async def push(self, message: Message) -> bool:
        n = self._part_of(message.tenant)
        await self._ready()
        created = await self._parts[n].push(message)
        self._remember(message.task_id, n)
        self._picker.touch()
        return created

    def _split(self, tenants: Sequence[str]) -> dict[int, list[int]]:
        """Indexes of ``tenants`` per partition; every id checked first (a bad one refuses
        the whole batch before anything is sent)."""
        groups: dict[int, list[int]] = {}
        for i, tenant in enumerate(tenants):
            groups.setdefault(partition_for(tenant, self._count), []).append(i)
        return groups

    async def push_batch(self, messages: Sequence[Message]) -> list[bool]:
        return [stored for stored, _holder in await self.push_batch_detailed(messages)]

    async def push_batch_detailed(self, messages: Sequence[Message]) -> list[tuple[bool, str]]:
        """Per partition one script call, in partition order; a refusal (a full queue) of a
        later partition leaves the earlier partitions' pushes stored."""
        if not messages:
            return []
        groups = self._split([m.tenant for m in messages])
        await self._ready()
        out: list[tuple[bool, str]] = [(False, "")] * len(messages)
        for n, indexes in sorted(groups.items()):
            got = await self._parts[n].push_batch_detailed([messages[i] for i in indexes])
            for i, result in zip(indexes, got, strict=True):
                out[i] = result
                self._remember(messages[i].task_id, n)
        self._picker.touch()
        return out

    # ------------------------------------------------------------------ the intake (ADR 47)
    async def push_intake(self, messages: Sequence[Message]) -> None:
        """Each partition's entries in its own intake (tenant -> partition as for push): one
        RPUSH per partition, in partition order; every message checked (once) before the first."""
        entries = self._parts[0].encode_intake(messages)
        if not entries:
            return
        groups = self._split([m.tenant for m in messages])
        await self._ready()
        for n, indexes in sorted(groups.items()):
            await self._parts[n].append_intake([entries[i] for i in indexes])
            for i in indexes:
                self._remember(messages[i].task_id, n)
        self._picker.touch()

    async def ingest(self, limit: int = 1000) -> IngestReport:
        """Up to ``limit`` entries in all, partition after partition; ``left`` counts every
        partition's intake."""
        room = check_ingest_limit(limit)
        await self._ready()
        total = IngestReport()
        for part in self._parts:
            got = await part.ingest(room) if room else IngestReport(left=await part.intake_size())
            total += got
            room -= got.done
        if total.ingested:
            self._picker.touch()
        return total

    async def intake_size(self) -> int:
        await self._ready()
        return sum([await part.intake_size() for part in self._parts])

    # ------------------------------------------------------------------ claim
    def _clock_mark(self) -> object:
        return None if self._clock is None else self._clock()

    async def _refresh(self) -> None:
        loads = [await part.load() for part in self._parts]
        self._picker.update(loads, self._clock_mark())

    async def _claim_from(
        self, n: int, count: int, worker_id: str, lease_seconds: float | None, **groups: Any
    ) -> list[Claimed]:
        got = await self._parts[n].claim(
            worker_id=worker_id, count=count, lease_seconds=lease_seconds, **groups
        )
        for claimed in got:
            self._remember(claimed.message.task_id, n)
            self._remember_lease(claimed.lease.token, n)
        return got

    async def claim(
        self,
        *,
        worker_id: str = "",
        assigned: Sequence[str] | None = None,
        steal: Sequence[str] | None = None,
        count: int = 1,
        lease_seconds: float | None = None,
    ) -> list[Claimed]:
        """Up to ``count`` tasks: from the partitions the picker orders (weighted by their
        active tenants), falling through to the next while short; with ``assigned`` or
        ``steal``, from those tenants' partitions (every assigned one before any steal one)."""
        if assigned or steal:
            return await self._claim_pinned(worker_id, assigned, steal, count, lease_seconds)
        self._parts[0].check_claim(worker_id, count, (), lease_seconds)
        await self._ready()
        out: list[Claimed] = []
        refreshed = False
        if self._picker.stale(self._clock_mark()):
            await self._refresh()
            refreshed = True
        while True:
            for n in self._picker.order():
                want = count - len(out)
                got = await self._claim_from(n, want, worker_id, lease_seconds)
                self._picker.served(n, want, len(got))
                out.extend(got)
                if len(out) >= count:
                    return out
            if out or refreshed:
                return out
            await self._refresh()  # every partition it knew of ran dry: look again once
            refreshed = True

    async def _claim_pinned(
        self,
        worker_id: str,
        assigned: Sequence[str] | None,
        steal: Sequence[str] | None,
        count: int,
        lease_seconds: float | None,
    ) -> list[Claimed]:
        mine = list(assigned or ())
        others = list(steal or ())
        self._parts[0].check_claim(worker_id, count, (*mine, *others), lease_seconds)
        await self._ready()
        out: list[Claimed] = []
        for role, tenants in (("assigned", mine), ("steal", others)):
            groups = self._split(tenants)
            for n in self._picker.order() + list(range(self._count)):
                if n not in groups:
                    continue
                names = [tenants[i] for i in groups.pop(n)]
                group = {"assigned": names} if role == "assigned" else {"steal": names}
                out.extend(
                    await self._claim_from(n, count - len(out), worker_id, lease_seconds, **group)
                )
                if len(out) >= count:
                    return out
            if out:  # steal tenants are served only when no assigned one had work
                return out
        return out

    # ------------------------------------------------------------------ leases
    async def heartbeat(
        self, task_id: str, token: str, lease_seconds: float | None = None
    ) -> float:
        part = self._parts[await self._lease_index(task_id, token)]
        return await part.heartbeat(task_id, token, lease_seconds)

    async def heartbeat_batch(
        self, items: Sequence[tuple[str, str]], lease_seconds: float | None = None
    ) -> list[float | None]:
        if not items:
            return []
        groups: dict[int, list[int]] = {}
        for i, (task_id, token) in enumerate(items):
            groups.setdefault(await self._lease_index(task_id, token), []).append(i)
        out: list[float | None] = [None] * len(items)
        for n, indexes in sorted(groups.items()):
            got = await self._parts[n].heartbeat_batch([items[i] for i in indexes], lease_seconds)
            for i, deadline in zip(indexes, got, strict=True):
                out[i] = deadline
        return out

    async def finish(
        self,
        task_id: str,
        token: str,
        result: bytes | None = None,
        xcom: Mapping[str, bytes] | None = None,
        *,
        keep: bool = True,
    ) -> None:
        part = self._parts[await self._lease_index(task_id, token)]
        with self._ending(token):
            await part.finish(task_id, token, result, xcom, keep=keep)

    async def finish_batch(self, items: Sequence[FinishItem]) -> list[bool]:
        if not items:
            return []
        groups: dict[int, list[int]] = {}
        for i, item in enumerate(items):
            groups.setdefault(await self._lease_index(item[0], item[1]), []).append(i)
        out = [False] * len(items)
        for n, indexes in sorted(groups.items()):
            got = await self._parts[n].finish_batch([items[i] for i in indexes])
            for i, done in zip(indexes, got, strict=True):
                out[i] = done
            # finished or lost: either way the lease is over
            self._forget_leases(items[i][1] for i in indexes)
        # no refresh forced: a capped tenant that a finish lets in again counts from the next
        # periodic refresh (or at once when every known partition came back dry)
        return out

    async def fail(
        self,
        task_id: str,
        token: str,
        *,
        retry_delay: float | None,
        failure_type: FailureType = FailureType.FAILED,
        reason: str = "",
        error: str = "",
    ) -> TaskState:
        part = self._parts[await self._lease_index(task_id, token)]
        with self._ending(token):
            return await part.fail(
                task_id,
                token,
                retry_delay=retry_delay,
                failure_type=failure_type,
                reason=reason,
                error=error,
            )

    async def release(self, task_id: str, token: str) -> None:
        part = self._parts[await self._lease_index(task_id, token)]
        with self._ending(token):
            await part.release(task_id, token)
        self._picker.touch()

    async def requeue_expired(self, limit: int = 100) -> int:
        """The reaper over every partition, starting at a rotating one, at most ``limit``
        leases in all."""
        self._parts[0].check_reaper(limit)
        handled = 0
        start = self._home
        self._home = (self._home + 1) % self._count
        await self._ready()
        for k in range(self._count):
            if handled >= limit:
                break
            handled += await self._parts[(start + k) % self._count].requeue_expired(limit - handled)
        if handled:
            self._picker.touch()
        return handled

    # ------------------------------------------------------------------ by task id
    async def cancel(self, task_id: str, terminate: bool = False) -> bool:
        part = await self._task_part(task_id)
        return await part.cancel(task_id, terminate)

    async def get_message(self, task_id: str) -> Message | None:
        return await (await self._task_part(task_id)).get_message(task_id)

    async def get_state(self, task_id: str) -> TaskState | None:
        return await (await self._task_part(task_id)).get_state(task_id)

    async def get_result(self, task_id: str) -> bytes | None:
        return await (await self._task_part(task_id)).get_result(task_id)

    async def get_outcome(self, task_id: str) -> TaskOutcome | None:
        return await (await self._task_part(task_id)).get_outcome(task_id)

    async def get_record(self, task_id: str) -> StoredRecord | None:
        return await (await self._task_part(task_id)).get_record(task_id)

    async def wait_done(self, task_id: str, timeout: float) -> bool:
        """The wait of the task's partition; a task no partition knows yet is looked for
        again every wait slice until ``timeout``."""
        seconds = check_wait_timeout(timeout)
        deadline = time.monotonic() + seconds
        while True:
            n = await self._locate(task_id)
            if n != 0 or task_id in self._where:
                left = max(deadline - time.monotonic(), 0.001)
                return await self._parts[n].wait_done(task_id, left)
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            await asyncio.sleep(min(left, _WAIT_SLICE_SECONDS))

    async def xcom_get(self, tenant: str, items: Sequence[tuple[str, str]]) -> list[bytes | None]:
        return await self._parts[self._part_of(tenant)].xcom_get(tenant, items)

    # ------------------------------------------------------------------ idle workers
    async def wait_for_work(self, timeout: float) -> bool:
        """True once any partition has work for a claim (a wake token, a due scheduled
        task); the wait blocks on one partition for a short slice at a time, rotating, and
        takes the others' pending tokens in between, so a push to any partition ends it
        within a slice (:data:`_WAIT_SLICE_SECONDS`)."""
        seconds = check_wait_timeout(timeout)
        deadline = time.monotonic() + seconds
        await self._ready()
        while True:
            for k in range(self._count):
                if await self._parts[(self._home + k) % self._count].wait_for_work(0):
                    self._picker.touch()
                    return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self._home = (self._home + 1) % self._count
            if await self._parts[self._home].wait_for_work(min(left, _WAIT_SLICE_SECONDS)):
                self._picker.touch()
                return True

    async def close(self) -> None:
        """Close the client if this backend made it."""
        if self._closed:
            return
        self._closed = True
        if self._owns_client:
            await self._client.aclose()

    async def __aenter__(self) -> AsyncPartitionedBackend:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


_: type[AsyncQueueBackend] = AsyncPartitionedBackend
