"""Redis Sentinel: a queue on whichever server the sentinels call the primary (issue 34).

``redis+sentinel://[user:password@]host:port[,host:port...]/service[/db]`` names the sentinels
(at least one; port 26379 when left out), the service (the name the sentinels monitor, as in
``sentinel monitor <service> ...``) and the database. ``rediss+sentinel://`` speaks TLS to the
primary; ``valkey+sentinel://`` and ``valkeys+sentinel://`` are the same. The userinfo is the
primary's; the sentinels' own credentials, if they need any, go in the query as
``sentinel_username`` / ``sentinel_password``. Other query options are redis-py's, as for a
plain URL.

redis-py's :class:`~redis.sentinel.Sentinel` asks the sentinels for the primary's address on
every new connection, so after a failover the first call fails (a typed connection error: no
call is retried, ADR 11) and the next one reaches the new primary.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import attrs
import redis
import redis.asyncio
import redis.asyncio.sentinel
import redis.sentinel
from redis.connection import URL_QUERY_ARGUMENT_PARSERS

from fairque_core.domain.errors import ConfigurationError
from fairque_core.domain.validation import is_digits
from fairque_core.settings.config import mask_url

__all__ = [
    "SENTINEL_PORT",
    "SENTINEL_SCHEMES",
    "SentinelTarget",
    "is_sentinel_url",
    "parse_sentinel_url",
    "sentinel_client",
]

#: The port a sentinel listens on when the URL leaves it out.
SENTINEL_PORT = 26379
#: URL schemes that name sentinels, and whether the primary is reached over TLS.
SENTINEL_SCHEMES = {
    "redis+sentinel": False,
    "valkey+sentinel": False,
    "rediss+sentinel": True,
    "valkeys+sentinel": True,
}
_SENTINEL_OPTIONS = ("sentinel_username", "sentinel_password")


@attrs.frozen
class SentinelTarget:
    """What a sentinel URL names (:func:`parse_sentinel_url`)."""

    sentinels: tuple[tuple[str, int], ...]
    service: str
    db: int = 0
    username: str | None = attrs.field(default=None, repr=False)
    password: str | None = attrs.field(default=None, repr=False)
    tls: bool = False
    #: redis-py options from the query (for the primary's connections)
    options: dict[str, str] = attrs.field(factory=dict)
    #: the sentinels' own credentials (``sentinel_username`` / ``sentinel_password``)
    sentinel_options: dict[str, str] = attrs.field(factory=dict, repr=False)


def is_sentinel_url(url: str) -> bool:
    scheme, sep, _ = url.partition("://")
    return bool(sep) and scheme.lower() in SENTINEL_SCHEMES


def _bad(url: str, why: str) -> ConfigurationError:
    return ConfigurationError(
        f"bad sentinel URL {mask_url(url)!r}: {why} (the form is "
        "redis+sentinel://[user:password@]host:port[,host:port...]/service[/db])",
        path="redis.url",
        value=mask_url(url),
    )


def parse_sentinel_url(url: str) -> SentinelTarget:
    """The sentinels, service, database, credentials and options of ``url``;
    ConfigurationError (never echoing a password) when it is malformed."""
    if not is_sentinel_url(url):
        raise _bad(url, "not a sentinel URL")
    scheme, _, rest = url.partition("://")
    parts = urlsplit("//" + rest)
    netloc = parts.netloc
    userinfo, at, hosts = netloc.rpartition("@")
    if not at:
        userinfo, hosts = "", netloc
    username: str | None = None
    password: str | None = None
    if userinfo:
        user, colon, secret = userinfo.partition(":")
        username = unquote(user) or None if colon else None
        password = unquote(secret if colon else user) or None
    sentinels: list[tuple[str, int]] = []
    for item in hosts.split(","):
        sentinels.append(_host_port(url, item.strip()))
    path = [p for p in parts.path.split("/") if p]
    if not path:
        raise _bad(url, "no service name")
    if len(path) > 2 or (len(path) == 2 and not is_digits(path[1])):
        raise _bad(url, "the path is /service or /service/db, db a number")
    options: dict[str, str] = {}
    sentinel_options: dict[str, str] = {}
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        (sentinel_options if key in _SENTINEL_OPTIONS else options)[key] = value
    return SentinelTarget(
        sentinels=tuple(sentinels),
        service=unquote(path[0]),
        db=int(path[1]) if len(path) == 2 else 0,
        username=username,
        password=password,
        tls=SENTINEL_SCHEMES[scheme.lower()],
        options=options,
        sentinel_options={k.removeprefix("sentinel_"): v for k, v in sentinel_options.items()},
    )


def _host_port(url: str, item: str) -> tuple[str, int]:
    if not item:
        raise _bad(url, "an empty sentinel address")
    if item.startswith("["):  # [v6]:port
        host, _, tail = item[1:].partition("]")
        port_text = tail.removeprefix(":")
    else:
        host, _, port_text = item.rpartition(":") if ":" in item else (item, "", "")
    if not host:
        raise _bad(url, f"no host in {item!r}")
    if not port_text:
        return host, SENTINEL_PORT
    if not is_digits(port_text) or not 0 < int(port_text) <= 65535:
        raise _bad(url, f"bad port in {item!r} (must be a number 1-65535)")
    return host, int(port_text)


def sentinel_client(target: SentinelTarget, options: dict[str, Any], redis_class: type[Any]) -> Any:
    """A client of ``redis_class`` (``redis.Redis`` or ``redis.asyncio.Redis``) bound to the
    primary of ``target.service``, found through the sentinels. ``options`` are the client
    options fairque chose (no retries, timeouts, credentials); the URL's query options and
    credentials win over them, as in a plain URL."""
    kwargs: dict[str, Any] = dict(options)
    for key, value in target.options.items():  # the URL's options win, as redis-py's from_url
        parse: Any = URL_QUERY_ARGUMENT_PARSERS.get(key)
        kwargs[key] = parse(value) if parse is not None else value
    kwargs["db"] = target.db
    if target.username is not None:
        kwargs["username"] = target.username
    if target.password is not None:
        kwargs["password"] = target.password
    if target.tls:
        kwargs["ssl"] = True
    sentinel_kwargs: dict[str, Any] = {
        key: options[key] for key in ("socket_timeout", "socket_connect_timeout") if key in options
    }
    sentinel_kwargs.update(target.sentinel_options)
    if issubclass(redis_class, redis.asyncio.Redis):
        async_sentinel = redis.asyncio.sentinel.Sentinel(  # type: ignore[no-untyped-call]
            list(target.sentinels), sentinel_kwargs=sentinel_kwargs, **kwargs
        )
        return async_sentinel.master_for(target.service, redis_class=redis_class)
    sync_sentinel = redis.sentinel.Sentinel(  # type: ignore[no-untyped-call]
        list(target.sentinels), sentinel_kwargs=sentinel_kwargs, **kwargs
    )
    return sync_sentinel.master_for(  # type: ignore[no-untyped-call]
        target.service, redis_class=redis_class
    )
