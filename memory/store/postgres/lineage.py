"""`LineageRepository` and `ForgetStore` on PostgreSQL (tables `lineage`, `lineage_tombstones`;
`erase` also touches the transcripts, the session row and the recall signals).

`erase` is one transaction: all of it or nothing. Deleting the session row runs in a savepoint
(a nested `conn.transaction()`): if another table still refers to the session, only that
statement is undone and the empty row stays, as on SQLite. A tombstone is an upsert (one per
session id).
"""

from __future__ import annotations

import json
import time
from typing import Any

import psycopg

from memory.store.forget_store import SessionErasure
from memory.store.lineage import LineageRow, Tombstones
from memory.store.postgres.database import PgDatabase
from memory.store.postgres.signals import delete_signals_in, shift_signals_in

_INSERT = (
    "INSERT INTO lineage (session_id, kind, path, ref, detail, created_at) "
    "VALUES (%s, %s, %s, %s, %s, %s)"
)


class PgLineageStore:
    """`LineageRepository` on PostgreSQL (memory/store/lineage.py states the promises)."""

    def __init__(self, db: PgDatabase) -> None:
        self.db = db

    def record(
        self,
        session_id: str,
        kind: str,
        *,
        path: str | None = None,
        ref: str | None = None,
        detail: dict[str, Any] | None = None,
    ) -> None:
        with self.db.transaction() as conn:
            conn.execute(
                _INSERT, (session_id, kind, path, ref, json.dumps(detail or {}), time.time())
            )

    def of_session(self, session_id: str) -> list[LineageRow]:
        rows = self.db.execute(
            "SELECT id, session_id, kind, path, ref, detail, created_at FROM lineage "
            "WHERE session_id = %s ORDER BY id",
            (session_id,),
        )
        return [
            LineageRow(int(r[0]), r[1], r[2], r[3], r[4], json.loads(r[5]), float(r[6]))
            for r in rows
        ]

    def is_forgotten(self, session_id: str) -> bool:
        rows = self.db.execute(
            "SELECT 1 FROM lineage_tombstones WHERE session_id = %s", (session_id,)
        )
        return bool(rows)

    def forgotten_sessions(self) -> frozenset[str]:
        return frozenset(r[0] for r in self.db.execute("SELECT session_id FROM lineage_tombstones"))

    def tombstone(self, session_id: str) -> tuple[float, str | None] | None:
        rows = self.db.execute(
            "SELECT forgotten_at, session_key FROM lineage_tombstones WHERE session_id = %s",
            (session_id,),
        )
        return (float(rows[0][0]), rows[0][1]) if rows else None

    def tombstones(self) -> Tombstones:
        kept = self.db.execute(
            "SELECT l.path FROM lineage l JOIN lineage_tombstones t ON t.session_id = l.session_id"
            " WHERE l.kind = 'session_note' AND l.path IS NOT NULL"
        )
        return Tombstones(self.forgotten_sessions(), frozenset(str(r[0]) for r in kept))


class PgForgetStore:
    """`ForgetStore` on PostgreSQL (memory/store/forget_store.py states the promises)."""

    def __init__(self, db: PgDatabase) -> None:
        self.db = db

    def chunk_count(self, generation: int, path: str) -> int:
        rows = self.db.execute(
            "SELECT count(*) FROM memory_chunks WHERE generation = %s AND path = %s",
            (generation, path),
        )
        return int(rows[0][0])

    def erase(self, erasure: SessionErasure) -> None:
        sid = erasure.session_id
        with self.db.transaction() as conn:
            delete_signals_in(conn, erasure.signal_spans)
            for path, lines in erasure.cut_lines.items():
                shift_signals_in(conn, path, lines)
            conn.execute("DELETE FROM transcript_events WHERE session_id = %s", (sid,))
            try:
                with conn.transaction():  # a savepoint
                    conn.execute("DELETE FROM sessions WHERE id = %s", (sid,))
            except psycopg.errors.ForeignKeyViolation:
                pass  # another table still points at it: keep the empty row
            conn.execute(
                "INSERT INTO lineage_tombstones VALUES (%s, %s, %s, %s) "
                "ON CONFLICT (session_id) DO UPDATE SET session_key = excluded.session_key, "
                "forgotten_at = excluded.forgotten_at, summary = excluded.summary",
                (
                    sid,
                    erasure.session_key,
                    erasure.forgotten_at,
                    json.dumps([dict(s) for s in erasure.summary]),
                ),
            )
            if erasure.lineage_ids:
                conn.execute("DELETE FROM lineage WHERE id = ANY(%s)", (list(erasure.lineage_ids),))
            for note in erasure.kept_notes:
                conn.execute(
                    _INSERT,
                    (
                        sid,
                        "session_note",
                        note.path,
                        None,
                        json.dumps({"kept": note.reason}),
                        erasure.forgotten_at,
                    ),
                )
