"""The automation tables of the agent database: jobs and their runs.

Kept as an ordered list of named migrations with its own record table
(`automation_migrations`), so it never reorders the memory index's list; switch to the shared
migration sets (memory/schema.py) once those are on main.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


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


MIGRATIONS: list[Callable[[Any], None]] = [a001_jobs_and_runs]


def apply_automation_migrations(conn: Any) -> list[str]:
    """Apply the pending automation migrations in order, each in one transaction; return names."""
    conn.execute(
        "CREATE TABLE IF NOT EXISTS automation_migrations (name TEXT PRIMARY KEY, applied_at REAL)"
    )
    names: list[str] = []
    for migration in MIGRATIONS:
        name = migration.__name__
        conn.execute("BEGIN IMMEDIATE")
        try:
            if conn.execute(
                "SELECT 1 FROM automation_migrations WHERE name = ?", (name,)
            ).fetchone():
                conn.execute("ROLLBACK")
                continue
            for statement in _statements(migration):
                conn.execute(statement)
            conn.execute("INSERT INTO automation_migrations VALUES (?, ?)", (name, time.time()))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        names.append(name)
    return names


class _Collect:
    """Collects a migration's script so it runs inside our transaction (executescript commits)."""

    def __init__(self) -> None:
        self.scripts: list[str] = []

    def executescript(self, script: str) -> None:
        self.scripts.append(script)


def _statements(migration: Callable[[Any], None]) -> list[str]:
    collect = _Collect()
    migration(collect)
    out: list[str] = []
    for script in collect.scripts:
        lines = [ln.split("--", 1)[0] for ln in script.splitlines()]
        out += [s.strip() for s in "\n".join(lines).split(";") if s.strip()]
    return out
