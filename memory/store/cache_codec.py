"""The embedding cache's vectors as stored (feature "size", issue 22): 4-bit codes with a
scale (memory/store/vector_codec.py `encode4_many`, 198 bytes at 384 dimensions), 8-bit where
the width does not allow 4-bit, and what rewrites an older version's wider rows. No database
handle here: the cache (index_embedcache.py) and the migrations both use it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from memory.store.vector_codec import (
    decode,
    encodable,
    encodable4,
    encode,
    encode4_many,
    is_4bit,
    is_compact,
)

# Vectors an older version stored in a wider form than the cache's (float32; 8-bit codes).
WIDE_VECTORS = (
    "((length(vector) = 4 * dimensions AND dimensions % 4 = 0) OR (length(vector) = dimensions "
    "+ 6 AND dimensions % 8 = 0 AND substr(vector, 1, 2) = X'6938'))"
)
SHRINK_BATCH = 2000


def shrink_batch(conn: Any, after: int) -> tuple[int, int | None]:
    """Rewrite the next `SHRINK_BATCH` wide cached vectors with a rowid above `after`, inside
    the caller's transaction: (how many, the last rowid seen — None when none were left)."""
    rows = conn.execute(
        f"SELECT rowid, dimensions, vector FROM embedding_cache WHERE {WIDE_VECTORS} "
        "AND rowid > ? ORDER BY rowid LIMIT ?",
        (after, SHRINK_BATCH),
    ).fetchall()
    if not rows:
        return 0, None
    return shrink_cache_rows(conn, rows), int(rows[-1][0])


def stored_vector(blob: bytes, dimensions: int) -> bytes:
    """A float32 vector of `dimensions` as the cache stores it: 4-bit codes (8-bit when the
    width does not allow them; anything else, as it is)."""
    if len(blob) != 4 * dimensions or not encodable(dimensions):
        return blob
    if encodable4(dimensions):
        return encode4_many(decode(blob)[None, :])[0]
    return encode(decode(blob))


def shrink_cache_rows(conn: Any, rows: Sequence[tuple[int, int, bytes]]) -> int:
    """Rewrite cached vectors (rowid, dimensions, blob) in the cache's current form (float32 or
    8-bit rows of an older version → 4-bit), inside the caller's transaction; how many."""
    todo = [(int(r), int(d), bytes(v)) for r, d, v in rows]
    todo = [
        (r, d, v) for r, d, v in todo if not is_4bit(v) and stored_vector(as_float32(v), d) != v
    ]
    conn.executemany(
        "UPDATE embedding_cache SET vector = ? WHERE rowid = ?",
        [(stored_vector(as_float32(v), d), r) for r, d, v in todo],
    )
    return len(todo)


def as_float32(blob: bytes) -> bytes:
    """A stored vector as a float32 blob (any form)."""
    return decode(blob).astype("<f4").tobytes() if is_compact(blob) else blob
