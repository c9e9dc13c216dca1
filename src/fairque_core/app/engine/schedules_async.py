"""AsyncScheduleMixin: the engine's cron schedule methods (ADR 24).

Part of :class:`~fairque_core.app.engine.queue_async.AsyncFairQueue`, kept apart to keep modules
short; the schedules live in the backend's schedule store.
"""

# schedules.py (ScheduleMixin) is generated from this file  # unasync: remove
# by tools/gen_sync.py: edit here, then run it.  # unasync: remove

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from fairque_core.app.engine.messages import to_message
from fairque_core.domain.errors import (
    ConfigurationError,
    ScheduleValidationError,
    TaskSerializationError,
    TaskValidationError,
)
from fairque_core.domain.schedules import (
    Misfire,
    Schedule,
    ScheduleInfo,
    TaskTemplate,
    Tick,
    decode_schedule,
    encode_schedule,
    next_tick,
    tick_task,
    validate_schedule_name,
)
from fairque_core.ports.schedules import AsyncScheduleStore

if TYPE_CHECKING:  # the engine's members used here (MixinHost), a base for mypy only
    from fairque_core.app.engine.host_async import MixinHost
else:
    MixinHost = object

__all__ = ["AsyncScheduleMixin"]


class AsyncScheduleMixin(MixinHost):
    """Add, replace, remove and list cron schedules (see the engine)."""

    # ------------------------------------------------------------------ cron schedules
    @property
    def schedules(self) -> AsyncScheduleStore:
        """The backend's schedule store (``backend.schedules``); ConfigurationError when the
        backend keeps no schedules."""
        store = getattr(self._backend, "schedules", None)
        if store is None:
            raise ConfigurationError(
                f"backend {type(self._backend).__name__} has no schedule store (schedules)"
            )
        return cast(AsyncScheduleStore, store)

    async def add_schedule(
        self,
        name: str,
        cron: str,
        task_template: TaskTemplate | Mapping[str, Any],
        *,
        timezone: str = "UTC",
        misfire: Misfire | str = "skip",
        jitter: float = 0.0,
    ) -> Schedule:
        """Create or replace the cron schedule ``name``; ``fairque scheduler`` fires it.

        ``task_template`` is a TaskTemplate or a mapping with ``tenant`` (required),
        ``task_name``, ``priority``, ``payload`` (JSON) and ``max_retries``. Every value is
        checked before anything is stored (ScheduleValidationError naming the field).
        Replacing a schedule keeps its last fired tick.
        """
        schedule = Schedule(
            name=name,
            cron=cron,
            template=task_template,
            timezone=timezone,
            misfire=misfire,
            jitter=jitter,
        )
        await self.save_schedule(schedule)
        return schedule

    async def save_schedule(self, schedule: Schedule) -> None:
        """Store ``schedule`` (``add_schedule`` with a built Schedule). Its tasks are checked
        first as a push of one checks them (this queue's codec and ``max_payload_bytes``):
        a schedule whose ticks could never be pushed is refused, ScheduleValidationError,
        and so is one whose cron matches no date from now on (a year gone by)."""
        if next_tick(schedule, time.time()) is None:
            raise ScheduleValidationError(
                "cron", schedule.cron, "matches no date from now on: it would never fire"
            )
        try:
            to_message(tick_task(schedule, Tick(time.time())), self._plugins, self._config)
        except (TaskValidationError, TaskSerializationError) as exc:
            raise ScheduleValidationError(
                "task", schedule.template.as_dict(), f"its ticks could not be pushed: {exc}"
            ) from exc
        store = self.schedules
        known = await store.get(schedule.name)
        added_at = time.time() if known is None else decode_schedule(known.definition)[1]
        await store.save(schedule.name, encode_schedule(schedule, added_at))

    async def remove_schedule(self, name: str) -> bool:
        """Delete the schedule ``name`` and its progress; False if there was none
        (ScheduleValidationError for a name no schedule can have)."""
        return await self.schedules.delete(validate_schedule_name(name))

    async def list_schedules(self) -> list[ScheduleInfo]:
        """Every schedule by name, with when it last fired and when it fires next."""
        out: list[ScheduleInfo] = []
        now = time.time()
        for record in await self.schedules.list():
            schedule, added_at = decode_schedule(record.definition)
            start = record.last_fired if record.last_fired is not None else added_at
            upcoming = next_tick(schedule, max(start, now))
            out.append(
                ScheduleInfo(
                    schedule=schedule,
                    added_at=added_at,
                    last_fired=record.last_fired,
                    next_at=None if upcoming is None else upcoming.at,
                )
            )
        return out
