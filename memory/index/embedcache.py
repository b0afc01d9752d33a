"""The embedding cache: vectors by (provider, model, text hash), so a text is embedded once.

A rebuild, a re-chunked file or two files sharing a paragraph take their vectors from here; only
texts never seen by this model run through it, in batches, each batch cached as it completes
(a killed run keeps what it paid for).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Generator, Sequence
from typing import Any, Protocol

import numpy as np

from memory.embeddings.base import BatchEmbedder
from memory.embeddings.providers import EmbeddingError, EmbeddingProvider
from memory.errors import IndexingError
from memory.index.chunking import hash_text
from memory.store.db import Database
from memory.store.index_embedcache import EmbeddingCacheRepository, ModelKey
from memory.store.vector_tables import from_blob, to_blob

ProgressCallback = Callable[[int, int, str], None]  # (done_chunks, total_chunks, current_path)


class Embeddable(Protocol):
    @property
    def hash(self) -> str: ...

    @property
    def text(self) -> str: ...

    @property
    def legacy(self) -> str:
        """The hash of what an earlier version embedded for the same text ("" if the same)."""
        ...


class EmbeddingCache:
    """Cached embedding of texts for one agent database."""

    def __init__(self, db: Database, repo: EmbeddingCacheRepository, batch_size: int) -> None:
        self.db = db
        self.repo = repo
        self.batch_size = batch_size

    def count(self) -> int:
        return self.repo.count()

    def cached(self, p: EmbeddingProvider, hashes: Sequence[str]) -> dict[str, np.ndarray]:
        """The cached vectors among `hashes` for this provider and model."""
        blobs = self.repo.get(_key(p), hashes)
        return {h: from_blob(blob) for h, blob in blobs.items()}

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
        found = self.cached(p, hashes)  # before any text reaches the model's tokenizer
        from_cache = len(found)
        missing = [c for c in dict((c.hash, c) for c in items).values() if c.hash not in found]
        carried = self._carry_over(p, missing)
        found.update(carried)
        from_cache += len(carried)
        missing = [c for c in missing if c.hash not in carried]
        total = len(missing)
        if on_progress and total:
            on_progress(0, total, "")
        done = 0
        # Closed when this loop ends early (a failed write, a lost lease): no batch starts after.
        with contextlib.closing(self._batches(p, missing)) as batches:
            for part, vecs in batches:
                with self.db.transaction() as conn:
                    blobs = [(c.hash, to_blob(v)) for c, v in zip(part, vecs, strict=True)]
                    self.repo.put(conn, _key(p), blobs)
                    if on_batch is not None:
                        on_batch(conn)
                for c, v in zip(part, vecs, strict=True):
                    found[c.hash] = np.asarray(v, dtype=np.float32)
                done += len(part)
                if on_progress:
                    on_progress(done, total, "")
        return found, from_cache, total

    def _carry_over(
        self, p: EmbeddingProvider, missing: Sequence[Embeddable]
    ) -> dict[str, np.ndarray]:
        """Vectors of texts an earlier version embedded in another form (with a list marker, a
        turn stamp: chunking.passage_text), cached again under the new form's hash."""
        legacy = {c.legacy: c.hash for c in missing if c.legacy}
        if not legacy:
            return {}
        old = self.cached(p, list(legacy))
        carried = {legacy[h]: v for h, v in old.items()}
        if carried:
            with self.db.transaction() as conn:
                self.repo.put(conn, _key(p), [(h, to_blob(v)) for h, v in carried.items()])
        return carried

    def _batches(
        self, p: EmbeddingProvider, missing: list[Embeddable]
    ) -> Generator[tuple[list[Embeddable], np.ndarray], None, None]:
        """(items, their vectors) batch by batch: as the provider finishes them when it can
        hand them back so (the local models, in parallel), else `batch_size` at a time."""
        try:
            if isinstance(p, BatchEmbedder):
                batches = p.embed_document_batches([c.text for c in missing])
                try:
                    for indices, vecs in batches:
                        yield [missing[i] for i in indices], vecs
                finally:
                    close = getattr(batches, "close", None)
                    if close is not None:
                        close()  # stop the provider's workers too
                return
            for i in range(0, len(missing), self.batch_size):
                part = missing[i : i + self.batch_size]
                yield part, p.embed_documents([c.text for c in part])
        except EmbeddingError:
            raise
        except Exception as exc:  # a model library failing mid-run
            raise IndexingError(f"The embedding model failed: {exc}") from exc

    def prime(self, p: EmbeddingProvider, texts: Sequence[str], vectors: np.ndarray) -> None:
        """Store vectors for texts without running the model (benchmarks, imports)."""
        blobs = [(hash_text(t), to_blob(v)) for t, v in zip(texts, vectors, strict=True)]
        with self.db.transaction() as conn:
            self.repo.put(conn, _key(p), blobs)


def _key(p: EmbeddingProvider) -> ModelKey:
    return ModelKey(p.provider, p.model, p.dimensions)
