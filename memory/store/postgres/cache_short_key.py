"""The embedding cache's keys on PostgreSQL as SQLite's since its migration m016 (issue 22): the
hex of the text's SHA-256, first 14 bytes (28 digits: memory/store/content_hash.py `cache_key`)
instead of all 64 digits, and no `created_at` (SQLite keeps no time in a cache row any more,
and nothing on PostgreSQL read it). One key form on both backends, so `pinch migrate` carries
the cache across in either direction with nothing to convert, and a row copied from SQLite is
found by the same lookups as one PostgreSQL wrote. The passages' hashes (`memory_units.hash`)
stay as they are: nothing looks a passage up by its hash.

The keys are rewritten in place (an UPDATE of every row: seconds at 500k rows, under the
schema's lock, the old row versions left to autovacuum); a key of another form (a test's
made-up one) stays as it is, as `cache_key` leaves it. Two texts whose hashes share their first
14 bytes would make the UPDATE fail on the primary key: about one chance in 10^20 at ten million
rows (content_hash.py says why that is negligible).
"""

from __future__ import annotations

from typing import Any


def p002_cache_short_key(conn: Any) -> None:
    """The cache's keys cut to their first 14 bytes' hex; its `created_at` dropped."""
    conn.execute(
        "UPDATE embedding_cache SET chunk_hash = lower(left(chunk_hash, 28)) "
        "WHERE chunk_hash ~ '^[0-9a-fA-F]{64}$'"
    )
    conn.execute("ALTER TABLE embedding_cache DROP COLUMN created_at")
