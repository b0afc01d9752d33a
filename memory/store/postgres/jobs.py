"""`JobStore` on PostgreSQL (tables `jobs`, `job_runs`; instants are `timestamptz`).

How the promises are kept here: `insert` counts and inserts under a transaction-level advisory
lock (one per agent schema), so the cap holds with several gateways; `claim` is one conditional
`UPDATE … WHERE state = 'active' AND next_run_utc = scheduled` — PostgreSQL re-checks that
condition on the row a concurrent claimer just changed, so of two schedulers exactly one
updates a row and records the run; the others get None.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from memory.store.jobs_store import (
    Job,
    NewJob,
    Run,
    Schedule,
    State,
    Target,
    TooManyJobs,
)
from memory.store.postgres.database import PgDatabase, one_row

_JOB_COLUMNS = (
    "id, kind, spec, tz, anchor_utc, payload, text, channel, chat_id, thread_id, creator_key, "
    "owner_private, state, next_run_utc, consecutive_failures, backoff_until, managed, created_at"
)
_RUN_COLUMNS = "id, job_id, scheduled_for, started, finished, status, late_by_s, note"


def _utc(value: datetime | None) -> datetime | None:
    return value.astimezone(UTC) if value is not None else None


def _job(row: Any) -> Job:
    (id_, kind, spec, tz, anchor, payload, text, channel, chat_id, thread_id, creator) = row[:11]
    (owner_private, state, next_run, failures, backoff, managed, created) = row[11:]
    return Job(
        id=int(id_),
        schedule=Schedule(kind, spec, tz, anchor.astimezone(UTC)),
        payload=payload,
        text=text,
        target=Target(channel, chat_id, thread_id),
        creator_key=creator,
        owner_private=bool(owner_private),
        state=state,
        next_run_utc=_utc(next_run),
        consecutive_failures=int(failures),
        backoff_until=_utc(backoff),
        managed=managed,
        created_at=created.astimezone(UTC),
    )


def _run(row: Any) -> Run:
    id_, job_id, scheduled, started, finished, status, late, note = row
    return Run(
        int(id_),
        int(job_id),
        scheduled.astimezone(UTC),
        _utc(started),
        _utc(finished),
        status,
        float(late),
        note,
    )


class PgJobStore:
    """`JobStore` on PostgreSQL (memory/store/jobs_store.py states the promises)."""

    def __init__(self, db: PgDatabase) -> None:
        self.db = db

    # reading
    def get(self, job_id: int) -> Job | None:
        rows = self.db.execute(f"SELECT {_JOB_COLUMNS} FROM jobs WHERE id = %s", (job_id,))
        return _job(rows[0]) if rows else None

    def get_managed(self, name: str) -> Job | None:
        rows = self.db.execute(f"SELECT {_JOB_COLUMNS} FROM jobs WHERE managed = %s", (name,))
        return _job(rows[0]) if rows else None

    def jobs(self, *, states: tuple[str, ...] | None = None) -> list[Job]:
        if states:
            rows = self.db.execute(
                f"SELECT {_JOB_COLUMNS} FROM jobs WHERE state = ANY(%s) ORDER BY id",
                (list(states),),
            )
        else:
            rows = self.db.execute(f"SELECT {_JOB_COLUMNS} FROM jobs ORDER BY id")
        return [_job(r) for r in rows]

    def runs(self, job_id: int | None = None, limit: int = 50) -> list[Run]:
        if job_id is None:
            rows = self.db.execute(
                f"SELECT {_RUN_COLUMNS} FROM job_runs ORDER BY id DESC LIMIT %s", (limit,)
            )
        else:
            rows = self.db.execute(
                f"SELECT {_RUN_COLUMNS} FROM job_runs WHERE job_id = %s ORDER BY id DESC LIMIT %s",
                (job_id, limit),
            )
        return [_run(r) for r in rows]

    # writing
    def insert(
        self, new: NewJob, *, first_run: datetime, now: datetime, max_active: int | None
    ) -> Job:
        s, t = new.schedule, new.target
        with self.db.transaction() as conn:
            conn.execute("SELECT pg_advisory_xact_lock(hashtextextended('jobs:insert', 4))")
            row = conn.execute(
                "SELECT count(*) FROM jobs WHERE state IN ('active', 'paused') AND managed IS NULL"
            ).fetchone()
            active = int(row[0]) if row else 0
            if max_active is not None and active >= max_active:
                raise TooManyJobs(active)
            made = conn.execute(
                f"INSERT INTO jobs ({_JOB_COLUMNS.removeprefix('id, ')}) VALUES "
                "(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, 'active', %s, 0, NULL, %s, %s) "
                f"RETURNING {_JOB_COLUMNS}",
                (
                    s.kind,
                    s.spec,
                    s.tz,
                    s.anchor_utc,
                    new.payload,
                    new.text,
                    t.channel,
                    t.chat_id,
                    t.thread_id,
                    new.creator_key,
                    new.owner_private,
                    first_run,
                    new.managed,
                    now,
                ),
            ).fetchone()
        return _job(one_row(made))

    def update_schedule(
        self, job_id: int, state: State, next_run: datetime | None, anchor: datetime
    ) -> None:
        with self.db.transaction() as conn:
            conn.execute(
                "UPDATE jobs SET state = %(state)s, next_run_utc = %(next)s, "
                "anchor_utc = %(anchor)s, consecutive_failures = CASE WHEN %(state)s = 'active' "
                "THEN 0 ELSE consecutive_failures END WHERE id = %(id)s",
                {"state": state, "next": next_run, "anchor": anchor, "id": job_id},
            )

    def force_state(self, job_id: int, state: State) -> None:
        with self.db.transaction() as conn:
            conn.execute("UPDATE jobs SET state = %s WHERE id = %s", (state, job_id))

    def delete(self, job_id: int) -> None:
        with self.db.transaction() as conn:
            conn.execute("DELETE FROM jobs WHERE id = %s", (job_id,))

    def run_now(self, job_id: int, now: datetime) -> None:
        with self.db.transaction() as conn:
            conn.execute(
                "UPDATE jobs SET next_run_utc = %(now)s, state = 'active', "
                "anchor_utc = CASE WHEN kind = 'at' THEN %(now)s ELSE anchor_utc END "
                "WHERE id = %(id)s AND state IN ('active', 'paused')",
                {"now": now, "id": job_id},
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
                "UPDATE jobs SET next_run_utc = %s WHERE id = %s AND state = 'active' "
                "AND next_run_utc = %s",
                (new_next, job_id, scheduled),
            )
            if cur.rowcount != 1:
                return None
            row = conn.execute(
                "INSERT INTO job_runs (job_id, scheduled_for, started, status) "
                "VALUES (%s, %s, %s, 'running') RETURNING id",
                (job_id, run_for, now),
            ).fetchone()
            return int(one_row(row)[0])

    def finish_run(
        self, run_id: int, status: str, now: datetime, late_by_s: float, note: str | None
    ) -> None:
        with self.db.transaction() as conn:
            conn.execute(_FINISH_RUN, (status, now, late_by_s, note, run_id))

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
            conn.execute(_FINISH_RUN, (status, now, late_by_s, note, run_id))
            conn.execute(
                "UPDATE jobs SET consecutive_failures = 0, backoff_until = NULL, "
                "state = CASE WHEN %s AND state = 'active' THEN 'done' ELSE state END "
                "WHERE id = %s",
                (done, job_id),
            )

    def record_failure(self, job_id: int, failures: int, retry_at: datetime, disable: bool) -> None:
        with self.db.transaction() as conn:
            conn.execute(
                "UPDATE jobs SET consecutive_failures = %(failures)s, backoff_until = %(retry)s, "
                "next_run_utc = CASE WHEN state = 'active' THEN %(retry)s ELSE next_run_utc END, "
                "state = CASE WHEN %(disable)s AND state = 'active' THEN 'disabled' "
                "ELSE state END WHERE id = %(id)s",
                {"failures": failures, "retry": retry_at, "disable": disable, "id": job_id},
            )

    def release(self, job_id: int, due: datetime) -> None:
        with self.db.transaction() as conn:
            conn.execute(
                "UPDATE jobs SET next_run_utc = %s WHERE id = %s AND state = 'active'",
                (due, job_id),
            )

    def close_interrupted_runs(self, now: datetime, started_before: datetime | None = None) -> int:
        with self.db.transaction() as conn:
            cur = conn.execute(
                "UPDATE job_runs SET status = 'cancelled', finished = %s, "
                "note = 'interrupted: Pinch stopped during the run' WHERE status = 'running' "
                "AND (%s::timestamptz IS NULL OR started < %s)",
                (now, started_before, started_before),
            )
            return int(cur.rowcount)

    def mark_done(self, job_id: int) -> None:
        with self.db.transaction() as conn:
            conn.execute(
                "UPDATE jobs SET state = 'done' WHERE id = %s AND state = 'active'", (job_id,)
            )

    def cancel_managed(self, name: str) -> None:
        with self.db.transaction() as conn:
            conn.execute("UPDATE jobs SET state = 'cancelled' WHERE managed = %s", (name,))

    def close(self) -> None:
        self.db.close()


_FINISH_RUN = (
    "UPDATE job_runs SET status = %s, finished = %s, late_by_s = %s, note = %s WHERE id = %s"
)
