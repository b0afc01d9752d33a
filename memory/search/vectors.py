"""Vector stores over the chunks of one index generation: numpy, or sqlite-vec
(memory/search/sqlite_vec.py).

Both find a chunk by its centroid (the mean of its passages' vectors) and search exactly, so the
two return the same chunks for the same index. Both search the same way: one float32 matrix of
the generation's centroids held in process (1.5 kB a chunk: 150 MB at 100k) and multiplied by
the query (~10 ms at 100k; sqlite-vec's own vec0 KNN, a brute-force scan, takes 60-160 ms and is
kept as `SqliteVecStore.search_vec0`). The matrix is read in full once, then kept current through
the change log (memory/search/matrix_cache.py); what is stored, and its SQL, is in
memory/store/vector_tables.py (rows and change log), vector_pack.py (the pack, which holds every
vector not written since it) and vector_knn.py (sqlite-vec's vec0 table, which answers
sqlite-vec's searches until the matrix is read, and only while in step with the stored vectors).

Measured at 100k chunks and not adopted: a float16 matrix (numpy has no float16 BLAS: 125 ms a
query), sqlite-vec's `bit[384]` KNN (~150 ms with k = 1,000), and a 1-bit code shortlist with
exact re-scoring (4 ms, but on e5's anisotropic vectors the best 2 % by Hamming distance held
only 46 % of the true top 10; codes of mean-centred vectors 88 %).
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from memory.search.matrix_cache import MatrixCache
from memory.store.db import Database
from memory.store.vector_readers import SharedReader
from memory.store.vector_storage import VectorStorage, sqlite_vector_storage


class VectorStore(Protocol):
    """Where a generation's chunk centroids are kept and searched.

    Writes (`add`, `delete`, `drop_generation`) run inside the caller's transaction. `search`
    is exact (every stored centroid of the generation is considered), returns only chunks of
    the given scopes, best first with ties broken by the lower chunk id, and sees every write
    committed before it began.
    """

    name: str

    def add(self, conn: Any, rows: list[tuple[int, int, str, np.ndarray]]) -> None:
        """Insert (chunk_id, generation, scope, centroid) rows inside the caller's transaction."""

    def delete(self, conn: Any, generation: int, chunk_ids: list[int]) -> None: ...

    def drop_generation(self, conn: Any, generation: int) -> None: ...

    def search(
        self, query: np.ndarray, k: int, generation: int, scopes: list[str]
    ) -> list[tuple[int, float]]:
        """Up to k (chunk_id, cosine similarity of its centroid) pairs, best first (ties: lower
        chunk id first)."""

    def reader(self) -> Database:
        """A read connection of its own, so vector reads run beside the keyword query."""

    def preload(self, generation: int) -> None:
        """Start reading what searching `generation` needs in the background (may do nothing)."""

    def catch_up(self, generation: int) -> None:
        """Bring what the store derives from the stored vectors in step with them (sqlite-vec's
        vec0 table after another process's numpy-only writes); may do nothing."""

    def close(self) -> None:
        """Close the read connection (the caller closes the main one)."""


class NumpyStore:
    """Exact cosine search in process over the generation's centroid matrix (see
    memory/search/matrix_cache.py), on the store's own connection."""

    name = "numpy"

    def __init__(self, db: Database, storage: VectorStorage | None = None) -> None:
        self.db = db
        storage = storage or sqlite_vector_storage()
        self._tables = storage.tables
        self._reader = SharedReader(db)
        self._cache = MatrixCache(self._reader, storage)

    def add(self, conn: Any, rows: list[tuple[int, int, str, np.ndarray]]) -> None:
        self._tables.add(conn, rows)

    def delete(self, conn: Any, generation: int, chunk_ids: list[int]) -> None:
        self._tables.delete(conn, generation, chunk_ids)

    def drop_generation(self, conn: Any, generation: int) -> None:
        self._tables.drop_generation(conn, generation)
        self._cache.forget()

    def reader(self) -> Database:
        return self._reader.get()

    def close(self) -> None:
        self._reader.close()

    def search(
        self, query: np.ndarray, k: int, generation: int, scopes: list[str]
    ) -> list[tuple[int, float]]:
        return self._cache.search(query, k, generation, scopes)

    def preload(self, generation: int) -> None:
        """Read the generation's matrix in the background now; a search meanwhile waits for
        that read instead of starting its own."""
        self._cache.preload(generation)

    def catch_up(self, generation: int) -> None:
        """Nothing derived to keep in step (the vec0 table, if any, is sqlite-vec's to catch
        up: it sees from the change log that this store wrote past it)."""

    def wait_loaded(self, timeout: float) -> bool:
        return self._cache.wait_loaded(timeout)
