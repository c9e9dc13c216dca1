"""Cron schedules, the pure part: validation, tick arithmetic, DST, misfire policies."""

from __future__ import annotations

import itertools
from datetime import datetime, timezone
from zoneinfo import ZoneInfo

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from fairque_core import FairQueueConfig, Priority, ScheduleValidationError
from fairque_core.domain.errors import ConfigurationError, TaskValidationError
from fairque_core.domain.schedules import (
    Misfire,
    Schedule,
    TaskTemplate,
    decode_schedule,
    due_ticks,
    encode_schedule,
    jitter_offset,
    last_tick,
    next_ticks,
    tick_task_id,
    validate_schedule_name,
)
from fairque_core.domain.validation import validate_id

NY = ZoneInfo("America/New_York")
UTC = ZoneInfo("UTC")


def at(*parts: int, zone: ZoneInfo = NY, fold: int = 0) -> float:
    return datetime(*parts, tzinfo=zone, fold=fold).timestamp()  # type: ignore[misc]


def local(ts: float, zone: ZoneInfo = NY) -> str:
    return datetime.fromtimestamp(ts, zone).strftime("%Y-%m-%d %H:%M:%S%z")


def sched(cron: str, misfire: str = "skip", zone: str = "America/New_York") -> Schedule:
    return Schedule(
        name="s", cron=cron, template={"tenant": "acme"}, timezone=zone, misfire=misfire
    )


# ---------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"cron": "61 * * * *"}, "cron"),
        ({"cron": "* * * *"}, "cron"),
        ({"cron": ""}, "cron"),
        ({"cron": 5}, "cron"),
        ({"timezone": "Mars/Olympus_Mons"}, "timezone"),
        ({"timezone": ""}, "timezone"),
        ({"misfire": "sometimes"}, "misfire"),
        ({"jitter": -1}, "jitter"),
        ({"jitter": float("nan")}, "jitter"),
        ({"jitter": True}, "jitter"),
        ({"jitter": 1e300}, "jitter"),  # its ticks' tasks would start past the year 9999
        ({"cron": "0 0 30 2 *"}, "cron"),  # valid fields, no date: it would never fire
        ({"template": {"tenant": "a", "payload": {"x": float("nan")}}}, "payload"),
        ({"template": {"tenant": "a", "max_retries": 2**40}}, "max_retries"),
        ({"name": "has space"}, "name"),
        ({"name": "x" * 81}, "name"),
        ({"template": {"tenant": "a b"}}, "tenant"),
        ({"template": {}}, "tenant"),
        ({"template": {"tenant": "a", "priority": 9}}, "priority"),
        ({"template": {"tenant": "a", "payload": {"x": object()}}}, "payload"),
        ({"template": {"tenant": "a", "payload": [1]}}, "payload"),
        ({"template": {"tenant": "a", "max_retries": -1}}, "max_retries"),
        ({"template": {"tenant": "a", "colour": "red"}}, "task"),
        ({"template": "acme"}, "task"),
    ],
)
def test_bad_input_is_a_typed_error_naming_the_field(
    changes: dict[str, object], field: str
) -> None:
    args: dict[str, object] = {"name": "s", "cron": "* * * * *", "template": {"tenant": "a"}}
    args.update(changes)
    with pytest.raises(ScheduleValidationError) as info:
        Schedule(**args)  # type: ignore[arg-type]
    assert info.value.field == field
    assert isinstance(info.value, TaskValidationError)
    assert field in str(info.value)


def test_a_cron_that_matches_no_date_has_no_ticks_rather_than_an_error() -> None:
    """Such a schedule may be stored from before add_schedule refused it: reading its ticks
    gives none (croniter raises CroniterBadDateError, a bare ValueError)."""
    start = at(2026, 1, 1, 0, 0, zone=UTC)
    assert next_ticks("0 0 30 2 *", UTC, start, start + 10 * 365 * 86400, 5) == []
    assert last_tick("0 0 30 2 *", UTC, start, start - 365 * 86400) is None


def test_schedule_names_are_checked_alone() -> None:
    assert validate_schedule_name("nightly.report") == "nightly.report"
    for bad in ("a b", "", "x" * 81, 5):
        with pytest.raises(ScheduleValidationError) as info:
            validate_schedule_name(bad)
        assert info.value.field == "name"


def test_yaml_schedules_are_checked_with_their_path() -> None:
    good = {"name": "n", "cron": "*/5 * * * *", "task": {"tenant": "acme", "priority": 4}}
    config = FairQueueConfig.from_dict({"schedules": [good]}, env={})
    [value] = config.schedule_values()
    assert value.template.priority is Priority.HIGH
    with pytest.raises(ConfigurationError) as info:
        FairQueueConfig.from_dict({"schedules": [good, {**good, "name": "m", "cron": "x"}]}, env={})
    assert info.value.path == "schedules.1.cron"
    with pytest.raises(ConfigurationError) as info:
        FairQueueConfig.from_dict({"schedules": [good, good]}, env={})
    assert info.value.path == "schedules.1.name"
    assert FairQueueConfig.from_dict(config.to_dict(), env={}) == config


def test_stored_form_round_trips() -> None:
    s = Schedule(
        name="n",
        cron="0 3 * * *",
        template=TaskTemplate(tenant="t", task_name="x", priority=6, payload={"a": [1]}),
        timezone="Europe/Paris",
        misfire="catch_up",
        jitter=2.5,
    )
    assert decode_schedule(encode_schedule(s, 123.5)) == (s, 123.5)


# ---------------------------------------------------------------------- ticks and DST


def test_spring_forward_gap_tick_moves_to_the_gap_end_and_obeys_the_policy() -> None:
    # 2024-03-10 02:00 EST -> 03:00 EDT: 02:30 does not exist that day
    ticks = next_ticks("30 2 * * *", NY, at(2024, 3, 9, 12), at(2024, 3, 11, 12), 10)
    assert [(local(t.at), t.in_gap) for t in ticks] == [
        ("2024-03-10 03:00:00-0400", True),
        ("2024-03-11 02:30:00-0400", False),
    ]
    start, now = at(2024, 3, 10, 0), at(2024, 3, 10, 3, 0, 5)
    assert due_ticks(sched("30 2 * * *", "skip"), start=start, now=now, grace=30).fire == ()
    for policy in ("run_once", "catch_up"):
        due = due_ticks(sched("30 2 * * *", policy), start=start, now=now, grace=30)
        assert [local(t.at) for t in due.fire] == ["2024-03-10 03:00:00-0400"]
        assert due.missed


def test_spring_forward_gap_ticks_coalesce_and_real_ones_still_fire() -> None:
    ticks = next_ticks("*/20 2-3 * * *", NY, at(2024, 3, 10, 1), at(2024, 3, 10, 5), 10)
    assert [(local(t.at)[11:19], t.in_gap) for t in ticks] == [
        ("03:00:00", False),  # 02:00, 02:20, 02:40 (gap) and the real 03:00 in one tick
        ("03:20:00", False),
        ("03:40:00", False),
    ]


def test_fall_back_repeated_wall_time_fires_once() -> None:
    # 2024-11-03 02:00 EDT -> 01:00 EST: 01:30 happens twice
    ticks = next_ticks("30 1 * * *", NY, at(2024, 11, 2, 12), at(2024, 11, 4, 12), 10)
    assert [local(t.at) for t in ticks] == [
        "2024-11-03 01:30:00-0400",
        "2024-11-04 01:30:00-0500",
    ]
    # started inside the second pass of the repeated hour: the first-pass tick is already past
    second_pass = at(2024, 11, 3, 1, 10, fold=1)
    assert [
        local(t.at) for t in next_ticks("30 1 * * *", NY, second_pass, at(2024, 11, 4, 12), 5)
    ] == ["2024-11-04 01:30:00-0500"]


def test_fall_back_interval_schedule_keeps_wall_clock_rhythm() -> None:
    ticks = next_ticks("0 * * * *", NY, at(2024, 11, 3, 0, 30), at(2024, 11, 3, 3, 30), 10)
    assert [local(t.at) for t in ticks] == [
        "2024-11-03 01:00:00-0400",
        "2024-11-03 02:00:00-0500",
        "2024-11-03 03:00:00-0500",
    ]
    # in UTC the rhythm is uniform
    utc = next_ticks("0 * * * *", UTC, at(2024, 11, 3, 0, 30), at(2024, 11, 3, 3, 30), 10)
    assert len(utc) == 4


@given(
    zone=st.sampled_from(["UTC", "America/New_York", "Europe/London", "Australia/Lord_Howe"]),
    cron=st.sampled_from(["* * * * *", "*/7 * * * *", "30 1,2,3 * * *", "0 0 * * 0", "15 2 * 3 *"]),
    offset_hours=st.integers(min_value=0, max_value=24 * 400),
    span_hours=st.integers(min_value=1, max_value=72),
)
def test_ticks_are_increasing_whole_seconds_inside_the_window(
    zone: str, cron: str, offset_hours: int, span_hours: int
) -> None:
    tz = ZoneInfo(zone)
    after = datetime(2024, 1, 1, tzinfo=timezone.utc).timestamp() + offset_hours * 3600.0
    until = after + span_hours * 3600.0
    ticks = next_ticks(cron, tz, after, until, 10_000)
    assert all(after < t.at <= until and t.at == int(t.at) for t in ticks)
    assert all(a.at < b.at for a, b in itertools.pairwise(ticks))
    latest = last_tick(cron, tz, until, after)
    assert (latest is None) == (not ticks)
    if latest is not None:
        assert latest.at == ticks[-1].at


# ---------------------------------------------------------------------- misfire policies


def test_misfire_after_an_hour_down() -> None:
    start = at(2024, 6, 1, 12, zone=UTC)
    now = start + 3600 + 20  # down for an hour; the tick at +3600 is 20 s late (on time)
    grace = 30.0

    def fired(policy: str) -> list[float]:
        due = due_ticks(sched("*/5 * * * *", policy, "UTC"), start=start, now=now, grace=grace)
        assert due.advance_to == start + 3600
        return [t.at - start for t in due.fire]

    assert fired("skip") == [3600]  # the late ones dropped, the on-time one runs
    assert fired("run_once") == [3300, 3600]  # one run for the eleven late ticks
    assert fired("catch_up") == [300 * k for k in range(1, 13)]
    late = now + 60  # nothing on time any more
    assert (
        due_ticks(sched("*/5 * * * *", "skip", "UTC"), start=start, now=late, grace=grace).fire
        == ()
    )


def test_catch_up_is_bounded_per_call_and_resumes() -> None:
    s = sched("* * * * * *", "catch_up", "UTC")
    start = at(2024, 6, 1, 12, zone=UTC)
    first = due_ticks(s, start=start, now=start + 3600, grace=1, limit=1000)
    assert len(first.fire) == 1000
    assert first.advance_to == start + 1000
    rest = due_ticks(s, start=first.advance_to, now=start + 3600, grace=1, limit=5000)
    assert len(rest.fire) == 2600


@given(
    policy=st.sampled_from(list(Misfire)),
    down=st.floats(min_value=0, max_value=7200),
    grace=st.floats(min_value=0, max_value=120),
)
@example(policy=Misfire.SKIP, down=1800.0, grace=0.0)  # a tick exactly at now is on time
def test_policies_never_fire_twice_and_never_beyond_now(
    policy: Misfire, down: float, grace: float
) -> None:
    s = sched("*/2 * * * *", policy.value, "UTC")
    start = at(2024, 6, 1, 12, zone=UTC)
    now = start + down
    due = due_ticks(s, start=start, now=now, grace=grace)
    times = [t.at for t in due.fire]
    assert times == sorted(set(times))
    assert all(start < t <= now for t in times)
    every = next_ticks(s.cron, s.zone, start, now, 100_000)
    on_time = [t.at for t in every if now - t.at <= grace]
    assert set(on_time) <= set(times)  # an on-time tick always fires
    if policy is Misfire.CATCH_UP:
        assert times == [t.at for t in every]
    if policy is Misfire.SKIP:
        assert times == on_time
    if policy is Misfire.RUN_ONCE:
        assert len(times) - len(on_time) == (1 if len(every) > len(on_time) else 0)
    # the next call from the recorded tick fires nothing new
    if due.advance_to is not None:
        assert due_ticks(s, start=due.advance_to, now=now, grace=grace).fire == ()


# ---------------------------------------------------------------------- ids and jitter


@given(
    name=st.from_regex(r"[A-Za-z0-9_.@-]{1,80}", fullmatch=True),
    tick=st.integers(min_value=0, max_value=4_000_000_000),
)
def test_tick_ids_are_valid_deterministic_and_distinct(name: str, tick: int) -> None:
    task_id = tick_task_id(name, tick)
    assert validate_id(task_id) == task_id
    assert tick_task_id(name, tick) == task_id
    assert tick_task_id(name, tick + 1) != task_id


@given(tick=st.integers(min_value=0, max_value=4_000_000_000), jitter=st.floats(0, 3600))
@example(tick=1, jitter=5e-324)  # a subnormal jitter: the product rounded up to it once
def test_jitter_is_deterministic_and_in_range(tick: int, jitter: float) -> None:
    offset = jitter_offset("n", tick, jitter)
    assert offset == jitter_offset("n", tick, jitter)
    assert 0 <= offset <= jitter
    assert offset < jitter or jitter == 0


def test_tick_id_names_the_utc_second() -> None:
    ts = datetime(2024, 3, 10, 7, 0, tzinfo=timezone.utc).timestamp()
    assert tick_task_id("nightly", ts) == "cron:nightly:20240310T070000Z"
    assert tick_task_id("nightly", ts + 0.9) == tick_task_id("nightly", ts)
