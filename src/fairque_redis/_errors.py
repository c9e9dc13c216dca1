"""The adapter's error edge: redis-py exceptions become fairque errors here, and only here."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from redis import exceptions as rexc

from fairque_core.domain.errors import (
    BackendError,
    BackendOutOfMemoryError,
    OutcomeUnknownError,
    RedisConnectionError,
)
from fairque_redis.scripts import translate_script_error

__all__ = ["translate_errors"]

# Connection errors whose text says the command never left the client.
_NOT_SENT_MARKERS = ("connecting to", "Connection refused", "Name or service not known")


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
    except rexc.OutOfMemoryError as exc:
        raise BackendOutOfMemoryError(f"the server is out of memory ({script})") from exc
    except (rexc.ClusterDownError, rexc.TryAgainError, rexc.ReadOnlyError) as exc:
        raise RedisConnectionError(f"the server cannot take {script} now: {exc}") from exc
    except rexc.ResponseError as exc:
        text = str(exc)
        if text.startswith("OOM"):
            raise BackendOutOfMemoryError(f"the server is out of memory ({script})") from exc
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
    except rexc.RedisError as exc:
        raise BackendError(f"{script}: {type(exc).__name__}: {exc}") from exc
