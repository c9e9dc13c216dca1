"""Cron schedules: the values and the pure tick arithmetic (no I/O, no clock of its own).

A :class:`Schedule` says *when* (a cron expression read by ``croniter``, in an IANA time zone)
and *what* (a :class:`TaskTemplate`: tenant, task name, priority, payload). The scheduler
(:mod:`fairque_core.app.scheduler.scheduler`) asks :func:`due_ticks` which ticks to fire, given the
last
tick it recorded and the time now, and pushes one task per tick with the id
:func:`tick_task_id`, so the same tick pushed twice (two schedulers in a split brain, a crash
between the push and the record) is stored once: push is idempotent by task id.

Ticks are instants (epoch seconds, whole seconds). They are found on the *local wall clock* of
the schedule's zone, then mapped to instants:

* a wall time that exists once maps to its instant;
* a wall time that exists twice (the hour repeated when clocks go back) maps to its FIRST
  occurrence only: ``30 1 * * *`` runs once on that day, and an every-5-minutes schedule
  pauses during the repeated hour (use ``UTC`` for a uniform rhythm);
* a wall time that does not exist (skipped when clocks go forward) is a *gap tick*: it maps to
  the instant the gap ends and counts as missed, so the misfire policy decides: ``skip`` does
  not run it, ``run_once`` and ``catch_up`` run it once at the end of the gap (several gap
  ticks coalesce into that one instant).

Misfire policies, for the ticks due since the last recorded one (``grace`` is how late a tick
may be and still count as on time):

* ``skip``: fire the on-time ticks, drop the late ones;
* ``run_once``: fire the on-time ticks, plus ONE run for all the late ones (the latest);
* ``catch_up``: fire every tick, late or not (at most ``limit`` per call; the rest next call).
"""

from __future__ import annotations

import enum
import hashlib
import json
import math
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import attrs
from croniter import CroniterBadDateError, croniter

from fairque_core.domain.enums import Priority
from fairque_core.domain.errors import ScheduleValidationError
from fairque_core.domain.models import Task
from fairque_core.domain.validation import MAX_RETRY_COUNT, validate_id

__all__ = [
    "MAX_JITTER_SECONDS",
    "MAX_SCHEDULE_NAME_LENGTH",
    "SCHEDULE_HEADER",
    "TICK_HEADER",
    "Due",
    "Misfire",
    "Schedule",
    "ScheduleInfo",
    "TaskTemplate",
    "Tick",
    "decode_schedule",
    "due_ticks",
    "encode_schedule",
    "jitter_offset",
    "last_tick",
    "next_tick",
    "next_ticks",
    "tick_task",
    "tick_task_id",
    "validate_schedule_name",
]

#: Schedule names are ids (the id grammar) of at most this many characters, so that
#: ``cron:<name>:<tick>`` stays a valid task id.
MAX_SCHEDULE_NAME_LENGTH = 80
#: The longest ``jitter``: a tick's task starts at most this long after the tick (366 days).
MAX_JITTER_SECONDS = 366 * 86_400.0
#: Headers of a tick's task: the schedule that pushed it and its tick (``%Y%m%dT%H%M%SZ``).
SCHEDULE_HEADER = "x-fairque-schedule"
TICK_HEADER = "x-fairque-tick"

# Safety bound on wall-clock steps per call (a repeated hour of a per-second schedule is 3600).
_MAX_STEPS = 100_000


class Misfire(str, enum.Enum):
    """What a scheduler does with ticks it is late for (see the module docstring)."""

    SKIP = "skip"
    RUN_ONCE = "run_once"
    CATCH_UP = "catch_up"


def _field_error(field: str, value: object, rule: str) -> ScheduleValidationError:
    return ScheduleValidationError(field, value, rule)


def _check_name(_inst: object, _attr: attrs.Attribute[Any], value: object) -> None:
    try:
        validate_id(value, "name")
    except ValueError:
        raise _field_error(
            "name", value, "must be 1-80 id characters (letters, digits, _ . : @ / + = # -)"
        ) from None
    assert isinstance(value, str)
    if len(value) > MAX_SCHEDULE_NAME_LENGTH:
        raise _field_error("name", value, f"must be at most {MAX_SCHEDULE_NAME_LENGTH} characters")


def validate_schedule_name(value: object) -> str:
    """``value`` if it is a schedule name (ScheduleValidationError otherwise)."""
    _check_name(None, None, value)  # type: ignore[arg-type]
    assert isinstance(value, str)
    return value


def _check_cron(_inst: object, _attr: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or not value.strip():
        raise _field_error("cron", value, "must be a non-empty cron expression")
    try:
        # some date at all, up to croniter's last year (2099); a year gone by is refused when
        # the schedule is saved, from now (engine_schedules)
        walls = croniter(value, datetime(2000, 1, 1), max_years_between_matches=100)
    except (ValueError, KeyError, TypeError) as exc:
        raise _field_error("cron", value, f"is not a valid cron expression ({exc})") from None
    try:
        walls.get_next(datetime)
    except CroniterBadDateError:  # e.g. "0 0 30 2 *": valid fields, no date matches them
        raise _field_error("cron", value, "matches no date: it would never fire") from None


def _check_timezone(_inst: object, _attr: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or not value:
        raise _field_error("timezone", value, "must be an IANA time zone name such as 'UTC'")
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise _field_error("timezone", value, "is not a known IANA time zone") from None


def _to_misfire(value: object) -> Misfire:
    try:
        return Misfire(value)
    except ValueError:
        raise _field_error(
            "misfire", value, "must be one of 'skip', 'run_once', 'catch_up'"
        ) from None


def _check_jitter(_inst: object, _attr: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _field_error("jitter", value, "must be a number of seconds")
    if not 0 <= value <= MAX_JITTER_SECONDS:  # NaN and inf fail here too
        raise _field_error("jitter", value, f"must be in [0, {MAX_JITTER_SECONDS:.0f}] seconds")


def _to_priority(value: object) -> Priority:
    if isinstance(value, Priority):
        return value
    try:
        return Priority.from_int(value)  # type: ignore[arg-type]
    except ValueError:
        raise _field_error("priority", value, "must be a Priority (1-6)") from None


def _to_payload(value: object) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _field_error("payload", value, "must be a mapping")
    try:
        json.dumps(value, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise _field_error("payload", value, f"must be JSON-serializable ({exc})") from None
    return dict(value)


def _check_tenant(_inst: object, _attr: attrs.Attribute[Any], value: object) -> None:
    try:
        validate_id(value, "tenant")
    except ValueError as exc:
        raise _field_error("tenant", value, getattr(exc, "rule", str(exc))) from None


def _check_task_name(_inst: object, _attr: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str):
        raise _field_error("task_name", value, "must be a str")


def _check_retries(_inst: object, _attr: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_RETRY_COUNT:
        raise _field_error("max_retries", value, f"must be an int in [0, {MAX_RETRY_COUNT}]")


@attrs.frozen(kw_only=True)
class TaskTemplate:
    """What each tick pushes: a task for ``tenant`` (fair like any other task of that tenant).

    The payload is stored with the schedule as JSON, so it must be JSON-serializable; the
    queue's codec encodes it again when the task is pushed.
    """

    tenant: str = attrs.field(validator=_check_tenant)
    task_name: str = attrs.field(default="", validator=_check_task_name)
    priority: Priority = attrs.field(default=Priority.NORMAL, converter=_to_priority)
    payload: Mapping[str, Any] = attrs.field(factory=dict, converter=_to_payload)
    max_retries: int = attrs.field(default=3, validator=_check_retries)

    @classmethod
    def from_mapping(cls, data: object) -> TaskTemplate:
        """A template from a mapping (YAML, CLI, storage): keys as the attributes, ``name``
        accepted for ``task_name``; unknown keys are a ScheduleValidationError."""
        if isinstance(data, TaskTemplate):
            return data
        if not isinstance(data, Mapping):
            raise _field_error("task", data, "must be a TaskTemplate or a mapping")
        known = {"tenant", "task_name", "name", "priority", "payload", "max_retries"}
        unknown = sorted(str(k) for k in data if k not in known)
        if unknown:
            raise _field_error("task", unknown, f"unknown keys; known: {sorted(known)}")
        if "tenant" not in data:
            raise _field_error("tenant", None, "is required")
        args = {k: v for k, v in data.items() if k != "name"}
        if "name" in data:
            args.setdefault("task_name", data["name"])
        return cls(**args)

    def as_dict(self) -> dict[str, Any]:
        return {
            "tenant": self.tenant,
            "task_name": self.task_name,
            "priority": int(self.priority),
            "payload": dict(self.payload),
            "max_retries": self.max_retries,
        }


def _to_template(value: object) -> TaskTemplate:
    return TaskTemplate.from_mapping(value)


@attrs.frozen(kw_only=True)
class Schedule:
    """A named cron schedule. Every field is checked on construction: a bad one raises
    :class:`~fairque_core.domain.errors.ScheduleValidationError` naming it."""

    name: str = attrs.field(validator=_check_name)
    cron: str = attrs.field(validator=_check_cron)
    template: TaskTemplate = attrs.field(converter=_to_template)
    timezone: str = attrs.field(default="UTC", validator=_check_timezone)
    misfire: Misfire = attrs.field(default=Misfire.SKIP, converter=_to_misfire)
    jitter: float = attrs.field(default=0.0, validator=_check_jitter)

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "cron": self.cron,
            "task": self.template.as_dict(),
            "timezone": self.timezone,
            "misfire": self.misfire.value,
            "jitter": self.jitter,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Schedule:
        """The inverse of :meth:`as_dict` (also the shape of a YAML ``schedules:`` item)."""
        known = {"name", "cron", "task", "timezone", "misfire", "jitter"}
        unknown = sorted(str(k) for k in data if k not in known)
        if unknown:
            raise _field_error("schedule", unknown, f"unknown keys; known: {sorted(known)}")
        for required in ("name", "cron", "task"):
            if required not in data:
                raise _field_error(required, None, "is required")
        return cls(
            name=data["name"],
            cron=data["cron"],
            template=data["task"],
            timezone=data.get("timezone", "UTC"),
            misfire=data.get("misfire", Misfire.SKIP),
            jitter=data.get("jitter", 0.0),
        )


def encode_schedule(schedule: Schedule, added_at: float) -> bytes:
    """The stored form: JSON of the schedule plus ``added_at`` (epoch seconds), the start of
    a schedule that never fired."""
    body = schedule.as_dict()
    body["added_at"] = added_at
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def decode_schedule(data: bytes) -> tuple[Schedule, float]:
    """The schedule and its ``added_at`` from :func:`encode_schedule`'s bytes."""
    try:
        body = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise _field_error("schedule", data[:40], f"stored record is not JSON ({exc})") from None
    if not isinstance(body, dict):
        raise _field_error("schedule", body, "stored record is not a JSON object")
    added_at = float(body.pop("added_at", 0.0))
    return Schedule.from_dict(body), added_at


# ---------------------------------------------------------------------------- ticks
@attrs.frozen
class Tick:
    """One firing time: ``at`` in epoch seconds; ``in_gap`` when every wall time it stands
    for was skipped by a clock change (it is then at the end of the gap)."""

    at: float
    in_gap: bool = False


@attrs.frozen
class Due:
    """What to do now: the ticks to ``fire`` (in order) and the tick to record as the last
    one handled (``advance_to``, None when nothing is due)."""

    fire: tuple[Tick, ...] = ()
    advance_to: float | None = None
    missed: bool = False


def _wall(at: float, zone: ZoneInfo) -> datetime:
    return datetime.fromtimestamp(at, zone).replace(tzinfo=None)


def _gap_end(wall: datetime, zone: ZoneInfo) -> float:
    """The instant a clock-forward gap containing ``wall`` ends (whole seconds)."""
    lo = math.floor(wall.replace(tzinfo=zone, fold=1).timestamp())
    hi = math.ceil(wall.replace(tzinfo=zone, fold=0).timestamp())
    after = datetime.fromtimestamp(hi, zone).utcoffset()
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if datetime.fromtimestamp(mid, zone).utcoffset() == after:
            hi = mid
        else:
            lo = mid
    return float(hi)


def _instant(wall: datetime, zone: ZoneInfo) -> Tick:
    """Map a wall time to its tick: first occurrence if repeated, gap end if skipped."""
    at = wall.replace(tzinfo=zone, fold=0).timestamp()
    if _wall(at, zone) == wall:
        return Tick(at)
    return Tick(_gap_end(wall, zone), in_gap=True)


def _merge(ticks: list[Tick], tick: Tick) -> None:
    """Append ``tick``; a tick at the same instant as the last one coalesces with it."""
    if ticks and ticks[-1].at == tick.at:
        ticks[-1] = Tick(tick.at, in_gap=ticks[-1].in_gap and tick.in_gap)
    else:
        ticks.append(tick)


def next_ticks(cron: str, zone: ZoneInfo, after: float, until: float, limit: int) -> list[Tick]:
    """The ticks ``t`` with ``after < t.at <= until``, in order, at most ``limit``."""
    out: list[Tick] = []
    if until <= after or limit <= 0:
        return out
    walls = croniter(cron, _wall(after, zone), max_years_between_matches=100)
    for _ in range(_MAX_STEPS):
        try:
            wall = walls.get_next(datetime)
        except CroniterBadDateError:  # no date matches any more (a schedule stored before
            break  # add_schedule refused such expressions): no further tick
        tick = _instant(wall, zone)
        if tick.at <= after:
            continue  # the second pass of a repeated hour
        if tick.at > until:
            break
        if len(out) == limit and out[-1].at != tick.at:
            break
        _merge(out, tick)
    return out


def next_tick(schedule: Schedule, after: float) -> Tick | None:
    """The first tick of ``schedule`` after ``after`` (None if croniter finds none)."""
    ticks = next_ticks(schedule.cron, schedule.zone, after, math.inf, 1)
    return ticks[0] if ticks else None


@attrs.frozen(kw_only=True)
class ScheduleInfo:
    """A stored schedule as ``list_schedules`` shows it: the schedule, when it was added,
    its last fired tick and its next one (epoch seconds; None when unknown)."""

    schedule: Schedule
    added_at: float
    last_fired: float | None = None
    next_at: float | None = None

    @property
    def name(self) -> str:
        return self.schedule.name


def last_tick(cron: str, zone: ZoneInfo, at_or_before: float, after: float) -> Tick | None:
    """The latest tick ``t`` with ``after < t.at <= at_or_before``, or None."""
    if at_or_before <= after:
        return None
    start = _wall(math.floor(at_or_before), zone) + timedelta(seconds=1)
    walls = croniter(cron, start)
    best: Tick | None = None
    for _ in range(_MAX_STEPS):
        try:
            wall = walls.get_prev(datetime)
        except CroniterBadDateError:  # no earlier date matches
            break
        tick = _instant(wall, zone)
        if tick.at <= after:
            break
        if tick.at <= at_or_before:
            # earlier walls can only map to the same or earlier instants: the first match wins,
            # but a coalesced gap tick may also stand for real wall times: keep scanning those
            if best is None:
                best = tick
            elif tick.at == best.at:
                best = Tick(best.at, in_gap=best.in_gap and tick.in_gap)
            else:
                break
    return best


def due_ticks(
    schedule: Schedule, *, start: float, now: float, grace: float, limit: int = 1000
) -> Due:
    """The ticks to fire now, per ``schedule.misfire``, for ticks after ``start`` (the last
    recorded tick, or when the schedule was added) up to ``now``.

    A tick is on time while ``now - tick <= grace``. Gap ticks are late by definition (their
    wall time never happened): ``skip`` never fires them.
    """
    if now <= start:
        return Due()
    zone = schedule.zone
    policy = schedule.misfire
    if policy is Misfire.CATCH_UP:
        ticks = next_ticks(schedule.cron, zone, start, now, limit)
        if not ticks:
            return Due()
        behind = any(now - t.at > grace or t.in_gap for t in ticks)
        return Due(fire=tuple(ticks), advance_to=ticks[-1].at, missed=behind)
    # on time: now - grace <= tick <= now. Ticks are whole seconds and the windows below are
    # open at their start, so they start at the last whole second before now - grace (a tick
    # exactly at now - grace is on time)
    before_cutoff = math.ceil(now - grace) - 1
    on_time = next_ticks(schedule.cron, zone, max(start, before_cutoff), now, limit)
    late = last_tick(schedule.cron, zone, before_cutoff, start)
    fire = [t for t in on_time if not t.in_gap]
    gaps = [t for t in on_time if t.in_gap]
    newest = on_time[-1] if on_time else late
    if newest is None:
        return Due()
    if policy is Misfire.RUN_ONCE:
        missed = [t for t in (late, gaps[-1] if gaps else None) if t is not None]
        if missed:
            once = max(missed, key=lambda t: t.at)
            fire = sorted([*fire, once], key=lambda t: t.at)
    return Due(fire=tuple(fire), advance_to=newest.at, missed=late is not None or bool(gaps))


def tick_task_id(name: str, at: float) -> str:
    """The task id of schedule ``name``'s tick at ``at``: the same for every scheduler."""
    stamp = datetime.fromtimestamp(math.floor(at), timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return f"cron:{name}:{stamp}"


def jitter_offset(name: str, at: float, jitter: float) -> float:
    """A delay in ``[0, jitter)`` for the tick, derived from its name and time, so every
    scheduler computes the same one (the pushed task is identical)."""
    if jitter <= 0:
        return 0.0
    digest = hashlib.sha256(f"{name}\0{math.floor(at)}".encode()).digest()
    # 53 bits: a fraction in [0, 1) that a double holds exactly (64 bits could round to 1.0)
    fraction = (int.from_bytes(digest[:8], "big") >> 11) / 2.0**53
    # the product still rounds up to ``jitter`` when it is tiny (a subnormal): stay below it
    return min(fraction * jitter, math.nextafter(jitter, 0.0))


def tick_task(schedule: Schedule, tick: Tick) -> Task:
    """The task ``schedule`` pushes for ``tick``: the same for every scheduler."""
    template = schedule.template
    at = tick.at + jitter_offset(schedule.name, tick.at, schedule.jitter)
    task_id = tick_task_id(schedule.name, tick.at)
    return Task.create(
        template.tenant,
        template.priority,
        template.payload,
        task_id=task_id,
        max_retries=template.max_retries,
        execute_after=at,
        headers={SCHEDULE_HEADER: schedule.name, TICK_HEADER: task_id.rsplit(":", 1)[-1]},
        name=template.task_name,
    )
