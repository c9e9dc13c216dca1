"""AsyncRedisBackend: the queue backend on Redis, Valkey or a cluster of either.

Every operation is "build the call -> one script call -> parse the reply": argument building
and reply parsing live in :mod:`fairque_redis.scripting.calls` (no I/O), the atomic work in the
Lua scripts, and redis-py exceptions are translated at one edge
(:mod:`fairque_redis.backends.errors`).
"""

# backend.py (RedisBackend) is generated from this file  # unasync: remove
# by tools/gen_sync.py: edit here, then run it.  # unasync: remove

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar, cast

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from fairque_core.domain.enums import FailureType, TaskState
from fairque_core.domain.errors import (
    BackendPermissionError,
    LeaseLostError,
    TaskValidationError,
    UnsafeServerConfigError,
)
from fairque_core.domain.intake import IngestReport
from fairque_core.domain.limits import LimitStatus
from fairque_core.domain.models import Claimed, DLQEntry, Message, QueueSizes
from fairque_core.domain.outcomes import TaskOutcome
from fairque_core.domain.task_records import StoredRecord, StoredSummary
from fairque_core.domain.tenant_figures import TenantFairness
from fairque_core.domain.validation import check_wait_timeout, validate_id, validate_queue_name
from fairque_core.ports import AsyncQueueBackend, Clock, FinishItem, TokenSource, random_token
from fairque_core.settings.accel import Accelerators
from fairque_core.settings.config import FairQueueConfig, QueueConfig, RedisConfig
from fairque_redis.backends import client_options as co
from fairque_redis.backends.errors import translate_errors
from fairque_redis.backends.events_async import AsyncEventsMixin
from fairque_redis.backends.schedules_async import AsyncRedisScheduleStore
from fairque_redis.backends.waits_async import AsyncWaitMixin
from fairque_redis.durability.modes import Durability, replica_waiter
from fairque_redis.keys import QUEUES_KEY, KeySpace
from fairque_redis.scripting.calls import Call, ScriptCalls, intake
from fairque_redis.scripting.calls.base import to_text
from fairque_redis.scripting.function_library import library_for
from fairque_redis.scripting.objects_async import AsyncScript
from fairque_redis.scripting.scripts import fast_includes, sources_for
from fairque_redis.servers.checks import check_memory_policy, memory_policies
from fairque_redis.servers.watch import DEFAULT_INTERVAL, ServerWatch

__all__ = ["AsyncRedisBackend"]

T = TypeVar("T")

log = logging.getLogger("fairque.redis")


class AsyncRedisBackend(AsyncWaitMixin, AsyncEventsMixin):
    """The queue backend on a ``redis.asyncio.Redis`` or ``redis.asyncio.cluster.RedisCluster``.

    The client must return bytes (``decode_responses=False``). Build it with :meth:`from_url`
    or :meth:`from_config` to get fairque's settings (automatic retries off for scripts, TLS
    verification on). ``clock`` is for tests only: it replaces server ``TIME``. Before its
    first command the backend reads ``INFO memory`` once and refuses a server whose
    ``maxmemory-policy`` may evict keys (:class:`UnsafeServerConfigError`) unless
    ``allow_eviction`` is True; :meth:`check_server` runs that check (and a PING) at once.
    With ``durability="replicated"`` (or a :class:`~fairque_redis.durability.modes.Durability`)
    every write but the work loop's claim, heartbeat and reap waits for a replica to confirm
    it, else NotReplicatedError (ADR 33). ``scripts="functions"`` (default: Redis Functions,
    EVALSHA where refused) or ``"eval"`` (ADR 41; also ?scripts=). The intake (ADR 47).

    ``accel`` (default: ``Accelerators.from_env()``, read once, here) turns accelerators off
    for this backend's scripts: ``functions`` off runs them by EVALSHA, ``claim_view`` off
    builds the claim with the plain include (ADR 65). ``intake_entries`` encodes
    ``push_intake``'s messages (default: the reference encoder; a composition root plugs the
    intake client's).

    The ``maxmemory-policy`` is watched after connect (:mod:`fairque_redis.servers.watch`):
    checked again every ``server_check_interval`` seconds and after any failed call; while it
    is unsafe, writing calls raise UnsafeServerConfigError and reads go on."""

    def __init__(
        self,
        client: Redis | RedisCluster,
        *,
        queue: str = "default",
        config: QueueConfig | None = None,
        clock: Clock | None = None,
        token_source: TokenSource | None = None,
        allow_eviction: bool = False,
        durability: Durability | str = "default",
        scripts: str = "functions",
        accel: Accelerators | None = None,
        intake_entries: intake.EntryEncoder | None = None,
        server_check_interval: float = DEFAULT_INTERVAL,
    ) -> None:
        accel = accel if accel is not None else Accelerators.from_env()
        if not accel.on("functions"):  # the library is an accelerator (ADR 41): EVALSHA only
            scripts = "eval"
        fast = fast_includes(accel)
        self.accel = accel
        self._keys = KeySpace(queue)
        self._config = config if config is not None else QueueConfig(name=queue)
        co.require_bytes_client(client)
        self._client = client
        self._owns_client = False
        self._planner = ScriptCalls(
            self._keys,
            self._config,
            clock,
            token_source if token_source is not None else random_token,
        )
        library = library_for(fast) if co.script_mode(scripts) == "functions" else None
        self._scripts: dict[str, AsyncScript] = {  # Redis Functions or EVALSHA (ADR 41)
            name: AsyncScript(client, source, mode=scripts, library=library)
            for name, source in sources_for(fast).items()
        }
        self._intake_entries = intake_entries or intake.encode_entries
        self.script_mode = scripts  # "functions" or "eval" (ADR 41): what settle_layout uses
        self._closed = False
        self._allow_eviction = allow_eviction
        # durability="replicated": writes wait for a replica (ADR 33); None waits for nothing
        self._replicas = replica_waiter(client, Durability.of(durability), queue)
        self._pipelines_claims = not isinstance(client, RedisCluster) and not (
            self._replicas and self._replicas.waits_after("claim")
        )
        # the maxmemory-policy, checked before the first call and watched after (issue 34)
        self.watch = ServerWatch(server_check_interval)
        self._polling = False
        self._registered = False

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        queue: str | None = None,
        cluster: bool = False,
        config: QueueConfig | FairQueueConfig | None = None,
        clock: Clock | None = None,
        token_source: TokenSource | None = None,
        allow_eviction: bool = False,
        durability: Durability | str | None = None,
        accel: Accelerators | None = None,
        intake_entries: intake.EntryEncoder | None = None,
        **redis_opts: Any,
    ) -> AsyncRedisBackend:
        """A backend on a client of its own for ``redis://``, ``rediss://`` (TLS) or
        ``valkey(s)://`` URLs. ``redis_opts`` go to redis-py (``password``, ``username``,
        ``ssl_ca_certs``, ``ssl_certfile``, ``ssl_keyfile``, timeouts ...). A whole
        FairQueueConfig as ``config`` contributes its ``redis`` section too: options,
        durability, ``scripts`` (under a ``scripts=`` option or the URL's ``?scripts=``).
        ``queue`` defaults to the queue config's name (``"default"`` without a config);
        ``allow_eviction`` (or ``redis.allow_eviction``) accepts an evicting server."""
        if durability is None:  # the config's redis section decides (ADR 33)
            durability = Durability.of(config if isinstance(config, FairQueueConfig) else None)
        plan = co.plan_client(
            url,
            queue=queue,
            cluster=cluster,
            config=config,
            allow_eviction=allow_eviction,
            redis_opts=redis_opts,
        )
        client: Redis | RedisCluster = co.open_client(
            plan, cluster=cluster, redis_class=Redis, cluster_class=RedisCluster
        )
        interval = (
            config.redis.server_check_interval
            if isinstance(config, FairQueueConfig)
            else DEFAULT_INTERVAL
        )
        backend = cls(
            client,
            queue=plan.queue,
            config=plan.config,
            clock=clock,
            token_source=token_source,
            allow_eviction=plan.allow_eviction,
            durability=durability,
            scripts=plan.scripts or "functions",
            accel=accel,
            intake_entries=intake_entries,
            server_check_interval=interval,
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
        intake_entries: intake.EntryEncoder | None = None,
    ) -> AsyncRedisBackend:
        """A backend from the ``redis`` and ``queue`` sections of a FairQueueConfig (the
        redis section's options, eviction, durability and scripts: see :meth:`from_url`)."""
        return cls.from_url(
            co.config_url(redis_config),
            cluster=redis_config.cluster,
            config=FairQueueConfig(redis=redis_config, queue=queue_config or QueueConfig()),
            clock=clock,
            token_source=token_source,
            accel=accel,
            intake_entries=intake_entries,
        )

    def __repr__(self) -> str:
        kind = "cluster" if isinstance(self._client, RedisCluster) else "server"
        return f"AsyncRedisBackend(queue={self._keys.queue!r}, {kind})"

    # ------------------------------------------------------------------ plumbing
    @property
    def queue(self) -> str:
        return self._keys.queue

    @property
    def config(self) -> QueueConfig:
        return self._config

    @property
    def keys(self) -> KeySpace:
        return self._keys

    @property
    def client(self) -> Redis | RedisCluster:
        return self._client

    async def check_server(self) -> None:
        """Check the server now (``connect`` calls it): a PING (bad credentials or a refused
        connection raise here, typed), then the ``maxmemory-policy`` check (server_checks)."""
        with translate_errors("ping", writes=False):
            await self._client.ping()
        await self._check_memory_policy("ping", refuse=True)

    @property
    def server_problem(self) -> str | None:
        """Why the server is unsafe now (writes refused), or None (see ServerWatch)."""
        return self.watch.problem

    @property
    def _checked(self) -> bool:
        """Whether the next call can skip the server check (see :class:`ServerWatch`)."""
        return not self.watch.due()

    async def _check_memory_policy(self, operation: str, *, refuse: bool) -> None:
        """Read the policy and book it on :attr:`watch`; an unsafe one raises when ``refuse``
        (a writing call, or the check at connect), else only the watch records it."""
        unreadable = ""
        reply: Any = None
        try:
            with translate_errors(operation, writes=False):
                if isinstance(self._client, RedisCluster):
                    reply = await self._client.info("memory", target_nodes=RedisCluster.PRIMARIES)
                else:
                    reply = await self._client.info("memory")
        except BackendPermissionError as exc:
            unreadable = str(exc)
        policies = {} if unreadable else memory_policies(reply)
        try:
            check_memory_policy(
                policies, allow_eviction=self._allow_eviction, unreadable=unreadable
            )
        except UnsafeServerConfigError as exc:
            self.watch.failed(self._keys.queue, str(exc))
            if refuse:
                raise
            return
        self.watch.passed(self._keys.queue)

    @property
    def schedules(self) -> AsyncRedisScheduleStore:
        """The queue's cron schedules and scheduler lock, on this backend's client."""
        return AsyncRedisScheduleStore(self._client, self._keys, self._scripts)

    async def _run(self, call: Call[T]) -> T:
        if self.watch.due():
            refuse = call.writes or not self.watch.ever_safe
            await self._check_memory_policy(call.script, refuse=refuse)
        if call.registers and not self._registered:
            await self._register_queue()
        script = self._scripts.get(call.script)  # None: a plain command (the intake's RPUSH)
        if call.writes and self._replicas and self._replicas.waits_after(call.script):
            return await self._replicas.run(call, script, self._planner.anchors)
        try:
            if script is None:
                reply = await cast(Any, self._client).execute_command(*call.args)
            else:
                reply = await script(keys=self._planner.anchors, args=call.args)
        except Exception:
            self.watch.forget()  # a refusal may be the first sign of a changed setting
            # redis-py's errors become fairque's, translated only once a call has failed
            with translate_errors(call.script, writes=call.writes):
                raise
        return call.parse(reply)

    async def _register_queue(self) -> None:
        """Enter the queue in the server's registry (``fq:queues``, read by ``fairque queues``)
        before its first storing call, once: one SADD; an ACL refusing it only loses the
        listing. Marked done once the SADD went through or was refused: a connection error
        (or a cancellation) there leaves it to the next storing call, and raises as the call
        would have."""
        try:
            with translate_errors("register_queue", writes=True):
                await self._client.sadd(QUEUES_KEY, self._keys.queue)
            self._registered = True
        except BackendPermissionError as exc:
            self._registered = True
            log.warning(
                "the server's ACL refuses the queue registry (%s on %s): queue %s works, "
                "but `fairque queues` will not list it",
                exc.command or "sadd",
                QUEUES_KEY,
                self._keys.queue,
            )

    # ------------------------------------------------------------------ push and claim
    async def push(self, message: Message) -> bool:
        [created] = await self._run(self._planner.push_one(message))
        return created

    async def push_batch(self, messages: Sequence[Message]) -> list[bool]:
        return await self._run(self._planner.push(messages)) if messages else []

    async def push_batch_detailed(self, messages: Sequence[Message]) -> list[tuple[bool, str]]:
        return await self._run(self._planner.push_detailed(messages)) if messages else []

    async def claim(
        self,
        *,
        worker_id: str = "",
        assigned: Sequence[str] | None = None,
        steal: Sequence[str] | None = None,
        count: int = 1,
        lease_seconds: float | None = None,
    ) -> list[Claimed]:
        call = self._planner.claim(
            worker_id=worker_id,
            assigned=assigned,
            steal=steal,
            count=count,
            lease_seconds=lease_seconds,
        )
        return await self._run(call)

    async def push_intake(self, messages: Sequence[Message]) -> None:
        await self.append_intake(self._intake_entries(self._planner, messages))

    async def append_intake(self, entries: list[bytes]) -> None:
        """One plain RPUSH of checked entries, then the wake if the intake was empty (ADR 47)."""
        if entries and await self._run(intake.append_call(self._keys, entries)) == len(entries):
            with translate_errors("push_intake", writes=True):
                await intake.wake(self._client.pipeline(transaction=False), self._keys).execute()

    async def ingest(self, limit: int = 1000) -> IngestReport:
        plan = intake.IngestPlan(self._planner, limit)  # script calls of 1,000 entries at most
        while plan.due:
            plan.take(await self._run(plan.call()))
        return plan.report

    async def intake_size(self) -> int:
        return await self._run(intake.size_call(self._keys))

    # ------------------------------------------------------------------ leases
    async def heartbeat(
        self, task_id: str, token: str, lease_seconds: float | None = None
    ) -> float:
        [deadline] = await self._run(
            self._planner.heartbeat([(task_id, token)], lease_seconds, strict=True)
        )
        if deadline is None:  # never: a strict heartbeat reports a lost lease as an error
            raise LeaseLostError(task_id)
        return deadline

    async def heartbeat_batch(
        self, items: Sequence[tuple[str, str]], lease_seconds: float | None = None
    ) -> list[float | None]:
        if not items:
            return []
        return await self._run(self._planner.heartbeat(items, lease_seconds, strict=False))

    async def finish(
        self,
        task_id: str,
        token: str,
        result: bytes | None = None,
        xcom: Mapping[str, bytes] | None = None,
        *,
        keep: bool = True,
    ) -> None:
        item: FinishItem = (task_id, token, result) if not xcom else (task_id, token, result, xcom)
        if not keep:
            item = (task_id, token, result, xcom, False)
        await self._run(self._planner.finish([item], strict=True))

    async def finish_batch(self, items: Sequence[FinishItem]) -> list[bool]:
        return await self._run(self._planner.finish(items, strict=False)) if items else []

    async def finish_and_claim(
        self, items: Sequence[FinishItem], **claim: Any
    ) -> tuple[list[bool], list[Claimed]]:
        """``finish_batch(items)``, then ``claim(**claim)``, in one script call (ADR 40)."""
        return await self._run(self._planner.finish_claim(items, self._planner.claim(**claim)))

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
        call = self._planner.fail(task_id, token, retry_delay, failure_type, reason, error=error)
        return await self._run(call)

    async def release(self, task_id: str, token: str) -> None:
        await self._run(self._planner.release(task_id, token))

    async def requeue_expired(self, limit: int = 100) -> int:
        return await self._run(self._planner.requeue_expired(limit))

    # ------------------------------------------------------------------ cancel and reads
    async def cancel(self, task_id: str, terminate: bool = False) -> bool:
        return await self._run(self._planner.cancel(task_id, terminate))

    async def get_message(self, task_id: str) -> Message | None:
        return await self._run(self._planner.get_message(task_id))

    async def get_state(self, task_id: str) -> TaskState | None:
        return await self._run(self._planner.get_state(task_id))

    async def get_result(self, task_id: str) -> bytes | None:
        return await self._run(self._planner.get_result(task_id))

    async def get_outcome(self, task_id: str) -> TaskOutcome | None:
        return await self._run(self._planner.get_outcome(task_id))

    async def get_record(self, task_id: str) -> StoredRecord | None:
        return await self._run(self._planner.get_record(task_id))

    async def list_tasks(
        self,
        *,
        state: TaskState | None = None,
        tenant: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> tuple[list[StoredSummary], str | None]:
        return await self._run(self._planner.list_tasks(state, tenant, limit, cursor))

    async def wait_done(self, task_id: str, timeout: float) -> bool:
        """Block on the task's end notification (``done:<id>``, one token the ending script
        leaves for the result TTL) with ``BLMOVE done done``: it rotates the list onto itself,
        so the token stays and every waiter wakes. The token is left only for a task a waiter
        armed first (watch.lua, one call before blocking): True at once when it has ended; at
        most what the client's socket timeout allows (the caller waits again)."""
        validate_id(task_id, "task_id")
        seconds = co.blocking_seconds(check_wait_timeout(timeout), self._client)
        ended = await self._run(self._planner.watch(task_id))
        if ended or ended is None:
            return bool(ended)
        key = self._keys.done(task_id)
        with translate_errors("wait_done", writes=False):
            if seconds < co.MIN_BLOCK_SECONDS:
                return bool(await self._client.exists(key))
            # redis-py types the timeout int; the server takes decimal seconds (6.0+)
            got = await self._client.blmove(key, key, seconds, "LEFT", "RIGHT")  # type: ignore[arg-type]
        return got is not None

    async def xcom_get(self, tenant: str, items: Sequence[tuple[str, str]]) -> list[bytes | None]:
        return await self._run(self._planner.xcom_get(tenant, items)) if items else []

    async def queue_sizes(self, tenants: Sequence[str]) -> dict[str, QueueSizes]:
        call = self._planner.queue_sizes(tenants)
        return await self._run(call) if tenants else {}

    async def stats(self) -> dict[str, int]:
        return await self._run(self._planner.stats())

    async def tenant_stats(self, tenant: str) -> dict[str, int]:
        return await self._run(self._planner.tenant_stats(tenant))

    async def list_tenants(self, *, limit: int = 100, offset: int = 0) -> tuple[list[str], int]:
        return await self._run(self._planner.list_tenants(limit, offset))

    async def set_tenant_weight(self, tenant: str, weight: float, *, tier: int = 0) -> None:
        await self._run(self._planner.set_tenant_weight(tenant, weight, tier))

    # ------------------------------------------------------------------ DLQ
    async def list_dlq(
        self, *, limit: int = 100, offset: int = 0, failure_type: FailureType | None = None
    ) -> list[DLQEntry]:
        return await self._run(self._planner.list_dlq(limit, offset, failure_type))

    async def requeue_dlq(self, entry_ids: Sequence[str] | None = None) -> int:
        return await self._run(self._planner.requeue_dlq(entry_ids))

    async def purge_dlq(self, entry_ids: Sequence[str] | None = None) -> int:
        return await self._run(self._planner.purge_dlq(entry_ids))

    # ------------------------------------------------------------------ operators
    async def purge_tenant(self, tenant: str) -> int:
        return await self._run(self._planner.purge_tenant(tenant))

    async def purge_all(self) -> int:
        return await self._run(self._planner.purge_all())

    # ------------------------------------------------------------------ flow control
    async def set_limits(
        self,
        changes: Mapping[str, float | None],
        *,
        tenant: str | None = None,
        tier: int | None = None,
    ) -> None:
        await self._run(self._planner.set_limits(changes, tenant=tenant, tier=tier))

    async def limit_status(self, tenant: str) -> LimitStatus:
        return await self._run(self._planner.limit_status(tenant))

    async def pause(self, tenant: str | None = None) -> None:
        await self._run(self._planner.set_paused(True, tenant))

    async def resume(self, tenant: str | None = None) -> None:
        await self._run(self._planner.set_paused(False, tenant))

    async def is_paused(self, tenant: str | None = None) -> bool:
        return await self._run(self._planner.is_paused(tenant))

    async def tenant_weights(self, tenants: Sequence[str]) -> dict[str, tuple[float, int]]:
        call = self._planner.tenant_weights(tenants)
        return await self._run(call) if tenants else {}

    async def tenant_fairness(
        self, tenants: Sequence[str] | None = None, *, limit: int = 100, offset: int = 0
    ) -> list[TenantFairness]:
        call = self._planner.tenant_fairness(tenants, limit, offset)
        return [] if tenants is not None and not tenants else await self._run(call)

    async def list_queues(self) -> list[str]:
        """The queue names registered on this server (``fq:queues``), sorted."""
        with translate_errors("list_queues", writes=False):
            names = await self._client.smembers(QUEUES_KEY)
        out: list[str] = []
        for raw in names:
            name = to_text(raw)
            try:
                out.append(validate_queue_name(name))
            except TaskValidationError:  # not written by fairque: every queue name is checked
                log.warning("%s holds %r, which is no queue name: skipped", QUEUES_KEY, name)
        return sorted(out)

    async def register_worker(self, worker_id: str, record: str) -> None:
        """Write ``worker_id``'s heartbeat record (JSON text) into the queue's workers hash."""
        validate_id(worker_id, "worker_id")
        with translate_errors("register_worker", writes=True):
            await self._client.hset(self._keys.workers, worker_id, record)

    async def list_workers(self) -> dict[str, str]:
        """Every worker's heartbeat record: worker id -> JSON text."""
        with translate_errors("list_workers", writes=False):
            got = await self._client.hgetall(self._keys.workers)
        return {to_text(k): to_text(v) for k, v in got.items()}

    async def remove_workers(self, worker_ids: Sequence[str]) -> int:
        """Drop the records of ``worker_ids`` (stale or stopped workers); how many were there."""
        if not worker_ids:
            return 0
        with translate_errors("remove_workers", writes=True):
            return int(await self._client.hdel(self._keys.workers, *worker_ids))

    async def close(self) -> None:
        """Close the client if this backend made it (``from_url``/``from_config``)."""
        if self._closed:
            return
        self._closed = True
        if self._owns_client:
            await self._client.aclose()

    async def __aenter__(self) -> AsyncRedisBackend:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


_: type[AsyncQueueBackend] = AsyncRedisBackend
