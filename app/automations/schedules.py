"""When a job runs: schedules read in their zone, crontab fields, and the next run.

    schedule = Schedule("cron", "30 8 * * 1-5", "Europe/Berlin", anchor_utc=now)
    validate(schedule)                      # ScheduleError with advice when it cannot run
    next_run(schedule, after=now)           # the next UTC instant, or None

A job keeps its `spec` in its zone (`tz`) and the UTC instant of its next run beside it. `cron` is
wall-clock time in that zone (a 09:00 job stays at 09:00 across DST; a time the clocks skip runs
once when the gap ends; a time that happens twice runs once, at the first); `every` is elapsed
time from its first run; `at` is one instant.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, tzinfo

from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.combining import OrTrigger
from apscheduler.triggers.cron import CronTrigger

from app.automations.durations import (
    DURATIONS,
    ScheduleError,
    human_duration,
    later_by,
    parse_duration,
)
from common.clock import load_timezone
from common.text import shorten
from memory.store.jobs_store import Job, Kind, Schedule

KINDS: tuple[Kind, ...] = ("at", "every", "cron")
BACKOFF_S = (30, 60, 300, 900, 3600)  # after the 1st, 2nd, … consecutive failure
MIN_EVERY_S = 60


def zone(name: str) -> tzinfo:
    """The IANA zone `name` (common.clock.load_timezone), or a `ScheduleError` with advice."""
    try:
        if not name:
            raise ValueError(name)
        return load_timezone(name)
    except ValueError as exc:
        raise ScheduleError(
            f'Unknown time zone "{name}": use an IANA name such as "Europe/Berlin".'
        ) from exc


def local_text(dt: datetime, tz_name: str) -> str:
    """'Tue 2026-12-01 09:00 CET (Europe/Berlin)': every confirmation states the zone (once
    when its abbreviation is its name: 'Tue 2026-12-01 09:00 UTC')."""
    local = dt.astimezone(zone(tz_name))
    name = "" if local.tzname() == tz_name else f" ({tz_name})"
    return f"{local:%a %Y-%m-%d %H:%M} {local.tzname()}{name}"


def parse_at(text: str, tz_name: str, now: datetime) -> datetime:
    """The UTC instant of `text`: an ISO time (without an offset: in `tz_name`) or '20m'."""
    raw = text.strip()
    if DURATIONS.fullmatch(raw.replace(" ", "")):
        return later_by(now, parse_duration(raw))
    try:
        dt = datetime.fromisoformat(raw.replace(" ", "T", 1) if " " in raw else raw)
    except ValueError:
        raise ScheduleError(
            f'"{text}" is not a time: write an ISO time such as "2026-12-02T09:00" '
            f'(read in {tz_name}) or a delay such as "20m".'
        ) from None
    if dt.tzinfo is None:
        return wall_to_utc(dt, zone(tz_name))
    return dt.astimezone(UTC)


_DAY_NAMES = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_DAY_VALUE = re.compile(r"[0-7]|sun|mon|tue|wed|thu|fri|sat", re.I)


def _day_number(text: str) -> int:
    """0–7 or a name → crontab's day number 0–7 (0 and 7 are Sunday)."""
    if not _DAY_VALUE.fullmatch(text):
        raise ValueError(text)
    return int(text) if text.isdigit() else _DAY_NAMES.index(text.lower())


def crontab_weekdays(field: str) -> set[int]:
    """The days (0 = Sunday … 6 = Saturday) crontab's day-of-week `field` names: numbers 0–7
    (0 and 7 are Sunday), names (sun–sat), ranges (1-5, mon-fri), steps (*/2, 1-5/2), lists.

    Parsed here rather than handed to APScheduler 3.x, whose day 0 is Monday (its issue 286)."""
    days: set[int] = set()
    try:
        for part in field.split(","):
            body, _, step_text = part.partition("/")
            step = int(step_text) if step_text else 1
            if step < 1 or (step_text and not step_text.isdigit()):
                raise ValueError(part)
            if body == "*":
                first, last = 0, 7
            elif "-" in body:
                a, b = body.split("-", 1)
                first, last = _day_number(a), _day_number(b)
                if first > last:
                    raise ValueError(part)  # as crontab: "5-0" is no range
            else:
                first = _day_number(body)
                last = 7 if step_text else first  # "1/2" is "1-7/2"
            days.update(d % 7 for d in range(first, last + 1, step))
    except ValueError:
        raise ScheduleError(
            f'"{field}" is not a day of the week: use 0–7 (0 and 7 are Sunday) or sun–sat, '
            "with ranges (1-5), steps (*/2) and lists (1,3,5)."
        ) from None
    return days


def _aps_weekdays(field: str) -> str:
    days = crontab_weekdays(field)
    return "*" if len(days) == 7 else ",".join(_DAY_NAMES[d] for d in sorted(days))


def cron_trigger(spec: str) -> BaseTrigger:
    """A trigger matching the 5-field crontab `spec` on wall-clock time (UTC stands for 'naive').

    As in crontab, when both day of month and day of week are restricted (neither starts with
    "*"), a day matching either runs ("0 9 1 * 1": the 1st, and every Monday)."""
    fields = spec.split()
    if len(fields) != 5:
        raise ScheduleError(
            f'"{spec}" is not a cron schedule: write 5 fields, minute hour day month weekday, '
            'e.g. "30 8 * * 1-5" for weekdays at 08:30.'
        )
    minute, hour, day, month, dow = fields
    weekdays = _aps_weekdays(dow)

    def trigger(day: str, day_of_week: str) -> CronTrigger:
        return CronTrigger(
            minute=minute, hour=hour, day=day, month=month, day_of_week=day_of_week, timezone=UTC
        )

    try:
        if day.startswith("*") or dow.startswith("*"):
            return trigger(day, weekdays)
        return OrTrigger([trigger(day, "*"), trigger("*", weekdays)])
    except ValueError as exc:
        raise ScheduleError(f'"{spec}" is not a valid cron schedule ({exc}).') from None


def wall_to_utc(wall: datetime, tz: tzinfo) -> datetime:
    """The UTC instant the wall-clock time `wall` (naive) names in `tz`.

    A time that happens twice (clocks go back) is its first occurrence; a time the clocks skip
    (clocks go forward) is the instant the gap ends."""
    wall = wall.replace(tzinfo=None)
    first = wall.replace(tzinfo=tz, fold=0).astimezone(UTC)
    if first.astimezone(tz).replace(tzinfo=None) == wall:
        return first
    # In a gap: fold=0 reads it with the offset before the gap, fold=1 with the one after;
    # the transition lies between the two instants. Find it to the second.
    lo = min(first, wall.replace(tzinfo=tz, fold=1).astimezone(UTC))
    hi = max(first, wall.replace(tzinfo=tz, fold=1).astimezone(UTC))
    before = lo.astimezone(tz).utcoffset()
    while hi - lo > timedelta(seconds=1):
        mid = lo + (hi - lo) / 2
        if mid.astimezone(tz).utcoffset() == before:
            lo = mid
        else:
            hi = mid
    return hi.replace(microsecond=0)


def validate(schedule: Schedule) -> None:
    """Raise `ScheduleError` with advice when `schedule` cannot run."""
    zone(schedule.tz)
    if schedule.kind == "cron":
        cron_trigger(schedule.spec)
    elif schedule.kind == "every":
        if int(schedule.spec) < MIN_EVERY_S:
            raise ScheduleError("Repeat at most once a minute (every ≥ 1m).")
    elif schedule.kind != "at":
        raise ScheduleError(f"kind must be one of {KINDS}, not {schedule.kind!r}.")


def describe(schedule: Schedule) -> str:
    """'once at Tue 2026-12-01 09:00 CET (Europe/Berlin)', 'every 30 min', 'cron "…" in …'."""
    if schedule.kind == "at":
        return f"once at {local_text(schedule.anchor_utc, schedule.tz)}"
    if schedule.kind == "every":
        return f"every {human_duration(int(schedule.spec))}"
    return f'cron "{schedule.spec}" in {schedule.tz}'


def summary(job: Job) -> str:
    """One line about `job` for a list: id, state, what, schedule, next run, text."""
    what = "reminder" if job.payload == "reminder" else job.payload
    nxt = local_text(job.upcoming, job.schedule.tz) if job.upcoming else "—"
    text = shorten(job.text, 60)
    return f"#{job.id} {job.state} {what} {describe(job.schedule)}; next {nxt}: {text}"


def next_run(schedule: Schedule, after: datetime) -> datetime | None:
    """The first run strictly after `after` (aware), in UTC, or None when there is none."""
    after = after.astimezone(UTC)
    if schedule.kind == "at":
        return schedule.anchor_utc if schedule.anchor_utc > after else None
    if schedule.kind == "every":
        step = timedelta(seconds=int(schedule.spec))
        if schedule.anchor_utc > after:
            return schedule.anchor_utc
        k = (after - schedule.anchor_utc) // step + 1
        try:
            return schedule.anchor_utc + k * step
        except OverflowError:
            return None  # past the calendar's end: no more runs
    tz = zone(schedule.tz)
    trigger = cron_trigger(schedule.spec)
    # Walk wall-clock matches after `after`'s local wall time; map each to UTC and take the
    # first one after `after` (the mapping is monotonic except around the repeated hour).
    wall = after.astimezone(tz).replace(tzinfo=None)
    probe = wall.replace(tzinfo=UTC)
    for _ in range(8):
        match = trigger.get_next_fire_time(None, probe + timedelta(microseconds=1))
        if match is None:
            return None
        instant = wall_to_utc(match.replace(tzinfo=None), tz)
        if instant > after:
            return instant
        probe = match
    return None


def runs_between(
    schedule: Schedule, start: datetime, end: datetime, cap: int = 10_000
) -> Iterator[datetime]:
    """Runs at or after `start` and at or before `end` (at most `cap`)."""
    current: datetime | None = start
    n = 0
    while current is not None and current <= end and n < cap:
        yield current
        n += 1
        current = next_run(schedule, current)


def backoff_s(failures: int) -> int:
    return BACKOFF_S[min(failures, len(BACKOFF_S)) - 1] if failures > 0 else 0
