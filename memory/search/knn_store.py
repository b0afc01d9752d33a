"""`KnnStore`: the `VectorStore` of a database that keeps its own nearest-neighbour index beside
the vectors — PostgreSQL + pgvector (HNSW with cosine distance, its candidates re-ranked
exactly from the stored float32 vectors: memory/store/postgres/vectors.py).

Nothing is held in process: every search asks the database (no 150 MB matrix per process, which
is what lets several gateway processes share one index), writes go through the backend's
`VectorTables` inside the caller's transaction, and the database updates its index in the same
transaction, so a search sees every write committed before it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from memory.store.backends import backend_of, implementation
from memory.store.vector_knn import KnnIndex
from memory.store.vector_tables import VectorTables


class KnnStore:
    """`VectorStore` over a database's own KNN index (`KnnIndex`) and vector rows."""

    def __init__(self, db: Any, dimensions: int) -> None:
        backend = backend_of(db)
        tables = implementation("VectorTables", backend)
        knn = implementation("KnnIndex", backend)
        if tables is None or knn is None:
            raise LookupError(f"No {backend} vector store")
        self.db = db
        self.name = f"{backend}-knn"
        self._tables: VectorTables = tables()
        self._knn: KnnIndex = knn(dimensions)

    def add(self, conn: Any, rows: list[tuple[int, int, str, np.ndarray]]) -> None:
        self._tables.add(conn, rows)

    def delete(self, conn: Any, generation: int, chunk_ids: list[int]) -> None:
        self._tables.delete(conn, generation, chunk_ids)

    def drop_generation(self, conn: Any, generation: int) -> None:
        self._tables.drop_generation(conn, generation)
        self._knn.forget(generation)

    def search(
        self, query: np.ndarray, k: int, generation: int, scopes: list[str]
    ) -> list[tuple[int, float]]:
        with self.db.transaction() as conn:
            return self._knn.knn(conn, query, k, generation, scopes)

    def reader(self) -> Any:
        return self.db  # a pool: every call borrows its own connection

    def preload(self, generation: int) -> None:
        """Nothing to read ahead: the database holds the index."""

    def catch_up(self, generation: int) -> None:
        with self.db.transaction() as conn:
            if not self._knn.in_step(conn, generation):
                self._knn.catch_up(conn, generation)

    def close(self) -> None:
        """The pool is the index's to close."""
