"""Recall signals: what memory_search returned, for Dreaming to count.

Every search records one row per hit (path and lines, a hash of the snippet, a hash of the query,
the day, the score, the hit's origin) — never the query text. `record_recall` is called by
`MemoryIndex.search` after the results are computed; it never blocks and never fails a search:
the INSERT runs with a zero busy timeout, and if another process holds the write lock the rows
wait in a small bounded buffer for the next search (or `flush_signals`). Measured cost: well
under a millisecond per search (tests/test_dreaming_signals.py).

The tables belong to Dreaming: their own ordered migration set `DREAMING` (owner "dreaming" in
`schema_migrations`, memory/store/schema.py), applied on first use by `apply_dreaming_migrations`.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import threading
import time
from collections import deque
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from memory.store.schema import MigrationSet, apply

if TYPE_CHECKING:
    from memory.search.hybrid import SearchHit
    from memory.store.db import Database

log = logging.getLogger(__name__)

MAX_PENDING = 2_000  # rows kept while the database is busy; the oldest are dropped beyond


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
    if getattr(db, "_dreaming_ready", False):
        return []
    with db.lock:
        names = apply(db.conn, DREAMING)
        db._dreaming_ready = True  # type: ignore[attr-defined]
    return names


def query_hash(query: str) -> str:
    """A stable hash of a query, normalised for case and spacing (the text itself is not kept)."""
    norm = " ".join(query.lower().split())
    return hashlib.sha256(norm.encode("utf-8")).hexdigest()[:16]


def _snippet_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


_pending_lock = threading.Lock()


def _pending(db: Database) -> deque[tuple[Any, ...]]:
    found: deque[tuple[Any, ...]] | None = getattr(db, "_recall_pending", None)
    if found is None:
        found = deque(maxlen=MAX_PENDING)
        db._recall_pending = found  # type: ignore[attr-defined]
    return found


def stop_recording(db: Database) -> None:
    """Record no signals through `db` from now on (`[dreaming] enabled = false`)."""
    db._recall_off = True  # type: ignore[attr-defined]


def record_recall(
    db: Database, query: str, hits: Sequence[SearchHit], *, now: datetime | None = None
) -> None:
    """Record that `hits` answered `query`. Never raises, never waits for a lock."""
    if not hits or getattr(db, "_recall_off", False):
        return
    try:
        moment = now or datetime.now()
        qh, day, at = query_hash(query), moment.date().isoformat(), time.time()
        rows = [
            (
                h.path,
                h.start_line,
                h.end_line,
                _snippet_hash(h.snippet),
                h.origin,
                qh,
                day,
                float(h.score),
                at,
            )
            for h in hits
        ]
        with _pending_lock:
            _pending(db).extend(rows)
        _try_flush(db, wait=False)
    except Exception:  # a signal lost is better than a search failed
        log.debug("Could not record recall signals", exc_info=True)


def flush_signals(db: Database) -> None:
    """Write any buffered signals now, waiting for the write lock if need be (Dreaming)."""
    apply_dreaming_migrations(db)
    _try_flush(db, wait=True)


def _try_flush(db: Database, *, wait: bool) -> None:
    # The process-level lock too may be held by a long index write: then try again next time.
    if not db.lock.acquire(blocking=wait):
        return
    try:
        apply_dreaming_migrations(db)
        with _pending_lock:
            pending = _pending(db)
            rows = list(pending)
            pending.clear()
        if not rows:
            return
        conn = db.conn
        if not wait:
            conn.execute("PRAGMA busy_timeout = 0")
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.executemany(
                    "INSERT INTO recall_signals(path, start_line, end_line, snippet_hash, origin, "
                    "query_hash, day, score, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    rows,
                )
                conn.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(Exception):
                    conn.execute("ROLLBACK")
                raise
        except Exception:
            with _pending_lock:  # busy: keep them for next time (bounded)
                _pending(db).extendleft(reversed(rows))
            if wait:
                raise
        finally:
            if not wait:
                from memory.store.db import BUSY_TIMEOUT_S

                conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
    finally:
        db.lock.release()


def prune_signals(db: Database, before_day: str) -> int:
    """Delete signals older than `before_day` (YYYY-MM-DD); returns how many went."""
    apply_dreaming_migrations(db)
    with db.transaction() as conn:
        return int(conn.execute("DELETE FROM recall_signals WHERE day < ?", (before_day,)).rowcount)


def forget_signals(db: Database, path: str) -> int:
    """Delete the signals of one file (for forgetting); returns how many went."""
    apply_dreaming_migrations(db)
    with db.transaction() as conn:
        return int(conn.execute("DELETE FROM recall_signals WHERE path = ?", (path,)).rowcount)
