"""The index's row repositories on PostgreSQL: `GenerationRepository`, `IndexRowRepository` and
`EmbeddingCacheRepository` (memory/store/index_*.py state the promises).

Methods that take a `conn` run inside the caller's transaction (`PgDatabase.transaction()`), so a
file's chunks, keyword rows, passages and source row change together or not at all. Ids come
from identity columns: always larger than every id present, never reused. At most one active
generation and one rebuild lease are enforced by the schema (a partial unique index; the lease's
`id = 1` key), exactly as on SQLite. Passage and cached vectors come in as float32 blobs and
are stored (`bytea`) as SQLite's cache stores them, 8-bit codes and a scale
(memory/store/vector_codec.py `compact_blobs`: 390 bytes instead of 1,536 at 384 dimensions);
rows an older version wrote in float32 read the same, and `pinch memory compact` codes them
(vector_forms.py). The pgvector side is the vector stores' concern.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from memory.store.cache_codec import as_float32
from memory.store.content_hash import cache_key, hash_of_stored
from memory.store.index_embedcache import ModelKey
from memory.store.index_generations import RebuildLeaseHolder
from memory.store.index_rows import ChunkRow, PassageRow, SourceRow, SourceState, StoredChunk
from memory.store.postgres.database import PgDatabase, one_row
from memory.store.postgres.keywords import keyword_tokens, stemmed
from memory.store.vector_codec import compact_blobs

# Deletes keyword rows (`{}`: which) and takes them out of bm25's N, total length and the
# document frequencies of their tokens, in one statement; returns the tokens no row holds now.
_DELETE_KEYWORDS = (
    "WITH gone AS (DELETE FROM memory_keywords WHERE {} RETURNING tokens), "
    "totals AS (UPDATE memory_keyword_stats SET rows = rows - (SELECT count(*) FROM gone), "
    "tokens = tokens - (SELECT coalesce(sum(cardinality(tokens)), 0) FROM gone) WHERE id = 1), "
    "per_token AS (SELECT t, count(*) AS n FROM gone, "
    "LATERAL (SELECT DISTINCT unnest(gone.tokens) AS t) AS u GROUP BY t) "
    "UPDATE memory_keyword_df AS d SET rows = d.rows - per_token.n FROM per_token "
    "WHERE d.token = per_token.t RETURNING d.token, d.rows"
)


def _delete_keywords(conn: Any, which: str, params: tuple[Any, ...]) -> None:
    """Delete the keyword rows `which` selects with the totals and frequencies kept with them.
    (Writers queue on the one `memory_keyword_stats` row before touching the frequencies.)"""
    changed = conn.execute(_DELETE_KEYWORDS.format(which), params).fetchall()
    unheld = sorted(str(token) for token, rows in changed if rows <= 0)
    if unheld:
        conn.execute("DELETE FROM memory_keyword_df WHERE token = ANY(%s) AND rows <= 0", (unheld,))


class PgGenerations:
    """`GenerationRepository` on PostgreSQL."""

    def __init__(self, db: PgDatabase) -> None:
        self.db = db

    def active(self) -> tuple[int, dict[str, Any]] | None:
        rows = self.db.execute(
            "SELECT id, identity FROM memory_generations WHERE state = 'active' "
            "ORDER BY id DESC LIMIT 1"
        )
        return (int(rows[0][0]), json.loads(rows[0][1])) if rows else None

    def identity_of(self, generation: int) -> dict[str, Any] | None:
        rows = self.db.execute(
            "SELECT identity FROM memory_generations WHERE id = %s", (generation,)
        )
        return json.loads(rows[0][0]) if rows else None

    def exists(self, conn: Any, generation: int) -> bool:
        found = conn.execute("SELECT 1 FROM memory_generations WHERE id = %s", (generation,))
        return found.fetchone() is not None

    def state_of(self, conn: Any, generation: int) -> str | None:
        row = conn.execute(
            "SELECT state FROM memory_generations WHERE id = %s", (generation,)
        ).fetchone()
        return str(row[0]) if row is not None else None

    def dimensions_of(self, conn: Any, generation: int) -> int | None:
        row = conn.execute(
            "SELECT dimensions FROM memory_generations WHERE id = %s", (generation,)
        ).fetchone()
        return int(row[0]) if row and row[0] is not None else None

    def inactive(self, conn: Any | None = None) -> list[int]:
        sql = "SELECT id FROM memory_generations WHERE state != 'active' ORDER BY id"
        rows = conn.execute(sql).fetchall() if conn is not None else self.db.execute(sql)
        return [int(r[0]) for r in rows]

    def has_leftovers(self) -> bool:
        rows = self.db.execute(
            "SELECT EXISTS (SELECT 1 FROM memory_generations WHERE state != 'active') "
            "OR EXISTS (SELECT 1 FROM memory_rebuild_lease)"
        )
        return bool(rows[0][0])

    def create_building(self, conn: Any, identity: dict[str, Any], now: float) -> int:
        row = conn.execute(
            "INSERT INTO memory_generations (identity, state, dimensions, created_at) "
            "VALUES (%s, 'building', %s, %s) RETURNING id",
            (json.dumps(identity, sort_keys=True), identity["dimensions"], now),
        ).fetchone()
        return int(one_row(row)[0])

    def activate(self, conn: Any, generation: int, now: float) -> None:
        conn.execute("UPDATE memory_generations SET state = 'retired' WHERE state = 'active'")
        conn.execute(
            "UPDATE memory_generations SET state = 'active', completed_at = %s WHERE id = %s",
            (now, generation),
        )

    def delete(self, conn: Any, generation: int) -> None:
        conn.execute("DELETE FROM memory_generations WHERE id = %s", (generation,))

    def bump_version(self, conn: Any) -> None:
        conn.execute(
            "INSERT INTO meta (key, value) VALUES ('index_version', '1') ON CONFLICT (key) DO "
            "UPDATE SET value = (meta.value::bigint + 1)::text"
        )

    def lease_holder(self, conn: Any | None = None) -> RebuildLeaseHolder | None:
        statement = (
            "SELECT generation, token, pid, host, started_at, heartbeat_at "
            "FROM memory_rebuild_lease WHERE id = 1"
        )
        if conn is not None:
            row = conn.execute(statement).fetchone()
        else:
            row = next(iter(self.db.execute(statement)), None)
        if row is None:
            return None
        return RebuildLeaseHolder(
            int(row[0]), row[1], int(row[2]), row[3], float(row[4]), float(row[5])
        )

    def take_lease(
        self, conn: Any, generation: int, token: str, pid: int, host: str, now: float
    ) -> None:
        conn.execute(
            "INSERT INTO memory_rebuild_lease (id, generation, token, pid, host, started_at, "
            "heartbeat_at) VALUES (1, %s, %s, %s, %s, %s, %s)",
            (generation, token, pid, host, now, now),
        )

    def beat_lease(self, conn: Any, generation: int, token: str, now: float) -> bool:
        cur = conn.execute(
            "UPDATE memory_rebuild_lease SET heartbeat_at = %s "
            "WHERE id = 1 AND token = %s AND generation = %s",
            (now, token, generation),
        )
        return bool(cur.rowcount == 1)

    def release_lease(self, conn: Any, token: str, generation: int | None = None) -> None:
        if generation is None:
            conn.execute("DELETE FROM memory_rebuild_lease WHERE token = %s", (token,))
        else:
            conn.execute(
                "DELETE FROM memory_rebuild_lease WHERE token = %s AND generation = %s",
                (token, generation),
            )

    def clear_lease(self, conn: Any) -> None:
        conn.execute("DELETE FROM memory_rebuild_lease")


class PgIndexRows:
    """`IndexRowRepository` on PostgreSQL (keyword rows in `memory_keywords`)."""

    def __init__(self, db: PgDatabase) -> None:
        self.db = db

    def insert_chunk(self, conn: Any, row: ChunkRow) -> int:
        made = conn.execute(
            "INSERT INTO memory_chunks (generation, path, source, origin, scope, start_line, "
            "end_line, hash, text, importance, day, project) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING id",
            (
                row.generation,
                row.path,
                row.source,
                row.origin,
                row.scope,
                row.start_line,
                row.end_line,
                row.hash,
                row.text,
                row.importance,
                row.day,
                row.project,
            ),
        ).fetchone()
        cid = int(one_row(made)[0])
        tokens = stemmed(keyword_tokens(row.keywords))
        conn.execute(
            "INSERT INTO memory_keywords (chunk_id, body, tokens) VALUES (%s, %s, %s)",
            (cid, row.keywords, tokens),
        )
        conn.execute(
            "UPDATE memory_keyword_stats SET rows = rows + 1, tokens = tokens + %s WHERE id = 1",
            (len(tokens),),
        )
        # Each distinct token's document frequency, in token order (the stats row above already
        # queues writers; the order keeps any other writer from deadlocking with this one).
        conn.execute(
            "INSERT INTO memory_keyword_df AS d (token, rows) SELECT t, 1 FROM unnest(%s::text[]) "
            "AS t ON CONFLICT (token) DO UPDATE SET rows = d.rows + 1",
            (sorted(set(tokens)),),
        )
        return cid

    def insert_passages(
        self, conn: Any, chunk_id: int, generation: int, passages: Sequence[PassageRow]
    ) -> None:
        vectors = compact_blobs([p.vector for p in passages])
        conn.cursor().executemany(
            "INSERT INTO memory_units (chunk_id, generation, start_line, end_line, hash, vector) "
            "VALUES (%s, %s, %s, %s, %s, %s)",
            [
                (chunk_id, generation, p.start_line, p.end_line, p.hash, v)
                for p, v in zip(passages, vectors, strict=True)
            ],
        )

    def set_centroid(self, conn: Any, chunk_id: int, vector: bytes) -> None:
        """Nothing: the centroid is stored once, in its generation's pgvector column (the
        vector store's); `memory_chunks.centroid` is only read for chunks an older SQLite file
        brought over before their generation had that table (centroids_once.py)."""

    def chunk_ids(
        self, conn: Any, generation: int, path: str, from_line: int | None = None
    ) -> list[int]:
        statement = "SELECT id FROM memory_chunks WHERE generation = %s AND path = %s"
        params: tuple[Any, ...] = (generation, path)
        if from_line is not None:
            statement += " AND start_line >= %s"
            params += (from_line,)
        return [int(r[0]) for r in conn.execute(statement + " ORDER BY id", params).fetchall()]

    def delete_keywords(self, conn: Any, chunk_ids: Sequence[int]) -> None:
        _delete_keywords(conn, "chunk_id = ANY(%s)", (list(chunk_ids),))

    def delete_chunks(self, conn: Any, chunk_ids: Sequence[int]) -> None:
        ids = list(chunk_ids)
        conn.execute("DELETE FROM memory_units WHERE chunk_id = ANY(%s)", (ids,))
        conn.execute("DELETE FROM memory_chunks WHERE id = ANY(%s)", (ids,))

    def tail(self, generation: int, path: str) -> list[StoredChunk]:
        rows = self.db.execute(
            "SELECT start_line, end_line, text, origin, day FROM memory_chunks "
            "WHERE generation = %(g)s AND path = %(p)s AND start_line = (SELECT max(start_line) "
            "FROM memory_chunks WHERE generation = %(g)s AND path = %(p)s) ORDER BY id",
            {"g": generation, "p": path},
        )
        return [StoredChunk(int(r[0]), int(r[1]), r[2], r[3], r[4]) for r in rows]

    def tagged_chunks(self, generation: int) -> list[tuple[str, int, str, str]]:
        rows = self.db.execute(
            "SELECT path, start_line, text, project FROM memory_chunks WHERE generation = %s "
            'AND project IS NOT NULL ORDER BY path COLLATE "C", start_line',
            (generation,),
        )
        return [(str(r[0]), int(r[1]), str(r[2]), str(r[3])) for r in rows]

    def chunk_count(self, generation: int) -> int:
        rows = self.db.execute(
            "SELECT count(*) FROM memory_chunks WHERE generation = %s", (generation,)
        )
        return int(rows[0][0])

    def write_source(self, conn: Any, row: SourceRow) -> None:
        conn.execute(
            "INSERT INTO memory_sources (generation, path, source, origin, hash, mtime, size, "
            "indexed_at, error, warning) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, NULL, %s)",
            (
                row.generation,
                row.path,
                row.source,
                row.origin,
                row.hash,
                row.mtime,
                row.size,
                time.time(),
                row.warning,
            ),
        )

    def record_problem(
        self,
        conn: Any,
        generation: int,
        where: tuple[str, str, str],
        mtime: float,
        size: int,
        message: str,
    ) -> None:
        path, source, origin = where
        conn.execute(
            "INSERT INTO memory_sources (generation, path, source, origin, hash, mtime, size, "
            "indexed_at, error) VALUES (%s, %s, %s, %s, '', %s, %s, %s, %s) "
            "ON CONFLICT (generation, path) DO UPDATE SET error = excluded.error, "
            "mtime = excluded.mtime, size = excluded.size",
            (generation, path, source, origin, mtime, size, time.time(), message),
        )

    def touch_source(self, conn: Any, generation: int, path: str, mtime: float, size: int) -> None:
        conn.execute(
            "UPDATE memory_sources SET mtime = %s, size = %s WHERE generation = %s AND path = %s",
            (mtime, size, generation, path),
        )

    def delete_source(self, conn: Any, generation: int, path: str) -> None:
        conn.execute(
            "DELETE FROM memory_sources WHERE generation = %s AND path = %s", (generation, path)
        )

    def sources(self, generation: int) -> dict[str, SourceState]:
        return {
            row[0]: SourceState(row[1], float(row[2]), int(row[3]), row[4])
            for row in self.db.execute(
                "SELECT path, hash, mtime, size, error FROM memory_sources WHERE generation = %s",
                (generation,),
            )
        }

    def indexed_file_count(self, generation: int) -> int:
        rows = self.db.execute(
            "SELECT count(*) FROM memory_sources WHERE generation = %s AND error IS NULL",
            (generation,),
        )
        return int(rows[0][0])

    def problems(self, generation: int) -> dict[str, str]:
        rows = self.db.execute(
            "SELECT path, coalesce(error, warning) FROM memory_sources "
            "WHERE generation = %s AND (error IS NOT NULL OR warning IS NOT NULL)",
            (generation,),
        )
        return {str(r[0]): str(r[1]) for r in rows}

    def drop_keywords_of(self, conn: Any, generation: int) -> None:
        _delete_keywords(
            conn, "chunk_id IN (SELECT id FROM memory_chunks WHERE generation = %s)", (generation,)
        )

    def drop_generation(self, conn: Any, generation: int) -> None:
        conn.execute("DELETE FROM memory_units WHERE generation = %s", (generation,))
        conn.execute("DELETE FROM memory_chunks WHERE generation = %s", (generation,))
        conn.execute("DELETE FROM memory_sources WHERE generation = %s", (generation,))


class PgEmbeddingCache:
    """`EmbeddingCacheRepository` on PostgreSQL (one `= ANY(array)` lookup however many). A key
    is the hex text of the hash's first 14 bytes, as SQLite keeps it (content_hash.cache_key;
    migration p002_cache_short_key), so `pinch migrate` carries keys across unchanged."""

    def __init__(self, db: PgDatabase) -> None:
        self.db = db

    def count(self) -> int:
        return int(self.db.execute("SELECT count(*) FROM embedding_cache")[0][0])

    def get(self, key: ModelKey, hashes: Sequence[str]) -> dict[str, bytes]:
        wanted = {cache_key_text(h): h for h in hashes}
        if not wanted:
            return {}
        rows = self.db.execute(
            "SELECT chunk_hash, vector FROM embedding_cache WHERE provider = %s AND model = %s "
            "AND dimensions = %s AND chunk_hash = ANY(%s)",
            (key.provider, key.model, key.dimensions, list(wanted)),
        )
        return {wanted[str(h)]: as_float32(bytes(v)) for h, v in rows}

    def put(self, conn: Any, key: ModelKey, vectors: Sequence[tuple[str, bytes]]) -> None:
        coded = compact_blobs([v for _, v in vectors])
        conn.cursor().executemany(
            "INSERT INTO embedding_cache (provider, model, chunk_hash, dimensions, vector) "
            "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (provider, model, chunk_hash) DO UPDATE "
            "SET dimensions = excluded.dimensions, vector = excluded.vector",
            [
                (key.provider, key.model, cache_key_text(h), key.dimensions, v)
                for (h, _), v in zip(vectors, coded, strict=True)
            ],
        )


def cache_key_text(text_hash: str) -> str:
    """A text hash as PostgreSQL's cache keys it: the hex of its `cache_key`."""
    return hash_of_stored(cache_key(text_hash))
