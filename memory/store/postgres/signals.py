"""`RecallSignalStore` on PostgreSQL (table `recall_signals`), and the two statements forgetting
runs on signals inside its own transaction (`delete_signals_in`, `shift_signals_in`).

`add` never raises and never waits: signals go to a bounded buffer kept with the database
(MAX_PENDING, oldest dropped) and are written only if a pooled connection is free at once and
the insert needs no lock wait (`lock_timeout`); otherwise the next `add` or `flush` writes them.
"""

from __future__ import annotations

import contextlib
import threading
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from memory.store.postgres.database import PgDatabase
from memory.store.recall_signals import MAX_PENDING, RecallSignal, Span

_COLUMNS = "path, start_line, end_line, snippet_hash, origin, query_hash, day, score, at"
_INSERT = f"INSERT INTO recall_signals ({_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)"
_NO_WAIT_S = 0.05  # how long `add` may wait for a pooled connection


@dataclass
class SignalBuffer:
    """Signals of one database not written yet, and whether recording is off."""

    pending: deque[tuple[Any, ...]] = field(default_factory=lambda: deque(maxlen=MAX_PENDING))
    off: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)


def _buffer(db: PgDatabase) -> SignalBuffer:
    found = db.store_state.get("recall_signals")
    if found is None:  # setdefault: of two threads creating it at once, one buffer wins
        found = db.store_state.setdefault("recall_signals", SignalBuffer())
    return cast(SignalBuffer, found)


def span_condition(spans: Iterable[Span]) -> tuple[str, list[Any]]:
    """A WHERE condition matching signals on any of `spans`, and its parameters."""
    parts, args = [], list[Any]()
    for s in spans:
        if s.start is None or s.end is None:
            parts.append("path = %s")
            args.append(s.path)
        else:
            parts.append("(path = %s AND start_line <= %s AND end_line >= %s)")
            args += [s.path, s.end, s.start]
    return " OR ".join(parts), args


def delete_signals_in(conn: Any, spans: Sequence[Span]) -> int:
    """Delete the signals on `spans` inside the caller's transaction; returns how many."""
    if not spans:
        return 0
    where, args = span_condition(spans)
    return int(conn.execute(f"DELETE FROM recall_signals WHERE {where}", args).rowcount)


def shift_signals_in(conn: Any, path: str, removed: set[int] | frozenset[int]) -> None:
    """Inside the caller's transaction: move the signals of `path` up past `removed` lines
    (1-based, before the cut), so each still covers the lines it was recorded for."""
    if not removed:
        return
    cut = sorted(removed)
    rows = conn.execute(
        "SELECT id, start_line, end_line FROM recall_signals WHERE path = %s AND end_line > %s "
        "FOR UPDATE",
        (path, cut[0]),
    ).fetchall()
    for row_id, start, end in rows:
        new_start = int(start) - bisect_left(cut, int(start))
        new_end = max(new_start, int(end) - bisect_right(cut, int(end)))
        if (new_start, new_end) != (start, end):
            conn.execute(
                "UPDATE recall_signals SET start_line = %s, end_line = %s WHERE id = %s",
                (new_start, new_end, int(row_id)),
            )


class PgRecallSignals:
    """`RecallSignalStore` on PostgreSQL (memory/store/recall_signals.py states the promises)."""

    def __init__(self, db: PgDatabase) -> None:
        self.db = db

    def add(self, signals: Sequence[RecallSignal]) -> None:
        buffer = _buffer(self.db)
        if not signals or buffer.off:
            return
        with buffer.lock:
            buffer.pending.extend(tuple(s) for s in signals)
        with contextlib.suppress(Exception):  # kept for the next add or flush
            self._write(wait=False)

    def flush(self) -> None:
        self._write(wait=True)

    def disable(self) -> None:
        _buffer(self.db).off = True

    def _write(self, *, wait: bool) -> None:
        buffer = _buffer(self.db)
        with buffer.lock:
            rows = list(buffer.pending)
            buffer.pending.clear()
        if not rows:
            return
        try:
            if wait:
                with self.db.transaction() as conn:
                    conn.cursor().executemany(_INSERT, rows)
            else:
                with self.db.pool.connection(timeout=_NO_WAIT_S) as conn, conn.transaction():
                    conn.execute("SET LOCAL lock_timeout = '50ms'")
                    conn.cursor().executemany(_INSERT, rows)
        except BaseException:
            with buffer.lock:  # busy or down: keep them for next time (bounded)
                buffer.pending.extendleft(reversed(rows))
            raise

    def overlapping(self, path: str, start_line: int, end_line: int) -> list[RecallSignal]:
        rows = self.db.execute(
            f"SELECT {_COLUMNS} FROM recall_signals "
            "WHERE path = %s AND start_line <= %s AND end_line >= %s ORDER BY id",
            (path, end_line, start_line),
        )
        return [RecallSignal(*r) for r in rows]

    def count_on(self, spans: Sequence[Span]) -> dict[str, int]:
        if not spans:
            return {}
        self.flush()  # signals a search buffered while the database was busy count too
        where, args = span_condition(spans)
        rows = self.db.execute(
            f"SELECT path, count(*) FROM recall_signals WHERE {where} GROUP BY path "
            'ORDER BY path COLLATE "C"',
            args,
        )
        return {str(r[0]): int(r[1]) for r in rows}

    def prune(self, before_day: str) -> int:
        with self.db.transaction() as conn:
            return int(
                conn.execute("DELETE FROM recall_signals WHERE day < %s", (before_day,)).rowcount
            )

    def delete_path(self, path: str) -> int:
        with self.db.transaction() as conn:
            return int(conn.execute("DELETE FROM recall_signals WHERE path = %s", (path,)).rowcount)
