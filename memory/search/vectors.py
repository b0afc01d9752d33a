"""Vector stores over the chunks of one index generation: sqlite-vec, or numpy.

Both find a chunk by its centroid (the mean of its passages' vectors) and search exactly, so the
two return the same chunks for the same index. Both search the same way: one float32 matrix of
the generation's centroids held in process (1.5 kB a chunk: 150 MB at 100k) and multiplied by
the query (~10 ms at 100k; sqlite-vec's own vec0 KNN, a brute-force scan, takes 60-160 ms and is
kept as `SqliteVecStore.search_vec0`). The matrix is read in full once, then kept current through a
change log, `memory_matrix_log_g<N>`: after a write a search re-reads only the chunks the log
names. The full read comes from a packed copy, `memory_matrix_pack_g<N>`
(memory/search/matrix_pack.py:
blocks of 1,024 rows, read on several connections at once; at 100k chunks 0.07-0.12 s from the
page cache, ≈0.8 s from disk) plus the changes since it, and otherwise from the table of one row a
chunk, `memory_matrix_g<N>` (the source of truth; 0.25-0.5 s, ≈3 s from disk). A sync rewrites the
pack at its end once 5 % of it changed (`refresh_pack`). The sqlite-vec backend also keeps a
vec0 table, which answers its searches until the matrix is read: it is derived from the matrix
table and used only while in step with it (`meta` key `vec0_seq_g<N>` = the change log's seq it
last caught up to). A process without sqlite-vec writes only the matrix table, which leaves the
vec0 table behind: sqlite-vec then searches the stored vectors exactly until its next write or
sync brings the vec0 table up to date.

Measured at 100k chunks and not adopted: a float16 matrix (numpy has no float16 BLAS: 125 ms a
query), sqlite-vec's `bit[384]` KNN (~150 ms with k = 1,000), and a 1-bit code shortlist with
exact re-scoring (4 ms, but on e5's anisotropic vectors the best 2 % by Hamming distance held
only 46 % of the true top 10; codes of mean-centred vectors 88 %).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from memory.search.matrix_pack import PackInfo, drop_pack, pack_info, read_pack, write_pack
from memory.store.db import Database

log = logging.getLogger(__name__)


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

    def preload(self, generation: int) -> None:
        """Start reading what searching `generation` needs in the background (may do nothing)."""

    def catch_up(self, generation: int) -> None:
        """Bring what the store derives from the stored vectors in step with them (sqlite-vec's
        vec0 table after another process's numpy-only writes); may do nothing."""

    def close(self) -> None:
        """Close the read connection (the caller closes the main one)."""


def vec_table(generation: int) -> str:
    return f"memory_vec_g{int(generation)}"


def matrix_table(generation: int) -> str:
    return f"memory_matrix_g{int(generation)}"


def log_table(generation: int) -> str:
    return f"memory_matrix_log_g{int(generation)}"


def vec0_seq_key(generation: int) -> str:
    return f"vec0_seq_g{int(generation)}"


def drop_vec_table(conn: Any, generation: int) -> None:
    """Drop a generation's vector tables. Without the extension loaded the vec0 table cannot be
    dropped and stays until a run that can load sqlite-vec (searches never read a retired
    generation; a generation that gets its id again starts with its vec0 table out of step, so
    sqlite-vec empties it before use)."""
    conn.execute("DELETE FROM meta WHERE key = ?", (vec0_seq_key(generation),))
    conn.execute(f"DROP TABLE IF EXISTS {matrix_table(generation)}")
    conn.execute(f"DROP TABLE IF EXISTS {log_table(generation)}")
    drop_pack(conn, generation)
    with contextlib.suppress(Exception):
        conn.execute(f"DROP TABLE IF EXISTS {vec_table(generation)}")


LOG_KEEP = 100_000  # change-log rows kept per generation (≈ 2 MB)


def _log_changes(conn: Any, generation: int, chunk_ids: list[int]) -> None:
    """Record which chunks' vectors changed, so a search process holding the matrix in memory
    re-reads only those rows after a write (not 150 MB at 100k chunks)."""
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {log_table(generation)} "
        "(seq INTEGER PRIMARY KEY AUTOINCREMENT, chunk_id INTEGER NOT NULL)"
    )
    conn.executemany(
        f"INSERT INTO {log_table(generation)}(chunk_id) VALUES (?)", [(i,) for i in chunk_ids]
    )
    # Keep the log bounded: a reader further behind than this reads the whole matrix again.
    conn.execute(
        f"DELETE FROM {log_table(generation)} WHERE seq <= "
        f"(SELECT max(seq) FROM {log_table(generation)}) - ?",
        (LOG_KEEP,),
    )


def _add_matrix_rows(conn: Any, rows: list[tuple[int, int, str, np.ndarray]]) -> None:
    # Both backends write it, so an index built with one can be searched with the other.
    for gen in sorted({r[1] for r in rows}):
        _log_changes(conn, gen, [r[0] for r in rows if r[1] == gen])
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
        _log_changes(conn, generation, chunk_ids)


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


def _plain_reader(db: Database) -> Any:
    """A bare read-only connection to `db`'s file (no extension: it reads tables only)."""
    driver = importlib.import_module(type(db.conn).__module__)
    conn = driver.connect(str(db.path), isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA busy_timeout = 10000")
    conn.execute("PRAGMA query_only = ON")
    return conn


@functools.cache
def limit_blas_threads() -> None:
    """One BLAS thread for this process (once). numpy's OpenBLAS otherwise starts a thread per
    core for the 100k × 384 product of every search, and those threads spin while waiting: on
    2 cores they fight SQLite's keyword search and the query's embedding for the other core.
    Measured at 100k chunks, quiet machine: steady p50 43 → 26 ms, p95 75 → 55 ms (the product
    itself is memory-bound and takes a few milliseconds on one thread)."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1, user_api="blas")  # process-wide, until changed again


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
        self._cache = _MatrixCache(self._reader)

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
        # The vec0 rows follow from the matrix table's, through the change log: whatever other
        # processes wrote meanwhile (a numpy-only one writes no vec0 rows) is caught up too.
        _add_matrix_rows(conn, rows)
        for gen in sorted({r[1] for r in rows}):
            self._catch_up(conn, gen)

    def delete(self, conn: Any, generation: int, chunk_ids: list[int]) -> None:
        table = vec_table(generation)
        if conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (table,)).fetchone():
            conn.executemany(f"DELETE FROM {table} WHERE rowid = ?", [(i,) for i in chunk_ids])
        _delete_matrix_rows(conn, generation, chunk_ids)
        self._catch_up(conn, generation)

    def catch_up(self, generation: int) -> None:
        """Bring the vec0 table in step with the stored vectors, if it is not (after another
        process's numpy-only writes: a few rows; a full copy when it was never in step)."""
        with self.db.lock:
            if _vec0_in_step(self.db.conn, generation):
                return
        with self.db.transaction() as conn:
            if conn.execute(
                "SELECT 1 FROM memory_generations WHERE id = ? AND state != 'retired'",
                (generation,),
            ).fetchone():
                self._catch_up(conn, generation)

    def _catch_up(self, conn: Any, generation: int) -> None:
        # the caller's transaction
        table = self._ensure(conn, generation)
        seq = _last_seq(conn, generation) or 0
        since = _vec0_seq(conn, generation)
        if since == seq:
            return
        changed = _changed_since(conn, generation, since) if since is not None else None
        if changed is None:  # never in step, or the log no longer covers its lag: copy it all
            conn.execute(f"DELETE FROM {table}")
            if _table_exists(conn, matrix_table(generation)):
                conn.execute(
                    f"INSERT INTO {table}(rowid, scope, embedding) "
                    f"SELECT chunk_id, scope, vector FROM {matrix_table(generation)}"
                )
            else:  # an index from before the matrix table
                conn.execute(
                    f"INSERT INTO {table}(rowid, scope, embedding) SELECT id, scope, centroid "
                    "FROM memory_chunks WHERE generation = ? AND centroid IS NOT NULL",
                    (generation,),
                )
        else:
            for i in range(0, len(changed), 500):
                part = changed[i : i + 500]
                marks = ",".join("?" for _ in part)
                conn.execute(f"DELETE FROM {table} WHERE rowid IN ({marks})", part)
                conn.execute(
                    f"INSERT INTO {table}(rowid, scope, embedding) SELECT chunk_id, scope, "
                    f"vector FROM {matrix_table(generation)} WHERE chunk_id IN ({marks})",
                    part,
                )
        conn.execute(
            "INSERT INTO meta(key, value) VALUES (?, ?) "
            "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            (vec0_seq_key(generation), str(seq)),
        )

    def drop_generation(self, conn: Any, generation: int) -> None:
        drop_vec_table(conn, generation)
        self._ready.discard(generation)
        self._cache.forget()

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
            return self._knn(db.conn, query, k, generation, scopes)

    def _search_vec0_in_step(
        self, query: np.ndarray, k: int, generation: int, scopes: list[str]
    ) -> list[tuple[int, float]] | None:
        """`search_vec0`, or None when the vec0 table is not in step with the stored vectors
        (a numpy-only process wrote since): it could miss chunks or name reused ids."""
        db = self.reader() if self.reader().vec_version else self.db
        with db.lock:
            conn = db.conn
            conn.execute("BEGIN")  # one snapshot: the check and the rows it vouches for
            try:
                if not _vec0_in_step(conn, generation):
                    return None
                return self._knn(conn, query, k, generation, scopes)
            finally:
                conn.execute("COMMIT")

    @staticmethod
    def _knn(
        conn: Any, query: np.ndarray, k: int, generation: int, scopes: list[str]
    ) -> list[tuple[int, float]]:
        table = vec_table(generation)
        if not _table_exists(conn, table):
            return []
        marks = ",".join("?" for _ in scopes)
        rows = conn.execute(
            f"SELECT rowid, distance FROM {table} WHERE embedding MATCH ? AND k = ? "
            f"AND scope IN ({marks}) ORDER BY distance",
            (to_blob(query), min(k, 4096), *scopes),
        ).fetchall()
        return _best_first([(int(uid), 1.0 - float(dist)) for uid, dist in rows])


def _vec0_seq(conn: Any, generation: int) -> int | None:
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (vec0_seq_key(generation),))
    found = row.fetchone()
    return int(found[0]) if found is not None else None


def _vec0_in_step(conn: Any, generation: int) -> bool:
    """Whether the generation's vec0 table holds exactly its stored vectors: it caught up to the
    change log's current seq (a numpy-only write advances the log, not the vec0 table)."""
    return _vec0_seq(conn, generation) == (_last_seq(conn, generation) or 0)


def _changed_since(conn: Any, generation: int, seq: int) -> list[int] | None:
    """Chunks whose vectors changed after `seq`; None if the change log no longer says."""
    last = _last_seq(conn, generation)
    if last is None or seq > last:  # no log, or it was dropped and made again
        return None
    (oldest,) = conn.execute(f"SELECT min(seq) FROM {log_table(generation)}").fetchone()
    if oldest is not None and oldest > seq + 1:  # pruned
        return None
    return [
        int(r[0])
        for r in conn.execute(
            f"SELECT DISTINCT chunk_id FROM {log_table(generation)} WHERE seq > ?", (seq,)
        )
    ]


class _Matrix:
    """A generation's centroids in memory: rows in no particular order (a freed row has scope
    -1 and is never returned), with room to grow so a write changes rows in place."""

    def __init__(
        self,
        key: tuple[int, str],
        seq: int | None,
        n: int,
        ids: np.ndarray,
        vectors: np.ndarray,
        scope_of: np.ndarray,
        scope_ids: dict[str, int],
    ) -> None:
        self.key = key  # (generation, index_version) it is current at
        self.seq = seq  # the change log's last seq it has seen; None: no log, re-read in full
        self.n = n  # rows in use (some may be freed); the arrays have room for more
        self.ids = ids  # int64 chunk ids
        self.vectors = vectors  # float32 (capacity, dimensions)
        self.scope_of = scope_of  # int32: index into scope_ids; -1 = a free row
        self.scope_ids = scope_ids
        self._row: dict[int, int] | None = None  # chunk id -> row, built on the first change
        self._free: list[int] = []  # freed rows, used again before the arrays grow

    def row_of(self) -> dict[int, int]:
        if self._row is None:
            live = np.flatnonzero(self.scope_of[: self.n] >= 0)
            self._row = dict(zip(self.ids[live].tolist(), live.tolist(), strict=True))
        return self._row

    def put(self, chunk_id: int, scope: str, vector: np.ndarray) -> None:
        rows = self.row_of()
        i = rows.get(chunk_id)
        if i is None:
            if self._free:  # a file's edit frees its old chunks' rows and adds new chunks
                i = self._free.pop()
            else:
                if self.n == len(self.ids):
                    self._grow()
                i = self.n
                self.n += 1
            rows[chunk_id] = i
            self.ids[i] = chunk_id
        self.vectors[i] = vector
        self.scope_of[i] = self.scope_ids.setdefault(scope, len(self.scope_ids))

    def remove(self, chunk_id: int) -> None:
        i = self.row_of().pop(chunk_id, None)
        if i is not None:
            self.scope_of[i] = -1
            self._free.append(i)

    def _grow(self) -> None:
        extra = max(64, len(self.ids) // 8)
        self.ids = np.concatenate([self.ids, np.zeros(extra, dtype=np.int64)])
        self.scope_of = np.concatenate([self.scope_of, np.full(extra, -1, dtype=np.int32)])
        pad = np.zeros((extra, self.vectors.shape[1]), dtype=np.float32)
        self.vectors = np.concatenate([self.vectors, pad])

    def search(self, query: np.ndarray, k: int, scopes: list[str]) -> list[tuple[int, float]]:
        if not self.n:
            return []
        sims = self.vectors[: self.n] @ np.asarray(query, dtype=np.float32)
        # Always filter: conversation transcripts carry their own scope, and no search may
        # see another conversation's (not even one asking only for the shared scope '').
        wanted = [self.scope_ids[s] for s in scopes if s in self.scope_ids]
        sims = np.where(np.isin(self.scope_of[: self.n], wanted), sims, -np.inf)
        k = min(k, len(sims))
        top = np.argpartition(-sims, k - 1)[:k]
        return _best_first(
            [(int(self.ids[i]), float(sims[i])) for i in top.tolist() if np.isfinite(sims[i])]
        )


# Past this share of a generation's chunks changed, reading the whole matrix again is cheaper.
_REFRESH_SHARE = 0.25


class _MatrixCache:
    """Exact cosine search in process over a generation's centroid matrix, read in full once and
    then kept current: after a write (any write bumps the index version) only the chunks the
    change log names are read again."""

    def __init__(self, reader: _Reader) -> None:
        limit_blas_threads()
        self._reader = reader
        self._matrix: _Matrix | None = None
        self._lock = threading.Lock()  # a refresh changes rows in place: not during a search
        self._loading: threading.Thread | None = None

    def forget(self) -> None:
        with self._lock:
            self._matrix = None

    def search(
        self,
        query: np.ndarray,
        k: int,
        generation: int,
        scopes: list[str],
        fallback: Callable[[], list[tuple[int, float]] | None] | None = None,
    ) -> list[tuple[int, float]]:
        """Search the matrix, reading it first if it is not current. With a `fallback`, a full
        read (≈0.4-2 s at 100k chunks) happens in a background thread instead, and this search
        (and any until the read is done) is answered by the fallback — unless it returns None
        (it cannot answer exactly): then this search waits for the matrix."""
        db = self._reader.get()
        loading = self._loading
        if fallback is None and loading is not None:
            loading.join()  # a read already under way (`preload`): wait for it, do not read twice
        with self._lock:
            with db.lock:
                current = _current_matrix(db, generation, self._matrix, full=fallback is None)
            if current is not None:
                self._matrix = current
                return current.search(query, k, scopes)
            self._start_load(generation)
        assert fallback is not None
        answer = fallback()
        if answer is not None:
            return answer
        return self.search(query, k, generation, scopes)  # waits for the read under way

    def preload(self, generation: int) -> None:
        """Start reading the matrix in the background if nothing is held or being read (a
        process that will search soon, e.g. the chat or the gateway at start-up)."""
        with self._lock:
            if self._matrix is None or self._matrix.key[0] != generation:
                self._start_load(generation)

    def _start_load(self, generation: int) -> None:
        # the caller holds self._lock
        if self._loading is None:
            self._loading = threading.Thread(
                target=self._load, args=(generation,), name="vector-matrix", daemon=True
            )
            self._loading.start()

    def _load(self, generation: int) -> None:
        try:
            db = open_reader(self._reader.db)  # not the reader: searches go on meanwhile
            try:
                with db.lock:
                    # One connection: vec0 answers meanwhile, and 8 connections reading at once
                    # slowed its first (cold) query by ≈ 150 ms and held ≈ 25 MB more.
                    loaded = _current_matrix(db, generation, None, full=True, parallel=False)
            finally:
                db.close()
            with self._lock:
                self._matrix = loaded  # if already stale, the next search brings it up to date
        except Exception:  # the fallback keeps answering; the next search tries again
            log.exception("reading the vector matrix failed")
        finally:
            with self._lock:
                self._loading = None

    def wait_loaded(self, timeout: float) -> bool:
        """Wait for a background read to finish (for tests and benchmarks)."""
        loading = self._loading
        if loading is not None:
            loading.join(timeout)
        return self._loading is None


def _current_matrix(
    db: Database, generation: int, cached: _Matrix | None, *, full: bool, parallel: bool = True
) -> _Matrix | None:
    """`cached` brought up to date with the index, or read in full (None if that is due and
    `full` is false; a pack on several connections at once if `parallel`); the caller holds
    `db.lock`."""
    conn = db.conn
    version = conn.execute("SELECT value FROM meta WHERE key = 'index_version'").fetchone()
    key = (generation, version[0] if version else "0")
    if cached is not None and cached.key == key:
        return cached
    conn.execute("BEGIN")  # one snapshot: the log's last seq and the rows it covers
    try:
        if cached is not None and cached.key[0] == generation and cached.seq is not None:
            refreshed = _apply_changes(conn, generation, cached, key)
            if refreshed is not None:
                return refreshed
        if not full:
            return None
        return _read_matrix(
            conn, generation, key, (lambda: _plain_reader(db)) if parallel else None
        )
    finally:
        conn.execute("COMMIT")


def _table_exists(conn: Any, name: str) -> bool:
    return bool(conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (name,)).fetchone())


def _last_seq(conn: Any, generation: int) -> int | None:
    if not (
        _table_exists(conn, log_table(generation)) and _table_exists(conn, matrix_table(generation))
    ):
        return None
    (seq,) = conn.execute(f"SELECT coalesce(max(seq), 0) FROM {log_table(generation)}").fetchone()
    return int(seq)


def _apply_changes(conn: Any, generation: int, m: _Matrix, key: tuple[int, str]) -> _Matrix | None:
    """`m` with the rows changed since its seq re-read; None when a full read is due."""
    seq = _last_seq(conn, generation)
    if seq is None or m.seq is None or seq < m.seq:  # the log was dropped and made again
        return None
    (oldest,) = conn.execute(f"SELECT min(seq) FROM {log_table(generation)}").fetchone()
    if oldest is not None and oldest > m.seq + 1:  # changes it has not seen were pruned
        return None
    changed = [
        int(r[0])
        for r in conn.execute(
            f"SELECT DISTINCT chunk_id FROM {log_table(generation)} WHERE seq > ?", (m.seq,)
        )
    ]
    if len(changed) > _REFRESH_SHARE * m.n:  # (an empty matrix does not know its width)
        return None
    found = {}
    table = matrix_table(generation)
    for i in range(0, len(changed), 500):
        part = changed[i : i + 500]
        marks = ",".join("?" for _ in part)
        for cid, scope, blob in conn.execute(
            f"SELECT chunk_id, scope, vector FROM {table} WHERE chunk_id IN ({marks})", part
        ):
            found[int(cid)] = (scope, from_blob(blob))
    for cid in changed:
        if cid in found:
            m.put(cid, *found[cid])
        else:
            m.remove(cid)
    m.key, m.seq = key, seq
    return m


class NumpyStore:
    """Exact cosine search in process over the generation's centroid matrix (see
    `_MatrixCache`), on the store's own connection."""

    name = "numpy"

    def __init__(self, db: Database) -> None:
        self.db = db
        self._reader = _Reader(db)
        self._cache = _MatrixCache(self._reader)

    def add(self, conn: Any, rows: list[tuple[int, int, str, np.ndarray]]) -> None:
        _add_matrix_rows(conn, rows)

    def delete(self, conn: Any, generation: int, chunk_ids: list[int]) -> None:
        _delete_matrix_rows(conn, generation, chunk_ids)

    def drop_generation(self, conn: Any, generation: int) -> None:
        drop_vec_table(conn, generation)
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


def _read_matrix(
    conn: Any, generation: int, key: tuple[int, str], connect: Callable[[], Any] | None = None
) -> _Matrix:
    """The generation's centroids in one preallocated float32 matrix (no second copy: the peak
    is the matrix itself): from the pack plus the changes since it when it is usable, else
    streamed from the row table."""
    seq = _last_seq(conn, generation)
    if seq is not None:
        packed = _read_packed(conn, generation, key, seq, connect)
        if packed is not None:
            return packed
    return _read_rows(conn, generation, key, seq)


def _room(n: int) -> int:
    # Room for the chunks later writes add, so they need no copy of the whole matrix.
    return n + max(256, n // 8)


def _pack_lag(conn: Any, generation: int, info: PackInfo, seq: int) -> int | None:
    """Chunks changed since the pack; None if the log no longer covers them (or never did)."""
    if info.seq > seq:  # the log was dropped and made again
        return None
    oldest, newer = conn.execute(
        f"SELECT min(seq), count(DISTINCT chunk_id) FROM {log_table(generation)} WHERE seq > ?",
        (info.seq,),
    ).fetchone()
    if oldest is not None and oldest > info.seq + 1:  # changes after the pack were pruned
        return None
    return int(newer)


def _read_packed(
    conn: Any,
    generation: int,
    key: tuple[int, str],
    seq: int,
    connect: Callable[[], Any] | None,
) -> _Matrix | None:
    info = pack_info(conn, generation)
    if info is None or not info.rows:
        return None
    lag = _pack_lag(conn, generation, info, seq)
    if lag is None or lag > _REFRESH_SHARE * info.rows:  # the row read is as cheap
        return None
    packed = read_pack(conn, generation, info, _room(info.rows + lag), connect)
    if packed is None:
        return None
    m = _Matrix(
        key,
        packed.seq,
        packed.rows,
        packed.ids,
        packed.vectors,
        packed.scope_of,
        packed.scope_ids,
    )
    return _apply_changes(conn, generation, m, key)


# A generation with fewer chunks is read row by row fast enough: no pack. (The row read costs
# 2-5 µs a chunk from the page cache, ≈ 30 µs from disk: ≈ 0.3 s at this size.)
PACK_MIN_ROWS = 10_000
# Once this share of the pack's rows changed since it was written, a sync writes it again (a
# reader applies these changes row by row after loading the pack).
PACK_REFRESH_SHARE = 0.05


def refresh_pack(db: Database, generation: int, *, force: bool = False) -> int | None:
    """Write the generation's packed matrix again if it is missing or behind by more than
    PACK_REFRESH_SHARE of its rows (or at all, with `force`); returns the rows packed (None:
    nothing to do). Cheap when the pack is current (two small queries); a rewrite at 100k
    chunks reads and writes ≈150 MB (1-4 s)."""
    with db.lock:  # decided without the write lock first: most syncs have nothing to pack
        conn = db.conn
        seq = _last_seq(conn, generation)
        if seq is None or not (force or _pack_due(conn, generation, seq)):
            return None
    with db.transaction() as conn:  # one snapshot: the log's seq and the rows it covers
        seq = _last_seq(conn, generation)
        if seq is None or not (force or _pack_due(conn, generation, seq)):
            return None
        return write_pack(conn, generation, matrix_table(generation), seq)


def _pack_due(conn: Any, generation: int, seq: int) -> bool:
    info = pack_info(conn, generation)
    if info is not None and info.seq == seq:
        return False
    lag = _pack_lag(conn, generation, info, seq) if info is not None else None
    if info is not None and lag is not None:
        return lag > PACK_REFRESH_SHARE * max(info.rows, 1)
    if info is not None:  # the log no longer covers the pack's changes
        return True
    # No pack yet: worth one once the generation is large. (An index whose matrix table was
    # copied in before the log existed counts only what the log names: a row read it stays.)
    (changes,) = conn.execute(
        f"SELECT count(DISTINCT chunk_id) FROM {log_table(generation)}"
    ).fetchone()
    return bool(changes >= PACK_MIN_ROWS)


def _read_rows(conn: Any, generation: int, key: tuple[int, str], seq: int | None) -> _Matrix:
    table = matrix_table(generation)
    params: tuple[Any, ...] = ()
    if _table_exists(conn, table):
        count_sql = f"SELECT count(*) FROM {table}"
        sql = f"SELECT chunk_id, scope, vector FROM {table} ORDER BY chunk_id"
    else:  # an index written before the matrix table existed: slower, same result
        where = "FROM memory_chunks WHERE generation = ? AND centroid IS NOT NULL"
        count_sql = f"SELECT count(*) {where}"
        sql, params = f"SELECT id, scope, centroid {where} ORDER BY id", (generation,)
    n = int(conn.execute(count_sql, params).fetchone()[0])
    cursor = conn.execute(sql, params)
    room = _room(n)  # pages of np.empty never written are never made resident
    ids = np.zeros(room, dtype=np.int64)
    scope_of = np.full(room, -1, dtype=np.int32)
    scope_ids: dict[str, int] = {}
    vectors: np.ndarray | None = None
    i = 0
    while i < n:
        rows = cursor.fetchmany(min(4096, n - i))
        if not rows:
            break
        block = from_blob(b"".join(r[2] for r in rows))
        if vectors is None:
            vectors = np.empty((room, len(block) // len(rows)), dtype=np.float32)
        vectors[i : i + len(rows)] = block.reshape(len(rows), -1)
        ids[i : i + len(rows)] = [r[0] for r in rows]
        scope_of[i : i + len(rows)] = [scope_ids.setdefault(r[1], len(scope_ids)) for r in rows]
        i += len(rows)
    matrix = vectors if vectors is not None else np.zeros((0, 1), dtype=np.float32)
    return _Matrix(key, seq, i, ids, matrix, scope_of, scope_ids)
