"""Recall signals: one row per search hit, for Dreaming to count. `RecallSignalStore` says what
any store of them promises; `SqliteRecallSignals` holds every statement (table
`recall_signals`, migrations in memory/store/dreaming_schema.py)."""

from __future__ import annotations

import contextlib
import threading
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol, cast

from memory.store import db as database
from memory.store.backends import store_for
from memory.store.db import Database
from memory.store.dreaming_schema import apply_dreaming_migrations

MAX_PENDING = 2_000  # signals kept while the database is busy; the oldest are dropped beyond


class RecallSignal(NamedTuple):
    """One search hit as Dreaming counts it: never the query text, only its hash. (A named tuple,
    not a dataclass: every search makes several, and a tuple is what the INSERT takes.)"""

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


# ---- recall signals in SQLite --------------------------------------------------------------

_pending_lock = threading.Lock()
_SIGNAL_COLUMNS = "path, start_line, end_line, snippet_hash, origin, query_hash, day, score, at"


@dataclass
class _Buffer:
    """Signals of one database not written yet, and whether recording is off."""

    pending: deque[tuple[Any, ...]] = field(default_factory=lambda: deque(maxlen=MAX_PENDING))
    off: bool = False


def _buffer(db: Database) -> _Buffer:
    # Kept with the connection it waits for, so every store object on one database shares it.
    found = db.store_state.get("recall_signals")
    if found is None:  # setdefault: of two threads creating it at once, one buffer wins
        found = db.store_state.setdefault("recall_signals", _Buffer())
    return cast(_Buffer, found)


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
        if not signals or _buffer(self.db).off:
            return
        rows = [tuple(s) for s in signals]
        with _pending_lock:
            _buffer(self.db).pending.extend(rows)
        self._try_flush(wait=False)

    def flush(self) -> None:
        apply_dreaming_migrations(self.db)
        self._try_flush(wait=True)

    def disable(self) -> None:
        _buffer(self.db).off = True

    def _try_flush(self, *, wait: bool) -> None:
        db = self.db
        # The process-level lock too may be held by a long index write: then try again later.
        if not db.lock.acquire(blocking=wait):
            return
        try:
            apply_dreaming_migrations(db)
            with _pending_lock:
                pending = _buffer(db).pending
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
                    _buffer(db).pending.extendleft(reversed(rows))
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


def signals_for(db: Database) -> RecallSignalStore:
    """The recall signals of `db` (`db`'s backend: memory/store/backends.py)."""
    found: RecallSignalStore = store_for("RecallSignalStore", db)
    return found
