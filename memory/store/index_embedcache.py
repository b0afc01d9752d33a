"""The embedding cache, as stored: `embedding_cache` rows, one vector per (provider, model, text
hash), so a text is embedded once per model. When and in what batches texts are embedded is
decided in memory/index/embedcache.py.

It is also where a passage's vector lives: `memory_units` rows name their passage's hash and
search reads the vector from here (`cached_vectors`), so each vector is stored once. Vectors are
handed in and out as float32 blobs and stored as 8-bit codes (memory/store/vector_codec.py);
rows written by older versions (float32) read the same and are rewritten by `requantise`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from memory.store.db import Database
from memory.store.vector_codec import decode, encodable, encode, is_quantised

LOOKUP_BATCH = 500  # hashes per lookup query (SQLite's bound-parameter limit is far above)


@dataclass(frozen=True)
class ModelKey:
    """Which model's vectors: a vector is reused only for the same provider, model and size."""

    provider: str
    model: str
    dimensions: int


class EmbeddingCacheRepository(Protocol):
    """Cached vectors by (provider, model, text hash).

    Promises: (provider, model, hash) is unique — `put` replaces an existing vector; a lookup
    returns only vectors of the same provider, model and dimensions, as float32 blobs (SQLite
    keeps a float32 vector of the key's width as 8-bit codes: it comes back within half a step
    of each component, memory/store/vector_codec.py; other blobs come back as they went in); `put` writes inside the
    caller's transaction, so a batch is cached with whatever else that transaction commits.
    """

    def count(self) -> int: ...

    def get(self, key: ModelKey, hashes: Sequence[str]) -> dict[str, bytes]:
        """The cached vectors among `hashes` (missing ones left out), by hash."""
        ...

    def put(self, conn: Any, key: ModelKey, vectors: Sequence[tuple[str, bytes]]) -> None:
        """Store (hash, vector) pairs, replacing what was cached for those hashes."""
        ...


class SqliteEmbeddingCache:
    """EmbeddingCacheRepository on the agent SQLite file."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def count(self) -> int:
        return int(self.db.execute("SELECT count(*) FROM embedding_cache")[0][0])

    def get(self, key: ModelKey, hashes: Sequence[str]) -> dict[str, bytes]:
        found: dict[str, bytes] = {}
        for i in range(0, len(hashes), LOOKUP_BATCH):
            part = list(hashes[i : i + LOOKUP_BATCH])
            marks = ",".join("?" for _ in part)
            for h, blob in self.db.execute(
                f"SELECT chunk_hash, vector FROM embedding_cache WHERE provider = ? AND model = ? "
                f"AND dimensions = ? AND chunk_hash IN ({marks})",
                (key.provider, key.model, key.dimensions, *part),
            ):
                found[h] = decode(blob).astype("<f4").tobytes() if is_quantised(blob) else blob
        return found

    def put(self, conn: Any, key: ModelKey, vectors: Sequence[tuple[str, bytes]]) -> None:
        now = time.time()
        conn.executemany(
            "INSERT OR REPLACE INTO embedding_cache VALUES (?, ?, ?, ?, ?, ?)",
            [(key.provider, key.model, h, key.dimensions, _stored(v, key.dimensions), now)
             for h, v in vectors],
        )


def _stored(blob: bytes, dimensions: int) -> bytes:
    """A float32 vector of `dimensions` as the cache stores it: 8-bit codes (anything else, as
    it is)."""
    if len(blob) != 4 * dimensions or not encodable(dimensions):
        return blob
    return encode(decode(blob))


def cached_vectors(db: Database, generation: int, hashes: Sequence[str]) -> dict[str, bytes]:
    """The stored vectors (either form, see vector_codec.decode) of `hashes` by the model the
    generation was built with; those not cached are left out. `db` may be a read connection."""
    row = db.execute("SELECT identity FROM memory_generations WHERE id = ?", (generation,))
    if not row:
        return {}
    identity = json.loads(row[0][0])
    key = (identity.get("provider"), identity.get("model"), identity.get("dimensions"))
    found: dict[str, bytes] = {}
    unique = list(dict.fromkeys(hashes))
    for i in range(0, len(unique), LOOKUP_BATCH):
        part = unique[i : i + LOOKUP_BATCH]
        marks = ",".join("?" for _ in part)
        for h, blob in db.execute(
            f"SELECT chunk_hash, vector FROM embedding_cache WHERE provider = ? AND model = ? "
            f"AND dimensions = ? AND chunk_hash IN ({marks})",
            (*key, *part),
        ):
            found[h] = blob
    return found
