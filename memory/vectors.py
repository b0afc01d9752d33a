"""Vector stores over the chunks of one index generation: sqlite-vec, or numpy.

Both find a chunk by its centroid (the mean of its passages' vectors). Small indexes are searched
exactly. Past `SHORTLIST` chunks both backends take the same two steps, so they return the same
chunks: a coarse pass over 1-bit codes of every centroid (the sign of each dimension, 48 bytes
for 384 dimensions, held in process: 4.8 MB at 100k chunks) picks the `SHORTLIST` nearest by
Hamming distance, and their stored float centroids are re-scored exactly by cosine. Measured at
100k chunks: Hamming over all codes 4 ms; sqlite-vec's brute-force float KNN 60-160 ms and its
`bit[]` KNN with k = 1000 ~150 ms; a float16 matrix 125 ms per query (numpy has no float16 BLAS).
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
        """Up to k (chunk_id, cosine similarity of its centroid) pairs, best first."""

    def reader(self) -> Database:
        """A read connection of its own, so vector reads run beside the keyword query."""


# Above this many chunks a search re-scores only this many, chosen by their 1-bit codes.
SHORTLIST = 2000


def vec_table(generation: int) -> str:
    return f"memory_vec_g{int(generation)}"


def codes_table(generation: int) -> str:
    return f"memory_codes_g{int(generation)}"


def binary_codes(vectors: np.ndarray) -> np.ndarray:
    """1 bit per dimension (its sign), packed: shape (n, ceil(dimensions / 8)), uint8."""
    return np.packbits(np.atleast_2d(vectors) > 0, axis=1)


def drop_vec_table(conn: Any, generation: int) -> None:
    """Drop a generation's vector tables. Without the extension loaded the vec0 table cannot be
    dropped and stays until a run that can load sqlite-vec (searches never read a retired
    generation)."""
    conn.execute(f"DROP TABLE IF EXISTS {codes_table(generation)}")
    with contextlib.suppress(Exception):
        conn.execute(f"DROP TABLE IF EXISTS {vec_table(generation)}")


def _add_codes(conn: Any, rows: list[tuple[int, int, str, np.ndarray]]) -> None:
    for gen in sorted({r[1] for r in rows}):
        part = [r for r in rows if r[1] == gen]
        table = codes_table(gen)
        conn.execute(
            f"CREATE TABLE IF NOT EXISTS {table} "
            "(chunk_id INTEGER PRIMARY KEY, scope TEXT NOT NULL, code BLOB NOT NULL)"
        )
        codes = binary_codes(np.vstack([r[3] for r in part]))
        conn.executemany(
            f"INSERT OR REPLACE INTO {table}(chunk_id, scope, code) VALUES (?, ?, ?)",
            [
                (cid, scope, code.tobytes())
                for (cid, _, scope, _), code in zip(part, codes, strict=True)
            ],
        )


def _delete_codes(conn: Any, generation: int, chunk_ids: list[int]) -> None:
    table = codes_table(generation)
    if conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (table,)).fetchone():
        conn.executemany(f"DELETE FROM {table} WHERE chunk_id = ?", [(i,) for i in chunk_ids])


def open_reader(db: Database) -> Database:
    """A second, read-only connection to `db`'s file through the same driver.

    SQLite releases Python's GIL while it works, so a search's vector reads on this connection
    run on the other core while the keyword query runs on the main one.
    """
    driver = importlib.import_module(type(db.conn).__module__)
    conn = driver.connect(str(db.path), isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA busy_timeout = 10000")
    conn.execute("PRAGMA query_only = ON")
    return Database(db.path, conn, db.driver, db.sqlite_version, None)


@dataclass(frozen=True)
class _Codes:
    key: tuple[int, str]
    ids: np.ndarray  # int64 chunk ids, ascending
    codes: np.ndarray  # (n, bytes) uint8
    scope_of: np.ndarray  # int32 index into scope_ids
    scope_ids: dict[str, int]


class CodeIndex:
    """The 1-bit codes of one generation's centroids, in process; reloaded when the index
    changes (`meta.index_version`). Shared by both backends so they shortlist the same chunks.
    """

    def __init__(self, db: Database) -> None:
        self.db = db
        self._reader: Database | None = None
        self._reader_lock = threading.Lock()
        self._codes: _Codes | None = None

    def invalidate(self) -> None:
        self._codes = None

    def reader(self) -> Database:
        """The store's own read connection (opened on first use, shared by its searches)."""
        with self._reader_lock:
            if self._reader is None:
                self._reader = open_reader(self.db)
            return self._reader

    def load(self, generation: int) -> _Codes:
        db = self.reader()
        with db.lock:  # one search loads, the others wait for its result
            version = db.execute("SELECT value FROM meta WHERE key = 'index_version'")
            key = (generation, version[0][0] if version else "0")
            current = self._codes
            if current is None or current.key != key:
                current = self._codes = _read_codes(db, generation, key)
            return current

    def shortlist(
        self, query: np.ndarray, k: int, generation: int, scopes: list[str]
    ) -> list[int] | None:
        """Up to k chunk ids of the scopes nearest the query by Hamming distance, or None when
        the scopes hold at most k chunks (search those exactly)."""
        c = self.load(generation)
        mask = np.isin(c.scope_of, [c.scope_ids[s] for s in scopes if s in c.scope_ids])
        if int(mask.sum()) <= k:
            return None
        distance = np.bitwise_count(np.bitwise_xor(c.codes, binary_codes(query)[0])).sum(
            axis=1, dtype=np.int64
        )
        # Ties go to the lower chunk id (ids are ascending), the same on every backend.
        order = np.where(mask, distance, 1 << 20) * len(c.ids) + np.arange(len(c.ids))
        top = np.argpartition(order, k - 1)[:k]
        top = top[np.argsort(order[top])]
        return [int(i) for i in c.ids[top]]


def _read_codes(db: Database, generation: int, key: tuple[int, str]) -> _Codes:
    table = codes_table(generation)
    if db.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (table,)):
        rows = db.execute(f"SELECT chunk_id, scope, code FROM {table} ORDER BY chunk_id")
        blob = b"".join(r[2] for r in rows)
    else:
        # An index written before codes were stored: derive them from the centroids once per
        # process (about 2 s at 100k chunks); the next rebuild stores them.
        rows = db.execute(
            "SELECT id, scope, centroid FROM memory_chunks "
            "WHERE generation = ? AND centroid IS NOT NULL ORDER BY id",
            (generation,),
        )
        blob = b"".join(binary_codes(from_blob(r[2])).tobytes() for r in rows)
    width = len(blob) // len(rows) if rows else 0
    scope_ids: dict[str, int] = {}
    return _Codes(
        key=key,
        ids=np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows)),
        codes=np.frombuffer(blob, dtype=np.uint8).reshape(len(rows), width),
        scope_of=np.fromiter(
            (scope_ids.setdefault(r[1], len(scope_ids)) for r in rows),
            dtype=np.int32,
            count=len(rows),
        ),
        scope_ids=scope_ids,
    )


def exact_scores(
    db: Database, query: np.ndarray, ids: list[int] | None, generation: int, scopes: list[str]
) -> list[tuple[int, float]]:
    """(chunk_id, cosine of its centroid) for `ids` (None: every chunk of the scopes), best first,
    ties by chunk id."""
    smarks = ",".join("?" for _ in scopes)
    rows: list[Any] = []
    if ids is None:
        rows = db.execute(
            "SELECT id, centroid FROM memory_chunks WHERE generation = ? AND centroid IS NOT NULL "
            f"AND scope IN ({smarks})",
            (generation, *scopes),
        )
    else:
        for i in range(0, len(ids), 500):
            part = ids[i : i + 500]
            marks = ",".join("?" for _ in part)
            rows += db.execute(
                f"SELECT id, centroid FROM memory_chunks WHERE id IN ({marks}) "
                f"AND +generation = ? AND centroid IS NOT NULL AND +scope IN ({smarks})",
                (*part, generation, *scopes),
            )
    if not rows:
        return []
    matrix = from_blob(b"".join(r[1] for r in rows)).reshape(len(rows), -1)
    sims = (matrix @ np.asarray(query, dtype=np.float32)).tolist()
    return sorted(((int(r[0]), s) for r, s in zip(rows, sims, strict=True)), key=_best_first)


def _best_first(pair: tuple[int, float]) -> tuple[float, int]:
    return (-pair[1], pair[0])


class SqliteVecStore:
    """One vec0 virtual table per index generation (dropped whole when the generation is
    retired); `scope` is a metadata column so KNN filters conversations inside the index."""

    name = "sqlite-vec"

    def __init__(self, db: Database, dimensions: int, codes: CodeIndex | None = None) -> None:
        self.db = db
        self.dimensions = dimensions
        self._ready: set[int] = set()
        self.codes = codes or CodeIndex(db)

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
        _add_codes(conn, rows)
        self.codes.invalidate()

    def delete(self, conn: Any, generation: int, chunk_ids: list[int]) -> None:
        table = vec_table(generation)
        if conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (table,)).fetchone():
            conn.executemany(f"DELETE FROM {table} WHERE rowid = ?", [(i,) for i in chunk_ids])
        _delete_codes(conn, generation, chunk_ids)
        self.codes.invalidate()

    def drop_generation(self, conn: Any, generation: int) -> None:
        drop_vec_table(conn, generation)
        self._ready.discard(generation)
        self.codes.invalidate()

    def reader(self) -> Database:
        return self.codes.reader()

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
        shortlist = self.codes.shortlist(query, max(SHORTLIST, k), generation, scopes)
        if shortlist is not None:
            return exact_scores(self.reader(), query, shortlist, generation, scopes)[:k]
        marks = ",".join("?" for _ in scopes)
        rows = self.db.execute(
            f"SELECT rowid, distance FROM {table} WHERE embedding MATCH ? AND k = ? "
            f"AND scope IN ({marks}) ORDER BY distance",
            (to_blob(query), min(k, 4096), *scopes),
        )
        return [(int(uid), 1.0 - float(dist)) for uid, dist in rows]


class NumpyStore:
    """Search in process: nothing but the 1-bit codes is held in memory; the centroids are
    read from the database for the shortlist (or, for a small index, all of them)."""

    name = "numpy"

    def __init__(self, db: Database, codes: CodeIndex | None = None) -> None:
        self.db = db
        self.codes = codes or CodeIndex(db)

    def add(self, conn: Any, rows: list[tuple[int, int, str, np.ndarray]]) -> None:
        _add_codes(conn, rows)
        self.codes.invalidate()

    def delete(self, conn: Any, generation: int, chunk_ids: list[int]) -> None:
        _delete_codes(conn, generation, chunk_ids)
        self.codes.invalidate()

    def drop_generation(self, conn: Any, generation: int) -> None:
        drop_vec_table(conn, generation)
        self.codes.invalidate()

    def search(
        self, query: np.ndarray, k: int, generation: int, scopes: list[str]
    ) -> list[tuple[int, float]]:
        # Always filter by scope: conversation transcripts carry their own, and no search may
        # see another conversation's (not even one asking only for the shared scope '').
        shortlist = self.codes.shortlist(query, max(SHORTLIST, k), generation, scopes)
        return exact_scores(self.reader(), query, shortlist, generation, scopes)[:k]

    def reader(self) -> Database:
        return self.codes.reader()
