"""Vector stores over the chunks of one index generation: sqlite-vec, or numpy.

Both find a chunk by its centroid (the mean of its passages' vectors) and search exactly, so the
two return the same chunks for the same index. sqlite-vec keeps nothing in process (brute-force
KNN over its vec0 table); numpy holds one float32 matrix of the generation's centroids (1.5 kB a
chunk: 150 MB at 100k) and multiplies by it (~10 ms at 100k). That matrix is read from a compact
table of its own, `memory_matrix_g<N>` (≈0.4 s at 100k chunks; reading the centroids out of
`memory_chunks`, whose rows hold the text too, takes 2 s).

Measured at 100k chunks and not adopted: a float16 matrix (numpy has no float16 BLAS: 125 ms a
query), sqlite-vec's `bit[384]` KNN (~150 ms with k = 1,000), and a 1-bit code shortlist with
exact re-scoring (4 ms, but on e5's anisotropic vectors the best 2 % by Hamming distance held
only 46 % of the true top 10; codes of mean-centred vectors 88 %).
"""

from __future__ import annotations

import contextlib
import importlib
import threading
from dataclasses import dataclass
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
        """Up to k (chunk_id, cosine similarity of its centroid) pairs, best first (ties: lower
        chunk id first)."""

    def reader(self) -> Database:
        """A read connection of its own, so vector reads run beside the keyword query."""

    def close(self) -> None:
        """Close the read connection (the caller closes the main one)."""


def vec_table(generation: int) -> str:
    return f"memory_vec_g{int(generation)}"


def matrix_table(generation: int) -> str:
    return f"memory_matrix_g{int(generation)}"


def drop_vec_table(conn: Any, generation: int) -> None:
    """Drop a generation's vector tables. Without the extension loaded the vec0 table cannot be
    dropped and stays until a run that can load sqlite-vec (searches never read a retired
    generation)."""
    conn.execute(f"DROP TABLE IF EXISTS {matrix_table(generation)}")
    with contextlib.suppress(Exception):
        conn.execute(f"DROP TABLE IF EXISTS {vec_table(generation)}")


def _add_matrix_rows(conn: Any, rows: list[tuple[int, int, str, np.ndarray]]) -> None:
    # Both backends write it, so an index built with one can be searched with the other.
    for gen in sorted({r[1] for r in rows}):
        table = matrix_table(gen)
        if not conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (table,)).fetchone():
            conn.execute(
                f"CREATE TABLE {table} "
                "(chunk_id INTEGER PRIMARY KEY, scope TEXT NOT NULL, vector BLOB NOT NULL)"
            )
            # A generation indexed before this table existed: copy its vectors once, so the
            # table always holds every chunk of the generation.
            conn.execute(
                f"INSERT INTO {table}(chunk_id, scope, vector) SELECT id, scope, centroid "
                "FROM memory_chunks WHERE generation = ? AND centroid IS NOT NULL",
                (gen,),
            )
        conn.executemany(
            f"INSERT OR REPLACE INTO {table}(chunk_id, scope, vector) VALUES (?, ?, ?)",
            [(cid, scope, to_blob(vec)) for cid, g, scope, vec in rows if g == gen],
        )


def _delete_matrix_rows(conn: Any, generation: int, chunk_ids: list[int]) -> None:
    table = matrix_table(generation)
    if conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (table,)).fetchone():
        conn.executemany(f"DELETE FROM {table} WHERE chunk_id = ?", [(i,) for i in chunk_ids])


def open_reader(db: Database) -> Database:
    """A second, read-only connection to `db`'s file through the same driver (with sqlite-vec
    when `db` has it). SQLite releases Python's GIL while it works, so a search's vector reads
    on this connection run on the other core while the keyword query runs on the main one."""
    driver = importlib.import_module(type(db.conn).__module__)
    conn = driver.connect(str(db.path), isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA busy_timeout = 10000")
    conn.execute("PRAGMA query_only = ON")
    vec = None
    if db.vec_version:
        with contextlib.suppress(Exception):
            import sqlite_vec

            conn.enable_load_extension(True)
            sqlite_vec.load(conn)
            conn.enable_load_extension(False)
            vec = db.vec_version
    return Database(db.path, conn, db.driver, db.sqlite_version, vec)


class _Reader:
    """One read connection, opened on first use and shared by a store's searches."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._conn: Database | None = None
        self._lock = threading.Lock()

    def get(self) -> Database:
        with self._lock:
            if self._conn is None:
                self._conn = open_reader(self.db)
            return self._conn

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


def _best_first(pairs: list[tuple[int, float]]) -> list[tuple[int, float]]:
    return sorted(pairs, key=lambda p: (-p[1], p[0]))


class SqliteVecStore:
    """One vec0 virtual table per index generation (dropped whole when the generation is
    retired); `scope` is a metadata column so KNN filters conversations inside the index."""

    name = "sqlite-vec"

    def __init__(self, db: Database, dimensions: int) -> None:
        self.db = db
        self.dimensions = dimensions
        self._ready: set[int] = set()
        self._reader = _Reader(db)

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
        _add_matrix_rows(conn, rows)

    def delete(self, conn: Any, generation: int, chunk_ids: list[int]) -> None:
        table = vec_table(generation)
        if conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (table,)).fetchone():
            conn.executemany(f"DELETE FROM {table} WHERE rowid = ?", [(i,) for i in chunk_ids])
        _delete_matrix_rows(conn, generation, chunk_ids)

    def drop_generation(self, conn: Any, generation: int) -> None:
        drop_vec_table(conn, generation)
        self._ready.discard(generation)

    def reader(self) -> Database:
        return self._reader.get()

    def close(self) -> None:
        self._reader.close()

    def count(self, generation: int) -> int:
        table = vec_table(generation)
        if not self.db.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (table,)):
            return 0
        return int(self.db.execute(f"SELECT count(*) FROM {table}")[0][0])

    def search(
        self, query: np.ndarray, k: int, generation: int, scopes: list[str]
    ) -> list[tuple[int, float]]:
        db = self.reader() if self.reader().vec_version else self.db
        table = vec_table(generation)
        if not db.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (table,)):
            return []
        marks = ",".join("?" for _ in scopes)
        rows = db.execute(
            f"SELECT rowid, distance FROM {table} WHERE embedding MATCH ? AND k = ? "
            f"AND scope IN ({marks}) ORDER BY distance",
            (to_blob(query), min(k, 4096), *scopes),
        )
        return _best_first([(int(uid), 1.0 - float(dist)) for uid, dist in rows])


@dataclass(frozen=True)
class _Matrix:
    key: tuple[int, str]  # (generation, index_version) it was read at
    ids: np.ndarray  # int64 chunk ids, ascending
    vectors: np.ndarray  # float32 (n, dimensions)
    scope_of: np.ndarray  # int32: index into scope_ids
    scope_ids: dict[str, int]


class NumpyStore:
    """Exact cosine search in process over the generation's centroid matrix, read once per
    index version (any write bumps it) on the store's own connection."""

    name = "numpy"

    def __init__(self, db: Database) -> None:
        self.db = db
        self._reader = _Reader(db)
        self._matrix: _Matrix | None = None

    def add(self, conn: Any, rows: list[tuple[int, int, str, np.ndarray]]) -> None:
        _add_matrix_rows(conn, rows)
        self._matrix = None

    def delete(self, conn: Any, generation: int, chunk_ids: list[int]) -> None:
        _delete_matrix_rows(conn, generation, chunk_ids)
        self._matrix = None

    def drop_generation(self, conn: Any, generation: int) -> None:
        drop_vec_table(conn, generation)
        self._matrix = None

    def reader(self) -> Database:
        return self._reader.get()

    def close(self) -> None:
        self._reader.close()

    def _load(self, generation: int) -> _Matrix:
        db = self.reader()
        with db.lock:  # one search reads the matrix, the others wait for it
            version = db.execute("SELECT value FROM meta WHERE key = 'index_version'")
            key = (generation, version[0][0] if version else "0")
            current = self._matrix
            if current is None or current.key != key:
                current = self._matrix = _read_matrix(db, generation, key)
            return current

    def search(
        self, query: np.ndarray, k: int, generation: int, scopes: list[str]
    ) -> list[tuple[int, float]]:
        m = self._load(generation)
        if not len(m.ids):
            return []
        sims = m.vectors @ np.asarray(query, dtype=np.float32)
        # Always filter: conversation transcripts carry their own scope, and no search may
        # see another conversation's (not even one asking only for the shared scope '').
        wanted = [m.scope_ids[s] for s in scopes if s in m.scope_ids]
        sims = np.where(np.isin(m.scope_of, wanted), sims, -np.inf)
        k = min(k, len(sims))
        top = np.argpartition(-sims, k - 1)[:k]
        return _best_first(
            [(int(m.ids[i]), float(sims[i])) for i in top.tolist() if np.isfinite(sims[i])]
        )


def _read_matrix(db: Database, generation: int, key: tuple[int, str]) -> _Matrix:
    """Stream the generation's centroids into one preallocated float32 matrix (no second copy:
    the peak is the matrix itself)."""
    table = matrix_table(generation)
    params: tuple[Any, ...] = ()
    if db.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (table,)):
        count_sql = f"SELECT count(*) FROM {table}"
        sql = f"SELECT chunk_id, scope, vector FROM {table} ORDER BY chunk_id"
    else:  # an index written before the matrix table existed: slower, same result
        where = "FROM memory_chunks WHERE generation = ? AND centroid IS NOT NULL"
        count_sql = f"SELECT count(*) {where}"
        sql, params = f"SELECT id, scope, centroid {where} ORDER BY id", (generation,)
    with db.lock:
        n = int(db.conn.execute(count_sql, params).fetchone()[0])
        cursor = db.conn.execute(sql, params)
        ids = np.zeros(n, dtype=np.int64)
        scope_of = np.zeros(n, dtype=np.int32)
        scope_ids: dict[str, int] = {}
        vectors: np.ndarray | None = None
        i = 0
        while i < n:
            rows = cursor.fetchmany(min(4096, n - i))  # rows added since the count wait
            if not rows:
                break
            block = from_blob(b"".join(r[2] for r in rows))
            if vectors is None:
                vectors = np.empty((n, len(block) // len(rows)), dtype=np.float32)
            vectors[i : i + len(rows)] = block.reshape(len(rows), -1)
            ids[i : i + len(rows)] = [r[0] for r in rows]
            scope_of[i : i + len(rows)] = [scope_ids.setdefault(r[1], len(scope_ids)) for r in rows]
            i += len(rows)
    matrix = vectors[:i] if vectors is not None else np.zeros((0, 1), dtype=np.float32)
    return _Matrix(key, ids[:i], matrix, scope_of[:i], scope_ids)
