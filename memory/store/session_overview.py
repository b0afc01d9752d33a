"""Read-only views over sessions and transcripts for the owner's web page: one page of sessions
with their last activity (fast at 10,000 sessions), the sessions per channel, and the token usage
the transcripts recorded (per model call, on `assistant` events) since a moment.

    overview = SqliteSessionOverview(db)   # applies the "session_overview" migration set once
    page = overview.page(channel="telegram", offset=0, limit=50)
    rows = overview.usage_since(time.time() - 14 * 86400)

Tables are sessions.py's; the one index this adds (usage by time) is migration set
"session_overview" (feature: the web page, issue 16).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from memory.store.db import Database
from memory.store.schema import MigrationSet, apply
from memory.store.sessions import USAGE_FIELDS, SessionKey


def o001_usage_by_time(conn: Any) -> None:
    # Feature: the web page's /health (tokens per day). Only events that carry usage are in
    # the index, so it stays small and the per-day sums read a few thousand rows, not all.
    conn.execute(
        "CREATE INDEX IF NOT EXISTS transcript_usage_by_time "
        "ON transcript_events (created_at) WHERE usage IS NOT NULL"
    )


SESSION_OVERVIEW = MigrationSet("session_overview", [o001_usage_by_time])


@dataclass(frozen=True)
class SessionRow:
    """One session as the list shows it."""

    id: str
    key: SessionKey
    state: str  # "current" | "archived"
    created_at: float
    compactions: int
    events: int  # how many transcript events (seqs have no gaps: the last seq)
    last_activity: float  # the last event's time, else the creation time


@dataclass(frozen=True)
class SessionPage:
    rows: tuple[SessionRow, ...]
    total: int  # sessions matching the filter
    offset: int
    limit: int


USAGE_BUCKET_S = 900  # every time zone's offset is a whole number of quarter hours


@dataclass(frozen=True)
class UsageRow:
    """The recorded usage of the model calls in one quarter hour starting at `at`."""

    at: float
    calls: int
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int


class SessionOverview(Protocol):
    """Read-only. `page` orders by last activity, newest first (ties: newer creation first, then
        id), and returns at most `limit` rows from `offset`; `channels` counts sessions per channel;
        `usage_since` sums the usage recorded at or after `since` per quarter hour (UTC-aligned, so
    a caller can add them up into days of any time zone), oldest first."""

    def page(self, *, channel: str | None, offset: int, limit: int) -> SessionPage: ...
    def channels(self) -> dict[str, int]: ...
    def usage_since(self, since: float) -> list[UsageRow]: ...


_LAST = (
    "(SELECT {col} FROM transcript_events e WHERE e.session_id = s.id ORDER BY e.seq DESC LIMIT 1)"
)


class SqliteSessionOverview:
    """`SessionOverview` on the agent SQLite database."""

    def __init__(self, db: Database) -> None:
        self.db = db
        if not db.store_state.get("session_overview_schema"):
            with db.lock:
                apply(db.conn, SESSION_OVERVIEW)
                db.store_state["session_overview_schema"] = True

    def page(self, *, channel: str | None, offset: int, limit: int) -> SessionPage:
        where, params = ("WHERE s.channel = ?", [channel]) if channel else ("", [])
        (total,) = self.db.execute(f"SELECT count(*) FROM sessions s {where}", params)[0]
        sql = (
            "SELECT id, agent_id, channel, chat_type, peer_id, thread_id, state, created_at, "
            "compactions, last_seq, coalesce(last_at, created_at) AS active FROM ("
            f"SELECT s.*, {_LAST.format(col='e.seq')} AS last_seq, "
            f"{_LAST.format(col='e.created_at')} AS last_at "
            f"FROM sessions s {where}) ORDER BY active DESC, created_at DESC, id LIMIT ? OFFSET ?"
        )
        rows = self.db.execute(sql, [*params, limit, offset])
        found = tuple(session_row(r) for r in rows)
        return SessionPage(found, int(total), offset, limit)

    def channels(self) -> dict[str, int]:
        rows = self.db.execute(
            "SELECT channel, count(*) FROM sessions GROUP BY channel ORDER BY channel"
        )
        return {str(r[0]): int(r[1]) for r in rows}

    def usage_since(self, since: float) -> list[UsageRow]:
        sums = ", ".join(f"sum(coalesce(json_extract(usage, '$.{f}'), 0))" for f in USAGE_FIELDS)
        bucket = f"CAST(created_at / {USAGE_BUCKET_S} AS INTEGER)"
        rows = self.db.execute(
            f"SELECT {bucket} AS q, count(*), {sums} FROM transcript_events "
            "INDEXED BY transcript_usage_by_time "
            "WHERE usage IS NOT NULL AND created_at >= ? GROUP BY q ORDER BY q",
            (since,),
        )
        return [UsageRow(float(r[0] * USAGE_BUCKET_S), *(int(v) for v in r[1:])) for r in rows]


def session_row(r: Any) -> SessionRow:
    """A `SessionRow` of one row of the page's SELECT (the same columns on every backend)."""
    return SessionRow(
        str(r[0]),
        SessionKey(r[1], r[2], r[3], r[4], r[5]),
        str(r[6]),
        float(r[7]),
        int(r[8]),
        int(r[9] or 0),
        float(r[10]),
    )
