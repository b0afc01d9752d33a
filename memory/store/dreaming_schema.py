"""Dreaming's tables (recall signals, dream runs, the dream lease): their own ordered migration
set `DREAMING` (owner "dreaming" in `schema_migrations`, memory/store/schema.py), applied on
first use by `apply_dreaming_migrations`. Never edit or reorder a shipped migration."""

from __future__ import annotations

from typing import Any

from memory.store.db import Database
from memory.store.schema import MigrationSet, apply


def m001_signals(conn: Any) -> None:
    conn.execute(
        """CREATE TABLE IF NOT EXISTS recall_signals (
            id INTEGER PRIMARY KEY,
            path TEXT NOT NULL,
            start_line INTEGER NOT NULL,
            end_line INTEGER NOT NULL,
            snippet_hash TEXT NOT NULL,
            origin TEXT NOT NULL,
            query_hash TEXT NOT NULL,
            day TEXT NOT NULL,
            score REAL NOT NULL,
            at REAL NOT NULL
        )"""
    )
    conn.execute("CREATE INDEX IF NOT EXISTS recall_signals_by_path ON recall_signals (path)")


def m002_runs(conn: Any) -> None:
    conn.execute(
        """CREATE TABLE IF NOT EXISTS dream_runs (
            id INTEGER PRIMARY KEY,
            started_at REAL NOT NULL,
            finished_at REAL,
            phase TEXT NOT NULL,
            promoted INTEGER NOT NULL DEFAULT 0,
            model_calls INTEGER NOT NULL DEFAULT 0,
            tokens INTEGER NOT NULL DEFAULT 0,
            mode TEXT,                 -- 'rewrite' | 'append' | NULL (nothing written)
            preimage TEXT,             -- workspace-relative copy of MEMORY.md before the write
            preimage_text TEXT,        -- the same text, what undo restores
            pre_hash TEXT,
            post_hash TEXT,
            undone_at REAL
        )"""
    )
    conn.execute(
        """CREATE TABLE IF NOT EXISTS dream_lease (
            name TEXT PRIMARY KEY,
            holder TEXT NOT NULL,
            expires_at REAL NOT NULL
        )"""
    )


def m003_run_outcome(conn: Any) -> None:
    # One line on what the run came to ("promoted 2 of 7 candidates", why nothing, or why the
    # nightly job could not run), for `pinch memory status`.
    conn.execute("ALTER TABLE dream_runs ADD COLUMN outcome TEXT")


DREAMING = MigrationSet("dreaming", [m001_signals, m002_runs, m003_run_outcome])


def apply_dreaming_migrations(db: Database) -> list[str]:
    """Apply Dreaming's pending migrations in order (`memory.store.schema`); return the names
    applied."""
    if db.store_state.get("dreaming_schema"):
        return []
    with db.lock:
        names = apply(db.conn, DREAMING)
        db.store_state["dreaming_schema"] = True
    return names
