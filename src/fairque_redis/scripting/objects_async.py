"""The script objects of a backend (ADR 41): FCALL of the script's function, else EVALSHA, each
with a single-flight reload (see :mod:`fairque_redis.scripting.loading`).

Written once, here, for the asyncio backend; ``_script_objects.py`` (``Script``) is generated
from it by ``tools/gen_sync.py``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from redis.commands import core
from redis.exceptions import NoScriptError, ResponseError
from redis.typing import EncodableT, KeyT

from fairque_redis.backends.client_options import script_mode
from fairque_redis.scripting.function_library import LIBRARY, FunctionLibrary
from fairque_redis.scripting.loading import (
    _DONE,
    _EVAL,
    _RETRY,
    ATTEMPTS,
    LibraryState,
    _fcall_command,
    _function_missing,
    _functions_refused,
    _target,
    is_cluster,
    log,
    reload_lock,
)

__all__ = ["AsyncScript"]


class AsyncScript(core.AsyncScript):
    """A script object of a backend: FCALL of its function (one FUNCTION LOAD per
    missing-library episode), else EVALSHA and one SCRIPT LOAD per NOSCRIPT episode."""

    def __init__(
        self,
        registered_client: Any,
        script: str | bytes,
        *,
        mode: str = "functions",
        library: FunctionLibrary | None = None,
    ) -> None:
        super().__init__(registered_client, script)
        self.loads = 0  # SCRIPT LOADs this object sent (its reload generation)
        self._reload_lock = reload_lock(asynchronous=True)
        library = library if library is not None else LIBRARY  # accelerators on (the default)
        self._library = library  # the function library that holds this script's function
        found = library.by_source.get(script) if isinstance(script, str) else None
        self.function: str | None = found if script_mode(mode) == "functions" else None
        self._cluster = is_cluster(registered_client)  # FCALL then names its node (_target)
        # the function's name as it goes out (the asyncio client encodes a str per call)
        self._function_arg = self.function.encode() if self.function is not None else b""
        self.library = (
            LibraryState.of(registered_client, asynchronous=True, name=library.name)
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
        keys = keys if type(keys) is list else list(keys or [])
        args = args if type(args) is list else list(args or [])
        by_eval = False  # this call only: the library could not be loaded now
        first = 1
        library = self.library
        if library is not None and library.on and not self._cluster:
            # the common call's first attempt, spelled directly: one FCALL, no layers
            seen = library.loads
            try:
                return await self.registered_client.execute_command(  # type: ignore[no-untyped-call,unused-ignore]
                    "FCALL", self._function_arg, len(keys), *keys, *args
                )
            except ResponseError as exc:
                state = await self._fcall_failed(exc, seen, last=False)
            by_eval = state is _EVAL
            first = 2
        for attempt in range(first, ATTEMPTS + 1):
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
                await self._load_script(seen)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _fcall(self, keys: list[Any], args: list[Any], *, last: bool) -> tuple[str, Any]:
        """``(_DONE, reply)`` of one FCALL; ``(_RETRY, None)`` when the library was loaded or
        functions were refused (the next attempt runs EVALSHA); ``(_EVAL, None)`` when the
        load failed otherwise (the server at maxmemory refuses FUNCTION LOAD): this call
        runs by EVALSHA."""
        assert self.library is not None
        assert self.function is not None
        client = self.registered_client
        seen = self.library.loads
        try:
            command = _fcall_command(self.function, keys, args)
            reply = await client.execute_command(*command, **_target(client, keys))  # type: ignore[no-untyped-call,unused-ignore]
            return _DONE, reply
        except ResponseError as exc:
            return await self._fcall_failed(exc, seen, last=last), None

    async def _fcall_failed(self, exc: ResponseError, seen: int, *, last: bool) -> str:
        """After an FCALL's error reply ``exc`` (the call began at load generation ``seen``):
        ``_RETRY`` or ``_EVAL`` as :meth:`_fcall` says; ``exc`` raised when it is the call's
        own error (or the last attempt's missing library)."""
        assert self.library is not None
        if _functions_refused(exc):
            self.library.refuse(exc)
            return _RETRY
        if not _function_missing(exc) or last:
            raise exc
        return await self._load_library(seen)

    async def _load_library(self, seen: int) -> str:
        """Load the library once per missing-library episode (``seen``: the load generation
        when the failed call began): ``_RETRY``, or ``_EVAL`` when the load failed otherwise
        than by a refusal (that call runs by EVALSHA)."""
        library = self.library
        assert library is not None
        async with library.lock:
            if library.loads == seen and library.on:  # nobody loaded it since this call began
                try:
                    await self.registered_client.function_load(self._library.code, replace=True)
                except ResponseError as exc:
                    if not _functions_refused(exc, loading=True):
                        log.info("FUNCTION LOAD failed (%s); this call runs by EVALSHA", exc)
                        return _EVAL
                    library.refuse(exc)
                library.loads += 1
        return _RETRY

    async def _load_script(self, seen: int) -> None:
        """SCRIPT LOAD once per NOSCRIPT episode (``seen``: :attr:`loads` when the call began)."""
        async with self._reload_lock:
            if self.loads == seen:  # nobody reloaded it since this attempt began
                self.sha = await self.registered_client.script_load(self.script)
                self.loads += 1

    # ------------------------------------------------------------------ one held connection
    # durability="replicated" (ADR 33) sends the call and its WAIT on one connection it holds;
    # these let it send FCALL there too, with the same loads and fallback as a call above.

    @property
    def generation(self) -> tuple[int, int]:
        """The load generations (library, script) before a call on a held connection."""
        return (self.library.loads if self.library is not None else 0), self.loads

    def command(self, keys: Sequence[Any], args: Sequence[Any]) -> tuple[Any, ...]:
        """The command of one call: FCALL of the function, or EVALSHA when functions are off."""
        if self.uses_functions:
            assert self.function is not None
            return _fcall_command(self.function, list(keys), args)
        return ("EVALSHA", self.sha, len(keys), *keys, *args)

    async def recover(
        self, reply: Any, seen: tuple[int, int], keys: Sequence[Any], args: Sequence[Any]
    ) -> tuple[Any, ...] | None:
        """After ``reply`` to :meth:`command` (sent when :attr:`generation` was ``seen``):
        None when it is the call's answer; else the call did not run (NOSCRIPT, a missing
        library, functions refused) and, once the cause is dealt with (a load, functions
        off), the command to send again."""
        if isinstance(reply, NoScriptError):
            await self._load_script(seen[1])
            return self.command(keys, args)
        if self.library is None or not isinstance(reply, ResponseError):
            return None
        if _functions_refused(reply):
            self.library.refuse(reply)
            return self.command(keys, args)
        if not _function_missing(reply):
            return None
        if await self._load_library(seen[0]) == _EVAL:
            return ("EVALSHA", self.sha, len(keys), *keys, *args)
        return self.command(keys, args)
