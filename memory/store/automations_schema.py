"""The automation tables of the agent database: jobs and their runs (memory/store/jobs_store.py).

Their own migration set ("automations", memory/store/schema.py): append a migration to the list,
never edit or reorder one that has shipped.
"""

from __future__ import annotations

from typing import Any

from memory.store.schema import MigrationSet, apply


def a001_jobs_and_runs(conn: Any) -> None:
    conn.executescript(
        """
        CREATE TABLE jobs (
            id INTEGER PRIMARY KEY,
            kind TEXT NOT NULL CHECK (kind IN ('at', 'every', 'cron')),
            spec TEXT NOT NULL,              -- ISO instant | seconds | 5-field cron
            tz TEXT NOT NULL,                -- IANA zone the spec is read in
            anchor_utc TEXT NOT NULL,        -- 'every': the first run; else creation time
            payload TEXT NOT NULL CHECK (payload IN ('reminder', 'task', 'heartbeat')),
            text TEXT NOT NULL,              -- reminder text or task prompt
            channel TEXT NOT NULL,           -- where results go
            chat_id TEXT NOT NULL,
            thread_id TEXT,
            creator_key TEXT NOT NULL,       -- the session key of the conversation that asked
            owner_private INTEGER NOT NULL,  -- created by the owner in the owner's own chat
            state TEXT NOT NULL CHECK (state IN
                ('active', 'paused', 'cancelled', 'done', 'disabled')),
            next_run_utc TEXT,               -- ISO UTC; NULL when nothing is due
            consecutive_failures INTEGER NOT NULL DEFAULT 0,
            backoff_until TEXT,
            managed TEXT UNIQUE,             -- e.g. 'heartbeat': owned by Pinch, not the owner
            created_at TEXT NOT NULL
        );
        CREATE INDEX jobs_due ON jobs (state, next_run_utc);
        CREATE TABLE job_runs (
            id INTEGER PRIMARY KEY,
            job_id INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
            scheduled_for TEXT NOT NULL,
            started TEXT,
            finished TEXT,
            status TEXT NOT NULL CHECK (status IN
                ('running', 'ok', 'late', 'failed', 'missed', 'cancelled', 'skipped')),
            late_by_s REAL NOT NULL DEFAULT 0,
            note TEXT
        );
        CREATE INDEX job_runs_by_job ON job_runs (job_id, id);
        """
    )


AUTOMATIONS = MigrationSet("automations", [a001_jobs_and_runs])


def apply_automation_migrations(conn: Any) -> list[str]:
    """Apply the pending automation migrations in order, each in one transaction; return names."""
    return apply(conn, AUTOMATIONS)
