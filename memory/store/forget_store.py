"""Forgetting a session, the database side: `ForgetStore` (what any store promises) and
`SqliteForgetStore`, which holds every statement `pinch memory forget` runs.

memory/lifecycle/forget.py plans and rewrites files; what it removes from the database is
handed over as one `SessionErasure` and applied in one transaction.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from memory.store.backends import store_for
from memory.store.db import Database
from memory.store.lineage import apply_lineage_migrations
from memory.store.recall_signals import Span, delete_signals_in, shift_signals_in


@dataclass(frozen=True)
class KeptNote:
    """A session note `forget` kept (the owner's now) with no lineage row yet: one is recorded,
    so re-indexing treats it as the owner's (`Tombstones.kept_notes`)."""

    path: str
    reason: str | None


@dataclass(frozen=True)
class SessionErasure:
    """Everything the database loses when session `session_id` is forgotten."""

    session_id: str
    session_key: str | None
    forgotten_at: float
    summary: Sequence[Mapping[str, Any]]  # what was removed, for the tombstone (no text)
    signal_spans: Sequence[Span] = ()  # recall signals on these go
    cut_lines: Mapping[str, frozenset[int]] = field(default_factory=dict)  # path -> lines cut
    lineage_ids: Sequence[int] = ()  # the session's lineage rows to delete
    kept_notes: Sequence[KeptNote] = ()


class ForgetStore(Protocol):
    """The database side of forgetting sessions. Every call blocks.

    Promises: `erase` is atomic (all of it or nothing: signals deleted and shifted, transcript
    events deleted, the session row deleted unless another table still refers to it — then it
    stays, empty —, lineage rows deleted, kept notes recorded, and the tombstone written);
    a second `erase` of one session replaces its tombstone (one per session id)."""

    def chunk_count(self, generation: int, path: str) -> int:
        """How many index chunks `path` has in index generation `generation`."""
        ...

    def erase(self, erasure: SessionErasure) -> None: ...


class SqliteForgetStore:
    """`ForgetStore` on the agent SQLite database."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def chunk_count(self, generation: int, path: str) -> int:
        rows = self.db.execute(
            "SELECT count(*) FROM memory_chunks WHERE generation = ? AND path = ?",
            (generation, path),
        )
        return int(rows[0][0])

    def erase(self, erasure: SessionErasure) -> None:
        apply_lineage_migrations(self.db)
        sid = erasure.session_id
        with self.db.transaction() as conn:
            delete_signals_in(conn, erasure.signal_spans)
            for path, lines in erasure.cut_lines.items():
                shift_signals_in(conn, path, lines)
            conn.execute("DELETE FROM transcript_events WHERE session_id = ?", (sid,))
            conn.execute("SAVEPOINT forget_session")
            try:
                conn.execute("DELETE FROM sessions WHERE id = ?", (sid,))
            except Exception as exc:  # another table still points at it: keep the empty row
                if "FOREIGN KEY" not in str(exc).upper():
                    raise
                conn.execute("ROLLBACK TO forget_session")
            conn.execute("RELEASE forget_session")
            conn.execute(
                "INSERT OR REPLACE INTO lineage_tombstones VALUES (?, ?, ?, ?)",
                (
                    sid,
                    erasure.session_key,
                    erasure.forgotten_at,
                    json.dumps([dict(s) for s in erasure.summary]),
                ),
            )
            for row_id in erasure.lineage_ids:
                conn.execute("DELETE FROM lineage WHERE id = ?", (row_id,))
            for note in erasure.kept_notes:
                conn.execute(
                    "INSERT INTO lineage(session_id, kind, path, ref, detail, created_at) "
                    "VALUES (?, 'session_note', ?, NULL, ?, ?)",
                    (sid, note.path, json.dumps({"kept": note.reason}), erasure.forgotten_at),
                )


def forget_store_for(db: Database) -> ForgetStore:
    """The database side of forgetting in `db` (`db`'s backend: memory/store/backends.py)."""
    found: ForgetStore = store_for("ForgetStore", db)
    return found
