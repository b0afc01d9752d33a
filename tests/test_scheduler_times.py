"""When jobs run: cron on wall-clock time across DST, intervals, one-shot times, backoff."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from app.automations.durations import ScheduleError, human_duration, parse_duration
from app.automations.schedules import backoff_s, cron_trigger, next_run, parse_at
from memory.store.jobs_store import Schedule

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


def runs(spec: str, tz: str, start: datetime, n: int) -> list[str]:
    """The next `n` runs after `start` (a local wall time), as local 'YYYY-MM-DD HH:MM±hh:mm'."""
    zone = ZoneInfo(tz)
    schedule = Schedule("cron", spec, tz, EPOCH)
    at = start.replace(tzinfo=zone).astimezone(UTC)
    out = []
    for _ in range(n):
        nxt = next_run(schedule, at)
        assert nxt is not None
        out.append(nxt.astimezone(zone).isoformat(sep=" ", timespec="minutes"))
        at = nxt
    return out


@pytest.mark.parametrize(
    ("tz", "before_spring", "before_fall"),
    [
        ("Europe/Berlin", datetime(2026, 3, 28, 12), datetime(2026, 10, 24, 12)),
        ("America/New_York", datetime(2026, 3, 7, 12), datetime(2026, 10, 31, 12)),
    ],
)
def test_a_nine_oclock_cron_stays_at_nine_local_across_both_dst_changes(
    tz: str, before_spring: datetime, before_fall: datetime
) -> None:
    for start in (before_spring, before_fall):
        assert [r[11:16] for r in runs("0 9 * * *", tz, start, 3)] == ["09:00"] * 3


def test_a_time_skipped_by_spring_forward_runs_once_when_the_gap_ends_berlin() -> None:
    assert runs("30 2 * * *", "Europe/Berlin", datetime(2026, 3, 28, 12), 3) == [
        "2026-03-29 03:00+02:00",
        "2026-03-30 02:30+02:00",
        "2026-03-31 02:30+02:00",
    ]


def test_a_time_skipped_by_spring_forward_runs_once_when_the_gap_ends_new_york() -> None:
    assert runs("30 2 * * *", "America/New_York", datetime(2026, 3, 7, 12), 2) == [
        "2026-03-08 03:00-04:00",
        "2026-03-09 02:30-04:00",
    ]


def test_a_time_repeated_by_fall_back_runs_once_at_its_first_occurrence_berlin() -> None:
    assert runs("30 2 * * *", "Europe/Berlin", datetime(2026, 10, 24, 12), 2) == [
        "2026-10-25 02:30+02:00",
        "2026-10-26 02:30+01:00",
    ]


def test_a_time_repeated_by_fall_back_runs_once_at_its_first_occurrence_new_york() -> None:
    assert runs("30 1 * * *", "America/New_York", datetime(2026, 10, 31, 12), 2) == [
        "2026-11-01 01:30-04:00",
        "2026-11-02 01:30-05:00",
    ]


def test_during_the_repeated_hour_the_run_already_done_is_not_run_again() -> None:
    zone = ZoneInfo("Europe/Berlin")
    schedule = Schedule("cron", "30 2 * * *", "Europe/Berlin", EPOCH)
    second_pass = datetime(2026, 10, 25, 2, 10, tzinfo=zone, fold=1)  # 02:10 CET, after 02:30 CEST
    nxt = next_run(schedule, second_pass)
    assert nxt is not None
    assert nxt.astimezone(zone).isoformat(timespec="minutes") == "2026-10-26T02:30+01:00"


def test_crontab_weekday_numbers_mean_sunday_zero_not_apschedulers_monday_zero() -> None:
    # 2026-12-04 is a Friday: "1-5" (Mon–Fri) next runs on Monday the 7th, not Saturday.
    assert runs("30 8 * * 1-5", "Europe/Berlin", datetime(2026, 12, 4, 12), 1) == [
        "2026-12-07 08:30+01:00"
    ]
    assert runs("0 10 * * 0", "Europe/Berlin", datetime(2026, 12, 4, 12), 1) == [
        "2026-12-06 10:00+01:00"  # Sunday
    ]


# From Tuesday 2026-12-01 12:00 Berlin: the next four runs of each crontab line (local dates).
CRONTAB = [
    ("0 9 * * 0-6", ["12-02", "12-03", "12-04", "12-05"]),  # every day
    ("0 9 * * 1-7", ["12-02", "12-03", "12-04", "12-05"]),  # 7 is Sunday too
    ("0 9 * * 0-3", ["12-02", "12-06", "12-07", "12-08"]),  # Sun–Wed
    ("0 9 * * 7", ["12-06", "12-13", "12-20", "12-27"]),  # Sundays
    ("0 9 * * 5-7", ["12-04", "12-05", "12-06", "12-11"]),  # Fri–Sun
    ("0 9 * * */2", ["12-03", "12-05", "12-06", "12-08"]),  # Sun, Tue, Thu, Sat
    ("0 9 * * 1-5/2", ["12-02", "12-04", "12-07", "12-09"]),  # Mon, Wed, Fri
    ("0 9 * * MON,fri", ["12-04", "12-07", "12-11", "12-14"]),  # names, any case
    ("0 9 * * sat,sun", ["12-05", "12-06", "12-12", "12-13"]),
    ("0 9 1 * 1", ["12-07", "12-14", "12-21", "12-28"]),  # the 1st OR a Monday …
    ("0 9 1 * 5", ["12-04", "12-11", "12-18", "12-25"]),
    ("0 9 1,2 * 5", ["12-02", "12-04", "12-11", "12-18"]),  # … whichever comes first
    ("0 9 */10 * 1", ["12-21", "01-11", "02-01", "03-01"]),  # "*" first: both must match
    ("0 9 1 * *", ["01-01", "02-01", "03-01", "04-01"]),
]


@pytest.mark.parametrize(("spec", "days"), CRONTAB)
def test_crontab_lines_run_on_the_days_crontab_runs_them(spec: str, days: list[str]) -> None:
    got = runs(spec, "Europe/Berlin", datetime(2026, 12, 1, 12), 4)
    assert [r[5:10] for r in got] == days
    assert all(r[11:16] == "09:00" for r in got)


def test_the_first_of_a_month_that_is_no_monday_runs_under_the_or_rule() -> None:
    # January 2027 starts on a Friday: "0 9 1 * 1" still runs on the 1st.
    assert "2027-01-01 09:00+01:00" in runs("0 9 1 * 1", "Europe/Berlin", datetime(2026, 12, 29), 2)


@pytest.mark.parametrize("dow", ["5-0", "sat-sun", "8", "*/0", "x", "1/a", "mon-", "1,,2", "*-3"])
def test_a_day_of_week_crontab_would_not_read_is_refused_with_advice(dow: str) -> None:
    with pytest.raises(ScheduleError) as info:
        cron_trigger(f"0 9 * * {dow}")
    assert str(info.value).startswith(f'"{dow}" is not a day of the week: use 0–7')


def test_an_interval_counts_elapsed_time_from_its_first_run() -> None:
    schedule = Schedule("every", "1800", "Europe/Berlin", EPOCH)
    assert next_run(schedule, EPOCH) == EPOCH + timedelta(minutes=30)
    assert next_run(schedule, EPOCH + timedelta(minutes=31)) == EPOCH + timedelta(minutes=60)
    assert next_run(schedule, EPOCH - timedelta(seconds=1)) == EPOCH


def test_a_one_shot_has_no_run_after_its_instant() -> None:
    schedule = Schedule("at", "x", "UTC", EPOCH)
    assert next_run(schedule, EPOCH - timedelta(seconds=1)) == EPOCH
    assert next_run(schedule, EPOCH) is None


def test_a_time_without_an_offset_is_read_in_the_jobs_zone() -> None:
    now = datetime(2026, 12, 1, tzinfo=UTC)
    assert parse_at("2026-12-02T09:00", "Europe/Berlin", now) == datetime(
        2026, 12, 2, 8, tzinfo=UTC
    )
    assert parse_at("2026-12-02 09:00+00:00", "Europe/Berlin", now) == datetime(
        2026, 12, 2, 9, tzinfo=UTC
    )
    assert parse_at("20m", "Europe/Berlin", now) == now + timedelta(minutes=20)


def test_durations_and_bad_schedules_read_as_advice() -> None:
    assert parse_duration("1h30m") == 5400
    with pytest.raises(ScheduleError, match="20m"):
        parse_duration("soon")
    with pytest.raises(ScheduleError, match="5 fields"):
        cron_trigger("* * *")
    with pytest.raises(ScheduleError, match="ISO time"):
        parse_at("tomorrow-ish", "UTC", EPOCH)


def test_backoff_steps_then_stays_at_an_hour() -> None:
    assert [backoff_s(n) for n in range(1, 8)] == [30, 60, 300, 900, 3600, 3600, 3600]


def test_lateness_reads_in_hours_and_minutes() -> None:
    assert human_duration(2 * 3600 + 10 * 60 + 5) == "2 h 10 min"
    assert human_duration(45) == "45 s"
