"""The partitioned backend's partitions, its queue-wide calls and its recorded layout (ADR 34).

:class:`AsyncPartitionReads` is the half of ``AsyncPartitionedBackend`` that is not routed by
one tenant or one task: reads merged over every partition (counters summed, tenant and DLQ
pages merged in their one-partition order), operator calls sent to every partition (each
partition's step is atomic; the whole is not), calls of one tenant sent to its partition.
:func:`settle_layout` records the number of partitions and refuses a different one on a
non-empty queue.
"""

# reads.py is generated from this file by tools/gen_sync.py.  # unasync: remove

from __future__ import annotations

import heapq
import time
from collections.abc import Mapping, Sequence
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from fairque_core.domain.enums import FailureType, TaskState
from fairque_core.domain.errors import ConfigurationError, TaskValidationError
from fairque_core.domain.key_limits import KeyLimits, KeyLimitStatus, check_key_limits
from fairque_core.domain.limits import LimitStatus
from fairque_core.domain.models import DLQEntry, Message, QueueSizes
from fairque_core.domain.task_records import (
    StoredSummary,
    check_list_args,
    decode_cursor,
    encode_cursor,
)
from fairque_core.domain.tenant_figures import TenantFairness
from fairque_core.domain.validation import check_page_bound, check_tenant_page, validate_id
from fairque_core.ports import Clock, TokenSource, random_token
from fairque_core.ports.workers import any_live
from fairque_core.settings.accel import Accelerators
from fairque_core.settings.config import QueueConfig
from fairque_redis.backends.backend_async import AsyncRedisBackend
from fairque_redis.backends.errors import translate_errors
from fairque_redis.keys import KeySpace, recorded_partitions
from fairque_redis.partitioned.picker import (
    SUMMARY_SAMPLE,
    PartitionLoad,
    PartitionPicker,
    parse_summary,
)
from fairque_redis.scripting.calls import ScriptCalls
from fairque_redis.scripting.calls.base import to_text
from fairque_redis.scripting.calls.intake import EntryEncoder
from fairque_redis.servers.watch import ServerWatch

__all__ = ["AsyncPartition", "AsyncPartitionReads", "settle_layout"]

# stats gauges that tell whether a layout still holds work (or a pause of the whole queue)
_WORK_GAUGES = ("ready", "scheduled", "leased", "dlq", "intake", "paused")


class AsyncPartition(AsyncRedisBackend):
    """One partition: the one-slot backend on the partition's own keys (same client)."""

    def __init__(
        self,
        client: Redis | RedisCluster,
        *,
        queue: str,
        partition: int,
        partitions: int,
        config: QueueConfig,
        clock: Clock | None = None,
        token_source: TokenSource = random_token,
        allow_eviction: bool = False,
        scripts: str = "functions",
        accel: Accelerators | None = None,
        intake_entries: EntryEncoder | None = None,
    ) -> None:
        super().__init__(
            client,
            queue=queue,
            config=config,
            clock=clock,
            token_source=token_source,
            allow_eviction=allow_eviction,
            scripts=scripts,
            accel=accel,
            intake_entries=intake_entries,
        )
        # one partition is the plain one-slot layout
        self._keys = (
            KeySpace(queue, partition=partition, partitions=partitions)
            if partitions > 1
            else KeySpace(queue)
        )
        self._planner = ScriptCalls(self._keys, self._config, clock, token_source)
        self._part_clock = clock

    def share_watch(self, watch: ServerWatch) -> None:
        """Use partition 0's server watch instead of this partition's own (same client, same
        servers: one check for the whole queue). Each partition still registers the queue's
        name (one idempotent SADD of the same name before its first write)."""
        self.watch = watch

    def check_claim(
        self, worker_id: str, count: int, tenants: Sequence[str], lease_seconds: float | None
    ) -> None:
        """The argument checks of a claim, before any command (TaskValidationError)."""
        for tenant in tenants:
            validate_id(tenant, "tenant")
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise TaskValidationError("count", count, "must be >= 1")
        if not isinstance(worker_id, str):
            raise TaskValidationError("worker_id", worker_id, "must be a str")
        self._planner._lease_ms(lease_seconds)

    def encode_intake(self, messages: Sequence[Message]) -> list[bytes]:
        """``push_intake``'s entries, every message checked first (TaskValidationError,
        PayloadTooLargeError), sending nothing: any partition's ``append_intake`` takes them."""
        return self._intake_entries(self._planner, messages)

    def check_reaper(self, limit: int) -> None:
        """The argument check of ``requeue_expired`` (builds the call, sends nothing)."""
        self._planner.requeue_expired(limit)

    async def next_due_in(self) -> float | None:
        """Seconds until this partition's first scheduled task is due (None: none is)."""
        return await self._run(self._planner.next_due())

    async def load(self) -> PartitionLoad:
        """This partition's summary for the picker (one read-only script call)."""
        keys = self._keys
        now = "" if self._part_clock is None else str(int(self._part_clock() * 1000))
        args: list[str | int] = [now, keys.active(0)[:-1], keys.tenant(""), SUMMARY_SAMPLE]
        with translate_errors("partition_summary", writes=False):
            reply = await self._scripts["partition_summary"](
                keys=[keys.meta, keys.tiers, keys.delayed, keys.parked, keys.intake], args=args
            )
        return parse_summary(reply)


def _is_empty(stats: Mapping[str, int]) -> bool:
    live = (
        stats.get("pushed", 0)
        - stats.get("finished", 0)
        - stats.get("canceled", 0)
        - stats.get("dead", 0)
        + stats.get("dlq_requeued", 0)
    )
    return live <= 0 and not any(stats.get(name, 0) for name in _WORK_GAUGES)


async def _layout_holds(
    client: Redis | RedisCluster, queue: str, partitions: int, config: QueueConfig, scripts: str
) -> str | None:
    """What the queue holds under ``partitions`` partitions that a new layout would lose: its
    tasks (live or dead, intake entries included), a pause of the queue, cron schedules, or a
    live worker (one that opened it with that number and would go on using it); None when it
    holds none of these."""
    parts: list[AsyncRedisBackend]
    if partitions == 1:
        parts = [
            AsyncRedisBackend(
                client, queue=queue, config=config, allow_eviction=True, scripts=scripts
            )
        ]
    else:
        parts = [
            AsyncPartition(
                client,
                queue=queue,
                partition=n,
                partitions=partitions,
                config=config,
                scripts=scripts,
            )
            for n in range(partitions)
        ]
    for n, part in enumerate(parts):
        if n:
            part.watch.trust()
        stats = await part.stats()
        if not _is_empty(stats):
            return "a pause of the queue" if stats.get("paused") else "tasks"
    keys = parts[0]._keys  # schedules and worker records live in partition 0 (ADR 34)
    with translate_errors("partitions", writes=False):
        schedules = await client.exists(keys.schedules)
        workers = await client.hgetall(keys.workers)
    if schedules:
        return "cron schedules"
    if any_live({to_text(k): to_text(v) for k, v in workers.items()}, time.time()):
        return "a live worker"
    return None


async def settle_layout(
    client: Redis | RedisCluster,
    queue: str,
    partitions: int,
    *,
    config: QueueConfig | None = None,
    scripts: str = "functions",
) -> None:
    """Check ``partitions`` against the number recorded for ``queue`` (its ``partitions``
    key; absent = 1) and record it. A different number is accepted only when the queue holds
    nothing under the recorded one that the new layout would lose (see :func:`_layout_holds`;
    it is re-created empty); otherwise ConfigurationError: changing P on a non-empty queue is
    refused. One GET when the numbers agree. ``scripts``:
    how the reads of that check run (ADR 41), as the caller's backend runs its own."""
    config = config if config is not None else QueueConfig(name=queue)
    key = KeySpace(queue).partition_count
    with translate_errors("partitions", writes=False):
        raw = await client.get(key)
    recorded = recorded_partitions(raw, key)
    if recorded == partitions:
        return
    held = await _layout_holds(client, queue, recorded, config, scripts)
    if held is not None:
        raise ConfigurationError(
            f"queue {queue!r} has {recorded} partition(s) and holds {held}: changing the number "
            f"of partitions (to {partitions}) on a non-empty queue is refused; drain it first "
            "or open it with the recorded number (ADR 34)",
            path="queue.partitions",
            value=partitions,
        )
    with translate_errors("partitions", writes=True):
        if partitions == 1:
            await client.delete(key)
        elif raw is None:
            if not await client.set(key, str(partitions), nx=True):  # another client was first
                await settle_layout(client, queue, partitions, config=config, scripts=scripts)
        else:
            await client.set(key, str(partitions))


class AsyncPartitionReads:
    """Queue-wide reads, operator calls and calls of one tenant (see the module doc)."""

    _parts: Sequence[AsyncPartition]
    _count: int
    _picker: PartitionPicker

    def _part_of(self, tenant: str) -> int:
        raise NotImplementedError

    async def _ready(self) -> None:
        raise NotImplementedError

    def _tenant_part(self, tenant: str) -> AsyncPartition:
        return self._parts[self._part_of(tenant)]

    def _groups(self, tenants: Sequence[str]) -> dict[int, list[int]]:
        groups: dict[int, list[int]] = {}
        for i, tenant in enumerate(tenants):
            groups.setdefault(self._part_of(tenant), []).append(i)
        return groups

    # ------------------------------------------------------------------ counters
    async def stats(self) -> dict[str, int]:
        """Every partition's counters and gauges summed; ``paused`` is 1 when every
        partition is paused."""
        await self._ready()
        total: dict[str, int] = {}
        paused = True
        for part in self._parts:
            got = await part.stats()
            paused = paused and bool(got.get("paused", 0))
            for name, value in got.items():
                total[name] = total.get(name, 0) + value
        total["paused"] = int(paused)
        return total

    async def tenant_stats(self, tenant: str) -> dict[str, int]:
        return await self._tenant_part(tenant).tenant_stats(tenant)

    async def queue_sizes(self, tenants: Sequence[str]) -> dict[str, QueueSizes]:
        out: dict[str, QueueSizes] = {}
        if not tenants:
            return out
        for n, indexes in sorted(self._groups(tenants).items()):
            out.update(await self._parts[n].queue_sizes([tenants[i] for i in indexes]))
        return {t: out[t] for t in tenants if t in out}

    # ------------------------------------------------------------------ tenants
    async def list_tenants(self, *, limit: int = 100, offset: int = 0) -> tuple[list[str], int]:
        """The partitions' tenant indexes merged by first push, then id (one ZCARD and one
        ZRANGE of the first ``offset + limit`` entries per partition)."""
        page, skip = check_tenant_page(limit, offset)
        await self._ready()
        total = 0
        rows: list[list[tuple[float, str]]] = []
        for part in self._parts:
            with translate_errors("tenants", writes=False):
                total += int(await part.client.zcard(part.keys.tenants))
                got: list[Any] = (
                    await part.client.zrange(part.keys.tenants, 0, skip + page - 1, withscores=True)
                    if page
                    else []
                )
            rows.append([(float(score), to_text(member)) for member, score in got])
        merged = [tenant for _score, tenant in heapq.merge(*rows)]
        return merged[skip : skip + page], total

    async def set_tenant_weight(self, tenant: str, weight: float, *, tier: int = 0) -> None:
        await self._tenant_part(tenant).set_tenant_weight(tenant, weight, tier=tier)
        self._picker.touch()

    async def tenant_weights(self, tenants: Sequence[str]) -> dict[str, tuple[float, int]]:
        out: dict[str, tuple[float, int]] = {}
        for n, indexes in sorted(self._groups(tenants).items()):
            out.update(await self._parts[n].tenant_weights([tenants[i] for i in indexes]))
        return {t: out[t] for t in tenants if t in out}

    async def tenant_fairness(
        self, tenants: Sequence[str] | None = None, *, limit: int = 100, offset: int = 0
    ) -> list[TenantFairness]:
        """Figures of ``tenants`` (each from its partition, in the order asked) or of a
        page of :meth:`list_tenants`. Virtual times and lags are those of each tenant's own
        partition."""
        if tenants is None:
            tenants, _total = await self.list_tenants(limit=limit, offset=offset)
        ids = list(tenants)
        if not ids:
            return []
        out: list[TenantFairness | None] = [None] * len(ids)
        for n, indexes in sorted(self._groups(ids).items()):
            got = await self._parts[n].tenant_fairness([ids[i] for i in indexes])
            for i, figures in zip(indexes, got, strict=True):
                out[i] = figures
        return [figures for figures in out if figures is not None]

    # ------------------------------------------------------------------ browse (ADR 70)
    async def list_tasks(
        self,
        *,
        state: TaskState | None = None,
        tenant: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> tuple[list[StoredSummary], str | None]:
        """A tenant's page from its partition; else every partition's page from the same
        cursor, merged newest first: the next cursor is the last entry taken (every entry
        newer than it was in some partition's page)."""
        state, limit = check_list_args(state, tenant, limit)
        decode_cursor(cursor)
        await self._ready()
        if tenant is not None:
            part = self._tenant_part(tenant)
            return await part.list_tasks(state=state, tenant=tenant, limit=limit, cursor=cursor)
        pages = [
            await part.list_tasks(state=state, limit=limit, cursor=cursor) for part in self._parts
        ]
        merged = sorted(
            (item for items, _ in pages for item in items),
            key=lambda s: (s.ended_ms, s.task_id),
            reverse=True,
        )
        items = merged[:limit]
        more = [after for _, after in pages if after is not None]
        if len(merged) > limit or (more and items):
            return items, encode_cursor(items[-1].ended_ms, items[-1].task_id)
        # (a partition that stopped short at its scan bound and found nothing: go on from it)
        return items, max(more, key=lambda c: decode_cursor(c) or (0, "")) if more else None

    # ------------------------------------------------------------------ DLQ
    async def list_dlq(
        self, *, limit: int = 100, offset: int = 0, failure_type: FailureType | None = None
    ) -> list[DLQEntry]:
        """The partitions' dead letters merged oldest first (ties by entry id)."""
        check_page_bound("limit", limit)
        check_page_bound("offset", offset)
        if limit == 0:
            return []
        await self._ready()
        rows: list[list[DLQEntry]] = []
        for part in self._parts:
            got = await part.list_dlq(limit=offset + limit, offset=0, failure_type=failure_type)
            rows.append(got)
        merged = list(heapq.merge(*rows, key=lambda e: (e.moved_at, e.entry_id)))
        return merged[offset : offset + limit]

    async def _by_entry(self, name: str, entry_ids: Sequence[str] | None) -> int:
        await self._ready()
        done = 0
        for part in self._parts:
            call = part.requeue_dlq if name == "requeue" else part.purge_dlq
            done += await call(None if entry_ids is None else list(entry_ids))
        return done

    async def requeue_dlq(self, entry_ids: Sequence[str] | None = None) -> int:
        """Every partition's requeue (an id is known to one partition only)."""
        if entry_ids is not None and not entry_ids:
            return 0
        done = await self._by_entry("requeue", entry_ids)
        self._picker.touch()
        return done

    async def purge_dlq(self, entry_ids: Sequence[str] | None = None) -> int:
        if entry_ids is not None and not entry_ids:
            return 0
        return await self._by_entry("purge", entry_ids)

    # ------------------------------------------------------------------ operators
    async def purge_tenant(self, tenant: str) -> int:
        purged = await self._tenant_part(tenant).purge_tenant(tenant)
        self._picker.touch()  # its weight left its partition's: refresh before the next claim
        return purged

    async def purge_all(self) -> int:
        """Each partition's purge, one after the other (each one atomic, the whole not)."""
        await self._ready()
        purged = 0
        for part in self._parts:
            purged += await part.purge_all()
        return purged

    async def set_limits(
        self,
        changes: Mapping[str, float | None],
        *,
        tenant: str | None = None,
        tier: int | None = None,
    ) -> None:
        """A tenant's limits go to its partition; a tier's defaults and the queue-wide limits
        go to every partition, where each holds for that partition (ADR 34: a queue-wide
        ``max_running`` of N lets up to P x N tasks run)."""
        if tenant is not None:
            await self._tenant_part(tenant).set_limits(changes, tenant=tenant, tier=tier)
        else:
            await self._ready()
            for part in self._parts:
                await part.set_limits(changes, tenant=tenant, tier=tier)
        self._picker.touch()

    async def limit_status(self, tenant: str) -> LimitStatus:
        return await self._tenant_part(tenant).limit_status(tenant)

    async def set_key_limits(
        self,
        key: str,
        *,
        max_running: int | None = None,
        rate: float | None = None,
        burst: int | None = None,
        per_tenant: bool = True,
    ) -> None:
        """Per-tenant key limits go to every partition (a tenant's scope lives in its
        partition); a global key's cap or rate would need one atomic count across partitions,
        which no script has: refused typed (ADR 79)."""
        limits = check_key_limits(key, max_running, rate, burst, per_tenant)
        if limits is not None and not limits.per_tenant:
            raise TaskValidationError(
                "per_tenant",
                per_tenant,
                "a partitioned queue takes per-tenant key limits only (ADR 79)",
            )
        await self._ready()
        for part in self._parts:
            await part.set_key_limits(
                key, max_running=max_running, rate=rate, burst=burst, per_tenant=per_tenant
            )
        self._picker.touch()  # parked tasks went back to their queues

    async def list_key_limits(self) -> dict[str, KeyLimits]:
        """Every partition holds the same key limits (set on all): the first one's."""
        await self._ready()
        return await self._parts[0].list_key_limits()

    async def key_limit_status(self, key: str) -> KeyLimitStatus:
        """Every partition's counts of ``key``, merged (its tenants are apart)."""
        await self._ready()
        running: dict[str, int] = {}
        parked: dict[str, int] = {}
        limits = None
        for part in self._parts:
            status = await part.key_limit_status(key)
            limits = limits or status.limits
            running.update(status.running)
            parked.update(status.parked)
        return KeyLimitStatus(
            key=key,
            limits=limits,
            running=dict(sorted(running.items())),
            parked=dict(sorted(parked.items())),
        )

    async def pause(self, tenant: str | None = None) -> None:
        if tenant is not None:
            await self._tenant_part(tenant).pause(tenant)
            return
        await self._ready()
        for part in self._parts:
            await part.pause(None)

    async def resume(self, tenant: str | None = None) -> None:
        if tenant is not None:
            await self._tenant_part(tenant).resume(tenant)
        else:
            await self._ready()
            for part in self._parts:
                await part.resume(None)
        self._picker.touch()

    async def is_paused(self, tenant: str | None = None) -> bool:
        """A tenant's own flag; for the queue, whether every partition is paused."""
        if tenant is not None:
            return await self._tenant_part(tenant).is_paused(tenant)
        paused = True
        for part in self._parts:
            paused = paused and await part.is_paused(None)
        return paused

    # ------------------------------------------------------------------ registry and workers
    async def list_queues(self) -> list[str]:
        return await self._parts[0].list_queues()

    async def register_worker(self, worker_id: str, record: str) -> None:
        """Worker records are kept in partition 0."""
        await self._parts[0].register_worker(worker_id, record)

    async def list_workers(self) -> dict[str, str]:
        return await self._parts[0].list_workers()

    async def remove_workers(self, worker_ids: Sequence[str]) -> int:
        return await self._parts[0].remove_workers(worker_ids)
