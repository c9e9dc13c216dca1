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

The classes keep redis-py's names (``Script``, ``AsyncScript``) so that the synchronous backend,
generated from the async one by ``tools/gen_sync.py``, picks the right one by the same rename.

Functions (ADR 41). A script of :data:`fairque_redis._function_library.LIBRARY` (every
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
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster
from redis.commands import core
from redis.exceptions import NoPermissionError, NoScriptError, ReadOnlyError, ResponseError
from redis.typing import EncodableT, KeyT

from fairque_redis._client_options import script_mode
from fairque_redis._function_library import LIBRARY

__all__ = ["ATTEMPTS", "AsyncScript", "LibraryState", "Script", "missing"]

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
        self.refusal: str | None = None

    def refuse(self, exc: BaseException) -> None:
        """Turn functions off for this client (the server or its ACL refused them)."""
        if self.on:
            self.on = False
            self.refusal = str(exc)
            log.warning(
                "the server refuses Redis Functions (%s); fairque runs its scripts with "
                "EVALSHA on this client (grant +fcall and +function|load to use functions, "
                "ADR 41)",
                str(exc)[:160],
            )

    _sync: ClassVar[weakref.WeakKeyDictionary[Any, LibraryState]] = weakref.WeakKeyDictionary()
    _async: ClassVar[weakref.WeakKeyDictionary[Any, LibraryState]] = weakref.WeakKeyDictionary()
    _guard: ClassVar[threading.Lock] = threading.Lock()

    @classmethod
    def of(cls, client: Any, *, asynchronous: bool) -> LibraryState:
        """The state of ``client`` (one per client object, made on first use)."""
        table = cls._async if asynchronous else cls._sync
        with cls._guard:
            state = table.get(client)
            if state is None:
                state = cls(asyncio.Lock() if asynchronous else threading.Lock())
                table[client] = state
            return state


def _fcall_command(function: str, keys: list[Any], args: Iterable[Any]) -> tuple[Any, ...]:
    return ("FCALL", function, len(keys), *keys, *args)


def _target(client: Any, keys: list[Any]) -> dict[str, Any]:
    """On a cluster, the node of the first key, named (redis-py would otherwise ask the
    server for FCALL's keys with COMMAND GETKEYS on every call)."""
    if keys and isinstance(client, (RedisCluster, AsyncRedisCluster)):
        return {"target_nodes": client.get_node_from_key(keys[0])}
    return {}


class Script(core.Script):
    """A script of the synchronous backend: FCALL of its function (one FUNCTION LOAD per
    missing-library episode), else EVALSHA and one SCRIPT LOAD per NOSCRIPT episode."""

    def __init__(
        self, registered_client: Any, script: str | bytes, *, mode: str = "functions"
    ) -> None:
        super().__init__(registered_client, script)
        self.loads = 0  # SCRIPT LOADs this object sent (its reload generation)
        self._reload_lock = threading.Lock()
        found = LIBRARY.by_source.get(script) if isinstance(script, str) else None
        self.function: str | None = found if script_mode(mode) == "functions" else None
        self.library = (
            LibraryState.of(registered_client, asynchronous=False)
            if self.function is not None
            else None
        )

    @property
    def uses_functions(self) -> bool:
        """Whether a call now goes by FCALL."""
        return self.library is not None and self.library.on

    def queue(self, pipe: Any, keys: Sequence[Any], args: Sequence[Any]) -> None:
        """Queue one call on ``pipe``, no load first: FCALL, or EVALSHA when functions are
        off. An error reply for which :func:`missing` holds means it did not run: call the
        script object alone then (it loads and retries)."""
        if self.uses_functions:
            assert self.function is not None
            pipe.execute_command(*_fcall_command(self.function, list(keys), args))
        else:
            pipe.evalsha(self.sha, len(keys), *keys, *args)

    def __call__(
        self,
        keys: Sequence[KeyT] | None = None,
        args: Iterable[EncodableT] | None = None,
        client: Any = None,
    ) -> Any:
        if client is not None and client is not self.registered_client:
            if self.uses_functions:  # a pipeline: FCALL queued; see ``missing``
                assert self.function is not None
                return client.execute_command(
                    *_fcall_command(self.function, list(keys or []), args or [])
                )
            return super().__call__(keys, args, client)  # a pipeline: redis-py's own path
        keys = list(keys or [])
        args = list(args or [])
        by_eval = False  # this call only: the library could not be loaded now
        for attempt in range(1, ATTEMPTS + 1):
            if self.uses_functions and not by_eval:
                state, reply = self._fcall(keys, args, last=attempt == ATTEMPTS)
                if state is _DONE:
                    return reply
                by_eval = state is _EVAL
                continue
            seen = self.loads
            try:
                return self.registered_client.evalsha(self.sha, len(keys), *keys, *args)
            except NoScriptError:
                if attempt == ATTEMPTS:
                    raise
                with self._reload_lock:
                    if self.loads == seen:  # nobody reloaded it since this attempt began
                        self.sha = self.registered_client.script_load(self.script)
                        self.loads += 1
        raise AssertionError("unreachable")  # pragma: no cover

    def _fcall(self, keys: list[Any], args: list[Any], *, last: bool) -> tuple[str, Any]:
        """``(_DONE, reply)`` of one FCALL; ``(_RETRY, None)`` when the library was loaded or
        functions were refused (the next attempt runs EVALSHA); ``(_EVAL, None)`` when the
        load failed otherwise (the server at maxmemory refuses FUNCTION LOAD): this call
        runs by EVALSHA."""
        library = self.library
        assert library is not None
        assert self.function is not None
        client = self.registered_client
        seen = library.loads
        try:
            command = _fcall_command(self.function, keys, args)
            reply = client.execute_command(*command, **_target(client, keys))  # type: ignore[no-untyped-call,unused-ignore]
            return _DONE, reply
        except ResponseError as exc:
            if _functions_refused(exc):
                library.refuse(exc)
                return _RETRY, None
            if not _function_missing(exc) or last:
                raise
        with library.lock:
            if library.loads == seen and library.on:  # nobody loaded it since this call began
                try:
                    client.function_load(LIBRARY.code, replace=True)
                except ResponseError as exc:
                    if not _functions_refused(exc, loading=True):
                        log.info("FUNCTION LOAD failed (%s); this call runs by EVALSHA", exc)
                        return _EVAL, None
                    library.refuse(exc)
                library.loads += 1
        return _RETRY, None


class AsyncScript(core.AsyncScript):
    """A script of the asyncio backend: FCALL of its function (one FUNCTION LOAD per
    missing-library episode), else EVALSHA and one SCRIPT LOAD per NOSCRIPT episode."""

    def __init__(
        self, registered_client: Any, script: str | bytes, *, mode: str = "functions"
    ) -> None:
        super().__init__(registered_client, script)
        self.loads = 0  # SCRIPT LOADs this object sent (its reload generation)
        self._reload_lock = asyncio.Lock()
        found = LIBRARY.by_source.get(script) if isinstance(script, str) else None
        self.function: str | None = found if script_mode(mode) == "functions" else None
        self.library = (
            LibraryState.of(registered_client, asynchronous=True)
            if self.function is not None
            else None
        )

    @property
    def uses_functions(self) -> bool:
        """Whether a call now goes by FCALL."""
        return self.library is not None and self.library.on

    def queue(self, pipe: Any, keys: Sequence[Any], args: Sequence[Any]) -> None:
        """Queue one call on ``pipe``, no load first: FCALL, or EVALSHA when functions are
        off. An error reply for which :func:`missing` holds means it did not run: call the
        script object alone then (it loads and retries)."""
        if self.uses_functions:
            assert self.function is not None
            pipe.execute_command(*_fcall_command(self.function, list(keys), args))
        else:
            pipe.evalsha(self.sha, len(keys), *keys, *args)

    async def __call__(
        self,
        keys: Sequence[KeyT] | None = None,
        args: Iterable[EncodableT] | None = None,
        client: Any = None,
    ) -> Any:
        if client is not None and client is not self.registered_client:
            if self.uses_functions:  # a pipeline: FCALL queued; see ``missing``
                assert self.function is not None
                return client.execute_command(
                    *_fcall_command(self.function, list(keys or []), args or [])
                )
            return await super().__call__(keys, args, client)  # a pipeline: redis-py's own path
        keys = list(keys or [])
        args = list(args or [])
        by_eval = False  # this call only: the library could not be loaded now
        for attempt in range(1, ATTEMPTS + 1):
            if self.uses_functions and not by_eval:
                state, reply = await self._fcall(keys, args, last=attempt == ATTEMPTS)
                if state is _DONE:
                    return reply
                by_eval = state is _EVAL
                continue
            seen = self.loads
            try:
                return await self.registered_client.evalsha(self.sha, len(keys), *keys, *args)
            except NoScriptError:
                if attempt == ATTEMPTS:
                    raise
                async with self._reload_lock:
                    if self.loads == seen:  # nobody reloaded it since this attempt began
                        self.sha = await self.registered_client.script_load(self.script)
                        self.loads += 1
        raise AssertionError("unreachable")  # pragma: no cover

    async def _fcall(self, keys: list[Any], args: list[Any], *, last: bool) -> tuple[str, Any]:
        """``(_DONE, reply)`` of one FCALL; ``(_RETRY, None)`` when the library was loaded or
        functions were refused (the next attempt runs EVALSHA); ``(_EVAL, None)`` when the
        load failed otherwise (the server at maxmemory refuses FUNCTION LOAD): this call
        runs by EVALSHA."""
        library = self.library
        assert library is not None
        assert self.function is not None
        client = self.registered_client
        seen = library.loads
        try:
            command = _fcall_command(self.function, keys, args)
            return _DONE, await client.execute_command(*command, **_target(client, keys))
        except ResponseError as exc:
            if _functions_refused(exc):
                library.refuse(exc)
                return _RETRY, None
            if not _function_missing(exc) or last:
                raise
        async with library.lock:
            if library.loads == seen and library.on:  # nobody loaded it since this call began
                try:
                    await client.function_load(LIBRARY.code, replace=True)
                except ResponseError as exc:
                    if not _functions_refused(exc, loading=True):
                        log.info("FUNCTION LOAD failed (%s); this call runs by EVALSHA", exc)
                        return _EVAL, None
                    library.refuse(exc)
                library.loads += 1
        return _RETRY, None
