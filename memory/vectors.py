"""Vector stores over the chunks of one index generation: sqlite-vec, or exact numpy search."""

from __future__ import annotations

import contextlib
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
        """Insert (chunk_id, generation, scope, centroid) rows inside the caller's transaction."""

    def delete(self, conn: Any, generation: int, chunk_ids: list[int]) -> None: ...

    def drop_generation(self, conn: Any, generation: int) -> None: ...

    def search(
        self, query: np.ndarray, k: int, generation: int, scopes: list[str]
    ) -> list[tuple[int, float]]:
        """Up to k (chunk_id, cosine similarity of its centroid) pairs, best first."""


def vec_table(generation: int) -> str:
    return f"memory_vec_g{int(generation)}"


def drop_vec_table(conn: Any, generation: int) -> None:
    """Drop a generation's vec0 table; without the extension loaded it cannot be dropped and
    stays until a run that can load sqlite-vec (searches never read a retired generation)."""
    with contextlib.suppress(Exception):
        conn.execute(f"DROP TABLE IF EXISTS {vec_table(generation)}")


class SqliteVecStore:
    """One vec0 virtual table per index generation (dropped whole when the generation is
    retired); `scope` is a metadata column so KNN filters conversations inside the index."""

    name = "sqlite-vec"

    def __init__(self, db: Database, dimensions: int) -> None:
        self.db = db
        self.dimensions = dimensions
        self._ready: set[int] = set()

    def _ensure(self, conn: Any, generation: int) -> str:
        table = vec_table(generation)
        if generation not in self._ready:
            conn.execute(
                f"CREATE VIRTUAL TABLE IF NOT EXISTS {table} USING vec0("
                f"scope text, embedding float[{self.dimensions}] distance_metric=cosine)"
            )
            self._ready.add(generation)
        return table

    def add(self, conn: Any, rows: list[tuple[int, int, str, np.ndarray]]) -> None:
        for gen in sorted({r[1] for r in rows}):
            table = self._ensure(conn, gen)
            conn.executemany(
                f"INSERT INTO {table}(rowid, scope, embedding) VALUES (?, ?, ?)",
                [(uid, scope, to_blob(vec)) for uid, g, scope, vec in rows if g == gen],
            )

    def delete(self, conn: Any, generation: int, chunk_ids: list[int]) -> None:
        table = vec_table(generation)
        if conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (table,)).fetchone():
            conn.executemany(f"DELETE FROM {table} WHERE rowid = ?", [(i,) for i in chunk_ids])

    def drop_generation(self, conn: Any, generation: int) -> None:
        drop_vec_table(conn, generation)
        self._ready.discard(generation)

    def count(self, generation: int) -> int:
        table = vec_table(generation)
        if not self.db.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (table,)):
            return 0
        return int(self.db.execute(f"SELECT count(*) FROM {table}")[0][0])

    def search(
        self, query: np.ndarray, k: int, generation: int, scopes: list[str]
    ) -> list[tuple[int, float]]:
        table = vec_table(generation)
        if not self.db.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (table,)):
            return []
        marks = ",".join("?" for _ in scopes)
        rows = self.db.execute(
            f"SELECT rowid, distance FROM {table} WHERE embedding MATCH ? AND k = ? "
            f"AND scope IN ({marks}) ORDER BY distance",
            (to_blob(query), min(k, 4096), *scopes),
        )
        return [(int(uid), 1.0 - float(dist)) for uid, dist in rows]


class NumpyStore:
    """Exact cosine search in process; the matrix is loaded once per index version."""

    name = "numpy"

    def __init__(self, db: Database) -> None:
        self.db = db
        self._key: tuple[int, str] | None = None
        self._ids = np.zeros(0, dtype=np.int64)
        self._scopes = np.zeros(0, dtype=object)
        self._matrix = np.zeros((0, 1), dtype=np.float32)

    def add(self, conn: Any, rows: list[tuple[int, int, str, np.ndarray]]) -> None:
        self._key = None  # vectors live in embedding_cache; just invalidate

    def delete(self, conn: Any, generation: int, chunk_ids: list[int]) -> None:
        self._key = None

    def drop_generation(self, conn: Any, generation: int) -> None:
        self._key = None

    def _load(self, generation: int) -> None:
        version = self.db.execute("SELECT value FROM meta WHERE key = 'index_version'")
        key = (generation, version[0][0] if version else "0")
        if key == self._key:
            return
        rows = self.db.execute(
            "SELECT id, scope, centroid FROM memory_chunks "
            "WHERE generation = ? AND centroid IS NOT NULL ORDER BY id",
            (generation,),
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
