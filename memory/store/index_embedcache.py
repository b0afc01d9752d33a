"""The embedding cache, as stored: `embedding_cache` rows, one vector per (provider, model, text
hash), so a text is embedded once per model. Vectors are packed float32 blobs; when and in what
batches texts are embedded is decided in memory/index/embedcache.py."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from memory.store.db import Database

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
    returns only vectors of the same provider, model and dimensions; `put` writes inside the
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
                found[h] = blob
        return found

    def put(self, conn: Any, key: ModelKey, vectors: Sequence[tuple[str, bytes]]) -> None:
        conn.executemany(
            "INSERT OR REPLACE INTO embedding_cache VALUES (?, ?, ?, ?, ?, ?)",
            [(key.provider, key.model, h, key.dimensions, v, time.time()) for h, v in vectors],
        )
