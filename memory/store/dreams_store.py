"""Dreaming's tables: recall signals, dream runs and the dream lease.

- `RecallSignalStore` / `SqliteRecallSignals`: one row per search hit, for Dreaming to count.
- `DreamRunStore` / `SqliteDreamRuns`: one row per dream (what it wrote, how to undo it) and the
  lease that lets one dream run at a time.
- `StagingLookups` / `SqliteStagingLookups`: the two reads Light needs from other tables (a
  file's origin in the active index generation; which sessions were automated).

The tables have their own ordered migration set `DREAMING` (owner "dreaming" in
`schema_migrations`, memory/store/schema.py), applied on first use by `apply_dreaming_migrations`.
memory/lifecycle/{signals,dreaming,forget_dreams}.py decide; every SQL statement is here.
"""

from __future__ import annotations

import contextlib
import threading
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from memory.store import db as database
from memory.store.db import Database
from memory.store.schema import MigrationSet, apply

MAX_PENDING = 2_000  # signals kept while the database is busy; the oldest are dropped beyond


# ---- values --------------------------------------------------------------------------------


@dataclass(frozen=True)
class RecallSignal:
    """One search hit as Dreaming counts it: never the query text, only its hash."""

    path: str
    start_line: int
    end_line: int
    snippet_hash: str
    origin: str
    query_hash: str
    day: str  # YYYY-MM-DD
    score: float
    at: float  # Unix seconds


@dataclass(frozen=True)
class Span:
    """Lines `start`..`end` (1-based) of `path` that are being forgotten; None: the whole file."""

    path: str
    start: int | None = None
    end: int | None = None


@dataclass(frozen=True)
class LastDream:
    run_id: int
    started_at: float
    outcome: str  # "promoted 2 of 7 candidates (append)", "nothing promoted: …", "failed: …"
    undone: bool


@dataclass(frozen=True)
class UndoableRun:
    """The latest dream that wrote MEMORY.md and was not undone."""

    run_id: int
    preimage: str  # workspace path of the copy of MEMORY.md before the write
    post_hash: str  # hash of what the dream wrote
    preimage_text: str  # what undo restores
    started_at: float


@dataclass(frozen=True)
class RunWrite:
    """What a dream wrote to MEMORY.md, as its run row keeps it."""

    mode: str  # "rewrite" | "append" | "none"
    preimage: str | None
    preimage_text: str
    pre_hash: str
    post_hash: str


# ---- the interfaces ------------------------------------------------------------------------


class RecallSignalStore(Protocol):
    """Recall signals of one agent database. Every call blocks, except that `add` never waits.

    Promises: `add` never raises and never waits for a lock held by another writer; signals it
    cannot write at once are kept in order (at most MAX_PENDING, the oldest dropped first) and
    written by the next `add` or `flush`. `flush` waits and raises if it cannot write. After
    `disable`, `add` drops everything. Reads see every signal added before a `flush`."""

    def add(self, signals: Sequence[RecallSignal]) -> None: ...

    def flush(self) -> None: ...

    def disable(self) -> None: ...

    def overlapping(self, path: str, start_line: int, end_line: int) -> list[RecallSignal]:
        """Signals on `path` whose lines overlap `start_line`..`end_line` (any order)."""
        ...

    def count_on(self, spans: Sequence[Span]) -> dict[str, int]:
        """path -> how many signals fall on `spans` (flushing first), ordered by path."""
        ...

    def prune(self, before_day: str) -> int:
        """Delete signals of days before `before_day`; returns how many."""
        ...

    def delete_path(self, path: str) -> int:
        """Delete every signal of `path`; returns how many."""
        ...


class DreamRunStore(Protocol):
    """Dream runs and the dream lease of one agent database. Every call blocks.

    Promises: run ids increase in start order and are never reused; `acquire_lease` is atomic
    across processes (of two callers, at most one holds an unexpired lease of a name);
    `release_lease` releases only the holder's own lease; `rewrite_preimages` changes every run's
    preimage in one transaction. `last_finished` and `last_undoable` read only: they create no
    table in a database that never dreamed."""

    def acquire_lease(self, name: str, holder: str, *, now: float, lease_s: float) -> bool:
        """Take lease `name` for `holder` until `now + lease_s`; False if another holder has
        it unexpired."""
        ...

    def release_lease(self, name: str, holder: str) -> None: ...

    def start_run(self, phase: str, *, started_at: float) -> int: ...

    def finish_run(
        self,
        run_id: int,
        *,
        finished_at: float,
        promoted: int,
        model_calls: int,
        tokens: int,
        write: RunWrite | None,
        outcome: str,
    ) -> None: ...

    def record_failed_run(self, phase: str, reason: str, *, at: float) -> None:
        """A finished run with outcome "failed: <reason>" (started and finished at `at`)."""
        ...

    def last_finished(self) -> LastDream | None:
        """The latest finished run, newest by id."""
        ...

    def last_undoable(self) -> UndoableRun | None: ...

    def mark_undone(self, run_id: int, *, at: float) -> None: ...

    def recent(self, n: int) -> list[dict[str, Any]]:
        """The last `n` runs, newest first: id, started_at, finished_at, phase, promoted,
        model_calls, tokens, mode."""
        ...

    def preimage_texts(self) -> list[tuple[int, str]]:
        """(run id, preimage text) of every run that kept a non-empty preimage."""
        ...

    def replace_post_hash(self, old: str, new: str) -> None:
        """Runs whose write ended in `old` now end in `new` (MEMORY.md changed under them)."""
        ...

    def rewrite_preimages(self, change: Callable[[str], str | None]) -> None:
        """Replace each non-empty preimage text by `change(text)` (None: unchanged), atomically."""
        ...


class StagingLookups(Protocol):
    """The reads Light (dreaming's staging) needs from the index and the sessions."""

    def indexed_origin(self, path: str) -> str | None:
        """The origin the active index generation gives file `path`; None if not indexed."""
        ...

    def automated_sessions(self, ids: set[str]) -> set[str]:
        """Those of `ids` that are sessions of scheduled jobs, heartbeats or sub-agents."""
        ...


# ---- schema --------------------------------------------------------------------------------


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


# ---- recall signals in SQLite --------------------------------------------------------------

_pending_lock = threading.Lock()
_SIGNAL_COLUMNS = "path, start_line, end_line, snippet_hash, origin, query_hash, day, score, at"


def _pending(db: Database) -> deque[tuple[Any, ...]]:
    # The buffer lives with the connection it waits for, so every store on one database
    # shares it.
    found: deque[tuple[Any, ...]] | None = getattr(db, "_recall_pending", None)
    if found is None:
        found = deque(maxlen=MAX_PENDING)
        db._recall_pending = found  # type: ignore[attr-defined]
    return found


def _signal_where(spans: Iterable[Span]) -> tuple[str, list[Any]]:
    parts, args = [], list[Any]()
    for s in spans:
        if s.start is None or s.end is None:
            parts.append("path = ?")
            args.append(s.path)
        else:
            parts.append("(path = ? AND start_line <= ? AND end_line >= ?)")
            args += [s.path, s.end, s.start]
    return " OR ".join(parts), args


def delete_signals_in(conn: Any, spans: Sequence[Span]) -> int:
    """Delete the signals on `spans` inside the caller's SQLite transaction; returns how many."""
    if not spans:
        return 0
    where, args = _signal_where(spans)
    return int(conn.execute(f"DELETE FROM recall_signals WHERE {where}", tuple(args)).rowcount)


def shift_signals_in(conn: Any, path: str, removed: set[int] | frozenset[int]) -> None:
    """Inside the caller's SQLite transaction: move the signals of `path` up past `removed`
    lines (1-based, before the cut), so each still covers the lines it was recorded for."""
    if not removed:
        return
    cut = sorted(removed)
    rows = conn.execute(
        "SELECT id, start_line, end_line FROM recall_signals WHERE path = ? AND end_line > ?",
        (path, cut[0]),
    ).fetchall()
    for row_id, start, end in rows:
        new_start = int(start) - bisect_left(cut, int(start))
        new_end = max(new_start, int(end) - bisect_right(cut, int(end)))
        if (new_start, new_end) != (start, end):
            conn.execute(
                "UPDATE recall_signals SET start_line = ?, end_line = ? WHERE id = ?",
                (new_start, new_end, int(row_id)),
            )


class SqliteRecallSignals:
    """`RecallSignalStore` on the agent SQLite database (table `recall_signals`)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def add(self, signals: Sequence[RecallSignal]) -> None:
        if not signals or getattr(self.db, "_recall_off", False):
            return
        rows = [
            (
                s.path,
                s.start_line,
                s.end_line,
                s.snippet_hash,
                s.origin,
                s.query_hash,
                s.day,
                s.score,
                s.at,
            )
            for s in signals
        ]
        with _pending_lock:
            _pending(self.db).extend(rows)
        self._try_flush(wait=False)

    def flush(self) -> None:
        apply_dreaming_migrations(self.db)
        self._try_flush(wait=True)

    def disable(self) -> None:
        self.db._recall_off = True  # type: ignore[attr-defined]

    def _try_flush(self, *, wait: bool) -> None:
        db = self.db
        # The process-level lock too may be held by a long index write: then try again later.
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
                        f"INSERT INTO recall_signals({_SIGNAL_COLUMNS}) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
                    # Read now, not at import: the setting may have been changed since.
                    timeout_ms = int(database.BUSY_TIMEOUT_S * 1000)
                    conn.execute(f"PRAGMA busy_timeout = {timeout_ms}")
        finally:
            db.lock.release()

    def overlapping(self, path: str, start_line: int, end_line: int) -> list[RecallSignal]:
        rows = self.db.execute(
            f"SELECT {_SIGNAL_COLUMNS} FROM recall_signals "
            "WHERE path = ? AND start_line <= ? AND end_line >= ?",
            (path, end_line, start_line),
        )
        return [RecallSignal(*r) for r in rows]

    def count_on(self, spans: Sequence[Span]) -> dict[str, int]:
        if not spans:
            return {}
        self.flush()  # signals a search buffered while the database was busy count too
        where, args = _signal_where(spans)
        rows = self.db.execute(
            f"SELECT path, count(*) FROM recall_signals WHERE {where} GROUP BY path ORDER BY path",
            tuple(args),
        )
        return {str(r[0]): int(r[1]) for r in rows}

    def prune(self, before_day: str) -> int:
        apply_dreaming_migrations(self.db)
        with self.db.transaction() as conn:
            return int(
                conn.execute("DELETE FROM recall_signals WHERE day < ?", (before_day,)).rowcount
            )

    def delete_path(self, path: str) -> int:
        apply_dreaming_migrations(self.db)
        with self.db.transaction() as conn:
            return int(conn.execute("DELETE FROM recall_signals WHERE path = ?", (path,)).rowcount)


# ---- dream runs in SQLite ------------------------------------------------------------------


class SqliteDreamRuns:
    """`DreamRunStore` on the agent SQLite database (tables `dream_runs`, `dream_lease`)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def _has_runs(self) -> bool:
        return bool(self.db.execute("SELECT 1 FROM sqlite_master WHERE name = 'dream_runs'"))

    def acquire_lease(self, name: str, holder: str, *, now: float, lease_s: float) -> bool:
        apply_dreaming_migrations(self.db)
        with self.db.transaction() as conn:
            row = conn.execute(
                "SELECT expires_at FROM dream_lease WHERE name = ?", (name,)
            ).fetchone()
            if row and float(row[0]) > now:
                return False
            conn.execute(
                "INSERT OR REPLACE INTO dream_lease(name, holder, expires_at) VALUES (?, ?, ?)",
                (name, holder, now + lease_s),
            )
        return True

    def release_lease(self, name: str, holder: str) -> None:
        with self.db.transaction() as conn:
            conn.execute("DELETE FROM dream_lease WHERE name = ? AND holder = ?", (name, holder))

    def start_run(self, phase: str, *, started_at: float) -> int:
        with self.db.transaction() as conn:
            cur = conn.execute(
                "INSERT INTO dream_runs(started_at, phase) VALUES (?, ?)", (started_at, phase)
            )
            return int(cur.lastrowid)

    def finish_run(
        self,
        run_id: int,
        *,
        finished_at: float,
        promoted: int,
        model_calls: int,
        tokens: int,
        write: RunWrite | None,
        outcome: str,
    ) -> None:
        with self.db.transaction() as conn:
            conn.execute(
                "UPDATE dream_runs SET finished_at = ?, promoted = ?, model_calls = ?, "
                "tokens = ?, mode = ?, preimage = ?, preimage_text = ?, pre_hash = ?, "
                "post_hash = ?, outcome = ? WHERE id = ?",
                (
                    finished_at,
                    promoted,
                    model_calls,
                    tokens,
                    write.mode if write else None,
                    write.preimage if write else None,
                    write.preimage_text if write else None,
                    write.pre_hash if write else None,
                    write.post_hash if write else None,
                    outcome,
                    run_id,
                ),
            )

    def record_failed_run(self, phase: str, reason: str, *, at: float) -> None:
        apply_dreaming_migrations(self.db)
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT INTO dream_runs(started_at, finished_at, phase, outcome) "
                "VALUES (?, ?, ?, ?)",
                (at, at, phase, f"failed: {reason}"),
            )

    def last_finished(self) -> LastDream | None:
        if not self._has_runs():
            return None
        columns = {str(r[1]) for r in self.db.execute("PRAGMA table_info(dream_runs)")}
        outcome = "outcome" if "outcome" in columns else "NULL"
        rows = self.db.execute(
            f"SELECT id, started_at, {outcome}, promoted, undone_at FROM dream_runs "
            "WHERE finished_at IS NOT NULL ORDER BY id DESC LIMIT 1"
        )
        if not rows:
            return None
        run_id, started, text, promoted, undone = rows[0]
        return LastDream(
            int(run_id), float(started), str(text or f"promoted {promoted}"), undone is not None
        )

    def last_undoable(self) -> UndoableRun | None:
        if not self._has_runs():
            return None  # never dreamed: create nothing
        apply_dreaming_migrations(self.db)
        rows = self.db.execute(
            "SELECT id, preimage, post_hash, preimage_text, started_at FROM dream_runs "
            "WHERE preimage_text IS NOT NULL AND undone_at IS NULL ORDER BY id DESC LIMIT 1"
        )
        if not rows:
            return None
        run_id, preimage, post_hash, text, started = rows[0]
        return UndoableRun(int(run_id), str(preimage), str(post_hash), str(text), float(started))

    def mark_undone(self, run_id: int, *, at: float) -> None:
        with self.db.transaction() as conn:
            conn.execute("UPDATE dream_runs SET undone_at = ? WHERE id = ?", (at, run_id))

    def recent(self, n: int) -> list[dict[str, Any]]:
        apply_dreaming_migrations(self.db)
        cols = [
            "id",
            "started_at",
            "finished_at",
            "phase",
            "promoted",
            "model_calls",
            "tokens",
            "mode",
        ]
        rows = self.db.execute(
            f"SELECT {', '.join(cols)} FROM dream_runs ORDER BY id DESC LIMIT ?", (n,)
        )
        return [dict(zip(cols, r, strict=True)) for r in rows]

    def preimage_texts(self) -> list[tuple[int, str]]:
        apply_dreaming_migrations(self.db)
        rows = self.db.execute("SELECT id, preimage_text FROM dream_runs WHERE preimage_text != ''")
        return [(int(r[0]), str(r[1])) for r in rows]

    def replace_post_hash(self, old: str, new: str) -> None:
        with self.db.transaction() as conn:
            conn.execute("UPDATE dream_runs SET post_hash = ? WHERE post_hash = ?", (new, old))

    def rewrite_preimages(self, change: Callable[[str], str | None]) -> None:
        with self.db.transaction() as conn:
            for run_id, text in conn.execute(
                "SELECT id, preimage_text FROM dream_runs WHERE preimage_text != ''"
            ).fetchall():
                new = change(str(text))
                if new is not None:
                    conn.execute(
                        "UPDATE dream_runs SET preimage_text = ? WHERE id = ?", (new, int(run_id))
                    )


# ---- Light's lookups in SQLite -------------------------------------------------------------


class SqliteStagingLookups:
    """`StagingLookups` on the agent SQLite database (index generations, sessions)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def indexed_origin(self, path: str) -> str | None:
        rows = self.db.execute(
            "SELECT s.origin FROM memory_sources s JOIN memory_generations g "
            "ON g.id = s.generation WHERE g.state = 'active' AND s.path = ?",
            (path,),
        )
        return str(rows[0][0]) if rows else None

    def automated_sessions(self, ids: set[str]) -> set[str]:
        if not ids:
            return set()
        marks = ",".join("?" for _ in ids)
        rows = self.db.execute(
            f"SELECT id FROM sessions WHERE id IN ({marks}) AND (channel IN ('automation', "
            "'heartbeat', 'subagent') OR thread_id LIKE 'job:%' OR thread_id LIKE 'subagent:%')",
            tuple(ids),
        )
        return {str(r[0]) for r in rows}
