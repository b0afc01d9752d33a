"""An index turned back into what an earlier version wrote (memory/store/migrations.py); opening
it again upgrades it.

- `m015_layout`: before m016-m018 — the embedding cache keyed by the text hash's 32 bytes, its
  width and the time it was written (whole seconds) in every row, `embedding_models` naming
  provider and model only, no `embedding_cache_writes`; each chunk's packed passages as uint32
  triples; the chunks' and files' hashes as hex text; m016-m018 not recorded.
- `m013_layout`: before m014 — besides, the cache with an implicit rowid, provider and model in
  every row and a fractional `created_at`; one `memory_units` row per passage naming its cache
  row and hash; no `memory_passages` nor `embedding_models`; m014 not recorded either.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from memory.index.chunking import Chunk, hash_text, split_units
from memory.store.chunk_text import read_text
from memory.store.content_hash import CACHE_KEY_BYTES
from memory.store.passage_pack import spans_of

M015_UNDONE = (
    "m016_cache_short_rows",
    "m017_spans_compact",
    "m018_chunk_and_source_hashes_as_bytes",
)

WRITTEN_AT = 1_796_307_550  # the time m015_layout gives every cache row (whole seconds)


def whole_hashes(conn: Any) -> dict[bytes, bytes]:
    """{cache key: the whole 32-byte hash} of the index's texts (its chunks and passages: what
    it embeds), as the cache kept them before m016."""
    found: dict[bytes, bytes] = {}
    for start, end, stored in conn.execute("SELECT start_line, end_line, text FROM memory_chunks"):
        text = read_text(conn, stored)
        chunk = Chunk(int(start), int(end), text, hash_text(text), None)
        for h in [chunk.hash, *(u.hash for u in split_units(chunk))]:
            found[bytes.fromhex(h)[:CACHE_KEY_BYTES]] = bytes.fromhex(h)
    return found


def m015_layout(conn: Any) -> None:
    """Inside the caller's transaction: the current layout as m015 left it. A key whose text
    the index does not hold (a test's made-up one) gets zeros for its lost bytes."""
    whole = whole_hashes(conn)
    rows = conn.execute(
        "SELECT c.id, m.provider, m.model, m.dimensions, c.chunk_hash, c.vector "
        "FROM embedding_cache c JOIN embedding_models m ON m.id = c.model_id ORDER BY c.id"
    ).fetchall()
    (counter,) = conn.execute(
        "SELECT seq FROM sqlite_sequence WHERE name = 'embedding_cache'"
    ).fetchone() or (0,)
    conn.execute("DROP TABLE embedding_cache")
    conn.execute("DROP TABLE embedding_models")
    conn.execute("DROP TABLE embedding_cache_writes")
    conn.execute(
        "CREATE TABLE embedding_models (id INTEGER PRIMARY KEY, provider TEXT NOT NULL, "
        "model TEXT NOT NULL, UNIQUE (provider, model))"
    )
    conn.execute(
        "CREATE TABLE embedding_cache (id INTEGER PRIMARY KEY AUTOINCREMENT, model_id INTEGER "
        "NOT NULL, chunk_hash TEXT NOT NULL, dimensions INTEGER NOT NULL, vector BLOB NOT NULL, "
        "created_at INTEGER NOT NULL)"
    )
    numbers: dict[tuple[str, str], int] = {}
    for _, provider, model, *_ in rows:
        numbers.setdefault((provider, model), len(numbers) + 1)
    conn.executemany(
        "INSERT INTO embedding_models(id, provider, model) VALUES (?, ?, ?)",
        [(n, p, m) for (p, m), n in numbers.items()],
    )
    conn.executemany(
        "INSERT INTO embedding_cache VALUES (?, ?, ?, ?, ?, ?)",
        [
            (i, numbers[(p, m)], _whole(k, whole), dims, v, WRITTEN_AT)
            for i, p, m, dims, k, v in rows
        ],
    )
    conn.execute("UPDATE sqlite_sequence SET seq = ? WHERE name = 'embedding_cache'", (counter,))
    conn.execute(
        "CREATE INDEX embedding_cache_by_key ON embedding_cache (substr(chunk_hash, 1, 8))"
    )
    packed = conn.execute("SELECT chunk_id, spans FROM memory_passages").fetchall()
    conn.executemany(
        "UPDATE memory_passages SET spans = ? WHERE chunk_id = ?",
        [(np.asarray(spans_of(blob), dtype="<u4").tobytes(), c) for c, blob in packed],
    )
    for table in ("memory_chunks", "memory_sources"):
        conn.execute(f"UPDATE {table} SET hash = lower(hex(hash)) WHERE typeof(hash) = 'blob'")
    for table in ("schema_migrations", "_migrations"):
        conn.executemany(f"DELETE FROM {table} WHERE name = ?", [(n,) for n in M015_UNDONE])


def _whole(key: Any, whole: dict[bytes, bytes]) -> Any:
    if not isinstance(key, bytes):
        return key
    return whole.get(key, key + bytes(32 - len(key)))


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
