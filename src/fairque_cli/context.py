"""What every subcommand shares: configuration, opening the queue, user-facing errors.

Precedence of settings, highest first: command-line flags (``--url``, ``--queue``), then
``$FAIRQUE_REDIS_URL``, then the YAML file named by ``--config`` (or ``$FAIRQUE_CONFIG``) with
its ``FAIRQUE_<SECTION>__<KEY>`` environment overrides. When none of them names a server
(no URL, no ``redis.host``/``redis.port``), the command uses the shared local server of
:mod:`fairque_redis.servers.dev_server`, starting it on first use.

Only the worker (and ``fairque tenant apply``) writes the config's tenant weights and tiers to
the server: the other commands open the queue without applying them, so a stale config file
cannot overwrite what an operator set.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import warnings
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

import attrs

from fairque_cli.checks import check_url
from fairque_core.app.backend_loading import open_backend
from fairque_core.app.engine.queue import FairQueue
from fairque_core.settings.config import FairQueueConfig, mask_url
from fairque_redis.servers.topology import check_not_cluster_node

__all__ = [
    "CONFIG_ENV",
    "URL_ENV",
    "CliError",
    "SubCommands",
    "UsageError",
    "config_tenants",
    "error_name",
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


class UsageError(CliError):
    """A usage error found before anything ran (flags that do not go together, a missing or
    out-of-range argument): one line on stderr like argparse's, exit 2 (docs/cli.md)."""


def error_name(exc: BaseException) -> str:
    """The name of ``exc``'s class a user may see: the first public one of its bases (a
    private class, such as the settings' ``_FieldError``, shows as its public base,
    ``ConfigurationError``)."""
    for cls in type(exc).__mro__:
        if not cls.__name__.startswith("_"):
            return cls.__name__
    return "Exception"  # pragma: no cover - Exception itself is public


def load_config(args: argparse.Namespace, *, local_server: bool = True) -> FairQueueConfig:
    """The configuration for this invocation (file, env overrides, then flags).

    With no server named anywhere and ``local_server`` true, the shared local server is
    started (if it is not running) and its URL used.
    """
    path = getattr(args, "config", None) or os.environ.get(CONFIG_ENV) or None
    raw: Any = None
    if path:
        file = Path(path)
        if not file.is_file():
            raise CliError(f"config file not found: {path}")
        with _warnings_on_stderr():
            config = FairQueueConfig.from_yaml(file)
        raw = _raw_yaml(file)
    else:
        with _warnings_on_stderr():
            config = FairQueueConfig.from_dict({})
    url = getattr(args, "url", None) or _env_url()
    if getattr(args, "cluster", False):
        config = attrs.evolve(config, redis=attrs.evolve(config.redis, cluster=True))
    if url:
        config = attrs.evolve(config, redis=attrs.evolve(config.redis, url=url))
    elif local_server and not _names_a_server(config, raw):
        url = local_server_url()
        config = attrs.evolve(config, redis=attrs.evolve(config.redis, url=url))
    if getattr(args, "cluster", False) and (config.redis.url or "").lower().startswith("memory:"):
        raise CliError("--cluster needs a Redis or Valkey URL; memory:// has no cluster")
    queue = getattr(args, "queue", None)
    if queue:
        config = attrs.evolve(config, queue=attrs.evolve(config.queue, name=queue))
    return config


@contextlib.contextmanager
def _warnings_on_stderr() -> Iterator[None]:
    """The loader's warnings (a removed key: DeprecationWarning, which Python hides outside
    ``__main__``) as ``fairque: warning: ...`` lines on stderr, each once."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield
        finally:
            for text in dict.fromkeys(str(w.message) for w in caught):
                sys.stderr.write(f"fairque: warning: {text}\n")


def _env_url() -> str | None:
    text = os.environ.get(URL_ENV, "").strip()
    if not text:
        return None
    try:
        return check_url(text)
    except argparse.ArgumentTypeError as exc:
        raise CliError(f"${URL_ENV}: {exc}") from None


def _raw_yaml(file: Path) -> Any:
    import yaml

    with contextlib.suppress(OSError, yaml.YAMLError):
        return yaml.safe_load(file.read_text(encoding="utf-8"))
    return None


def _names_a_server(config: FairQueueConfig, raw: Any) -> bool:
    """True when the file or the environment chose a server (URL, host or port)."""
    if config.redis.url:
        return True
    section = raw.get("redis") if isinstance(raw, dict) else None
    if isinstance(section, dict) and {"url", "host", "port"} & set(section):
        return True
    keys = {f"FAIRQUE_REDIS__{k}" for k in ("URL", "HOST", "PORT")}
    return any(name.upper() in keys for name in os.environ)


def local_server_url() -> str:
    """The shared local server's URL, starting it (with a note on stderr) if needed."""
    from fairque_redis.servers import dev_server

    state, started = dev_server.ensure_running()
    if started:
        sys.stderr.write(
            f"fairque: started the local server at {state.url} (data in {state.data_dir}); "
            "`fairque server stop` stops it\n"
        )
    return state.url


def describe_target(config: FairQueueConfig) -> str:
    """The server address to show the user (password removed)."""
    redis = config.redis
    if redis.url:
        return mask_url(redis.url)
    return f"redis://{redis.host}:{redis.port}/{redis.db}"


def open_queue(
    config: FairQueueConfig, *, plugins: Sequence[object] = (), apply_tenants: bool = False
) -> FairQueue:
    """The queue the config describes (``memory://`` runs the in-process reference model).

    The config's tenant weights and tiers are written to the server only with
    ``apply_tenants=True`` (the worker, ``tenant apply``): reading commands never write.
    """
    backend = open_backend(config)
    if not config.redis.cluster:
        try:
            check_not_cluster_node(getattr(backend, "client", None))
        except BaseException:
            backend.close()
            raise
    queue = FairQueue(backend, plugins=plugins)
    if apply_tenants:
        try:
            queue.apply_tenant_config()
        except BaseException:
            queue.close()
            raise
    return queue


def config_tenants(config: FairQueueConfig) -> list[str]:
    """Tenants the config names: weights, tiers and the worker's assigned/steal lists."""
    seen: dict[str, None] = {}
    for group in (
        config.queue.tenant_weights,
        config.queue.tenant_tiers,
        config.worker.assigned_tenants,
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


def add_tenant_flag(
    parser: argparse.ArgumentParser, *, many: bool, required: bool = False, help: str
) -> None:
    """``--tenant`` (``args.tenant``): one tenant, or with ``many`` a list (repeat the flag or
    comma-separate)."""
    if many:
        parser.add_argument("--tenant", action="append", help=help)
        return
    parser.add_argument("--tenant", required=required, help=help)
