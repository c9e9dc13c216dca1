"""Configuration values: attrs classes for the redis, worker and queue sections.

This module holds the section values and their rules only; the whole document
(:class:`~fairque_core.settings.config.FairQueueConfig`) is in :mod:`fairque_core.settings.config`,
and reading it from YAML, plain dicts and the environment is :mod:`fairque_core.settings.loading`
(so importing the values never imports yaml or cattrs).

* Each class validates itself (attrs validators), so a bad value is a ``ConfigurationError``
  however the object was built. Its ``path`` names the field (``worker.max_concurrent_tasks``)
  and its ``value`` the bad value; passwords are never echoed.
* Every field here is read by fairque somewhere. The seed's fields that never had an effect
  (``queue.stats_prefix``, ``queue.default_max_retries`` ... ``redis.decode_responses``) are
  gone; the loader still accepts them in a file with a ``DeprecationWarning`` (see
  ``fairque_core.settings.loading.REMOVED_FIELDS``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import attrs

from fairque_core.domain.errors import (
    ConfigurationError,
    ScheduleValidationError,
    TaskValidationError,
)
from fairque_core.domain.limits import LIMIT_FIELDS, check_changes
from fairque_core.domain.queue_picker import QUEUE_ORDERS
from fairque_core.domain.schedules import Schedule
from fairque_core.domain.scoring import stride_for
from fairque_core.domain.validation import MAX_EPOCH_SECONDS, validate_id, validate_queue_name
from fairque_core.settings.url_masking import MASK as _MASK
from fairque_core.settings.url_masking import SECRET_QUERY_KEYS, mask_url

__all__ = [
    "MAX_PARTITIONS",
    "MAX_TIER_RANK",
    "SCRIPT_MODES",
    "SECRET_QUERY_KEYS",
    "LimitSetting",
    "LimitsConfig",
    "QueueConfig",
    "RedisConfig",
    "TierConfig",
    "WorkerConfig",
    "check_schedules",
    "mask_url",
]

#: The highest strict-tier rank (TierConfig.rank, `fairque tenant set-tier`).
MAX_TIER_RANK = 1000
#: The most partitions a queue may have (QueueConfig.partitions, ADR 34).
MAX_PARTITIONS = 1024


# ---------------------------------------------------------------------- errors and masking


class _FieldError(ConfigurationError):
    """A bad field value: ``path`` is the full dotted path, ``field`` the class-relative one."""

    def __init__(self, section: str, field: str, value: object, rule: str) -> None:
        self.field = field
        self.rule = rule
        path = f"{section}.{field}" if section else field
        shown = _shown(path, value)
        super().__init__(f"invalid {path} {shown}: {rule}", path=path, value=_stored(path, value))


def _is_secret(path: str) -> bool:
    return path.rsplit(".", 1)[-1] == "password"


def _stored(path: str, value: object) -> object:
    if _is_secret(path):
        return _MASK
    if isinstance(value, str) and path.rsplit(".", 1)[-1] == "url":
        return mask_url(value)
    return value


def _shown(path: str, value: object) -> str:
    shown = repr(_stored(path, value))
    return shown if len(shown) <= 80 else shown[:77] + "..."


def _repr_url(url: str | None) -> str:
    return repr(url if url is None else mask_url(url))


# ---------------------------------------------------------------------- validators

Validator = Callable[[Any, "attrs.Attribute[Any]", Any], None]


def _section(inst: object) -> str:
    return str(getattr(type(inst), "_section", ""))


def _fail(inst: object, attribute: attrs.Attribute[Any], value: object, rule: str) -> _FieldError:
    return _FieldError(_section(inst), attribute.name, value, rule)


def _bound_text(bound: float) -> str:
    """A bound as a rule shows it: whole numbers in full (253402300799, not 2.53402e+11)."""
    return f"{bound:.0f}" if float(bound).is_integer() else f"{bound:g}"


def _number(
    low: float,
    high: float = math.inf,
    *,
    integer: bool = False,
    low_open: bool = False,
    high_open: bool = False,
) -> Validator:
    """A validator: a finite number (an int if ``integer``) between ``low`` and ``high``."""
    kind = "an int" if integer else "a number"
    if high == math.inf:
        rule = f"must be {kind} {'>' if low_open else '>='} {_bound_text(low)}"
    else:
        rule = (
            f"must be {kind} in [{_bound_text(low)}, {_bound_text(high)}{')' if high_open else ']'}"
        )
    allowed = (int,) if integer else (int, float)

    def check(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if isinstance(value, bool) or not isinstance(value, allowed):
            raise _fail(inst, attribute, value, rule)
        assert isinstance(value, (int, float))  # narrowed for mypy
        try:  # an int too large for a float would overflow every later use as seconds
            finite = math.isfinite(value)
        except OverflowError:
            finite = False
        too_low = value <= low if low_open else value < low
        too_high = value >= high if high_open else value > high
        if not finite or too_low or too_high:
            raise _fail(inst, attribute, value, rule)

    return check


def _optional(check: Validator) -> Validator:
    def optional(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if value is not None:
            check(inst, attribute, value)

    return optional


def _type(kind: type, rule: str) -> Validator:
    def check(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if not isinstance(value, kind):
            raise _fail(inst, attribute, value, rule)

    return check


def _an_id(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    try:
        validate_id(value, attribute.name)
    except TaskValidationError as exc:
        raise _fail(inst, attribute, value, exc.rule) from None


def _id_list(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, list):
        raise _fail(inst, attribute, value, "must be a list of ids")
    for index, item in enumerate(value):
        try:
            validate_id(item, attribute.name)
        except TaskValidationError as exc:
            raise _FieldError(_section(inst), f"{attribute.name}.{index}", item, exc.rule) from None


def _queue_name(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    try:
        validate_queue_name(value)
    except TaskValidationError as exc:
        raise _fail(inst, attribute, value, exc.rule) from None


def _weight_rule(section: str, path: str, value: object) -> None:
    try:
        stride_for(value)  # type: ignore[arg-type]  # stride_for checks the type itself
    except TaskValidationError as exc:
        raise _FieldError(section, path, value, exc.rule) from None


def _weight(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    _weight_rule(_section(inst), attribute.name, value)


def _queue_weights(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """A mapping of queue names to weights (a worker's queues, ADR 69)."""
    if not isinstance(value, dict):
        raise _fail(inst, attribute, value, "must be a mapping of queue names to weights")
    for key, weight in value.items():
        path = f"{attribute.name}.{key}"
        try:
            validate_queue_name(key)
        except TaskValidationError as exc:
            raise _FieldError(_section(inst), path, key, exc.rule) from None
        _weight_rule(_section(inst), path, weight)


def _id_keys(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, dict):
        raise _fail(inst, attribute, value, "must be a mapping")
    for key in value:
        try:
            validate_id(key, attribute.name)
        except TaskValidationError as exc:
            raise _FieldError(_section(inst), f"{attribute.name}.{key}", key, exc.rule) from None


_POSITIVE = _number(0, low_open=True)
#: A span the backends keep in integer milliseconds: at least 1 ms, at most the span from the
#: epoch to the year 9999 (a lease of 1e16 s was lost at its first heartbeat; a result TTL of
#: 1e16 s dropped the result at once; a lease of 1e-9 s rounds to 0 ms).
_SPAN = _number(0.001, MAX_EPOCH_SECONDS)
_NON_NEGATIVE = _number(0)
_POSITIVE_INT = _number(1, integer=True)
_NON_NEGATIVE_INT = _number(0, integer=True)
_BOOL = _type(bool, "must be true or false")
_OPTIONAL_STR = _optional(_type(str, "must be a string"))
DURABILITY_MODES = ("default", "replicated")  # RedisConfig.durability (ADR 33)
SCRIPT_MODES = ("functions", "eval")  # RedisConfig.scripts (ADR 41)
_REPLICATION_MS = _number(1, 60000, integer=True)


def _choice(allowed: tuple[str, ...]) -> Validator:
    rule = "must be one of " + ", ".join(repr(value) for value in allowed)

    def check(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if value not in allowed:
            raise _fail(inst, attribute, value, rule)

    return check


# ---------------------------------------------------------------------- the classes


@attrs.define(kw_only=True)
class RedisConfig:
    """How to reach the server. ``url`` wins over host/port when set.

    The password never shows in ``repr``/``str``; a password inside ``url`` is masked there.
    """

    _section: ClassVar[str] = "redis"

    url: str | None = attrs.field(default=None, repr=_repr_url, validator=_OPTIONAL_STR)
    host: str = attrs.field(default="localhost", validator=_type(str, "must be a string"))
    port: int = attrs.field(default=6379, validator=_number(1, 65535, integer=True))
    db: int = attrs.field(default=0, validator=_NON_NEGATIVE_INT)
    password: str | None = attrs.field(default=None, repr=False, validator=_OPTIONAL_STR)
    username: str | None = attrs.field(default=None, validator=_OPTIONAL_STR)
    socket_timeout: float = attrs.field(default=5.0, validator=_POSITIVE)
    socket_connect_timeout: float = attrs.field(default=5.0, validator=_POSITIVE)
    health_check_interval: int = attrs.field(default=30, validator=_NON_NEGATIVE_INT)
    cluster: bool = attrs.field(default=False, validator=_BOOL)
    ssl_ca_certs: str | None = attrs.field(default=None, validator=_OPTIONAL_STR)
    ssl_certfile: str | None = attrs.field(default=None, validator=_OPTIONAL_STR)
    ssl_keyfile: str | None = attrs.field(default=None, validator=_OPTIONAL_STR)
    # True accepts a server whose maxmemory-policy may evict keys (tasks can then be lost
    # silently); by default such a server is refused with UnsafeServerConfigError (ADR 26)
    allow_eviction: bool = attrs.field(default=False, validator=_BOOL)
    # seconds between two checks of the server's settings after connect (and after any
    # failed call); while they are unsafe, pushes and claims are refused (issue 34)
    server_check_interval: float = attrs.field(default=10.0, validator=_POSITIVE)
    # "replicated": writes wait for a replica (WAITAOF 0 1, else WAIT 1), NotReplicatedError
    # after replication_timeout_ms; replica_fsync False waits with WAIT only (ADR 33)
    durability: str = attrs.field(default="default", validator=_choice(DURABILITY_MODES))
    replication_timeout_ms: int = attrs.field(default=500, validator=_REPLICATION_MS)
    replica_fsync: bool = attrs.field(default=True, validator=_BOOL)
    # "functions": scripts run as Redis Functions (FCALL; EVALSHA where the server or ACL
    # refuses them); "eval": always EVALSHA. A ?scripts= in url wins over this field (ADR 41)
    scripts: str = attrs.field(default="functions", validator=_choice(SCRIPT_MODES))


@attrs.define(kw_only=True)
class WorkerConfig:
    """One worker's identity, affinity and limits.

    ``assigned_tenants`` are served first (fairly among themselves), ``steal_targets`` when
    those are idle.
    """

    _section: ClassVar[str] = "worker"

    id: str = attrs.field(default="worker-1", validator=_an_id)
    assigned_tenants: list[str] = attrs.field(factory=list, validator=_id_list)
    steal_targets: list[str] = attrs.field(factory=list, validator=_id_list)
    poll_interval_seconds: float = attrs.field(default=1.0, validator=_POSITIVE)
    task_timeout_seconds: float = attrs.field(default=300.0, validator=_POSITIVE)
    max_concurrent_tasks: int = attrs.field(default=10, validator=_POSITIVE_INT)
    graceful_shutdown_timeout: float = attrs.field(default=30.0, validator=_NON_NEGATIVE)
    # default: lease_seconds / 3
    heartbeat_interval_seconds: float | None = attrs.field(
        default=None, validator=_optional(_POSITIVE)
    )
    reaper_interval_seconds: float = attrs.field(default=1.0, validator=_POSITIVE)
    # the worker's record in the queue's workers registry is rewritten this often; readers
    # count it gone after 3 intervals without one (ADR 72); 0: the worker keeps no record
    registry_interval_seconds: float = attrs.field(default=5.0, validator=_NON_NEGATIVE)
    claim_batch_size: int = attrs.field(default=0, validator=_NON_NEGATIVE_INT)  # 0: free slots
    #: the queues ``fairque worker`` serves, name -> weight, in order (empty: the queue
    #: section's name alone; ``--queue`` flags replace it); ADR 69
    queues: dict[str, float] = attrs.field(factory=dict, validator=_queue_weights)
    #: between those queues: "weighted" (stride scheduling by weight) or "strict" (in order)
    queue_order: str = attrs.field(default="weighted", validator=_choice(QUEUE_ORDERS))

    def __attrs_post_init__(self) -> None:
        both = sorted(set(self.assigned_tenants) & set(self.steal_targets))
        if both:
            raise _FieldError(
                self._section, "steal_targets", both, "must not repeat tenants of assigned_tenants"
            )


def _limit(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """A flow-control limit (ADR 28): None (no limit) or a value ``check_changes`` accepts."""
    if value is None:
        return
    try:
        check_changes({attribute.name: value})
    except TaskValidationError as exc:
        raise _fail(inst, attribute, value, exc.rule) from None


def _limit_changes(record: object) -> dict[str, float | None]:
    """The limits a config record sets (its fields that are not None)."""
    values = {name: getattr(record, name) for name in LIMIT_FIELDS}
    return {name: value for name, value in values.items() if value is not None}


@attrs.define(kw_only=True)
class LimitsConfig:
    """Flow-control limits (ADR 28), each optional (None: no limit): ``max_running`` leases at
    once, ``rate`` starts per second with a ``burst``, ``max_queued`` ready + scheduled tasks.
    Used per tenant (``queue.tenant_limits``) and queue-wide (``queue.limits``, without
    ``max_queued``)."""

    max_running: int | None = attrs.field(default=None, validator=_limit)
    rate: float | None = attrs.field(default=None, validator=_limit)
    burst: int | None = attrs.field(default=None, validator=_limit)
    max_queued: int | None = attrs.field(default=None, validator=_limit)

    def changes(self) -> dict[str, float | None]:
        """The limits this record sets, as ``set_limits`` takes them."""
        return _limit_changes(self)


@attrs.define(kw_only=True)
class TierConfig:
    """A subscription tier: its weight and, in strict mode, its rank (higher served first).

    The limit fields (``max_running``, ``rate``, ``burst``, ``max_queued``; ADR 28) are the
    defaults of every tenant of the tier's rank that does not set its own. They are stored per
    rank, so tiers that share a rank must not give different limits.
    """

    weight: float = attrs.field(default=1.0, validator=_weight)
    rank: int = attrs.field(default=0, validator=_number(0, MAX_TIER_RANK, integer=True))
    max_running: int | None = attrs.field(default=None, validator=_limit)
    rate: float | None = attrs.field(default=None, validator=_limit)
    burst: int | None = attrs.field(default=None, validator=_limit)
    max_queued: int | None = attrs.field(default=None, validator=_limit)

    def changes(self) -> dict[str, float | None]:
        """The limit defaults this tier sets, as ``set_limits`` takes them."""
        return _limit_changes(self)


@attrs.frozen
class LimitSetting:
    """One ``set_limits`` call the config asks for: ``changes`` for ``tenant``'s own limits,
    ``tier``'s defaults, or (neither) the queue-wide limits."""

    changes: dict[str, float | None]
    tenant: str | None = None
    tier: int | None = None


def _weights(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    _id_keys(inst, attribute, value)
    assert isinstance(value, dict)
    for key, weight in value.items():
        _weight_rule(_section(inst), f"{attribute.name}.{key}", weight)


def _id_mapping_of(kind: type, rule: str) -> Validator:
    """A mapping of valid ids to ``kind`` values (errors name ``<field>.<key>``)."""

    def check(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
        _id_keys(inst, attribute, value)
        assert isinstance(value, dict)
        for key, item in value.items():
            if not isinstance(item, kind):
                raise _FieldError(_section(inst), f"{attribute.name}.{key}", item, rule)

    return check


_tiers = _id_mapping_of(TierConfig, "must be a tier")
_tenant_limits = _id_mapping_of(LimitsConfig, "must be limits")


def _queue_limits(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, LimitsConfig):
        raise _fail(inst, attribute, value, "must be limits")
    if value.max_queued is not None:
        raise _FieldError(
            _section(inst),
            f"{attribute.name}.max_queued",
            value.max_queued,
            "is per tenant: set it in tenant_limits or a tier",
        )


def _tenant_tiers(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    _id_keys(inst, attribute, value)
    assert isinstance(value, dict)
    for key, tier in value.items():
        if not isinstance(tier, str):
            raise _FieldError(_section(inst), f"{attribute.name}.{key}", tier, "must be a string")


@attrs.define(kw_only=True)
class QueueConfig:
    """Queue behaviour: name, leases, aging, limits, retry backoff, tenant weights and tiers,
    flow control (ADR 28: ``tenant_limits``, the tiers' limit defaults, queue-wide ``limits``).
    """

    _section: ClassVar[str] = "queue"

    name: str = attrs.field(default="default", validator=_queue_name)
    lease_seconds: float = attrs.field(default=30.0, validator=_SPAN)
    aging_horizon_seconds: float = attrs.field(default=300.0, validator=_POSITIVE)
    max_payload_bytes: int = attrs.field(default=1_048_576, validator=_POSITIVE_INT)
    max_recoveries: int = attrs.field(default=3, validator=_NON_NEGATIVE_INT)
    result_ttl_seconds: float = attrs.field(default=3600.0, validator=_SPAN)
    delayed_move_limit: int = attrs.field(default=100, validator=_POSITIVE_INT)
    retry_base_seconds: float = attrs.field(default=1.0, validator=_NON_NEGATIVE)
    retry_factor: float = attrs.field(default=2.0, validator=_number(1))
    retry_cap_seconds: float = attrs.field(default=300.0, validator=_NON_NEGATIVE)
    retry_jitter: float = attrs.field(default=0.0, validator=_number(0, 1, high_open=True))
    tenant_weights: dict[str, float] = attrs.field(factory=dict, validator=_weights)
    tiers: dict[str, TierConfig] = attrs.field(factory=dict, validator=_tiers)
    tenant_tiers: dict[str, str] = attrs.field(factory=dict, validator=_tenant_tiers)
    strict_tiers: bool = attrs.field(default=False, validator=_BOOL)
    tenant_limits: dict[str, LimitsConfig] = attrs.field(factory=dict, validator=_tenant_limits)
    limits: LimitsConfig = attrs.field(factory=LimitsConfig, validator=_queue_limits)
    #: Hash-tag partitions of the queue (ADR 34): 1 is one slot (the plain layout); P > 1
    #: spreads tenants over P slots, fixed when the queue is first written.
    partitions: int = attrs.field(default=1, validator=_number(1, MAX_PARTITIONS, integer=True))
    #: The queue's event log (ADR 71): about this many latest events are kept (per partition);
    #: 0 turns events off (nothing is written).
    events_maxlen: int = attrs.field(default=10_000, validator=_NON_NEGATIVE_INT)

    def __attrs_post_init__(self) -> None:
        if self.retry_cap_seconds < self.retry_base_seconds:
            raise _FieldError(
                self._section,
                "retry_cap_seconds",
                self.retry_cap_seconds,
                f"must be >= retry_base_seconds ({self.retry_base_seconds:g})",
            )
        for tenant, tier in self.tenant_tiers.items():
            if tier not in self.tiers:
                known = ", ".join(sorted(self.tiers)) or "none defined"
                raise _FieldError(
                    self._section, f"tenant_tiers.{tenant}", tier, f"unknown tier ({known})"
                )
        self._tier_limits_by_rank()

    def _tier_limits_by_rank(self) -> dict[int, dict[str, float | None]]:
        """Each rank's limit defaults; tiers sharing a rank must agree (limits are per rank)."""
        by_rank: dict[int, tuple[str, dict[str, float | None]]] = {}
        for name in sorted(self.tiers):
            tier = self.tiers[name]
            changes = tier.changes()
            other = by_rank.setdefault(tier.rank, (name, changes))
            if other[1] != changes:
                raise _FieldError(
                    self._section,
                    f"tiers.{name}",
                    changes,
                    f"shares rank {tier.rank} with tier {other[0]} whose limits differ (limit "
                    "defaults are kept per rank: give the tiers distinct ranks)",
                )
        return {rank: changes for rank, (_name, changes) in by_rank.items() if changes}

    def limit_settings(self) -> list[LimitSetting]:
        """The limits the config names (ADR 28), as ``set_limits`` calls: the queue-wide
        ``limits``, each tier rank's defaults, each tenant's own. Only the fields given are
        set; a limit set at run time on a field the config leaves out stays."""
        out: list[LimitSetting] = []
        if self.limits.changes():
            out.append(LimitSetting(self.limits.changes()))
        for rank, changes in sorted(self._tier_limits_by_rank().items()):
            out.append(LimitSetting(changes, tier=rank))
        for tenant, limits in self.tenant_limits.items():
            if limits.changes():
                out.append(LimitSetting(limits.changes(), tenant=tenant))
        return out

    def tenant_weight_table(self) -> dict[str, tuple[float, int]]:
        """``tenant -> (weight, tier rank)`` for every tenant the config names.

        A tenant in ``tenant_tiers`` takes its tier's weight and rank; an explicit
        ``tenant_weights`` entry overrides the weight and keeps the rank (0 without a tier).
        """
        table: dict[str, tuple[float, int]] = {}
        for tenant, tier_name in self.tenant_tiers.items():
            tier = self.tiers.get(tier_name)
            if tier is None:  # only when the mapping was changed after construction
                raise _FieldError(
                    self._section, f"tenant_tiers.{tenant}", tier_name, "unknown tier"
                )
            table[tenant] = (tier.weight, tier.rank)
        for tenant, weight in self.tenant_weights.items():
            table[tenant] = (weight, table.get(tenant, (1.0, 0))[1])
        return table


def check_schedules(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, list):
        raise _FieldError("", "schedules", value, "must be a list of schedules")
    names: set[str] = set()
    for index, item in enumerate(value):
        where = f"schedules.{index}"
        if not isinstance(item, Mapping):
            raise _FieldError("", where, item, "must be a mapping")
        try:
            schedule = Schedule.from_dict(item)
        except ScheduleValidationError as exc:
            raise _FieldError("", f"{where}.{exc.field}", exc.value, exc.rule) from None
        if schedule.name in names:
            raise _FieldError("", f"{where}.name", schedule.name, "is used twice")
        names.add(schedule.name)
