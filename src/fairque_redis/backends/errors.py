"""The adapter's error edge: redis-py exceptions become fairque errors here, and only here."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

from redis import exceptions as rexc

from fairque_core.domain.errors import (
    BackendError,
    BackendOutOfMemoryError,
    BackendPermissionError,
    ConfigurationError,
    OutcomeUnknownError,
    RedisConnectionError,
)
from fairque_redis.scripting.scripts import translate_script_error

__all__ = ["permission_error", "translate_errors"]

# Connection errors whose text says the command never left the client.
_NOT_SENT_MARKERS = ("connecting to", "Connection refused", "Name or service not known")


# How an ACL refusal of a command run inside a script reads (Valkey / Redis 7); a refused
# top-level command is a NOPERM reply (redis-py's NoPermissionError).
_SCRIPT_ACL_MARKERS = ("ACL failure in script", "can't run this command or subcommand")
_COMMAND_RE = re.compile(r"permissions? to run the '([^']+)' command")


def permission_error(operation: str, text: str) -> BackendPermissionError | None:
    """The typed error for an ACL refusal reply ``text`` (None if it is not one)."""
    if not (text.startswith("NOPERM") or "no permissions to run" in text) and not any(
        marker in text for marker in _SCRIPT_ACL_MARKERS
    ):
        return None
    found = _COMMAND_RE.search(text)
    return BackendPermissionError(operation, found.group(1) if found else None, text[:200])


def _not_sent(exc: BaseException) -> bool:
    if isinstance(exc, (rexc.AuthenticationError, rexc.AuthorizationError, rexc.BusyLoadingError)):
        return True
    if isinstance(exc, rexc.MaxConnectionsError):
        return True
    text = str(exc)
    return any(marker in text for marker in _NOT_SENT_MARKERS)


@contextmanager
def translate_errors(script: str, *, writes: bool) -> Iterator[None]:
    """Translate redis-py exceptions raised by one script call."""
    try:
        yield
    except rexc.NoPermissionError as exc:
        text = str(exc)
        found = _COMMAND_RE.search(text)
        raise BackendPermissionError(script, found.group(1) if found else None, text) from exc
    except rexc.OutOfMemoryError as exc:
        raise BackendOutOfMemoryError(f"the server is out of memory ({script})") from exc
    except (rexc.ClusterDownError, rexc.TryAgainError, rexc.ReadOnlyError) as exc:
        raise RedisConnectionError(f"the server cannot take {script} now: {exc}") from exc
    except rexc.ResponseError as exc:
        text = str(exc)
        if text.startswith("OOM"):
            raise BackendOutOfMemoryError(f"the server is out of memory ({script})") from exc
        if "DB index is out of range" in text:  # the connection's SELECT of the URL's /<db>
            raise ConfigurationError(
                f"the server has no database of the number the URL names (its path, /<db>): {text}",
                path="redis.url",
            ) from exc
        refused = permission_error(script, text)
        if refused is not None:
            raise refused from exc
        raise translate_script_error(script, text) from exc
    except (rexc.ConnectionError, rexc.TimeoutError) as exc:
        if writes and not _not_sent(exc):
            raise OutcomeUnknownError(
                f"the connection broke after {script} was sent; it may or may not have run: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        raise RedisConnectionError(f"{script}: {type(exc).__name__}: {exc}") from exc
    except rexc.RedisClusterException as exc:
        raise RedisConnectionError(f"{script}: {type(exc).__name__}: {exc}") from exc
    except rexc.ClusterError as exc:
        # the cluster client gave up following redirects ("TTL exhausted": a slot moving, a
        # failover). One of its attempts may have run before a connection broke, so a write's
        # outcome is unknown (push it again: a push is idempotent by id); a read may be retried
        if writes:
            raise OutcomeUnknownError(
                f"the cluster client gave up on {script}; it may or may not have run: {exc}"
            ) from exc
        raise RedisConnectionError(f"the cluster client gave up on {script}: {exc}") from exc
    except rexc.RedisError as exc:
        raise BackendError(f"{script}: {type(exc).__name__}: {exc}") from exc
