"""The in-memory schedule store: cron schedules and the scheduler lock of the reference model.

:class:`InMemoryScheduleStore` keeps definitions, last fired ticks and the lock lease in
dicts under one lock, on the model's clock. The backends reach it through the ``schedules``
attribute that :class:`ScheduleOps` (on :class:`~fairque_core.memory.model.InMemoryBackend`)
and :class:`AsyncScheduleOps` (on the async model) add; one model has one store.
"""

from __future__ import annotations

import threading
import time

from fairque_core.ports import Clock
from fairque_core.ports.schedules import AsyncScheduleStore, ScheduleRecord, ScheduleStore

__all__ = ["AsyncInMemoryScheduleStore", "AsyncScheduleOps", "InMemoryScheduleStore", "ScheduleOps"]

_CREATE_LOCK = threading.Lock()


class InMemoryScheduleStore:
    """A :class:`~fairque_core.ports.schedules.ScheduleStore` in process memory."""

    def __init__(self, clock: Clock | None = None) -> None:
        self._clock: Clock = clock if clock is not None else time.time
        self._lock = threading.Lock()
        self._definitions: dict[str, bytes] = {}
        self._fired: dict[str, float] = {}
        self._holder: str | None = None
        self._expires = 0.0

    def save(self, name: str, definition: bytes) -> None:
        with self._lock:
            self._definitions[name] = bytes(definition)

    def delete(self, name: str) -> bool:
        with self._lock:
            self._fired.pop(name, None)
            return self._definitions.pop(name, None) is not None

    def get(self, name: str) -> ScheduleRecord | None:
        with self._lock:
            definition = self._definitions.get(name)
            if definition is None:
                return None
            return ScheduleRecord(name, definition, self._fired.get(name))

    def list(self) -> list[ScheduleRecord]:
        with self._lock:
            return [
                ScheduleRecord(name, self._definitions[name], self._fired.get(name))
                for name in sorted(self._definitions)
            ]

    def _held_by(self, token: str) -> bool:
        return self._holder == token and self._clock() < self._expires

    def mark_fired(self, name: str, tick: float, token: str) -> bool:
        with self._lock:
            if not self._held_by(token) or name not in self._definitions:
                return False
            if tick > self._fired.get(name, float("-inf")):
                self._fired[name] = float(tick)
            return True

    def acquire_lock(self, token: str, ttl: float) -> bool:
        with self._lock:
            now = self._clock()
            if self._holder is not None and now < self._expires:
                return False
            self._holder, self._expires = token, now + ttl
            return True

    def renew_lock(self, token: str, ttl: float) -> bool:
        with self._lock:
            if not self._held_by(token):
                return False
            self._expires = self._clock() + ttl
            return True

    def release_lock(self, token: str) -> bool:
        with self._lock:
            if not self._held_by(token):
                return False
            self._holder = None
            return True

    def lock_holder(self) -> str | None:
        with self._lock:
            return self._holder if self._clock() < self._expires else None


class AsyncInMemoryScheduleStore:
    """The same store behind the async port (every call runs at once: no I/O)."""

    def __init__(self, store: InMemoryScheduleStore) -> None:
        self._store = store

    async def save(self, name: str, definition: bytes) -> None:
        self._store.save(name, definition)

    async def delete(self, name: str) -> bool:
        return self._store.delete(name)

    async def get(self, name: str) -> ScheduleRecord | None:
        return self._store.get(name)

    async def list(self) -> list[ScheduleRecord]:
        return self._store.list()

    async def mark_fired(self, name: str, tick: float, token: str) -> bool:
        return self._store.mark_fired(name, tick, token)

    async def acquire_lock(self, token: str, ttl: float) -> bool:
        return self._store.acquire_lock(token, ttl)

    async def renew_lock(self, token: str, ttl: float) -> bool:
        return self._store.renew_lock(token, ttl)

    async def release_lock(self, token: str) -> bool:
        return self._store.release_lock(token)

    async def lock_holder(self) -> str | None:
        return self._store.lock_holder()


class ScheduleOps:
    """Mixin for the model: ``schedules``, its store, made on first use on the model's clock."""

    _clock: Clock

    @property
    def schedules(self) -> InMemoryScheduleStore:
        with _CREATE_LOCK:
            store: InMemoryScheduleStore | None = self.__dict__.get("_schedule_store")
            if store is None:
                store = InMemoryScheduleStore(self._clock)
                self.__dict__["_schedule_store"] = store
            return store


class AsyncScheduleOps:
    """Mixin for the async model: ``schedules`` over the sync model's store (shared state)."""

    @property
    def model(self) -> ScheduleOps:
        raise NotImplementedError  # the async model overrides it

    @property
    def schedules(self) -> AsyncInMemoryScheduleStore:
        return AsyncInMemoryScheduleStore(self.model.schedules)


_sync: type[ScheduleStore] = InMemoryScheduleStore
_async: type[AsyncScheduleStore] = AsyncInMemoryScheduleStore
