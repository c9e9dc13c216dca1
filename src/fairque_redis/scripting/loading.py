"""Script objects that reload once per flush: redis-py's ``Script`` with a single-flight reload.

redis-py's ``Script`` sends ``EVALSHA`` and, on a ``NOSCRIPT`` reply (the server's script cache
was emptied: ``SCRIPT FLUSH``, a restart, a failover to a replica that never saw the script),
sends ``SCRIPT LOAD`` and the ``EVALSHA`` again. Shared by the threads of a worker (or the tasks
of an event loop), that has two faults (reliability plan R11):

- every caller that meets ``NOSCRIPT`` before the first reload lands sends its own
  ``SCRIPT LOAD`` of the same script, so one flush costs as many loads as callers in flight;
- a second flush between the load and the retried ``EVALSHA`` reaches the caller as an error.

Here each script object reloads at most once per ``NOSCRIPT`` episode, however many callers meet
it: a caller that finds the script reloaded since its own attempt began only retries. A call that
meets ``NOSCRIPT`` again reloads and retries, ``ATTEMPTS`` times in all. ``NOSCRIPT`` means the
script did not run, so a retry never applies a write twice. On a cluster ``SCRIPT LOAD`` goes
to every primary (redis-py's routing), so a flush costs one load of each script per node.

This module holds what both faces share (the library state, the reply tests, the constants).
The script objects themselves are :class:`~fairque_redis.scripting.objects_async.AsyncScript`,
written once, and ``Script`` in ``_script_objects.py``, generated from it by
``tools/gen_sync.py``; they keep redis-py's names so that the synchronous backend, generated
from the async one, picks the right one by the same rename.

Functions (ADR 41). A script of :data:`fairque_redis.scripting.function_library.LIBRARY` (every
registered one) runs by default as a Redis Function of that library: ``FCALL`` of its function,
whose include helpers the server made once at ``FUNCTION LOAD``, not on every call. The load is
shared by every script object of one client (:class:`LibraryState`): a ``Function not found``
reply (a ``FUNCTION FLUSH``, a server that never saw this fairque version) makes one caller
send ``FUNCTION LOAD REPLACE`` of the whole library while the others wait and retry, the same
single flight as ``NOSCRIPT`` above (on a cluster the load goes to every primary). A server or
ACL that refuses ``FCALL`` or ``FUNCTION LOAD`` (a user without ``+fcall`` or
``+function|load``; an old server) turns functions off for that client, logged once, and the
call runs by ``EVALSHA`` as before. ``mode="eval"`` (the backend's ``scripts="eval"``)
never tries them.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import weakref
from collections.abc import Iterable
from typing import Any, ClassVar

from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster
from redis.exceptions import NoPermissionError, NoScriptError, ReadOnlyError, ResponseError

__all__ = ["ATTEMPTS", "LibraryState", "is_cluster", "missing", "reload_lock"]

log = logging.getLogger("fairque.redis")

#: EVALSHA (or FCALL) attempts of one call when every one meets NOSCRIPT (or a missing
#: function: three flushes in a row).
ATTEMPTS = 4

_DONE, _RETRY, _EVAL = "done", "retry", "eval"  # what one FCALL attempt came to


def missing(reply: Any) -> bool:
    """Whether ``reply`` (an error of a pipelined call) says the script or function is not on
    the server: it did not run, and a call of the script object alone loads it and retries."""
    return isinstance(reply, NoScriptError) or _function_missing(reply)


def _function_missing(exc: Any) -> bool:
    return isinstance(exc, ResponseError) and "function not found" in str(exc).lower()


def _functions_refused(exc: BaseException, *, loading: bool = False) -> bool:
    """The server or its ACL refuses FCALL or FUNCTION itself (not a command a script calls);
    ``loading``: also a read-only replica refusing FUNCTION LOAD (a client reading from a
    replica: EVALSHA loads there, a library only comes from the primary)."""
    if isinstance(exc, ReadOnlyError):
        return loading
    text = str(exc).lower()
    if isinstance(exc, NoPermissionError):
        return "'fcall" in text or "'function" in text
    return isinstance(exc, ResponseError) and (
        "unknown command" in text and ("fcall" in text or "function" in text)
    )


class LibraryState:
    """The function library on one client's server(s): shared by all script objects of that
    client (:meth:`of`). ``on`` False once the server or ACL refused functions."""

    def __init__(self, lock: Any) -> None:
        self.on = True
        self.loads = 0  # FUNCTION LOADs sent (the load generation)
        self.lock = lock

    def refuse(self, exc: BaseException) -> None:
        """Turn functions off for this client (the server or its ACL refused them)."""
        if self.on:
            self.on = False
            log.warning(
                "the server refuses Redis Functions (%s); fairque runs its scripts with "
                "EVALSHA on this client (grant +fcall and +function|load to use functions, "
                "ADR 41)",
                str(exc)[:160],
            )

    _sync: ClassVar[weakref.WeakKeyDictionary[Any, dict[str, LibraryState]]] = (
        weakref.WeakKeyDictionary()
    )
    _async: ClassVar[weakref.WeakKeyDictionary[Any, dict[str, LibraryState]]] = (
        weakref.WeakKeyDictionary()
    )
    _guard: ClassVar[threading.Lock] = threading.Lock()

    @classmethod
    def of(cls, client: Any, *, asynchronous: bool, name: str = "") -> LibraryState:
        """The state of library ``name`` on ``client`` (one per client object and library,
        made on first use: backends built with different accelerators may share a client,
        each with its own library)."""
        table = cls._async if asynchronous else cls._sync
        with cls._guard:
            states = table.get(client)
            if states is None:
                states = {}
                table[client] = states
            state = states.get(name)
            if state is None:
                state = cls(asyncio.Lock() if asynchronous else threading.Lock())
                states[name] = state
            return state


def reload_lock(*, asynchronous: bool) -> Any:
    """A script object's reload lock: an asyncio one for the asyncio backend's objects."""
    return asyncio.Lock() if asynchronous else threading.Lock()


def _fcall_command(function: str, keys: list[Any], args: Iterable[Any]) -> tuple[Any, ...]:
    return ("FCALL", function, len(keys), *keys, *args)


def is_cluster(client: Any) -> bool:
    """Whether ``client`` is a Redis Cluster client (sync or asyncio)."""
    return isinstance(client, (RedisCluster, AsyncRedisCluster))


def _target(client: Any, keys: list[Any]) -> dict[str, Any]:
    """On a cluster, the node of the first key, named (redis-py would otherwise ask the
    server for FCALL's keys with COMMAND GETKEYS on every call)."""
    if keys and is_cluster(client):
        return {"target_nodes": client.get_node_from_key(keys[0])}
    return {}
