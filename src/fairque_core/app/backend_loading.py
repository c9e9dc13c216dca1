"""Which backend a URL names: every scheme (``memory``, ``redis``, ``valkey`` ...) is looked up
in the ``fairque.backends`` entry-point group, so the engine imports no adapter.

A factory registered there is called as
``factory(url, *, queue=..., config=<FairQueueConfig>, cluster=..., **options)`` and, for the
asyncio engine, with ``asyncio=True`` as well; it returns a ``QueueBackend`` (an
``AsyncQueueBackend`` with ``asyncio=True``) whose queue config is ``config.queue``.
"""

from __future__ import annotations

from importlib import metadata
from typing import Any, cast
from urllib.parse import urlsplit

from fairque_core.domain.errors import ConfigurationError
from fairque_core.ports import AsyncQueueBackend, QueueBackend
from fairque_core.settings.config import FairQueueConfig

__all__ = [
    "BACKENDS_GROUP",
    "backend_url",
    "load_backend_factory",
    "open_async_backend",
    "open_backend",
]

BACKENDS_GROUP = "fairque.backends"


def backend_url(config: FairQueueConfig) -> str:
    """The backend URL of ``config``: ``redis.url``, else one built from host/port/db.

    Credentials never go into the URL (it may end up in logs); the backend factory receives
    the whole config and takes them from its ``redis`` section.
    """
    redis = config.redis
    if redis.url:
        return redis.url
    scheme = "rediss" if redis.ssl_ca_certs or redis.ssl_certfile else "redis"
    return f"{scheme}://{redis.host}:{redis.port}/{redis.db}"


def load_backend_factory(scheme: str) -> Any:
    """The factory registered for ``scheme`` in the ``fairque.backends`` entry-point group
    (``X+sentinel`` is the factory of ``X``: the same backend, reached through sentinels)."""
    scheme = scheme.removesuffix("+sentinel")
    for entry in metadata.entry_points(group=BACKENDS_GROUP):
        if entry.name == scheme:
            return entry.load()
    known = sorted({e.name for e in metadata.entry_points(group=BACKENDS_GROUP)})
    raise ConfigurationError(
        f"no fairque backend handles URL scheme {scheme!r} (known: {', '.join(known)})",
        path="redis.url",
        value=scheme,
    )


def _open(config: FairQueueConfig, options: dict[str, Any]) -> Any:
    url = backend_url(config)
    factory = load_backend_factory(urlsplit(url).scheme.lower())
    return factory(
        url, queue=config.queue.name, config=config, cluster=config.redis.cluster, **options
    )


def open_backend(config: FairQueueConfig, **options: Any) -> QueueBackend:
    """The backend ``config`` names, built by its scheme's factory (``options`` passed on)."""
    return cast(QueueBackend, _open(config, options))


def open_async_backend(config: FairQueueConfig, **options: Any) -> AsyncQueueBackend:
    """:func:`open_backend` for the asyncio engine (the factory gets ``asyncio=True``)."""
    return cast(AsyncQueueBackend, _open(config, {**options, "asyncio": True}))
