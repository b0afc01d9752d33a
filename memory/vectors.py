"""Vector stores over the chunks of one index generation: sqlite-vec, or exact numpy search."""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from memory.db import Database


def to_blob(vector: np.ndarray) -> bytes:
    return np.asarray(vector, dtype="<f4").tobytes()


def from_blob(blob: bytes) -> np.ndarray:
    return np.frombuffer(blob, dtype="<f4")


class VectorStore(Protocol):
    name: str

    def add(self, conn: Any, rows: list[tuple[int, int, str, np.ndarray]]) -> None:
        """Insert (chunk_id, generation, scope, vector) rows inside the caller's transaction."""

    def delete(self, conn: Any, chunk_ids: list[int]) -> None: ...

    def drop_generation(self, conn: Any, generation: int) -> None: ...

    def search(
        self, query: np.ndarray, k: int, generation: int, scopes: list[str]
    ) -> list[tuple[int, float]]:
        """Up to k (chunk_id, cosine similarity) pairs, best first."""


class SqliteVecStore:
    """A vec0 virtual table per dimension; `generation` is a partition key, `scope` metadata."""

    name = "sqlite-vec"

    def __init__(self, db: Database, dimensions: int) -> None:
        self.db = db
        self.dimensions = dimensions
        self.table = f"memory_vec_{dimensions}"
        with db.lock:
            db.conn.execute(
                f"CREATE VIRTUAL TABLE IF NOT EXISTS {self.table} USING vec0("
                f"generation integer partition key, scope text, "
                f"embedding float[{dimensions}] distance_metric=cosine)"
            )

    def add(self, conn: Any, rows: list[tuple[int, int, str, np.ndarray]]) -> None:
        conn.executemany(
            f"INSERT INTO {self.table}(rowid, generation, scope, embedding) VALUES (?, ?, ?, ?)",
            [(cid, gen, scope, to_blob(vec)) for cid, gen, scope, vec in rows],
        )

    def delete(self, conn: Any, chunk_ids: list[int]) -> None:
        conn.executemany(f"DELETE FROM {self.table} WHERE rowid = ?", [(i,) for i in chunk_ids])

    def drop_generation(self, conn: Any, generation: int) -> None:
        conn.execute(f"DELETE FROM {self.table} WHERE generation = ?", (generation,))

    def count(self, generation: int) -> int:
        rows = self.db.execute(
            f"SELECT count(*) FROM {self.table} WHERE generation = ?", (generation,)
        )
        return int(rows[0][0])

    def search(
        self, query: np.ndarray, k: int, generation: int, scopes: list[str]
    ) -> list[tuple[int, float]]:
        marks = ",".join("?" for _ in scopes)
        rows = self.db.execute(
            f"SELECT rowid, distance FROM {self.table} WHERE embedding MATCH ? AND k = ? "
            f"AND generation = ? AND scope IN ({marks}) ORDER BY distance",
            (to_blob(query), min(k, 4096), generation, *scopes),
        )
        return [(int(cid), 1.0 - float(dist)) for cid, dist in rows]


class NumpyStore:
    """Exact cosine search in process; the matrix is loaded once per index version."""

    name = "numpy"

    def __init__(self, db: Database, provider: str, model: str) -> None:
        self.db = db
        self.provider = provider
        self.model = model
        self._key: tuple[int, str] | None = None
        self._ids = np.zeros(0, dtype=np.int64)
        self._scopes = np.zeros(0, dtype=object)
        self._matrix = np.zeros((0, 1), dtype=np.float32)

    def add(self, conn: Any, rows: list[tuple[int, int, str, np.ndarray]]) -> None:
        self._key = None  # vectors live in embedding_cache; just invalidate

    def delete(self, conn: Any, chunk_ids: list[int]) -> None:
        self._key = None

    def drop_generation(self, conn: Any, generation: int) -> None:
        self._key = None

    def _load(self, generation: int) -> None:
        version = self.db.execute("SELECT value FROM meta WHERE key = 'index_version'")
        key = (generation, version[0][0] if version else "0")
        if key == self._key:
            return
        rows = self.db.execute(
            "SELECT c.id, c.scope, e.vector FROM memory_chunks c JOIN embedding_cache e "
            "ON e.provider = ? AND e.model = ? AND e.chunk_hash = c.hash "
            "WHERE c.generation = ? ORDER BY c.id",
            (self.provider, self.model, generation),
        )
        self._ids = np.array([r[0] for r in rows], dtype=np.int64)
        self._scopes = np.array([r[1] for r in rows], dtype=object)
        self._matrix = (
            np.vstack([from_blob(r[2]) for r in rows])
            if rows
            else np.zeros((0, 1), dtype=np.float32)
        )
        self._key = key

    def search(
        self, query: np.ndarray, k: int, generation: int, scopes: list[str]
    ) -> list[tuple[int, float]]:
        self._load(generation)
        if not len(self._ids):
            return []
        sims = self._matrix @ np.asarray(query, dtype=np.float32)
        # Always filter: conversation transcripts carry their own scope, and no search may
        # see another conversation's (not even one asking only for the shared scope '').
        sims = np.where(np.isin(self._scopes, scopes), sims, -np.inf)
        k = min(k, len(sims))
        top = np.argpartition(-sims, k - 1)[:k]
        top = top[np.argsort(-sims[top])]
        return [(int(self._ids[i]), float(sims[i])) for i in top if np.isfinite(sims[i])]
