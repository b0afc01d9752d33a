"""Ordered, named schema migrations of the agent database, applied once and recorded.

Add a migration by appending a function to MIGRATIONS; never edit one that has shipped. A fresh
database and one migrated from any earlier version end with the same schema.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from memory.store.cache_codec import shrink_batch
from memory.store.chunk_text import compress_batch
from memory.store.content_hash import cache_key_sql, stored_hash
from memory.store.passage_pack import compact_spans_batch, pack_existing
from memory.store.schema import MigrationSet, apply
from memory.store.vector_tables import store_vectors_once

_CONVERT_BATCH = 20_000

# The keyword index's columns and options since m009 (no copy of the text: `content=''`).
FTS_COLUMNS = "body, content = '', tokenize = 'porter unicode61 remove_diacritics 2'"


def m001_memory_index(conn: Any) -> None:
    conn.executescript(
        """
        CREATE TABLE meta (
            key TEXT PRIMARY KEY,
            value TEXT NOT NULL
        );
        -- One row per build of the memory index; searches read the 'active' one. A full rebuild
        -- writes a 'building' generation beside it and flips it to active only when complete.
        CREATE TABLE memory_generations (
            id INTEGER PRIMARY KEY,
            identity TEXT NOT NULL,          -- JSON: provider, model, dims, chunking, tokenizer
            state TEXT NOT NULL CHECK (state IN ('building', 'active', 'retired')),
            dimensions INTEGER,
            created_at REAL NOT NULL,
            completed_at REAL
        );
        CREATE TABLE memory_sources (
            generation INTEGER NOT NULL REFERENCES memory_generations(id) ON DELETE CASCADE,
            path TEXT NOT NULL,              -- workspace-relative, '/' separated
            source TEXT NOT NULL,            -- 'memory' | 'extra' | 'sessions'
            origin TEXT NOT NULL,            -- default origin of the file's chunks
            hash TEXT NOT NULL,              -- sha256 of the whole file
            mtime REAL NOT NULL,
            size INTEGER NOT NULL,
            indexed_at REAL NOT NULL,
            error TEXT,                      -- why the file could not be indexed, if it could not
            PRIMARY KEY (generation, path)
        );
        CREATE TABLE memory_chunks (
            id INTEGER PRIMARY KEY,
            generation INTEGER NOT NULL REFERENCES memory_generations(id) ON DELETE CASCADE,
            path TEXT NOT NULL,
            source TEXT NOT NULL,
            origin TEXT NOT NULL CHECK (origin IN ('owner', 'agent', 'untrusted', 'system')),
            scope TEXT NOT NULL DEFAULT '',  -- '' = shared memory; else its conversation
            start_line INTEGER NOT NULL,
            end_line INTEGER NOT NULL,
            hash TEXT NOT NULL,              -- sha256 of the chunk text (embedding cache key)
            text TEXT NOT NULL,
            importance INTEGER,
            day TEXT                         -- YYYY-MM-DD for dated logs; NULL = evergreen
        );
        CREATE INDEX memory_chunks_by_path ON memory_chunks (generation, path);
        CREATE INDEX memory_chunks_by_hash ON memory_chunks (hash);
        CREATE VIRTUAL TABLE memory_fts USING fts5(
            body, tokenize = 'porter unicode61 remove_diacritics 2'
        );
        CREATE TABLE embedding_cache (
            provider TEXT NOT NULL,
            model TEXT NOT NULL,
            chunk_hash TEXT NOT NULL,
            dimensions INTEGER NOT NULL,
            vector BLOB NOT NULL,            -- float32, little-endian, L2-normalised
            created_at REAL NOT NULL,
            PRIMARY KEY (provider, model, chunk_hash)
        );
        """
    )


def m002_sessions(conn: Any) -> None:
    conn.executescript(
        """
        -- Conversations. Each session key has at most one 'current' session (the one a restart
        -- resumes); /new and /reset archive it and start another. Archived ones are kept.
        CREATE TABLE sessions (
            id TEXT PRIMARY KEY,             -- uuid4 hex
            key TEXT NOT NULL,               -- str(SessionKey), e.g. main:telegram:direct:12345
            agent_id TEXT NOT NULL,
            channel TEXT NOT NULL,
            chat_type TEXT NOT NULL CHECK (chat_type IN ('direct', 'group', 'channel')),
            peer_id TEXT NOT NULL,
            thread_id TEXT,
            state TEXT NOT NULL CHECK (state IN ('current', 'archived')),
            created_at REAL NOT NULL,
            archived_at REAL,
            compactions INTEGER NOT NULL DEFAULT 0,
            flushed_cycle INTEGER NOT NULL DEFAULT -1  -- compaction cycle whose flush ran
        );
        CREATE UNIQUE INDEX sessions_current_by_key ON sessions (key) WHERE state = 'current';
        CREATE INDEX sessions_by_key ON sessions (key, created_at);
        -- The transcript: the source of truth for a conversation's history.
        CREATE TABLE transcript_events (
            session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            seq INTEGER NOT NULL,            -- 1-based order within the session
            kind TEXT NOT NULL,              -- user | assistant | tool_call | tool_result | ...
            content TEXT NOT NULL,           -- JSON object
            usage TEXT,                      -- JSON object: tokens and model of a model call
            created_at REAL NOT NULL,
            PRIMARY KEY (session_id, seq)
        ) WITHOUT ROWID;
        CREATE INDEX transcript_events_by_kind ON transcript_events (session_id, kind, seq);
        """
    )


def m003_memory_units(conn: Any) -> None:
    """Passages inside chunks, each embedded on its own."""
    conn.executescript(
        """
        CREATE TABLE memory_units (
            id INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused: vector rows are keyed by it
            chunk_id INTEGER NOT NULL REFERENCES memory_chunks(id) ON DELETE CASCADE,
            generation INTEGER NOT NULL,
            start_line INTEGER NOT NULL,
            end_line INTEGER NOT NULL,
            hash TEXT NOT NULL                     -- sha256 of the passage (embedding cache key)
        );
        CREATE INDEX memory_units_by_chunk ON memory_units (chunk_id);
        CREATE INDEX memory_units_by_generation ON memory_units (generation);
        """
    )


def m004_passage_vectors(conn: Any) -> None:
    """Vectors stored with their rows: each passage's own, and each chunk's centroid (the mean
    of its passages) which is what the vector index holds; passages re-score the best chunks."""
    conn.executescript(
        """
        ALTER TABLE memory_units ADD COLUMN vector BLOB;
        ALTER TABLE memory_chunks ADD COLUMN centroid BLOB;
        """
    )


def m005_source_warnings(conn: Any) -> None:
    """Why a file was indexed imperfectly (e.g. invalid UTF-8), for `pinch memory status`."""
    conn.executescript("ALTER TABLE memory_sources ADD COLUMN warning TEXT;")


def m006_one_active_generation(conn: Any) -> None:
    """At most one active index generation, enforced by the schema, and the rebuild lease: the
    one process allowed to build a new generation (pid + host + heartbeat, taken over only when
    stale). Older versions could leave several generations active; the newest keeps serving and
    the others are retired (the next sync drops their rows)."""
    conn.executescript(
        """
        UPDATE memory_generations SET state = 'retired'
            WHERE state = 'active'
            AND id != (SELECT max(id) FROM memory_generations WHERE state = 'active');
        CREATE UNIQUE INDEX memory_generations_one_active ON memory_generations (state)
            WHERE state = 'active';
        DELETE FROM meta WHERE key LIKE 'build:%';
        CREATE TABLE memory_rebuild_lease (
            id INTEGER PRIMARY KEY CHECK (id = 1),  -- one lease per database
            generation INTEGER NOT NULL,            -- the generation being built
            token TEXT NOT NULL,                    -- which MemoryIndex in that process
            pid INTEGER NOT NULL,
            host TEXT NOT NULL,
            started_at REAL NOT NULL,
            heartbeat_at REAL NOT NULL
        );
        """
    )


def m007_projects_chunk_and_session_project(conn: Any) -> None:
    """Feature "projects" (issue 21): each chunk's `<!-- project: NAME -->` tag, and each
    session's active project (NULL: the default from `[projects.NAME]`; '': none, chosen with
    `/project none`). Files already indexed that hold a project marker are indexed again (their
    source hash and mtime are cleared), so their chunks get their tag without a rebuild."""
    conn.executescript(
        """
        ALTER TABLE memory_chunks ADD COLUMN project TEXT;
        ALTER TABLE sessions ADD COLUMN project TEXT;
        UPDATE memory_sources SET hash = '', mtime = 0 WHERE path IN (
            SELECT path FROM memory_chunks WHERE text LIKE '%project:%'
        );
        """
    )


def m008_compact_units_cache_row(conn: Any) -> None:
    """Feature "compact" (issue 22): a passage's vector is stored once, in the embedding cache;
    its row names that cache row (`cache_row`, its rowid, checked against the hash on every
    read: a row id a VACUUM renumbered falls back to the hash). NULL for older rows: read by
    hash, or from their own `vector`."""
    conn.executescript("ALTER TABLE memory_units ADD COLUMN cache_row INTEGER;")


def m009_size_contentless_fts(conn: Any) -> None:
    """Feature "size" (issue 22): the keyword index without its second copy of every chunk's
    text — a contentless FTS5 table (`content=''`); rows are removed with FTS5's 'delete'
    command and the body recomputed from `memory_chunks.text` (memory/store/index_rows.py).
    The existing rows are copied over as they are (no re-tokenising change: same tokenizer)."""
    conn.executescript(
        f"""
        CREATE VIRTUAL TABLE memory_fts_slim USING fts5({FTS_COLUMNS});
        INSERT INTO memory_fts_slim(rowid, body) SELECT rowid, body FROM memory_fts;
        DROP TABLE memory_fts;
        ALTER TABLE memory_fts_slim RENAME TO memory_fts;
        """
    )


def m010_size_binary_hashes(conn: Any) -> None:
    """Feature "size" (issue 22): the embedding cache's keys and the passages' hashes as the
    SHA-256 digest's 32 bytes instead of 64 hex characters (memory/store/content_hash.py
    `stored_hash`), and no index on the passages' generation nor on the chunks' hash (nothing
    looks them up by either: a generation's passages are removed through its chunks). Rows keep
    their rowids, so the passages' `cache_row` still names the right cache row."""
    conn.execute("DROP INDEX IF EXISTS memory_units_by_generation")
    conn.execute("DROP INDEX IF EXISTS memory_chunks_by_hash")
    for table, column in (("embedding_cache", "chunk_hash"), ("memory_units", "hash")):
        _hex_hashes_as_bytes(conn, table, column)


def _hex_hashes_as_bytes(conn: Any, table: str, column: str) -> None:
    """Rewrite the column's 64-character hex hashes as their 32 bytes (`stored_hash`), a batch
    of rows at a time by rowid (rowids kept); anything else (an empty hash: a file to index
    again) stays as it is."""
    last = 0
    while True:
        rows = conn.execute(
            f"SELECT rowid, {column} FROM {table} WHERE rowid > ? AND typeof({column}) = "
            f"'text' AND length({column}) = 64 ORDER BY rowid LIMIT {_CONVERT_BATCH}",
            (last,),
        ).fetchall()
        if not rows:
            break
        last = int(rows[-1][0])
        conn.executemany(
            f"UPDATE {table} SET {column} = ? WHERE rowid = ?",
            [(stored_hash(h), r) for r, h in rows if isinstance(stored_hash(h), bytes)],
        )


def m011_size_4bit_cache(conn: Any) -> None:
    """Feature "size" (issue 22): the embedding cache's vectors (the passages' only copy) in
    the cache's form (memory/store/cache_codec.py `CACHE_BITS`: 8-bit by default, 4-bit
    around the model's center when chosen), from the wider form an older version wrote:
    nothing is embedded again."""
    last: int | None = 0
    while last is not None:
        _, last = shrink_batch(conn, last)


def m012_size2_chunk_text(conn: Any) -> None:
    """Feature "size2" (issue 22, helper size2): chunk texts stored compressed with a preset
    dictionary made from the index's own chunks (memory/store/chunk_text.py); nothing else
    changes (the keyword index is recomputed from the same text, exactly). An index with too
    little text for a dictionary keeps them plain until it has enough. The pages freed are given
    back by `pinch memory compact`."""
    last: int | None = 0
    while last is not None:
        _, last = compress_batch(conn, last)


def m013_size2_cache_short_key(conn: Any) -> None:
    """Feature "size2" (issue 22, helper size2): the embedding cache without the unique index of
    its whole key (provider, model and the 32-byte hash again for every row: 36 MB at 100k
    chunks), and instead an index of the hash's first 8 bytes (memory/store/index_embedcache.py
    `lookup` compares the whole key; the cache's `put` keeps it unique). Rows keep their rowids,
    so the passages' `cache_row` still name them."""
    conn.executescript(
        """
        CREATE TABLE embedding_cache_slim (
            provider TEXT NOT NULL,
            model TEXT NOT NULL,
            chunk_hash TEXT NOT NULL,        -- sha256 digest (32 bytes) of the text
            dimensions INTEGER NOT NULL,
            vector BLOB NOT NULL,
            created_at REAL NOT NULL
        );
        INSERT INTO embedding_cache_slim(rowid, provider, model, chunk_hash, dimensions, vector,
            created_at) SELECT rowid, provider, model, chunk_hash, dimensions, vector, created_at
            FROM embedding_cache ORDER BY rowid;
        DROP TABLE embedding_cache;
        ALTER TABLE embedding_cache_slim RENAME TO embedding_cache;
        CREATE INDEX embedding_cache_by_key ON embedding_cache (substr(chunk_hash, 1, 8));
        """
    )


def m014_units_packed_passages(conn: Any) -> None:
    """Feature "units" (issue 22, helper units): the embedding cache's rows with an explicit
    id (a VACUUM keeps it, so passages name a vector by id alone), their provider and model as
    a number (`embedding_models`) and their time in whole seconds; and each chunk's passages
    packed in one `memory_passages` row (memory/store/passage_pack.py: lines and cache ids, no
    hash, no index by chunk). Chunks whose passages do not all name a cache row keep their
    `memory_units` rows. Nothing is embedded again; the pages freed are given back by `pinch
    memory compact`."""
    conn.executescript(
        """
        CREATE TABLE embedding_models (
            id INTEGER PRIMARY KEY,
            provider TEXT NOT NULL,
            model TEXT NOT NULL,
            UNIQUE (provider, model)
        );
        INSERT INTO embedding_models(provider, model)
            SELECT DISTINCT provider, model FROM embedding_cache ORDER BY provider, model;
        CREATE TABLE embedding_cache_units (
            id INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused: passages name rows by it
            model_id INTEGER NOT NULL,             -- embedding_models.id
            chunk_hash TEXT NOT NULL,              -- sha256 digest (32 bytes) of the text
            dimensions INTEGER NOT NULL,
            vector BLOB NOT NULL,
            created_at INTEGER NOT NULL            -- unix seconds
        );
        INSERT INTO embedding_cache_units(id, model_id, chunk_hash, dimensions, vector,
            created_at) SELECT c.rowid, m.id, c.chunk_hash, c.dimensions, c.vector,
            CAST(c.created_at AS INTEGER) FROM embedding_cache c JOIN embedding_models m
            ON m.provider = c.provider AND m.model = c.model ORDER BY c.rowid;
        DROP TABLE embedding_cache;
        ALTER TABLE embedding_cache_units RENAME TO embedding_cache;
        CREATE INDEX embedding_cache_by_key ON embedding_cache (substr(chunk_hash, 1, 8));
        CREATE TABLE memory_passages (
            chunk_id INTEGER PRIMARY KEY REFERENCES memory_chunks(id) ON DELETE CASCADE,
            generation INTEGER NOT NULL,
            first_unit INTEGER NOT NULL,           -- its first passage's id (memory_units' counter)
            spans BLOB NOT NULL                    -- uint32 (start line, end line, cache id) each
        );
        """
    )
    pack_existing(conn)


def m015_matrix_vectors_once(conn: Any) -> None:
    """Issue 22 (helper h-matrix): each chunk's centroid stored once. A generation's row table
    kept every vector and its pack a second copy (41 + 40 MB at 100k chunks); the pack is now
    written again from the rows and the rows keep their chunk id and scope, a vector only until
    the next pack holds it (memory/store/vector_tables.py `store_vectors_once`). Nothing is
    embedded again; the pages freed are given back by `pinch memory compact`."""
    store_vectors_once(conn)


_CACHE_COUNTER = "SELECT seq FROM sqlite_sequence WHERE name = 'embedding_cache'"


def m016_cache_short_rows(conn: Any) -> None:
    """Issue 22 (helper h-cache): the embedding cache's rows 25 bytes shorter — 369 instead of
    395 at 384 dimensions with their cell pointer, 11 to a 4 KB page instead of 10: the key is
    the hash's first 14 bytes (memory/store/content_hash.py `cache_key`), the width is the
    model's (`embedding_models` names provider, model and dimensions; a model cached at two
    widths gets a number for each, the width most of its rows have keeping the old one), and
    the time each row was written gives way to `embedding_cache_writes` (the ids written each
    recent minute: memory/store/index_embedcache.py). The passages still kept a row each
    (`memory_units`) name their text by the same key. Every row keeps its id and its vector,
    rewritten in id order so its pages are full; nothing is embedded again, and the id counter
    goes on where it was. The pages freed are given back by `pinch memory compact`."""
    # (the counter has no row when nothing was ever cached)
    counter = max([0, *(int(s) for (s,) in conn.execute(_CACHE_COUNTER).fetchall())])
    widths = conn.execute(
        "SELECT m.id, m.provider, m.model, c.dimensions, count(*) AS n FROM embedding_cache c "
        "JOIN embedding_models m ON m.id = c.model_id GROUP BY m.id, c.dimensions "
        "ORDER BY m.id, n DESC, c.dimensions"
    ).fetchall()
    # (a model no row is cached for is left out: its width is not known)
    last = max([0, *(int(w[0]) for w in widths)])
    numbered: set[int] = set()
    models = []
    for old, provider, model, dims, _ in widths:
        if old in numbered:  # another width of a model: a new number
            last += 1
            models.append((last, provider, model, dims))
        else:
            numbered.add(old)
            models.append((old, provider, model, dims))
    conn.execute(
        """CREATE TABLE embedding_models_m016 (
            id INTEGER PRIMARY KEY,
            provider TEXT NOT NULL,
            model TEXT NOT NULL,
            dimensions INTEGER NOT NULL,
            UNIQUE (provider, model, dimensions)
        )"""
    )
    if models:
        conn.executemany("INSERT INTO embedding_models_m016 VALUES (?, ?, ?, ?)", models)
    conn.execute(
        """CREATE TABLE embedding_cache_m016 (
            id INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused: passages name rows by it
            model_id INTEGER NOT NULL,             -- embedding_models.id
            chunk_hash BLOB NOT NULL,              -- the text's sha256, its first 14 bytes
            vector BLOB NOT NULL
        )"""
    )
    conn.execute(
        "INSERT INTO embedding_cache_m016(id, model_id, chunk_hash, vector) "
        f"SELECT c.id, n.id, {cache_key_sql('c.chunk_hash')}, c.vector FROM embedding_cache c "
        "JOIN embedding_models o ON o.id = c.model_id JOIN embedding_models_m016 n "
        "ON n.provider = o.provider AND n.model = o.model AND n.dimensions = c.dimensions "
        "ORDER BY c.id"
    )
    conn.execute("DROP TABLE embedding_cache")
    conn.execute("DROP TABLE embedding_models")
    conn.execute("ALTER TABLE embedding_cache_m016 RENAME TO embedding_cache")
    conn.execute("ALTER TABLE embedding_models_m016 RENAME TO embedding_models")
    # (the counter where it was, not at the highest id kept: a deleted row's id stays unused)
    conn.execute("DELETE FROM sqlite_sequence WHERE name = 'embedding_cache'")
    conn.execute(
        "INSERT INTO sqlite_sequence(name, seq) SELECT 'embedding_cache', "
        "max(?, coalesce(max(id), 0)) FROM embedding_cache",
        (counter,),
    )
    conn.execute(
        "CREATE INDEX embedding_cache_by_key ON embedding_cache (substr(chunk_hash, 1, 8))"
    )
    conn.execute(f"UPDATE memory_units SET hash = {cache_key_sql('hash')}")
    conn.execute(
        """CREATE TABLE embedding_cache_writes (
            minute INTEGER PRIMARY KEY,            -- unix time // 60
            after_id INTEGER NOT NULL              -- rows written in it have ids above this
        )"""
    )


def m017_spans_compact(conn: Any) -> None:
    """Issue 22 (helper h-spans): each chunk's packed passages (`memory_passages.spans`) in the
    compact form (memory/store/span_codec.py: line steps of 4 bits or a byte, cache ids in the
    bytes they need; 11.3 → 3.9 MB of blobs at 100k chunks) instead of uint32 triples. Both
    forms read alike; nothing else changes. The pages freed are given back by `pinch memory
    compact`."""
    last: int | None = 0
    while last is not None:
        _, last = compact_spans_batch(conn, last)


def m018_chunk_and_source_hashes_as_bytes(conn: Any) -> None:
    """Issue 22 (helper h-spans): the chunks' and files' SHA-256 hashes (`memory_chunks.hash`,
    `memory_sources.hash`) as the digest's 32 bytes instead of 64 hex characters, as m010 did
    for the cache and the passages (≈ 4 MB at 100k chunks). They are read back as hex
    (memory/store/index_rows.py), so a file indexed before is still known unchanged: nothing
    is read or indexed again. The pages freed are given back by `pinch memory compact`."""
    for table in ("memory_chunks", "memory_sources"):
        _hex_hashes_as_bytes(conn, table, "hash")


MIGRATIONS: list[Callable[[Any], None]] = [
    m001_memory_index,
    m002_sessions,
    m003_memory_units,
    m004_passage_vectors,
    m005_source_warnings,
    m006_one_active_generation,
    m007_projects_chunk_and_session_project,
    m008_compact_units_cache_row,
    m009_size_contentless_fts,
    m010_size_binary_hashes,
    m011_size_4bit_cache,
    m012_size2_chunk_text,
    m013_size2_cache_short_key,
    m014_units_packed_passages,
    m015_matrix_vectors_once,
    m016_cache_short_rows,
    m017_spans_compact,
    m018_chunk_and_source_hashes_as_bytes,
]


def apply_migrations(conn: Any) -> list[str]:
    """Apply the memory set's pending migrations in order, each in its own transaction; return
    their names. (The memory set is one of several in the database: see memory/store/schema.py.)"""
    return apply(conn, memory_set())


def memory_set() -> MigrationSet:
    """The memory index's migration set. Databases made before migration sets recorded these in
    `_migrations`, which stays readable and up to date."""
    return MigrationSet(
        "memory", MIGRATIONS, legacy_table="_migrations", retired=["m013_size2_cache_by_key"]
    )
