"""The web page's stores on PostgreSQL: `WebAuthStore` (login tokens and browser sessions),
`SessionOverview` (a page of sessions by last activity, usage per quarter hour) and
`SourceListings` (the index's files by kind). The promises are stated in
memory/store/web_store.py, session_overview.py and source_listing.py.

How they are kept here:
- `redeem_token` is one conditional `UPDATE` (PostgreSQL re-checks `used_at IS NULL` on a row
  another transaction just changed, so of two redeemers one gets the row);
- the overview reads each session's last event through a `LATERAL` join on the
  (session_id, seq) key, and sums usage from the JSON text per quarter hour (`floor`, as
  SQLite's integer cast of a positive time);
- the listing classifies paths with the regular expressions of SQLite's GLOBs and orders paths
  byte-wise (`COLLATE "C"`), as SQLite does.
"""

from __future__ import annotations

from typing import Any

from memory.store.postgres.database import PgDatabase, one_row
from memory.store.session_overview import (
    USAGE_BUCKET_S,
    SessionPage,
    UsageRow,
    session_row,
)
from memory.store.sessions import USAGE_FIELDS
from memory.store.source_listing import CachedListing, ListedFile, SourceListing

# -- WebAuthStore ------------------------------------------------------------------------------


class PgWebAuthStore:
    """`WebAuthStore` on PostgreSQL (tables `web_login_tokens`, `web_sessions`)."""

    def __init__(self, db: PgDatabase) -> None:
        self.db = db

    def add_token(self, token_hash: str, now: float, expires_at: float) -> None:
        self.db.execute(
            "INSERT INTO web_login_tokens (token_hash, created_at, expires_at) VALUES (%s, %s, %s)",
            (token_hash, now, expires_at),
        )

    def redeem_token(self, token_hash: str, now: float) -> bool:
        with self.db.transaction() as conn:
            cur = conn.execute(
                "UPDATE web_login_tokens SET used_at = %s "
                "WHERE token_hash = %s AND used_at IS NULL AND expires_at > %s",
                (now, token_hash, now),
            )
            return bool(cur.rowcount == 1)

    def add_session(self, session_hash: str, now: float, expires_at: float) -> None:
        self.db.execute(
            "INSERT INTO web_sessions (session_hash, created_at, expires_at) VALUES (%s, %s, %s)",
            (session_hash, now, expires_at),
        )

    def session_alive(self, session_hash: str, now: float) -> bool:
        rows = self.db.execute(
            "SELECT 1 FROM web_sessions WHERE session_hash = %s AND expires_at > %s",
            (session_hash, now),
        )
        return bool(rows)

    def end_session(self, session_hash: str) -> None:
        self.db.execute("DELETE FROM web_sessions WHERE session_hash = %s", (session_hash,))

    def prune(self, now: float) -> None:
        with self.db.transaction() as conn:
            conn.execute("DELETE FROM web_sessions WHERE expires_at <= %s", (now,))
            # Used or expired tokens are kept a day, then go (nothing in them logs in).
            conn.execute("DELETE FROM web_login_tokens WHERE expires_at <= %s", (now - 86400,))


# -- SessionOverview ---------------------------------------------------------------------------


class PgSessionOverview:
    """`SessionOverview` on PostgreSQL (read-only; the tables are the sessions store's)."""

    def __init__(self, db: PgDatabase) -> None:
        self.db = db

    def page(self, *, channel: str | None, offset: int, limit: int) -> SessionPage:
        where, params = ("WHERE s.channel = %s", [channel]) if channel else ("", [])
        counted = self.db.execute(f"SELECT count(*) FROM sessions s {where}", params)
        (total,) = one_row(counted[0] if counted else None)
        rows = self.db.execute(
            "SELECT s.id, s.agent_id, s.channel, s.chat_type, s.peer_id, s.thread_id, s.state, "
            "s.created_at, s.compactions, last.seq, coalesce(last.created_at, s.created_at) "
            "AS active FROM sessions s LEFT JOIN LATERAL (SELECT e.seq, e.created_at FROM "
            "transcript_events e WHERE e.session_id = s.id ORDER BY e.seq DESC LIMIT 1) last "
            f"ON true {where} "
            'ORDER BY active DESC, s.created_at DESC, s.id COLLATE "C" LIMIT %s OFFSET %s',
            [*params, limit, offset],
        )
        found = tuple(session_row(r) for r in rows)
        return SessionPage(found, int(total), offset, limit)

    def channels(self) -> dict[str, int]:
        rows = self.db.execute(
            'SELECT channel, count(*) FROM sessions GROUP BY channel ORDER BY channel COLLATE "C"'
        )
        return {str(r[0]): int(r[1]) for r in rows}

    def usage_since(self, since: float) -> list[UsageRow]:
        sums = ", ".join(
            f"coalesce(sum(CASE WHEN jsonb_typeof(usage::jsonb -> '{f}') = 'number' "
            f"THEN (usage::jsonb ->> '{f}')::numeric END), 0)"
            for f in USAGE_FIELDS
        )
        rows = self.db.execute(
            f"SELECT floor(created_at / {USAGE_BUCKET_S})::bigint AS q, count(*), {sums} "
            "FROM transcript_events WHERE usage IS NOT NULL AND created_at >= %s "
            "GROUP BY q ORDER BY q",
            (since,),
        )
        return [UsageRow(float(r[0] * USAGE_BUCKET_S), *(int(v) for v in r[1:])) for r in rows]


# -- SourceListings ----------------------------------------------------------------------------

_DAY = "[0-9]{4}-[0-9]{2}-[0-9]{2}"
# The kinds of memory/files/discovery.py (file_day, is_memory_path), as source_listing.py's.
_KIND = (
    "CASE WHEN path IN ('MEMORY.md', 'USER.md') THEN 'curated' "
    f"WHEN source = 'memory' AND path ~ '^memory/(.*/)?{_DAY}\\.md$' THEN 'daily' "
    f"WHEN source = 'memory' AND path ~ '^memory/(.*/)?{_DAY}-.*\\.md$' THEN 'note' "
    "WHEN source = 'memory' THEN 'other' ELSE 'extra' END"
)


class PgSourceListing(CachedListing):
    """`SourceListings` on PostgreSQL over `memory_sources` (read-only)."""

    def _read(self, generation: int, newest: int) -> SourceListing:
        classified = (
            f"SELECT path, {_KIND} AS kind, size, mtime FROM memory_sources "
            "WHERE generation = %s AND source <> 'sessions'"
        )
        counts = {
            str(k): int(n)
            for k, n in self.db.execute(
                f"SELECT kind, count(*) FROM ({classified}) f GROUP BY kind", (generation,)
            )
        }
        rows: list[Any] = []
        for kind in ("daily", "note"):
            if counts.get(kind):
                rows += self.db.execute(
                    f"SELECT * FROM ({classified}) f WHERE kind = %s "
                    'ORDER BY path COLLATE "C" DESC LIMIT %s',
                    (generation, kind, newest),
                )
        rows += self.db.execute(
            f"SELECT * FROM ({classified}) f WHERE kind NOT IN ('daily', 'note')", (generation,)
        )
        files = tuple(ListedFile(str(p), str(k), int(z), float(m)) for p, k, z, m in rows)
        return SourceListing(counts, files)
