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
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable, Sequence
from typing import Any

from redis.commands import core
from redis.exceptions import NoScriptError
from redis.typing import EncodableT, KeyT

__all__ = ["ATTEMPTS", "AsyncScript", "Script"]

#: EVALSHA attempts of one call when every one meets NOSCRIPT (three flushes in a row).
ATTEMPTS = 4


class Script(core.Script):
    """A script of the synchronous backend: EVALSHA, and one SCRIPT LOAD per NOSCRIPT episode."""

    def __init__(self, registered_client: Any, script: str | bytes) -> None:
        super().__init__(registered_client, script)
        self.loads = 0  # SCRIPT LOADs this object sent (its reload generation)
        self._reload_lock = threading.Lock()

    def __call__(
        self,
        keys: Sequence[KeyT] | None = None,
        args: Iterable[EncodableT] | None = None,
        client: Any = None,
    ) -> Any:
        if client is not None and client is not self.registered_client:
            return super().__call__(keys, args, client)  # a pipeline: redis-py's own path
        keys = list(keys or [])
        argv = (*keys, *(args or []))
        for attempt in range(1, ATTEMPTS + 1):
            seen = self.loads
            try:
                return self.registered_client.evalsha(self.sha, len(keys), *argv)
            except NoScriptError:
                if attempt == ATTEMPTS:
                    raise
                with self._reload_lock:
                    if self.loads == seen:  # nobody reloaded it since this attempt began
                        self.sha = self.registered_client.script_load(self.script)
                        self.loads += 1
        raise AssertionError("unreachable")  # pragma: no cover


class AsyncScript(core.AsyncScript):
    """A script of the asyncio backend: EVALSHA, and one SCRIPT LOAD per NOSCRIPT episode."""

    def __init__(self, registered_client: Any, script: str | bytes) -> None:
        super().__init__(registered_client, script)
        self.loads = 0  # SCRIPT LOADs this object sent (its reload generation)
        self._reload_lock = asyncio.Lock()

    async def __call__(
        self,
        keys: Sequence[KeyT] | None = None,
        args: Iterable[EncodableT] | None = None,
        client: Any = None,
    ) -> Any:
        if client is not None and client is not self.registered_client:
            return await super().__call__(keys, args, client)  # a pipeline: redis-py's own path
        keys = list(keys or [])
        argv = (*keys, *(args or []))
        for attempt in range(1, ATTEMPTS + 1):
            seen = self.loads
            try:
                return await self.registered_client.evalsha(self.sha, len(keys), *argv)
            except NoScriptError:
                if attempt == ATTEMPTS:
                    raise
                async with self._reload_lock:
                    if self.loads == seen:  # nobody reloaded it since this attempt began
                        self.sha = await self.registered_client.script_load(self.script)
                        self.loads += 1
        raise AssertionError("unreachable")  # pragma: no cover
