"""Key layout of a queue: the only place fairque spells Redis key names.

Every key of one queue starts with the same prefix ``fq:{<queue>}:``. The braces are a Redis
Cluster hash tag, so every key of a queue lives in ONE slot and every script touches one slot:
it runs unchanged on a single server, Redis Cluster, Valkey cluster and MemoryDB. One queue is
therefore served by one shard. To spread a queue over shards, split it into partitions:
``KeySpace(queue, partition=n)`` has the prefix ``fq:{<queue>:<n>}:`` (its own slot), and
:func:`partition_for` maps a tenant to its partition with a stable hash. A queue opened with
``partitions=P`` (ADR 34) uses ``KeySpace(queue, partition=n, partitions=P)``, whose tag
(:func:`partition_tag`) is ``<queue>:<n>`` or ``<queue>:<n>.<salt>``, the first whose slot lies
in the n-th of P equal slot ranges, so the partitions spread evenly over masters that own
contiguous, equal slot ranges (as ``CLUSTER ADDSLOTSRANGE`` and ``--cluster create`` assign
them). ``:`` is outside the queue-name grammar, so no partition tag equals another queue's.

Inside the prefix a key is ``<family>:<id>`` where the family is a fixed word and the id (tenant
or task) always comes LAST, so an id containing ``:`` can never make one family's key equal
another's. Scripts get the anchor key (``meta``) in KEYS and derive tenant and task keys from
its prefix with the same spelling as the builders below: ``lua/_include/keys.lua`` has one
builder per family (``fq_task_key``, ``fq_critical_key`` ...), the only Lua that spells them.

=================  ======  ==============================================================
key                type    contents
=================  ======  ==============================================================
``meta``           hash    ``vtime`` (queue virtual time), ``seq`` (push sequence), ``ready``;
                           with flow control (ADR 28) ``lim`` (1 once a limit was set),
                           ``lim:q`` / ``lim:<tier>`` (queue-wide / tier default limits),
                           ``qtat``, ``qhold`` (the queue-wide rate's GCRA state);
                           ``pau`` = 1 while the queue is paused (``pause.lua``)
``stats``          hash    queue counters (``scoring.STAT_COUNTERS``)
``tiers``          zset    tiers with at least one active tenant, scored by tier
``active:<tier>``  zset    active tenants of a tier, scored by their pass
``delayed``        zset    scheduled task ids by due time (ms)
``leases``         zset    leased task ids by lease deadline (ms)
``dlq``            zset    dead task ids by the time they died (ms)
``wake``           list    the wake signal: at most one token, BLPOPped by idle workers
``sched``          list    the schedule signal: at most one token, raised when the first due
                           time in ``delayed`` moves earlier (idle workers BLPOP it too)
``parked``         zset    tenants held by their rate limit (and ``|queue`` for the queue-wide
                           rate), scored by the time (ms) they may start again; the claim
                           moves the due ones back like due scheduled tasks (ADR 28)
``tenants``        zset    every tenant that ever pushed, scored by its first push (ms)
``intake``         list    messages appended by ``push_intake`` (ADR 47), one versioned entry
                           each (``scripting/calls/intake.py``), ingested by every claim first
``intake:bad``     list    intake entries an ingest could not read, kept raw for an operator
``schedules``      hash    cron schedules: name -> definition (JSON, ``domain/schedules.py``)
``schedule_fired`` hash    cron schedules: name -> last fired tick (epoch ms)
``scheduler_lock`` string  the scheduler lock: the holder's token, with a PX expiry
``task:<id>``      hash    one task: message fields and its state
``waits:<id>``     set     parents a deferred task still waits for
``children:<id>``  list    tasks that depend on this one
``c:<tenant>``     list    the tenant's critical FIFO
``n:<tenant>``     zset    the tenant's scored tasks (member = seq + id)
``tenant:<t>``     hash    ``pass``, ``stride``, ``tier`` of a tenant; its flow control:
                           ``lim`` (own limits), ``tat`` (GCRA, us), ``hold``, ``capd``;
                           ``pau`` = 1 while paused, ``npau`` times paused (``pause.lua``)
``ts:<tenant>``    hash    tenant counters plus ``scheduled`` and ``leased`` gauges
``events``         stream  the queue's event log (ADR 71, ``lua/_include/events.lua``): one
                           entry per change told (completed, failed, ...), capped by
                           ``XADD MAXLEN ~ events_maxlen``
``workers``        hash    live workers: worker id -> heartbeat record (JSON, written by
                           ``fairque_core.ports.workers``; plain commands, no script)
``partitions``     string  P of a partitioned queue (ADR 34), in the unpartitioned prefix
                           ``fq:{<queue>}:`` only; absent for a queue of one partition
=================  ======  ==============================================================

One key lies outside every queue's prefix: ``fq:queues`` (:data:`QUEUES_KEY`, a set of queue
names, its own cluster slot). A backend adds its queue's name with one idempotent ``SADD``
before its first write, so ``fairque queues`` can list the queues of a server without a
``SCAN``; it is touched by single-key commands only.
"""

from __future__ import annotations

import binascii
import functools
import zlib

from fairque_core.domain.errors import DamagedKeyError, TaskValidationError
from fairque_core.domain.validation import is_digits, validate_id, validate_queue_name

__all__ = [
    "KEY_PREFIX",
    "QUEUES_KEY",
    "KeySpace",
    "partition_for",
    "partition_tag",
    "recorded_partitions",
]

KEY_PREFIX = "fq"
#: The registry of queue names on a server (a set, outside every queue's hash tag).
QUEUES_KEY = f"{KEY_PREFIX}:queues"


def partition_for(tenant: str, n_partitions: int) -> int:
    """The partition (0 .. n-1) of ``tenant``: CRC-32 of its id, stable across processes."""
    validate_id(tenant, "tenant")
    if isinstance(n_partitions, bool) or not isinstance(n_partitions, int) or n_partitions < 1:
        raise TaskValidationError("n_partitions", n_partitions, "must be an int >= 1")
    return zlib.crc32(tenant.encode("ascii")) % n_partitions


#: the most partitions a queue records (``QueueConfig.partitions``' bound; kept equal to
#: ``fairque_core.settings.config.MAX_PARTITIONS``, which this module may not import)
_MAX_RECORDED = 1024


def recorded_partitions(raw: bytes | str | None, key: str) -> int:
    """The number of partitions a queue's ``partitions`` record (``raw``, the GET of ``key``)
    holds: 1 when absent. A record that is not a decimal count of 1 to 1,024 was written
    behind fairque's back: DamagedKeyError, typed, naming the key and what it holds (rather
    than a bare ValueError from ``int``). The doctor cannot repair it (the number is not
    derivable from the keys), so the error says how to put it back."""
    if raw is None:
        return 1
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    if is_digits(text) and 1 <= int(text) <= _MAX_RECORDED:
        return int(text)
    raise DamagedKeyError(
        key,
        f"string holding {text[:40]!r}",
        f"string holding the queue's number of partitions (1-{_MAX_RECORDED})",
        advice=f"SET {key} to the number of partitions the queue was created with",
    )


#: Redis Cluster's hash slots (CRC16 of the tag, modulo this).
CLUSTER_SLOTS = 16384


@functools.lru_cache(maxsize=64)
def _placed_tags(queue: str, partitions: int) -> tuple[str, ...]:
    tags: list[str] = []
    for n in range(partitions):
        low = n * CLUSTER_SLOTS // partitions
        high = (n + 1) * CLUSTER_SLOTS // partitions
        base = f"{queue}:{n}"
        tag = base
        salt = 0
        # expected P tries: a slot range is 1/P of the slots (crc_hqx is Redis's CRC16)
        while not low <= binascii.crc_hqx(tag.encode("ascii"), 0) % CLUSTER_SLOTS < high:
            salt += 1
            tag = f"{base}.{salt}"
        tags.append(tag)
    return tuple(tags)


def partition_tag(queue: str, partition: int, partitions: int) -> str:
    """The hash tag of partition ``partition`` of ``queue`` split in ``partitions`` (ADR 34):
    ``<queue>:<n>``, or ``<queue>:<n>.<salt>`` with the smallest salt whose cluster slot lies in
    the n-th of ``partitions`` equal slot ranges. A pure function of its arguments."""
    validate_queue_name(queue)
    for name, value in (("partitions", partitions), ("partition", partition)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise TaskValidationError(name, value, "must be an int >= 0")
    if not 0 <= partition < partitions:
        raise TaskValidationError("partition", partition, f"must be below {partitions}")
    return _placed_tags(queue, partitions)[partition]


class KeySpace:
    """Key builders for one queue (or one partition of it)."""

    __slots__ = ("partition", "prefix", "queue", "tag")

    def __init__(
        self, queue: str, *, partition: int | None = None, partitions: int | None = None
    ) -> None:
        self.queue = validate_queue_name(queue)
        if partition is not None and (
            isinstance(partition, bool) or not isinstance(partition, int) or partition < 0
        ):
            raise TaskValidationError("partition", partition, "must be an int >= 0")
        self.partition = partition
        if partition is None:
            self.tag = self.queue
        elif partitions is None:
            self.tag = f"{self.queue}:{partition}"
        else:
            self.tag = partition_tag(self.queue, partition, partitions)
        self.prefix = f"{KEY_PREFIX}:{{{self.tag}}}:"

    def __repr__(self) -> str:
        return f"KeySpace({self.prefix!r})"

    # -- queue-wide keys
    @property
    def meta(self) -> str:
        """The anchor key every script receives first; others derive from its prefix."""
        return self.prefix + "meta"

    @property
    def stats(self) -> str:
        return self.prefix + "stats"

    @property
    def tiers(self) -> str:
        return self.prefix + "tiers"

    @property
    def delayed(self) -> str:
        return self.prefix + "delayed"

    @property
    def leases(self) -> str:
        return self.prefix + "leases"

    @property
    def dlq(self) -> str:
        return self.prefix + "dlq"

    @property
    def tenants(self) -> str:
        """The tenants index: member = tenant id, score = its first push (ms), kept by
        ``fq_close`` (``lua/_include/core.lua``); Lua builds it with ``fq_tenants_key``."""
        return self.prefix + "tenants"

    def active(self, tier: int) -> str:
        return f"{self.prefix}active:{int(tier)}"

    # -- per task
    def task(self, task_id: str) -> str:
        return self.prefix + "task:" + task_id

    def waits(self, task_id: str) -> str:
        return self.prefix + "waits:" + task_id

    def children(self, task_id: str) -> str:
        return self.prefix + "children:" + task_id

    # -- per tenant
    def critical(self, tenant: str) -> str:
        return self.prefix + "c:" + tenant

    def normal(self, tenant: str) -> str:
        return self.prefix + "n:" + tenant

    def tenant(self, tenant: str) -> str:
        return self.prefix + "tenant:" + tenant

    def tenant_stats(self, tenant: str) -> str:
        return self.prefix + "ts:" + tenant

    # -- results (ADR 27): Lua builds them with fq_done_key, fq_xcom_key, fq_unique_key
    def done(self, task_id: str) -> str:
        """A task's end notification (a list of at most one token; result waiters block on
        it)."""
        return self.prefix + "done:" + task_id

    def xcom(self, tenant: str, task_id: str) -> str:
        """The XCom values of ``task_id`` of ``tenant`` (a hash: key -> encoded value)."""
        return f"{self.prefix}xcom:{len(tenant)}:{tenant}:{task_id}"

    def index(self, state: str, tenant: str | None = None) -> str:
        """The browse index (a sorted set of task ids by end ms, ADR 70) of the tasks that
        ended in ``state``: the queue's, or ``tenant``'s; Lua builds it with ``fq_ix_key``."""
        base = f"{self.prefix}ix:{state}"
        return base if tenant is None else f"{base}:{tenant}"

    def unique(self, tenant: str, key: str) -> str:
        """Which task holds ``tenant``'s unique key ``key`` (``<id>`` or ``<id>|<until ms>``)."""
        return f"{self.prefix}uniq:{len(tenant)}:{tenant}:{key}"

    @property
    def wake(self) -> str:
        """The wake signal (a list of at most one token); Lua builds it with ``fq_wake_key``."""
        return self.prefix + "wake"

    @property
    def intake(self) -> str:
        """The intake (a list of entries ``push_intake`` appended, ADR 47); Lua builds it with
        ``fq_intake_key``."""
        return self.prefix + "intake"

    @property
    def intake_bad(self) -> str:
        """Intake entries an ingest could not read (a list, raw); Lua: ``fq_intake_bad_key``."""
        return self.prefix + "intake:bad"

    @property
    def parked(self) -> str:
        """Tenants held by a rate limit (and ``|queue``), by the time (ms) they may start
        again (a zset; ADR 28); Lua builds it with ``fq_parked_key``."""
        return self.prefix + "parked"

    @property
    def sched(self) -> str:
        """The schedule signal (a list of at most one token); Lua builds it with
        ``fq_sched_key``."""
        return self.prefix + "sched"

    @property
    def events(self) -> str:
        """The event log (a stream, ADR 71); Lua builds it with ``fq_events_key``."""
        return self.prefix + "events"

    @property
    def workers(self) -> str:
        """Live workers' heartbeat records (a hash: worker id -> JSON)."""
        return self.prefix + "workers"

    @property
    def partition_count(self) -> str:
        """The number of partitions of a partitioned queue (a string, ADR 34); read and
        written by ``fairque_redis.partitioned.backend`` in the unpartitioned prefix only."""
        return self.prefix + "partitions"

    # -- cron schedules (ports/schedules.py; scripts get them in KEYS, never derive them)
    @property
    def schedules(self) -> str:
        return self.prefix + "schedules"

    @property
    def schedule_fired(self) -> str:
        return self.prefix + "schedule_fired"

    @property
    def scheduler_lock(self) -> str:
        return self.prefix + "scheduler_lock"

    def anchors(self) -> list[str]:
        """The fixed keys every script declares, in the order ``fq_open`` reads them
        (``lua/_include/core.lua``; ``fq_prefix`` in ``keys.lua`` derives the prefix from the
        first)."""
        return [self.meta, self.stats, self.tiers, self.delayed, self.leases, self.dlq]
