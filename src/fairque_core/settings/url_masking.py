"""Masking the secrets of a server URL wherever one is shown (:func:`mask_url`).

Kept apart from the configuration values (:mod:`fairque_core.settings.config`, which re-exports
both names) so that showing a URL needs no config class.
"""

from __future__ import annotations

from urllib.parse import unquote, urlsplit, urlunsplit

__all__ = ["MASK", "SECRET_QUERY_KEYS", "mask_url"]

#: What stands in for a secret.
MASK = "***"

#: Query parameters of a server URL whose values are secrets (redis-py reads ``password``).
SECRET_QUERY_KEYS = frozenset(
    {"password", "pass", "pwd", "secret", "token", "auth", "sentinel_password"}
)


def mask_url(url: str) -> str:
    """``url`` with its secrets replaced by ``***``: the password of its userinfo and the value
    of every secret query parameter (``?password=...``, see :data:`SECRET_QUERY_KEYS`).

    A URL too malformed to take apart is masked whole. Use this wherever a URL is shown: logs,
    reprs, exception messages, CLI output, metric and span attributes.
    """
    try:
        parts = urlsplit(url)
        password = parts.password
        if parts.scheme.lower().endswith("+sentinel"):  # host:port,host:port...
            for item in parts.netloc.rsplit("@", 1)[-1].split(","):
                _ = urlsplit(f"//{item}").port
        else:
            _ = parts.port  # a bad port means the netloc was not understood
    except ValueError:
        return MASK
    if password:
        user = parts.username or ""
        host = parts.netloc.rsplit("@", 1)[-1]
        parts = parts._replace(netloc=f"{user}:{MASK}@{host}")
    elif "@" in parts.netloc:  # userinfo without a colon: redis-py takes it as the password
        parts = parts._replace(netloc=f"{MASK}@{parts.netloc.rsplit('@', 1)[-1]}")
    if parts.query:
        parts = parts._replace(query=_mask_query(parts.query))
    if parts.fragment:
        parts = parts._replace(fragment=_mask_query(parts.fragment))
    return urlunsplit(parts)


def _mask_query(query: str) -> str:
    out = []
    for item in query.split("&"):
        key, sep, _value = item.partition("=")
        secret = sep and unquote(key).strip().lower() in SECRET_QUERY_KEYS
        out.append(f"{key}={MASK}" if secret else item)
    return "&".join(out)
