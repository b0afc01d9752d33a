"""The sqlite-vec vector store: the numpy store's in-process matrix search, answered by
sqlite-vec's vec0 KNN (memory/store/vector_knn.py) until the matrix is read in the background.

It also keeps the vec0 table in step with the stored vectors: a process without sqlite-vec writes
only the matrix table, which leaves the vec0 table behind; sqlite-vec then searches the stored
vectors exactly until its next write or sync brings the vec0 table up to date.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from memory.search.matrix_cache import MatrixCache
from memory.store.db import Database
from memory.store.vector_knn import SqliteVecIndex
from memory.store.vector_readers import SharedReader
from memory.store.vector_storage import VectorStorage, sqlite_vector_storage


class SqliteVecStore:
    """One vec0 virtual table per index generation (dropped whole when the generation is
    retired) beside the matrix table both stores write."""

    name = "sqlite-vec"

    def __init__(self, db: Database, dimensions: int, storage: VectorStorage | None = None) -> None:
        self.db = db
        self.dimensions = dimensions
        storage = storage or sqlite_vector_storage()
        self._tables = storage.tables
        self._knn = SqliteVecIndex(dimensions)
        self._reader = SharedReader(db)
        self._cache = MatrixCache(self._reader, storage)

    def add(self, conn: Any, rows: list[tuple[int, int, str, np.ndarray]]) -> None:
        # The vec0 rows follow from the matrix table's, through the change log: whatever other
        # processes wrote meanwhile (a numpy-only one writes no vec0 rows) is caught up too.
        self._tables.add(conn, rows)
        for gen in sorted({r[1] for r in rows}):
            self._knn.catch_up(conn, gen)

    def delete(self, conn: Any, generation: int, chunk_ids: list[int]) -> None:
        self._knn.delete(conn, generation, chunk_ids)
        self._tables.delete(conn, generation, chunk_ids)
        self._knn.catch_up(conn, generation)

    def catch_up(self, generation: int) -> None:
        """Bring the vec0 table in step with the stored vectors, if it is not (after another
        process's numpy-only writes: a few rows; a full copy when it was never in step)."""
        with self.db.lock:
            if self._knn.in_step(self.db.conn, generation):
                return
        with self.db.transaction() as conn:
            if self._knn.live(conn, generation):
                self._knn.catch_up(conn, generation)

    def drop_generation(self, conn: Any, generation: int) -> None:
        self._tables.drop_generation(conn, generation)
        self._knn.forget(generation)
        self._cache.forget()

    def reader(self) -> Database:
        return self._reader.get()

    def close(self) -> None:
        self._reader.close()

    def count(self, generation: int) -> int:
        """Rows in the generation's vec0 table."""
        with self.db.lock:
            return self._knn.count(self.db.conn, generation)

    def search(
        self, query: np.ndarray, k: int, generation: int, scopes: list[str]
    ) -> list[tuple[int, float]]:
        # The vec0 KNN is a brute-force scan of its table (60-160 ms at 100k chunks); the same
        # exact search over the centroids held in memory takes ~10 ms. Until they are read
        # (in the background), vec0 answers.
        return self._cache.search(
            query,
            k,
            generation,
            scopes,
            fallback=lambda: self._search_vec0_in_step(query, k, generation, scopes),
        )

    def wait_loaded(self, timeout: float) -> bool:
        """Wait until the centroid matrix read in the background is ready (tests, benchmarks)."""
        return self._cache.wait_loaded(timeout)

    def preload(self, generation: int) -> None:
        """Read the generation's matrix in the background now (vec0 answers until it is in)."""
        self._cache.preload(generation)

    def search_vec0(
        self, query: np.ndarray, k: int, generation: int, scopes: list[str]
    ) -> list[tuple[int, float]]:
        """The same search through sqlite-vec's own KNN (nothing held in process), whether or
        not the vec0 table is in step with the stored vectors."""
        db = self.reader() if self.reader().vec_version else self.db
        with db.lock:
            return self._knn.knn(db.conn, query, k, generation, scopes)

    def _search_vec0_in_step(
        self, query: np.ndarray, k: int, generation: int, scopes: list[str]
    ) -> list[tuple[int, float]] | None:
        """`search_vec0`, or None when the vec0 table is not in step with the stored vectors
        (a numpy-only process wrote since): it could miss chunks or name reused ids."""
        db = self.reader() if self.reader().vec_version else self.db
        with db.lock:
            conn = db.conn
            with self._tables.snapshot(conn):  # the check and the rows it vouches for
                if not self._knn.in_step(conn, generation):
                    return None
                return self._knn.knn(conn, query, k, generation, scopes)
