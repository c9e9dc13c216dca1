"""How fairque builds redis-py clients: bytes replies, automatic command retries off (a retried
script call could run twice, see ADR 0011), TLS verification on; URL schemes and the options a
config's ``redis`` section gives."""

from __future__ import annotations

import functools
import inspect
import logging
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import attrs
from redis.backoff import NoBackoff
from redis.connection import URL_QUERY_ARGUMENT_PARSERS, parse_url
from redis.retry import Retry

from fairque_core.domain.errors import ConfigurationError
from fairque_core.settings.config import (
    SCRIPT_MODES,
    FairQueueConfig,
    QueueConfig,
    RedisConfig,
    mask_url,
)
from fairque_redis.backends.sentinel import (
    SentinelTarget,
    is_sentinel_url,
    parse_sentinel_url,
    sentinel_client,
)

__all__ = [
    "MIN_BLOCK_SECONDS",
    "SCRIPT_MODES",
    "blocking_seconds",
    "client_options",
    "config_url",
    "normalize_url",
    "open_client",
    "redis_options",
    "require_bytes_client",
    "script_mode",
    "split_config",
]

log = logging.getLogger("fairque.redis")

_SCHEMES = {"redis": "redis", "rediss": "rediss", "valkey": "redis", "valkeys": "rediss"}


def normalize_url(url: str) -> str:
    """``url`` with a ``valkey(s)://`` scheme rewritten to ``redis(s)://`` (a sentinel URL
    as given, its scheme in lower case); others refused."""
    if not isinstance(url, str):
        raise ConfigurationError("the server URL must be a str", path="url")
    scheme, sep, rest = url.partition("://")
    if is_sentinel_url(url):
        return f"{scheme.lower()}://{rest}"
    target = _SCHEMES.get(scheme.lower()) if sep else None
    if target is None:
        # never echo the URL: it may carry a password
        raise ConfigurationError(
            "the server URL must start with redis://, rediss://, valkey://, valkeys:// or "
            "redis+sentinel:// (also rediss+, valkey+, valkeys+sentinel://)",
            path="url",
        )
    return f"{target}://{rest}"


def redis_options(config: RedisConfig) -> dict[str, Any]:
    """redis-py keyword options from a RedisConfig (never ``decode_responses``)."""
    opts: dict[str, Any] = {
        "socket_timeout": config.socket_timeout,
        "socket_connect_timeout": config.socket_connect_timeout,
        "health_check_interval": config.health_check_interval,
    }
    if config.username is not None:
        opts["username"] = config.username
    if config.password is not None:
        opts["password"] = config.password
    for name in ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile"):
        value = getattr(config, name)
        if value is not None:
            opts[name] = value
    return opts


def config_url(config: RedisConfig) -> str:
    """The URL a RedisConfig names (``url`` wins over host/port/db); carries no password."""
    if config.url:
        return config.url
    scheme = "rediss" if config.ssl_ca_certs or config.ssl_certfile else "redis"
    return f"{scheme}://{config.host}:{config.port}/{config.db}"


def split_config(
    config: QueueConfig | FairQueueConfig | None, opts: dict[str, Any]
) -> tuple[QueueConfig | None, dict[str, Any]]:
    """The queue section and redis-py options (explicit ``opts`` win over the redis section)."""
    if isinstance(config, FairQueueConfig):
        return config.queue, {**redis_options(config.redis), **opts}
    return config, opts


def script_mode(mode: str | None) -> str:
    """``mode`` checked (None: the default, ``"functions"``)."""
    if mode is None:
        return "functions"
    if mode not in SCRIPT_MODES:
        raise ConfigurationError(
            f"scripts must be one of {', '.join(SCRIPT_MODES)}, not {mode!r}", path="scripts"
        )
    return mode


@functools.cache
def _url_options() -> frozenset[str]:
    """The query options redis-py takes in a URL: what its clients, pools and connections
    accept as keywords (an unknown one reached a connection's constructor as a bare
    TypeError at the first command)."""
    import redis.asyncio
    import redis.asyncio.cluster
    import redis.cluster
    import redis.connection

    accepting = (
        redis.Redis,
        redis.cluster.RedisCluster,
        redis.asyncio.Redis,
        redis.asyncio.cluster.RedisCluster,
        redis.connection.ConnectionPool,
        redis.connection.AbstractConnection,
        redis.connection.Connection,
        redis.connection.SSLConnection,
    )
    names: set[str] = set(URL_QUERY_ARGUMENT_PARSERS)
    for kind in accepting:
        names |= {
            name
            for name, param in inspect.signature(kind.__init__).parameters.items()
            if param.kind in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY)
        }
    return frozenset(names - {"self"})


def _check_url_options(url: str) -> None:
    known = _url_options()
    if is_sentinel_url(url):
        known |= {"sentinel_username", "sentinel_password"}
    unknown = sorted(
        {key for key, _ in parse_qsl(urlsplit(url).query, keep_blank_values=True)} - known
    )
    if unknown:
        raise ConfigurationError(
            f"bad server URL {mask_url(url)!r}: unknown option(s) {', '.join(unknown)} "
            "(redis-py's connection options, e.g. socket_timeout, and fairque's scripts)",
            path="redis.url",
            value=mask_url(url),
        )


def _split_scripts(url: str) -> tuple[str, str | None]:
    """``url`` without its ``scripts=`` query parameter (fairque's, not redis-py's), and it."""
    parts = urlsplit(url)
    if "scripts=" not in parts.query:
        return url, None
    mode: str | None = None
    rest: list[tuple[str, str]] = []
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key == "scripts":
            mode = script_mode(value)
        else:
            rest.append((key, value))
    return urlunsplit(parts._replace(query=urlencode(rest))), mode


@attrs.frozen
class ClientPlan:
    """What a backend's ``from_url`` builds its client and itself from (:func:`plan_client`)."""

    url: str
    queue: str
    config: QueueConfig | None
    options: dict[str, Any]
    allow_eviction: bool
    #: ``scripts=functions|eval`` of the options or the URL (None when neither has it)
    scripts: str | None = None
    #: the sentinels and service of a ``redis+sentinel://`` URL (None for any other URL)
    sentinel: SentinelTarget | None = None


def plan_client(
    url: str,
    *,
    queue: str | None,
    cluster: bool,
    config: QueueConfig | FairQueueConfig | None,
    allow_eviction: bool,
    redis_opts: dict[str, Any],
) -> ClientPlan:
    """The normalized URL, the queue name (the queue config's, else ``"default"``), the queue
    section, redis-py options (a FairQueueConfig's redis section under explicit ``redis_opts``,
    fairque's fixed choices applied), whether eviction is allowed (also when the config's
    redis section says so) and how scripts run (ADR 41: the ``scripts`` option, else the URL's
    ``?scripts=``, else a FairQueueConfig's ``redis.scripts``): the part of ``from_url`` every
    Redis backend shares."""
    url, scripts = _split_scripts(normalize_url(url))
    _check_url_options(url)
    sentinel: SentinelTarget | None = None
    if is_sentinel_url(url):
        if cluster:
            raise ConfigurationError(
                "a sentinel URL names one primary: it cannot be a cluster (cluster: false)",
                path="redis.cluster",
                value=True,
            )
        sentinel = parse_sentinel_url(url)
    else:
        try:  # redis-py's own reading of the URL, now: it raised a bare ValueError later
            parse_url(url)  # type: ignore[no-untyped-call]
        except ValueError as exc:
            raise ConfigurationError(
                f"bad server URL {mask_url(url)!r}: {exc}", path="redis.url", value=mask_url(url)
            ) from None
    redis_opts = dict(redis_opts)
    if "scripts" in redis_opts:  # fairque's option (ADR 41), not redis-py's; wins over the URL
        scripts = script_mode(redis_opts.pop("scripts"))
    if isinstance(config, FairQueueConfig):
        allow_eviction = allow_eviction or config.redis.allow_eviction
        scripts = scripts or config.redis.scripts
    queue_config, opts = split_config(config, redis_opts)
    if queue is None:
        queue = queue_config.name if queue_config is not None else "default"
    options = client_options(url, opts, cluster=cluster)
    return ClientPlan(url, queue, queue_config, options, allow_eviction, scripts, sentinel)


def open_client(
    plan: ClientPlan, *, cluster: bool, redis_class: type[Any], cluster_class: type[Any]
) -> Any:
    """The client a plan names: through the sentinels (``plan.sentinel``), a cluster client
    (``cluster``) or a plain one, of the given classes (sync or asyncio)."""
    if plan.sentinel is not None:
        return sentinel_client(plan.sentinel, plan.options, redis_class)
    if cluster:
        return cluster_class.from_url(plan.url, **plan.options)
    return redis_class.from_url(plan.url, **plan.options)


def client_options(url: str | None, opts: dict[str, Any], *, cluster: bool) -> dict[str, Any]:
    """redis-py keyword options with fairque's fixed choices applied."""
    out = dict(opts)
    for forbidden in ("decode_responses",):
        if out.pop(forbidden, False):
            raise ConfigurationError(
                "fairque needs raw bytes replies: decode_responses must be False",
                path=forbidden,
            )
    out["retry"] = Retry(NoBackoff(), 0)
    if not cluster:
        out["retry_on_timeout"] = False
    tls = url is not None and urlsplit(url).scheme == "rediss"
    if (tls or out.get("ssl")) and out.get("ssl_cert_reqs") in (None, ""):
        out["ssl_cert_reqs"] = "required"
    if str(out.get("ssl_cert_reqs", "required")).lower() == "none":
        log.warning("TLS certificate verification is off (ssl_cert_reqs='none')")
    return out


def blocking_seconds(timeout: float, client: Any) -> float:
    """How long a blocking pop may wait: ``timeout``, kept well under the client's socket
    timeout (a read blocked longer than that fails as a broken connection)."""
    try:
        socket_timeout = client.get_connection_kwargs().get("socket_timeout")
    except AttributeError:
        socket_timeout = None
    if isinstance(socket_timeout, (int, float)) and socket_timeout > 0:
        return min(timeout, 0.8 * float(socket_timeout))
    return timeout


# Below this a blocking pop is not worth it: take a pending token without waiting.
MIN_BLOCK_SECONDS = 0.001


def require_bytes_client(client: Any) -> None:
    """ConfigurationError unless ``client`` returns raw bytes (bodies and results are binary)."""
    try:
        decodes = bool(client.get_encoder().decode_responses)
    except AttributeError:
        return
    if decodes:
        raise ConfigurationError(
            "fairque needs a client with decode_responses=False (task bodies are bytes)",
            path="decode_responses",
        )
