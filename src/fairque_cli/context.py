"""What every subcommand shares: configuration, opening the queue, user-facing errors.

Precedence of settings, highest first: command-line flags (``--url``, ``--queue``), then
``$FAIRQUE_REDIS_URL``, then the YAML file named by ``--config`` (or ``$FAIRQUE_CONFIG``) with
its ``FAIRQUE_<SECTION>__<KEY>`` environment overrides, then the defaults.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol

import attrs

from fairque_core.app.config import FairQueueConfig
from fairque_core.app.engine import FairQueue

__all__ = [
    "CONFIG_ENV",
    "URL_ENV",
    "CliError",
    "SubCommands",
    "config_tenants",
    "load_config",
    "open_queue",
    "split_ids",
]

URL_ENV = "FAIRQUE_REDIS_URL"
CONFIG_ENV = "FAIRQUE_CONFIG"


class SubCommands(Protocol):
    """What a subcommand module needs to register itself (``add_parser``)."""

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser: ...


class CliError(Exception):
    """A mistake of the user (bad flag value, missing file): one line on stderr, exit 1."""


def load_config(args: argparse.Namespace) -> FairQueueConfig:
    """The configuration for this invocation (file, env overrides, then flags)."""
    path = getattr(args, "config", None) or os.environ.get(CONFIG_ENV) or None
    if path:
        file = Path(path)
        if not file.is_file():
            raise CliError(f"config file not found: {path}")
        config = FairQueueConfig.from_yaml(file)
    else:
        config = FairQueueConfig.from_dict({})
    url = getattr(args, "url", None) or os.environ.get(URL_ENV, "").strip() or None
    if url:
        config = attrs.evolve(config, redis=attrs.evolve(config.redis, url=url))
    queue = getattr(args, "queue", None)
    if queue:
        config = attrs.evolve(config, queue=attrs.evolve(config.queue, name=queue))
    return config


def describe_target(config: FairQueueConfig) -> str:
    """The server address to show the user (password removed)."""
    redis = config.redis
    if redis.url:
        url = redis.url
        if "@" in url and "://" in url:
            scheme, rest = url.split("://", 1)
            url = f"{scheme}://***@{rest.rsplit('@', 1)[1]}"
        return url
    return f"redis://{redis.host}:{redis.port}/{redis.db}"


def open_queue(config: FairQueueConfig) -> FairQueue:
    """The queue the config describes (``memory://`` runs the in-process reference model)."""
    return FairQueue.from_config(config)


def config_tenants(config: FairQueueConfig) -> list[str]:
    """Tenants the config names: weights, tiers and the worker's assigned/steal lists."""
    seen: dict[str, None] = {}
    for group in (
        config.queue.tenant_weights,
        config.queue.tenant_tiers,
        config.worker.assigned_users,
        config.worker.steal_targets,
    ):
        for name in group:
            seen.setdefault(name, None)
    return list(seen)


def split_ids(values: Iterable[str] | None) -> list[str]:
    """Flag values that may repeat and may hold comma-separated lists, de-duplicated."""
    out: dict[str, None] = {}
    for value in values or ():
        for raw in value.split(","):
            part = raw.strip()
            if part:
                out.setdefault(part, None)
    return list(out)
