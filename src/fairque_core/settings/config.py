"""The whole configuration document: :class:`FairQueueConfig` (redis, worker, queue, schedules).

The section values and their rules are :mod:`fairque_core.settings.values` (re-exported here);
reading and writing the document is :mod:`fairque_core.settings.loading`, which this module
calls and which never imports it back.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import attrs

from fairque_core.domain.schedules import Schedule
from fairque_core.settings import loading
from fairque_core.settings.values import (
    DURABILITY_MODES,
    MAX_PARTITIONS,
    MAX_TIER_RANK,
    SCRIPT_MODES,
    SECRET_QUERY_KEYS,
    LimitsConfig,
    LimitSetting,
    QueueConfig,
    RedisConfig,
    TierConfig,
    WorkerConfig,
    check_schedules,
    mask_url,
)

__all__ = [
    "DURABILITY_MODES",
    "MAX_PARTITIONS",
    "MAX_TIER_RANK",
    "SCRIPT_MODES",
    "SECRET_QUERY_KEYS",
    "FairQueueConfig",
    "LimitSetting",
    "LimitsConfig",
    "QueueConfig",
    "RedisConfig",
    "TierConfig",
    "WorkerConfig",
    "mask_url",
]


@attrs.define(kw_only=True)
class FairQueueConfig:
    """The whole configuration: one YAML file with redis, worker and queue sections."""

    redis: RedisConfig = attrs.field(factory=RedisConfig)
    worker: WorkerConfig = attrs.field(factory=WorkerConfig)
    queue: QueueConfig = attrs.field(factory=QueueConfig)
    #: Cron schedules (``name``, ``cron``, ``task``, ``timezone``, ``misfire``, ``jitter``),
    #: stored on the queue by ``FairQueue.from_config`` (created or replaced, never removed).
    schedules: list[dict[str, Any]] = attrs.field(factory=list, validator=check_schedules)

    def schedule_values(self) -> list[Schedule]:
        """The ``schedules`` section as Schedule values."""
        return [Schedule.from_dict(item) for item in self.schedules]

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any] | None, *, env: Mapping[str, str] = os.environ
    ) -> FairQueueConfig:
        """Build a config from plain data (as YAML gives it) with ``env`` overrides on top."""
        return loading.config_from_dict(data, env=env, cls=cls, stacklevel=2)

    @classmethod
    def from_yaml(
        cls, path: str | os.PathLike[str], *, env: Mapping[str, str] = os.environ
    ) -> FairQueueConfig:
        """Load a YAML file (the seed's layout) with ``env`` overrides on top."""
        return loading.config_from_yaml(path, env=env, cls=cls, stacklevel=2)

    def to_dict(self) -> dict[str, Any]:
        """Plain data that ``from_dict`` reads back unchanged (includes the password)."""
        return loading.config_to_dict(self)

    def to_yaml(self, path: str | os.PathLike[str]) -> None:
        """Write the config as YAML (the password too: protect the file accordingly)."""
        loading.config_to_yaml(self, path)
