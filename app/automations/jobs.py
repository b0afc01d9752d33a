"""Automations' data: when a job runs next, and the `jobs` / `job_runs` tables.

    store = JobStore(db)                                  # applies the automation migrations
    job = store.create(NewJob("cron", "30 8 * * 1-5", "Europe/Berlin", "task", "Summarise …",
                              Target("telegram", "42"), creator_key, owner_private=True), now)
    next_run(job.schedule, after=now)                     # the next UTC instant, or None

Times: a job keeps its `spec` in its zone (`tz`) and the UTC instant of its next run beside it.
`cron` is wall-clock time in that zone (a 09:00 job stays at 09:00 across DST; a time the clocks
skip runs once when the gap ends; a time that happens twice runs once, at the first); `every` is
elapsed time from its first run; `at` is one instant.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.combining import OrTrigger
from apscheduler.triggers.cron import CronTrigger

from app.automations.schema import apply_automation_migrations
from memory.store.db import Database

Kind = Literal["at", "every", "cron"]
Payload = Literal["reminder", "task", "heartbeat"]
State = Literal["active", "paused", "cancelled", "done", "disabled"]
KINDS: tuple[Kind, ...] = ("at", "every", "cron")
ENDED: tuple[State, ...] = ("done", "cancelled")  # states a job never leaves

BACKOFF_S = (30, 60, 300, 900, 3600)  # after the 1st, 2nd, … consecutive failure
ALERT_AFTER_FAILURES = 2
DISABLE_AFTER_FAILURES = 10
MIN_EVERY_S = 60
# Active jobs the owner (or a model in a loop) may have at once; the heartbeat does not count.
MAX_ACTIVE_JOBS = 1000


class ScheduleError(ValueError):
    """A schedule that cannot be understood; the message says how to write it."""


# -- time ------------------------------------------------------------------------------------


def utc_text(dt: datetime) -> str:
    """The stored form of an instant: ISO UTC with microseconds (so strings sort as times)."""
    return dt.astimezone(UTC).isoformat(timespec="microseconds")


def parse_utc(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ScheduleError(
            f'Unknown time zone "{name}": use an IANA name such as "Europe/Berlin".'
        ) from exc


def human_duration(seconds: float) -> str:
    """'2 h 10 min', '45 s', '3 d 4 h'."""
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    d, s = divmod(s, 86_400)
    h, s = divmod(s, 3600)
    m = s // 60
    parts = [f"{d} d" if d else "", f"{h} h" if h else "", f"{m} min" if m and not d else ""]
    return " ".join(p for p in parts if p) or "0 s"


def local_text(dt: datetime, tz_name: str) -> str:
    """'Tue 2026-12-01 09:00 CET (Europe/Berlin)': every confirmation states the zone (once
    when its abbreviation is its name: 'Tue 2026-12-01 09:00 UTC')."""
    local = dt.astimezone(zone(tz_name))
    name = "" if local.tzname() == tz_name else f" ({tz_name})"
    return f"{local:%a %Y-%m-%d %H:%M} {local.tzname()}{name}"


_DURATION = re.compile(r"(\d+)(min|d|h|m|s)", re.I)
_DURATIONS = re.compile(r"(\d+(min|d|h|m|s))+", re.I)
_UNIT_S = {"d": 86_400, "h": 3600, "m": 60, "min": 60, "s": 1}


def parse_duration(text: str) -> int:
    """Seconds in '30m', '2h', '1h30m', '1d', '90s'."""
    cleaned = text.strip().lower().replace(" ", "")
    parts = _DURATION.findall(cleaned)
    if not parts or "".join(n + u for n, u in parts) != cleaned:
        raise ScheduleError(f'"{text}" is not a duration: write e.g. "20m", "2h", "1h30m", "1d".')
    return sum(int(n) * _UNIT_S[u.lower()] for n, u in parts)


def later_by(now: datetime, seconds: int) -> datetime:
    """`now` plus `seconds`, or a `ScheduleError` when that is past the calendar's end."""
    try:
        return now.astimezone(UTC) + timedelta(seconds=seconds)
    except OverflowError:
        raise ScheduleError(
            f"{human_duration(seconds)} from now is too far in the future: give a time before "
            "the year 9999."
        ) from None


def parse_at(text: str, tz_name: str, now: datetime) -> datetime:
    """The UTC instant of `text`: an ISO time (without an offset: in `tz_name`) or '20m'."""
    raw = text.strip()
    if _DURATIONS.fullmatch(raw.replace(" ", "")):
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


@dataclass(frozen=True)
class Schedule:
    kind: Kind
    spec: str
    tz: str
    anchor_utc: datetime  # 'every': the first run; 'at': the instant

    def validate(self) -> None:
        zone(self.tz)
        if self.kind == "cron":
            cron_trigger(self.spec)
        elif self.kind == "every":
            if int(self.spec) < MIN_EVERY_S:
                raise ScheduleError("Repeat at most once a minute (every ≥ 1m).")
        elif self.kind != "at":
            raise ScheduleError(f"kind must be one of {KINDS}, not {self.kind!r}.")

    def describe(self) -> str:
        if self.kind == "at":
            return f"once at {local_text(self.anchor_utc, self.tz)}"
        if self.kind == "every":
            return f"every {human_duration(int(self.spec))}"
        return f'cron "{self.spec}" in {self.tz}'


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


# -- rows ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """Where a job's results are delivered: the chat (and thread) that asked."""

    channel: str
    chat_id: str
    thread_id: str | None = None


@dataclass(frozen=True)
class NewJob:
    schedule: Schedule
    payload: Payload
    text: str
    target: Target
    creator_key: str
    owner_private: bool
    managed: str | None = None


@dataclass(frozen=True)
class Job:
    id: int
    schedule: Schedule
    payload: Payload
    text: str
    target: Target
    creator_key: str
    owner_private: bool
    state: State
    next_run_utc: datetime | None
    consecutive_failures: int
    backoff_until: datetime | None
    managed: str | None
    created_at: datetime

    @property
    def upcoming(self) -> datetime | None:
        """The next run, if the job is active (a done one-shot keeps its last lease's time)."""
        return self.next_run_utc if self.state == "active" else None

    def summary(self) -> str:
        what = "reminder" if self.payload == "reminder" else self.payload
        nxt = local_text(self.upcoming, self.schedule.tz) if self.upcoming else "—"
        text = self.text if len(self.text) <= 60 else self.text[:57] + "…"
        return f"#{self.id} {self.state} {what} {self.schedule.describe()}; next {nxt}: {text}"


@dataclass(frozen=True)
class Run:
    id: int
    job_id: int
    scheduled_for: datetime
    started: datetime | None
    finished: datetime | None
    status: str
    late_by_s: float
    note: str | None


_JOB_COLUMNS = (
    "id, kind, spec, tz, anchor_utc, payload, text, channel, chat_id, thread_id, creator_key, "
    "owner_private, state, next_run_utc, consecutive_failures, backoff_until, managed, created_at"
)


def _opt_dt(text: str | None) -> datetime | None:
    return parse_utc(text) if text else None


def _job(row: Any) -> Job:
    (
        id_,
        kind,
        spec,
        tz,
        anchor,
        payload,
        text,
        channel,
        chat_id,
        thread_id,
        creator,
        owner_private,
        state,
        next_run_utc,
        failures,
        backoff_until,
        managed,
        created,
    ) = row
    return Job(
        id=int(id_),
        schedule=Schedule(kind, spec, tz, parse_utc(anchor)),
        payload=payload,
        text=text,
        target=Target(channel, chat_id, thread_id),
        creator_key=creator,
        owner_private=bool(owner_private),
        state=state,
        next_run_utc=_opt_dt(next_run_utc),
        consecutive_failures=int(failures),
        backoff_until=_opt_dt(backoff_until),
        managed=managed,
        created_at=parse_utc(created),
    )


def _run(row: Any) -> Run:
    id_, job_id, scheduled, started, finished, status, late, note = row
    return Run(
        int(id_),
        int(job_id),
        parse_utc(scheduled),
        _opt_dt(started),
        _opt_dt(finished),
        status,
        float(late),
        note,
    )


class JobStore:
    """The jobs and runs tables over the agent database (thread-safe through `db.lock`)."""

    def __init__(self, db: Database) -> None:
        self.db = db
        with db.lock:
            apply_automation_migrations(db.conn)

    # reading
    def get(self, job_id: int) -> Job | None:
        rows = self.db.execute(f"SELECT {_JOB_COLUMNS} FROM jobs WHERE id = ?", (job_id,))
        return _job(rows[0]) if rows else None

    def get_managed(self, name: str) -> Job | None:
        rows = self.db.execute(f"SELECT {_JOB_COLUMNS} FROM jobs WHERE managed = ?", (name,))
        return _job(rows[0]) if rows else None

    def jobs(self, *, states: tuple[str, ...] | None = None) -> list[Job]:
        if states:
            marks = ",".join("?" * len(states))
            rows = self.db.execute(
                f"SELECT {_JOB_COLUMNS} FROM jobs WHERE state IN ({marks}) ORDER BY id", states
            )
        else:
            rows = self.db.execute(f"SELECT {_JOB_COLUMNS} FROM jobs ORDER BY id")
        return [_job(r) for r in rows]

    def runs(self, job_id: int | None = None, limit: int = 50) -> list[Run]:
        cols = "id, job_id, scheduled_for, started, finished, status, late_by_s, note"
        if job_id is None:
            rows = self.db.execute(
                f"SELECT {cols} FROM job_runs ORDER BY id DESC LIMIT ?", (limit,)
            )
        else:
            rows = self.db.execute(
                f"SELECT {cols} FROM job_runs WHERE job_id = ? ORDER BY id DESC LIMIT ?",
                (job_id, limit),
            )
        return [_run(r) for r in rows]

    # writing
    def create(self, new: NewJob, now: datetime) -> Job:
        """Store `new` as an active job; its first run is the first one after `now`."""
        new.schedule.validate()
        first = next_run(new.schedule, now - timedelta(microseconds=1))
        if first is None or (new.schedule.kind == "at" and first < now - timedelta(seconds=1)):
            raise ScheduleError(
                f"{new.schedule.describe()} is in the past: give a time after "
                f"{local_text(now, new.schedule.tz)}."
            )
        s, t = new.schedule, new.target
        with self.db.transaction() as conn:
            (active,) = conn.execute(
                "SELECT count(*) FROM jobs WHERE state IN ('active', 'paused') AND managed IS NULL"
            ).fetchone()
            if new.managed is None and active >= MAX_ACTIVE_JOBS:
                raise ScheduleError(
                    f"There are already {active} scheduled jobs (at most {MAX_ACTIVE_JOBS}): "
                    "cancel some first (`pinch jobs list`, `pinch jobs cancel ID`)."
                )
            cur = conn.execute(
                f"INSERT INTO jobs ({_JOB_COLUMNS}) VALUES "
                "(NULL, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'active', ?, 0, NULL, ?, ?)",
                (
                    s.kind,
                    s.spec,
                    s.tz,
                    utc_text(s.anchor_utc),
                    new.payload,
                    new.text,
                    t.channel,
                    t.chat_id,
                    t.thread_id,
                    new.creator_key,
                    int(new.owner_private),
                    utc_text(first),
                    new.managed,
                    utc_text(now),
                ),
            )
            job_id = int(cur.lastrowid)
        job = self.get(job_id)
        assert job is not None
        return job

    def set_state(self, job_id: int, state: State, now: datetime) -> Job | None:
        """Pause, resume (re-computing the next run after `now`), cancel or disable a job.
        Raises `ScheduleError` when asked to pause or resume a job that has ended (done or
        cancelled): that would run a delivered one-shot again, or revive a cancelled job."""
        job = self.get(job_id)
        if job is None:
            return None
        if state in ("active", "paused") and job.state in ENDED:
            why = (
                "it has run and is finished"
                if job.state == "done"
                else "a cancelled job stays cancelled (its history is kept)"
            )
            raise ScheduleError(
                f"Job #{job_id} is {job.state}: {why}, so it cannot be "
                f"{'resumed' if state == 'active' else 'paused'}. Ask Pinch for a new one."
            )
        nxt, anchor = job.next_run_utc, job.schedule.anchor_utc
        if state == "active" and job.state != "active":
            if job.schedule.kind != "at":
                nxt = next_run(job.schedule, now)
            else:
                # A one-shot resumed after its time runs now, on time (not "missed").
                nxt = anchor = max(anchor, now)
        with self.db.transaction() as conn:
            conn.execute(
                "UPDATE jobs SET state = ?, next_run_utc = ?, anchor_utc = ?, "
                "consecutive_failures = "
                "CASE WHEN ? = 'active' THEN 0 ELSE consecutive_failures END WHERE id = ?",
                (state, utc_text(nxt) if nxt else None, utc_text(anchor), state, job_id),
            )
        return self.get(job_id)

    def run_now(self, job_id: int, now: datetime) -> Job | None:
        """Make an active or paused job due at `now` (pinch jobs run)."""
        with self.db.transaction() as conn:
            conn.execute(
                "UPDATE jobs SET next_run_utc = ?, state = 'active', "
                "anchor_utc = CASE WHEN kind = 'at' THEN ? ELSE anchor_utc END "
                "WHERE id = ? AND state IN ('active', 'paused')",
                (utc_text(now), utc_text(now), job_id),
            )
        return self.get(job_id)

    def claim(
        self,
        job: Job,
        scheduled: datetime,
        new_next: datetime | None,
        now: datetime,
        *,
        run_for: datetime | None = None,
    ) -> int | None:
        """Take run `scheduled` of `job` for this process: the job's next run moves to `new_next`
        only if it is still `scheduled` and the job active, so two schedulers on one database
        never both run it. The run is recorded as due at `run_for` (the latest of several
        coalesced runs; default `scheduled`). Returns the new run's id, or None if another
        took it."""
        with self.db.transaction() as conn:
            cur = conn.execute(
                "UPDATE jobs SET next_run_utc = ? WHERE id = ? AND state = 'active' "
                "AND next_run_utc = ?",
                (utc_text(new_next) if new_next else None, job.id, utc_text(scheduled)),
            )
            if cur.rowcount != 1:
                return None
            cur = conn.execute(
                "INSERT INTO job_runs (job_id, scheduled_for, started, status) "
                "VALUES (?, ?, ?, 'running')",
                (job.id, utc_text(run_for or scheduled), utc_text(now)),
            )
            return int(cur.lastrowid)

    def finish_run(
        self, run_id: int, status: str, now: datetime, late_by_s: float, note: str | None
    ) -> None:
        with self.db.transaction() as conn:
            conn.execute(
                "UPDATE job_runs SET status = ?, finished = ?, late_by_s = ?, note = ? "
                "WHERE id = ?",
                (status, utc_text(now), late_by_s, note, run_id),
            )

    def complete_run(
        self,
        run_id: int,
        job_id: int,
        status: str,
        now: datetime,
        late_by_s: float,
        note: str | None,
        *,
        done: bool,
    ) -> None:
        """Record a successful run and reset the job's failures, in one transaction."""
        with self.db.transaction() as conn:
            conn.execute(
                "UPDATE job_runs SET status = ?, finished = ?, late_by_s = ?, note = ? "
                "WHERE id = ?",
                (status, utc_text(now), late_by_s, note, run_id),
            )
            conn.execute(
                "UPDATE jobs SET consecutive_failures = 0, backoff_until = NULL, "
                "state = CASE WHEN ? AND state = 'active' THEN 'done' ELSE state END WHERE id = ?",
                (int(done), job_id),
            )

    def record_success(self, job_id: int, *, done: bool) -> None:
        with self.db.transaction() as conn:
            conn.execute(
                "UPDATE jobs SET consecutive_failures = 0, backoff_until = NULL, "
                "state = CASE WHEN ? AND state = 'active' THEN 'done' ELSE state END WHERE id = ?",
                (int(done), job_id),
            )

    def record_failure(self, job_id: int, now: datetime) -> Job | None:
        """Count a failure: the run is retried after the backoff (30 s, 1 min, …; a recurring
        job then goes on from its schedule), or the job is disabled after
        `DISABLE_AFTER_FAILURES`. Returns the updated job."""
        job = self.get(job_id)
        if job is None:
            return None
        failures = job.consecutive_failures + 1
        until = now + timedelta(seconds=backoff_s(failures))
        # Retried at `until` even when the schedule's next run comes later (a daily reminder
        # that met one transient error is not lost): the retry's claim moves the job to the
        # first scheduled run after it.
        nxt = until
        state = "disabled" if failures >= DISABLE_AFTER_FAILURES else None
        with self.db.transaction() as conn:
            conn.execute(
                "UPDATE jobs SET consecutive_failures = ?, backoff_until = ?, "
                "next_run_utc = CASE WHEN state = 'active' THEN ? ELSE next_run_utc END, "
                "state = CASE WHEN ? IS NOT NULL AND state = 'active' THEN ? ELSE state END "
                "WHERE id = ?",
                (failures, utc_text(until), utc_text(nxt), state, state, job_id),
            )
        return self.get(job_id)

    def release(self, job_id: int, due: datetime) -> None:
        """Make an interrupted one-shot due again at `due` (it runs at the next start)."""
        with self.db.transaction() as conn:
            conn.execute(
                "UPDATE jobs SET next_run_utc = ? WHERE id = ? AND state = 'active'",
                (utc_text(due), job_id),
            )

    def close_interrupted_runs(self, now: datetime) -> int:
        """Mark runs a stopped process left 'running' as cancelled; returns how many."""
        with self.db.transaction() as conn:
            cur = conn.execute(
                "UPDATE job_runs SET status = 'cancelled', finished = ?, "
                "note = 'interrupted: Pinch stopped during the run' WHERE status = 'running'",
                (utc_text(now),),
            )
            return int(cur.rowcount)

    def mark_done(self, job_id: int) -> None:
        with self.db.transaction() as conn:
            conn.execute(
                "UPDATE jobs SET state = 'done' WHERE id = ? AND state = 'active'", (job_id,)
            )

    def replace_managed(self, new: NewJob, now: datetime) -> Job:
        """Create or update the managed job `new.managed` (e.g. the heartbeat) to match `new`.
        A job the owner paused (or that was disabled after failures) stays so: the config says
        what it is, `pinch jobs resume` whether it runs."""
        assert new.managed
        old = self.get_managed(new.managed)
        kept: State | None = None
        if old is not None:
            same = (
                old.schedule.kind,
                old.schedule.spec,
                old.schedule.tz,
                old.text,
                old.target,
            ) == (new.schedule.kind, new.schedule.spec, new.schedule.tz, new.text, new.target)
            if same and old.state in ("active", "paused", "disabled"):
                return old
            kept = old.state if old.state in ("paused", "disabled") else None
            with self.db.transaction() as conn:
                conn.execute("DELETE FROM jobs WHERE id = ?", (old.id,))
        job = self.create(new, now)
        if kept is not None:
            with self.db.transaction() as conn:
                conn.execute("UPDATE jobs SET state = ? WHERE id = ?", (kept, job.id))
            job = replace(job, state=kept)
        return job

    def remove_managed(self, name: str) -> None:
        with self.db.transaction() as conn:
            conn.execute("UPDATE jobs SET state = 'cancelled' WHERE managed = ?", (name,))


def with_next(job: Job, nxt: datetime | None) -> Job:
    return replace(job, next_run_utc=nxt)
