"""An index turned back into what an earlier version wrote (memory/store/migrations.py), the
migrations since not recorded; opening it again upgrades it. `m015_layout`: the version before
m017-m018 (each chunk's packed passages as uint32 triples, the chunks' and files' hashes as hex
text). `m013_layout`: the version before m014 (that, and also the embedding cache with an
implicit rowid, provider and model in every row and a fractional `created_at`; one
`memory_units` row per passage naming its cache row and hash; no `memory_passages` nor
`embedding_models`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from memory.store.passage_pack import spans_of

M015_UNDONE = ("m017_spans_compact", "m018_chunk_and_source_hashes_as_bytes")


def m015_layout(conn: Any) -> None:
    """Inside the caller's transaction: the current layout as m015 left it."""
    packed = conn.execute("SELECT chunk_id, spans FROM memory_passages").fetchall()
    conn.executemany(
        "UPDATE memory_passages SET spans = ? WHERE chunk_id = ?",
        [(np.asarray(spans_of(blob), dtype="<u4").tobytes(), c) for c, blob in packed],
    )
    for table in ("memory_chunks", "memory_sources"):
        conn.execute(f"UPDATE {table} SET hash = lower(hex(hash)) WHERE typeof(hash) = 'blob'")
    for table in ("schema_migrations", "_migrations"):
        conn.executemany(f"DELETE FROM {table} WHERE name = ?", [(n,) for n in M015_UNDONE])


def loose_passages(conn: Any) -> None:
    """Inside the caller's transaction: every packed chunk's passages as one `memory_units`
    row each (id, hash and `cache_row` as the packed row named them), as an index without
    m014 kept them; the cache as it is."""
    hashes = dict(conn.execute("SELECT id, chunk_hash FROM embedding_cache").fetchall())
    units = [
        (first + i, chunk, gen, int(s), int(e), hashes[int(ref)], int(ref))
        for chunk, gen, first, blob in conn.execute(
            "SELECT chunk_id, generation, first_unit, spans FROM memory_passages"
        ).fetchall()
        for i, (s, e, ref) in enumerate(spans_of(blob).tolist())
    ]
    conn.executemany(
        "INSERT INTO memory_units(id, chunk_id, generation, start_line, end_line, hash, "
        "cache_row) VALUES (?, ?, ?, ?, ?, ?, ?)",
        units,
    )
    conn.execute("DELETE FROM memory_passages")


def m013_layout(conn: Any) -> None:
    """Inside the caller's transaction: the current layout as m013 left it."""
    m015_layout(conn)
    loose_passages(conn)
    conn.execute(
        "CREATE TABLE cache_m013 (provider TEXT NOT NULL, model TEXT NOT NULL, "
        "chunk_hash TEXT NOT NULL, dimensions INTEGER NOT NULL, vector BLOB NOT NULL, "
        "created_at REAL NOT NULL)"
    )
    conn.execute(
        "INSERT INTO cache_m013(rowid, provider, model, chunk_hash, dimensions, vector, "
        "created_at) SELECT c.id, m.provider, m.model, c.chunk_hash, c.dimensions, c.vector, "
        "c.created_at + 0.25 FROM embedding_cache c JOIN embedding_models m ON m.id = c.model_id"
    )
    conn.execute("DROP TABLE memory_passages")
    conn.execute("DROP TABLE embedding_cache")
    conn.execute("DROP TABLE embedding_models")
    conn.execute("ALTER TABLE cache_m013 RENAME TO embedding_cache")
    conn.execute(
        "CREATE INDEX embedding_cache_by_key ON embedding_cache (substr(chunk_hash, 1, 8))"
    )
    for table in ("schema_migrations", "_migrations"):
        conn.execute(f"DELETE FROM {table} WHERE name = 'm014_units_packed_passages'")
