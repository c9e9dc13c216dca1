"""Configuration: attrs classes for the redis, worker and queue sections.

Loading (YAML, dicts, env overrides) lives below the classes; see ``FairQueueConfig``.
"""

from __future__ import annotations

import attrs

__all__ = ["FairQueueConfig", "QueueConfig", "RedisConfig", "TierConfig", "WorkerConfig"]


@attrs.define(kw_only=True)
class RedisConfig:
    """How to reach the server. ``url`` wins over host/port when set."""

    url: str | None = None
    host: str = "localhost"
    port: int = 6379
    db: int = 0
    password: str | None = attrs.field(default=None, repr=False)
    username: str | None = None
    socket_timeout: float = 5.0
    socket_connect_timeout: float = 5.0
    health_check_interval: int = 30
    decode_responses: bool = True
    cluster: bool = False
    ssl_ca_certs: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None


@attrs.define(kw_only=True)
class WorkerConfig:
    """One worker's identity, affinity and limits."""

    id: str = "worker-1"
    assigned_users: list[str] = attrs.field(factory=list)
    steal_targets: list[str] = attrs.field(factory=list)
    poll_interval_seconds: float = 1.0
    task_timeout_seconds: float = 300.0
    max_concurrent_tasks: int = 10
    graceful_shutdown_timeout: float = 30.0
    heartbeat_interval_seconds: float | None = None  # default: lease_seconds / 3
    reaper_interval_seconds: float = 1.0
    claim_batch_size: int = 0  # 0: as many as free slots


@attrs.define(kw_only=True)
class TierConfig:
    """A subscription tier: its weight and, in strict mode, its rank (higher served first)."""

    weight: float = 1.0
    rank: int = 0


@attrs.define(kw_only=True)
class QueueConfig:
    """Queue behaviour. The seed's fields are kept; fairque's own follow."""

    stats_prefix: str = "fq"
    lua_script_cache_size: int = 100
    max_retry_attempts: int = 3
    default_task_timeout: float = 300.0
    default_max_retries: int = 3
    enable_pipeline_optimization: bool = True
    pipeline_batch_size: int = 100
    pipeline_timeout: float = 5.0
    queue_cleanup_interval: int = 3600
    stats_aggregation_interval: int = 300
    # fairque's own
    name: str = "default"
    lease_seconds: float = 30.0
    aging_horizon_seconds: float = 300.0
    max_payload_bytes: int = 1_048_576
    max_recoveries: int = 3
    result_ttl_seconds: float = 3600.0
    delayed_move_limit: int = 100
    retry_base_seconds: float = 1.0
    retry_factor: float = 2.0
    retry_cap_seconds: float = 300.0
    retry_jitter: float = 0.0
    tenant_weights: dict[str, float] = attrs.field(factory=dict)
    tiers: dict[str, TierConfig] = attrs.field(factory=dict)
    tenant_tiers: dict[str, str] = attrs.field(factory=dict)
    strict_tiers: bool = False


@attrs.define(kw_only=True)
class FairQueueConfig:
    """The whole configuration: one YAML file with redis, worker and queue sections."""

    redis: RedisConfig = attrs.field(factory=RedisConfig)
    worker: WorkerConfig = attrs.field(factory=WorkerConfig)
    queue: QueueConfig = attrs.field(factory=QueueConfig)
