"""Scheduled jobs and their runs: the repository behind app/automations/.

    store = SqliteJobStore(db)                         # applies the automation migrations
    job = store.insert(new, first_run=when, now=now, max_active=1000)
    run_id = store.claim(job.id, scheduled, new_next, now, run_for=scheduled)

The rows are plain data; what a schedule means (cron, zones, back-off, validation) is decided in
app/automations/. Instants are aware datetimes; the SQLite implementation stores them as ISO UTC
text with microseconds, so they sort as times.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

from memory.store.automations_schema import apply_automation_migrations
from memory.store.db import Database

Kind = Literal["at", "every", "cron"]
Payload = Literal["reminder", "task", "heartbeat"]
State = Literal["active", "paused", "cancelled", "done", "disabled"]


@dataclass(frozen=True)
class Schedule:
    kind: Kind
    spec: str  # ISO instant | seconds | 5-field cron
    tz: str  # the IANA zone the spec is read in
    anchor_utc: datetime  # 'every': the first run; 'at': the instant


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


class TooManyJobs(Exception):
    """`insert` refused: `active` owner jobs (active or paused, not managed) already exist."""

    def __init__(self, active: int) -> None:
        super().__init__(f"{active} active jobs")
        self.active = active


class JobStore(Protocol):
    """Jobs and runs. What every implementation promises:

    - Job and run ids grow in creation order; `jobs` lists by id, `runs` newest first.
    - `managed` names are unique: at most one job per managed name (e.g. "heartbeat").
    - `insert` is atomic: counting the owner's active and paused jobs (managed ones not counted)
      and adding the new one happen in one transaction, so `max_active` is never exceeded.
    - Exactly-once claiming: `claim` moves a job's next run from `scheduled` to `new_next` and
      records a 'running' run in one transaction, only if the job is active and its next run is
      still `scheduled`; of two schedulers on one database, one gets the run id, the other None.
    - `complete_run` records the run's end and resets the job's failures in one transaction.
    - Conditional updates (`run_now`, `release`, `mark_done`, `record_failure`'s move) change
      only jobs in the states named in their docstrings; ended jobs (done, cancelled) stay so.
    """

    def get(self, job_id: int) -> Job | None: ...

    def get_managed(self, name: str) -> Job | None: ...

    def jobs(self, *, states: tuple[str, ...] | None = None) -> list[Job]: ...

    def runs(self, job_id: int | None = None, limit: int = 50) -> list[Run]: ...

    def insert(
        self, new: NewJob, *, first_run: datetime, now: datetime, max_active: int | None
    ) -> Job:
        """Store `new` as an active job due at `first_run`; raises `TooManyJobs` when
        `max_active` is given and reached (checked and inserted in one transaction)."""
        ...

    def update_schedule(
        self, job_id: int, state: State, next_run: datetime | None, anchor: datetime
    ) -> None:
        """Set a job's state, next run and anchor; entering 'active' resets its failures."""
        ...

    def force_state(self, job_id: int, state: State) -> None: ...

    def delete(self, job_id: int) -> None: ...

    def run_now(self, job_id: int, now: datetime) -> None:
        """Make an active or paused job due (and active) at `now`; a one-shot's instant too."""
        ...

    def claim(
        self,
        job_id: int,
        scheduled: datetime,
        new_next: datetime | None,
        now: datetime,
        *,
        run_for: datetime,
    ) -> int | None:
        """Take run `scheduled`: the new run's id, or None when another took it."""
        ...

    def finish_run(
        self, run_id: int, status: str, now: datetime, late_by_s: float, note: str | None
    ) -> None: ...

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
        """Record a successful run, reset the job's failures and (`done`) end an active job."""
        ...

    def record_failure(self, job_id: int, failures: int, retry_at: datetime, disable: bool) -> None:
        """Count a failure: `failures` in a row, retried at `retry_at` (an active job's next
        run moves there); `disable` turns an active job 'disabled'."""
        ...

    def release(self, job_id: int, due: datetime) -> None:
        """Make an active job due again at `due`."""
        ...

    def close_interrupted_runs(self, now: datetime, started_before: datetime | None = None) -> int:
        """Mark runs left 'running' as cancelled — only those started before `started_before`
        when given (several schedulers on one database: a younger run may be another's, live);
        returns how many."""
        ...

    def mark_done(self, job_id: int) -> None:
        """An active job is done."""
        ...

    def cancel_managed(self, name: str) -> None: ...

    def close(self) -> None:
        """Release the store's connection (a command-line run that opened it for itself)."""
        ...


def utc_text(dt: datetime) -> str:
    """The stored form of an instant: ISO UTC with microseconds (so strings sort as times)."""
    return dt.astimezone(UTC).isoformat(timespec="microseconds")


def parse_utc(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


def _opt_dt(text: str | None) -> datetime | None:
    return parse_utc(text) if text else None


_JOB_COLUMNS = (
    "id, kind, spec, tz, anchor_utc, payload, text, channel, chat_id, thread_id, creator_key, "
    "owner_private, state, next_run_utc, consecutive_failures, backoff_until, managed, created_at"
)
_RUN_COLUMNS = "id, job_id, scheduled_for, started, finished, status, late_by_s, note"


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


class SqliteJobStore:
    """`JobStore` over the agent database (tables `jobs`, `job_runs`; thread-safe through
    `db.lock`)."""

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
        if job_id is None:
            rows = self.db.execute(
                f"SELECT {_RUN_COLUMNS} FROM job_runs ORDER BY id DESC LIMIT ?", (limit,)
            )
        else:
            rows = self.db.execute(
                f"SELECT {_RUN_COLUMNS} FROM job_runs WHERE job_id = ? ORDER BY id DESC LIMIT ?",
                (job_id, limit),
            )
        return [_run(r) for r in rows]

    # writing
    def insert(
        self, new: NewJob, *, first_run: datetime, now: datetime, max_active: int | None
    ) -> Job:
        s, t = new.schedule, new.target
        with self.db.transaction() as conn:
            (active,) = conn.execute(
                "SELECT count(*) FROM jobs WHERE state IN ('active', 'paused') AND managed IS NULL"
            ).fetchone()
            if max_active is not None and active >= max_active:
                raise TooManyJobs(int(active))
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
                    utc_text(first_run),
                    new.managed,
                    utc_text(now),
                ),
            )
            job_id = int(cur.lastrowid)
        job = self.get(job_id)
        assert job is not None
        return job

    def update_schedule(
        self, job_id: int, state: State, next_run: datetime | None, anchor: datetime
    ) -> None:
        with self.db.transaction() as conn:
            conn.execute(
                "UPDATE jobs SET state = ?, next_run_utc = ?, anchor_utc = ?, "
                "consecutive_failures = "
                "CASE WHEN ? = 'active' THEN 0 ELSE consecutive_failures END WHERE id = ?",
                (state, utc_text(next_run) if next_run else None, utc_text(anchor), state, job_id),
            )

    def force_state(self, job_id: int, state: State) -> None:
        with self.db.transaction() as conn:
            conn.execute("UPDATE jobs SET state = ? WHERE id = ?", (state, job_id))

    def delete(self, job_id: int) -> None:
        with self.db.transaction() as conn:
            conn.execute("DELETE FROM jobs WHERE id = ?", (job_id,))

    def run_now(self, job_id: int, now: datetime) -> None:
        with self.db.transaction() as conn:
            conn.execute(
                "UPDATE jobs SET next_run_utc = ?, state = 'active', "
                "anchor_utc = CASE WHEN kind = 'at' THEN ? ELSE anchor_utc END "
                "WHERE id = ? AND state IN ('active', 'paused')",
                (utc_text(now), utc_text(now), job_id),
            )

    def claim(
        self,
        job_id: int,
        scheduled: datetime,
        new_next: datetime | None,
        now: datetime,
        *,
        run_for: datetime,
    ) -> int | None:
        with self.db.transaction() as conn:
            cur = conn.execute(
                "UPDATE jobs SET next_run_utc = ? WHERE id = ? AND state = 'active' "
                "AND next_run_utc = ?",
                (utc_text(new_next) if new_next else None, job_id, utc_text(scheduled)),
            )
            if cur.rowcount != 1:
                return None
            cur = conn.execute(
                "INSERT INTO job_runs (job_id, scheduled_for, started, status) "
                "VALUES (?, ?, ?, 'running')",
                (job_id, utc_text(run_for), utc_text(now)),
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
        with self.db.transaction() as conn:
            conn.execute(
                "UPDATE job_runs SET status = ?, finished = ?, late_by_s = ?, note = ? "
                "WHERE id = ?",
                (status, utc_text(now), late_by_s, note, run_id),
            )
            conn.execute(_SUCCESS, (int(done), job_id))

    def record_failure(self, job_id: int, failures: int, retry_at: datetime, disable: bool) -> None:
        state = "disabled" if disable else None
        with self.db.transaction() as conn:
            conn.execute(
                "UPDATE jobs SET consecutive_failures = ?, backoff_until = ?, "
                "next_run_utc = CASE WHEN state = 'active' THEN ? ELSE next_run_utc END, "
                "state = CASE WHEN ? IS NOT NULL AND state = 'active' THEN ? ELSE state END "
                "WHERE id = ?",
                (failures, utc_text(retry_at), utc_text(retry_at), state, state, job_id),
            )

    def release(self, job_id: int, due: datetime) -> None:
        with self.db.transaction() as conn:
            conn.execute(
                "UPDATE jobs SET next_run_utc = ? WHERE id = ? AND state = 'active'",
                (utc_text(due), job_id),
            )

    def close_interrupted_runs(self, now: datetime, started_before: datetime | None = None) -> int:
        with self.db.transaction() as conn:
            cur = conn.execute(
                "UPDATE job_runs SET status = 'cancelled', finished = ?, "
                "note = 'interrupted: Pinch stopped during the run' WHERE status = 'running' "
                "AND (? IS NULL OR started < ?)",
                (utc_text(now), *[utc_text(started_before) if started_before else None] * 2),
            )
            return int(cur.rowcount)

    def mark_done(self, job_id: int) -> None:
        with self.db.transaction() as conn:
            conn.execute(
                "UPDATE jobs SET state = 'done' WHERE id = ? AND state = 'active'", (job_id,)
            )

    def cancel_managed(self, name: str) -> None:
        with self.db.transaction() as conn:
            conn.execute("UPDATE jobs SET state = 'cancelled' WHERE managed = ?", (name,))

    def close(self) -> None:
        self.db.close()


_SUCCESS = (
    "UPDATE jobs SET consecutive_failures = 0, backoff_until = NULL, "
    "state = CASE WHEN ? AND state = 'active' THEN 'done' ELSE state END WHERE id = ?"
)
