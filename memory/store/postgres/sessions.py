"""`SessionStore` on PostgreSQL: sessions and their transcripts (tables of the "memory" set).

How the promises are kept here:
- one current session per key: the partial unique index `sessions_current_by_key`, and
  `current`/`reset` serialise on a transaction-level advisory lock of the key, so two gateways
  asking at once get the same session;
- gap-free seqs in `append` order: `append` locks the session's row (`FOR UPDATE`) before
  reading `max(seq)`, so appends to one session queue behind each other, across processes;
- durable `append`: `synchronous_commit = on` for its transaction (whatever the server's
  default), so the commit has reached the WAL on disk when `append` returns.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Collection
from typing import Any

from memory.errors import SessionError
from memory.store.postgres.database import PgDatabase, one_row
from memory.store.sessions import (
    EVENT_KINDS,
    USAGE_FIELDS,
    Session,
    SessionKey,
    TranscriptEvent,
)

_COLUMNS = (
    "id, agent_id, channel, chat_type, peer_id, thread_id, created_at, compactions, "
    "flushed_cycle, project"
)
_EVENT_COLUMNS = "seq, kind, content, created_at, usage"


def _session(row: Any) -> Session:
    key = SessionKey(row[1], row[2], row[3], row[4], row[5])
    return Session(row[0], key, float(row[6]), int(row[7]), int(row[8]), row[9])


def _event(row: Any) -> TranscriptEvent:
    usage = json.loads(row[4]) if row[4] is not None else None
    return TranscriptEvent(int(row[0]), row[1], json.loads(row[2]), float(row[3]), usage)


def _lock_key(conn: Any, key: SessionKey) -> None:
    conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 1))", (f"session:{key}",))


class PgSessionStore:
    """`SessionStore` on PostgreSQL (memory/store/sessions.py states the promises)."""

    def __init__(self, db: PgDatabase) -> None:
        self.db = db

    def current(self, key: SessionKey) -> Session:
        with self.db.transaction() as conn:
            _lock_key(conn, key)
            row = conn.execute(
                f"SELECT {_COLUMNS} FROM sessions WHERE key = %s AND state = 'current'",
                (str(key),),
            ).fetchone()
            return _session(row) if row else self._create(conn, key)

    def reset(self, key: SessionKey, project: str | None = None) -> Session:
        with self.db.transaction() as conn:
            _lock_key(conn, key)
            conn.execute(
                "UPDATE sessions SET state = 'archived', archived_at = %s "
                "WHERE key = %s AND state = 'current'",
                (time.time(), str(key)),
            )
            return self._create(conn, key, project)

    def _create(self, conn: Any, key: SessionKey, project: str | None = None) -> Session:
        session = Session(uuid.uuid4().hex, key, time.time(), 0, -1, project)
        conn.execute(
            "INSERT INTO sessions (id, key, agent_id, channel, chat_type, peer_id, thread_id, "
            "state, created_at, project) VALUES (%s, %s, %s, %s, %s, %s, %s, 'current', %s, %s)",
            (
                session.id,
                str(key),
                key.agent_id,
                key.channel,
                key.chat_type,
                key.peer_id,
                key.thread_id,
                session.created_at,
                project,
            ),
        )
        return session

    def get(self, session_id: str) -> Session | None:
        rows = self.db.execute(f"SELECT {_COLUMNS} FROM sessions WHERE id = %s", (session_id,))
        return _session(rows[0]) if rows else None

    def with_id_prefix(self, prefix: str, limit: int = 5) -> list[Session]:
        if not prefix or any(c not in "0123456789abcdef" for c in prefix):
            return []
        rows = self.db.execute(
            f'SELECT {_COLUMNS} FROM sessions WHERE id LIKE %s ORDER BY id COLLATE "C" LIMIT %s',
            (prefix + "%", limit),
        )
        return [_session(r) for r in rows]

    def history(self, key: SessionKey) -> list[Session]:
        rows = self.db.execute(
            f"SELECT {_COLUMNS} FROM sessions WHERE key = %s ORDER BY created_at, created_order",
            (str(key),),
        )
        return [_session(r) for r in rows]

    def all_sessions(self) -> list[Session]:
        rows = self.db.execute(
            f"SELECT {_COLUMNS} FROM sessions ORDER BY created_at, created_order"
        )
        return [_session(r) for r in rows]

    def append(
        self,
        session_id: str,
        kind: str,
        content: dict[str, Any],
        usage: dict[str, Any] | None = None,
    ) -> TranscriptEvent:
        if kind not in EVENT_KINDS:
            raise ValueError(
                f"Unknown transcript event kind {kind!r}; expected one of {sorted(EVENT_KINDS)}."
            )
        body = json.dumps(content, ensure_ascii=False)
        usage_json = json.dumps(usage, ensure_ascii=False) if usage is not None else None
        with self.db.transaction() as conn:
            conn.execute("SET LOCAL synchronous_commit = on")
            if not conn.execute(
                "SELECT 1 FROM sessions WHERE id = %s FOR UPDATE", (session_id,)
            ).fetchone():
                raise SessionError(f"No session {session_id!r} in this agent database.")
            row = conn.execute(
                "SELECT coalesce(max(seq), 0) FROM transcript_events WHERE session_id = %s",
                (session_id,),
            ).fetchone()
            event = TranscriptEvent(
                int(one_row(row)[0]) + 1,
                kind,
                json.loads(body),
                time.time(),
                json.loads(usage_json) if usage_json else None,
            )
            conn.execute(
                "INSERT INTO transcript_events (session_id, seq, kind, content, usage, "
                "created_at) VALUES (%s, %s, %s, %s, %s, %s)",
                (session_id, event.seq, kind, body, usage_json, event.created_at),
            )
        return event

    def events(
        self,
        session_id: str,
        *,
        after_seq: int = 0,
        kinds: Collection[str] | None = None,
        limit: int | None = None,
    ) -> list[TranscriptEvent]:
        statement = (
            f"SELECT {_EVENT_COLUMNS} FROM transcript_events WHERE session_id = %s AND seq > %s"
        )
        params: list[Any] = [session_id, after_seq]
        if kinds is not None:
            statement += " AND kind = ANY(%s)"
            params.append(list(kinds))
        statement += " ORDER BY seq"
        if limit is not None:
            statement += " LIMIT %s"
            params.append(limit)
        return [_event(r) for r in self.db.execute(statement, params)]

    def latest_compaction(self, session_id: str) -> TranscriptEvent | None:
        rows = self.db.execute(
            f"SELECT {_EVENT_COLUMNS} FROM transcript_events "
            "WHERE session_id = %s AND kind = 'compaction' ORDER BY seq DESC LIMIT 1",
            (session_id,),
        )
        return _event(rows[0]) if rows else None

    def mark_flushed(self, session_id: str, cycle: int) -> None:
        with self.db.transaction() as conn:
            cur = conn.execute(
                "UPDATE sessions SET flushed_cycle = %s WHERE id = %s", (cycle, session_id)
            )
            if cur.rowcount == 0:
                raise SessionError(f"No session {session_id!r} in this agent database.")

    def increment_compactions(self, session_id: str) -> Session:
        with self.db.transaction() as conn:
            row = conn.execute(
                f"UPDATE sessions SET compactions = compactions + 1 WHERE id = %s "
                f"RETURNING {_COLUMNS}",
                (session_id,),
            ).fetchone()
            if row is None:
                raise SessionError(f"No session {session_id!r} in this agent database.")
            return _session(row)

    def set_project(self, session_id: str, project: str | None) -> Session:
        with self.db.transaction() as conn:
            row = conn.execute(
                f"UPDATE sessions SET project = %s WHERE id = %s RETURNING {_COLUMNS}",
                (project, session_id),
            ).fetchone()
            if row is None:
                raise SessionError(f"No session {session_id!r} in this agent database.")
            return _session(row)

    def usage_totals(self, session_id: str) -> dict[str, int]:
        # Summed like SQLite's json_extract: a missing or non-numeric field counts as nothing.
        sums = ", ".join(
            f"coalesce(sum(CASE WHEN jsonb_typeof(usage::jsonb -> '{f}') = 'number' "
            f"THEN (usage::jsonb ->> '{f}')::numeric END), 0)"
            for f in USAGE_FIELDS
        )
        row = self.db.execute(
            f"SELECT {sums}, count(usage) FROM transcript_events WHERE session_id = %s",
            (session_id,),
        )[0]
        totals = {f: int(v) for f, v in zip(USAGE_FIELDS, row, strict=False)}
        totals["calls"] = int(row[len(USAGE_FIELDS)])
        return totals
