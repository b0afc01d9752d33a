"""The embedding cache: vectors by (provider, model, text hash), so a text is embedded once.

A rebuild, a re-chunked file or two files sharing a paragraph take their vectors from here; only
texts never seen by this model run through it, in batches, each batch cached as it completes
(a killed run keeps what it paid for).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from memory.embeddings.providers import EmbeddingError, EmbeddingProvider
from memory.errors import IndexingError
from memory.index.chunking import hash_text
from memory.store.db import Database
from memory.store.vector_tables import from_blob, to_blob

ProgressCallback = Callable[[int, int, str], None]  # (done_chunks, total_chunks, current_path)


class Embeddable(Protocol):
    @property
    def hash(self) -> str: ...

    @property
    def text(self) -> str: ...


class EmbeddingCache:
    """Cached embedding of texts for one agent database."""

    def __init__(self, db: Database, batch_size: int) -> None:
        self.db = db
        self.batch_size = batch_size

    def count(self) -> int:
        return int(self.db.execute("SELECT count(*) FROM embedding_cache")[0][0])

    def cached(self, p: EmbeddingProvider, hashes: Sequence[str]) -> dict[str, np.ndarray]:
        """The cached vectors among `hashes` for this provider and model."""
        found: dict[str, np.ndarray] = {}
        for i in range(0, len(hashes), 500):
            part = list(hashes[i : i + 500])
            marks = ",".join("?" for _ in part)
            for h, blob in self.db.execute(
                f"SELECT chunk_hash, vector FROM embedding_cache WHERE provider = ? AND model = ? "
                f"AND dimensions = ? AND chunk_hash IN ({marks})",
                (p.provider, p.model, p.dimensions, *part),
            ):
                found[h] = from_blob(blob)
        return found

    def embed(
        self,
        p: EmbeddingProvider,
        items: Sequence[Embeddable],
        *,
        on_progress: ProgressCallback | None = None,
        on_batch: Callable[[Any], None] | None = None,
    ) -> tuple[dict[str, np.ndarray], int, int]:
        """(vectors by hash, how many came from the cache, how many were embedded now).

        `on_batch(conn)` runs inside the transaction that caches each batch (a rebuild beats
        its lease there).
        """
        if not items:
            return {}, 0, 0
        hashes = list(dict.fromkeys(c.hash for c in items))
        found = self.cached(p, hashes)
        from_cache = len(found)
        missing = [c for c in dict((c.hash, c) for c in items).values() if c.hash not in found]
        total = len(missing)
        for i in range(0, total, self.batch_size):
            part = missing[i : i + self.batch_size]
            if on_progress:
                on_progress(i, total, "")
            try:
                vecs = p.embed_documents([c.text for c in part])
            except EmbeddingError:
                raise
            except Exception as exc:  # a model library failing mid-run
                raise IndexingError(f"The embedding model failed: {exc}") from exc
            with self.db.transaction() as conn:
                conn.executemany(
                    "INSERT OR REPLACE INTO embedding_cache VALUES (?, ?, ?, ?, ?, ?)",
                    [
                        (p.provider, p.model, c.hash, p.dimensions, to_blob(v), time.time())
                        for c, v in zip(part, vecs, strict=True)
                    ],
                )
                if on_batch is not None:
                    on_batch(conn)
            for c, v in zip(part, vecs, strict=True):
                found[c.hash] = np.asarray(v, dtype=np.float32)
        if on_progress and total:
            on_progress(total, total, "")
        return found, from_cache, total

    def prime(self, p: EmbeddingProvider, texts: Sequence[str], vectors: np.ndarray) -> None:
        """Store vectors for texts without running the model (benchmarks, imports)."""
        with self.db.transaction() as conn:
            conn.executemany(
                "INSERT OR REPLACE INTO embedding_cache VALUES (?, ?, ?, ?, ?, ?)",
                [
                    (p.provider, p.model, hash_text(t), p.dimensions, to_blob(v), time.time())
                    for t, v in zip(texts, vectors, strict=True)
                ],
            )
