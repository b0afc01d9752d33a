"""A generation's centroid matrix held in process: read in full once, then kept current.

The full read comes from the pack (memory/store/vector_pack.py, read by
memory/search/matrix_pack.py: at 100k chunks 0.07-0.12 s from the page cache, ≈0.8 s from disk)
plus the changes since it, however many (the rows hold a vector only when it changed since the
pack); without a pack, or when the change log no longer covers it, row by row (each row's own
vector or else the pack's: 0.5-0.9 s of CPU at 100k). After a write only the chunks the change
log names are read again. A sync rewrites the pack at its end once 5 % of it changed
(`refresh_pack`), which empties the rows' vectors again.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from memory.search.centroid_matrix import CentroidMatrix
from memory.search.matrix_pack import read_pack
from memory.store import vector_readers
from memory.store.db import Database
from memory.store.vector_codec import decode_many
from memory.store.vector_pack import PackInfo
from memory.store.vector_readers import SharedReader
from memory.store.vector_storage import VectorStorage, sqlite_vector_storage

log = logging.getLogger(__name__)

# Past this share of a generation's chunks changed, reading the whole matrix again is cheaper.
REFRESH_SHARE = 0.25
# A generation with fewer chunks is read row by row fast enough: no pack. (The row read costs
# 2-5 µs a chunk from the page cache, ≈ 30 µs from disk: ≈ 0.3 s at this size.)
PACK_MIN_ROWS = 10_000
# Once this share of the pack's rows changed since it was written, a sync writes it again (a
# reader applies these changes row by row after loading the pack).
PACK_REFRESH_SHARE = 0.05
# A search that meets a background read of the matrix waits this long for it before answering
# through the fallback instead (an 8-bit pack at 100k chunks is 39 MB: ≈ 0.1 s from the page
# cache, well under a second from disk).
LOAD_WAIT_S = 1.5


@functools.cache
def limit_blas_threads() -> None:
    """One BLAS thread for this process (once). numpy's OpenBLAS otherwise starts a thread per
    core for the 100k × 384 product of every search, and those threads spin while waiting: on
    2 cores they fight SQLite's keyword search and the query's embedding for the other core.
    Measured at 100k chunks, quiet machine: steady p50 43 → 26 ms, p95 75 → 55 ms (the product
    itself is memory-bound and takes a few milliseconds on one thread)."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1, user_api="blas")  # process-wide, until changed again


class MatrixCache:
    """Exact cosine search in process over a generation's centroid matrix, read in full once and
    then kept current: after a write (any write bumps the index version) only the chunks the
    change log names are read again."""

    def __init__(self, reader: SharedReader, storage: VectorStorage) -> None:
        limit_blas_threads()
        self._reader = reader
        self._storage = storage
        self._matrix: CentroidMatrix | None = None
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
        if loading is not None:
            # A read already under way (`preload`, or an earlier search): wait for it, do not
            # read twice. With a fallback, wait a bounded time: the fallback (sqlite-vec's vec0)
            # is a full scan, which from a cold disk took longer than the read it would race
            # (and slowed it down).
            loading.join(None if fallback is None else LOAD_WAIT_S)
        with self._lock:
            with db.lock:
                current = current_matrix(
                    self._storage, db, generation, self._matrix, full=fallback is None
                )
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
            loading = threading.Thread(
                target=self._load, args=(generation,), name="vector-matrix", daemon=True
            )
            loading.start()  # before it is published: a search may join it at once
            self._loading = loading  # (its end clears this under the lock we hold)

    def _load(self, generation: int) -> None:
        try:
            # not the shared reader: searches go on meanwhile
            db = vector_readers.open_reader(self._reader.db)
            try:
                with db.lock:
                    # One connection: vec0 answers meanwhile, and 8 connections reading at once
                    # slowed its first (cold) query by ≈ 150 ms and held ≈ 25 MB more.
                    loaded = current_matrix(
                        self._storage, db, generation, None, full=True, parallel=False
                    )
            finally:
                db.close()
            with self._lock:
                self._matrix = loaded  # if already stale, the next search brings it up to date
                if loaded is not None:  # a large matrix: its first pass is fitted from now on
                    loaded.projection()
        except Exception:  # the fallback keeps answering; the next search tries again
            log.exception("reading the vector matrix failed")
        finally:
            with self._lock:
                self._loading = None

    def wait_loaded(self, timeout: float) -> bool:
        """Wait for a background read to finish, and for the first pass's fit of a large
        matrix (for tests and benchmarks: the steady state)."""
        loading = self._loading
        if loading is not None:
            loading.join(timeout)
        with self._lock:
            matrix = self._matrix
            fitting = matrix.fitting() if matrix is not None else None
        if matrix is not None and fitting is not None:
            fitting.wait(timeout)
            with self._lock:
                if matrix is self._matrix:
                    matrix.projection()  # taken now, not by the next search
        return self._loading is None


def current_matrix(
    storage: VectorStorage,
    db: Database,
    generation: int,
    cached: CentroidMatrix | None,
    *,
    full: bool,
    parallel: bool = True,
) -> CentroidMatrix | None:
    """`cached` brought up to date with the index, or read in full (None if that is due and
    `full` is false; a pack on several connections at once if `parallel`); the caller holds
    `db.lock`."""
    conn = db.conn
    tables = storage.tables
    key = (generation, tables.index_version(conn))
    if cached is not None and cached.key == key:
        return cached
    with tables.snapshot(conn):  # one snapshot: the log's last seq and the rows it covers
        if cached is not None and cached.key[0] == generation and cached.seq is not None:
            refreshed = apply_changes(storage, conn, generation, cached, key)
            if refreshed is not None:
                return refreshed
        if not full:
            return None
        return read_matrix(
            storage,
            conn,
            generation,
            key,
            (lambda: vector_readers.open_plain_reader(db)) if parallel else None,
        )


def apply_changes(
    storage: VectorStorage,
    conn: Any,
    generation: int,
    m: CentroidMatrix,
    key: tuple[int, str],
    *,
    bounded: bool = True,
) -> CentroidMatrix | None:
    """`m` with the rows changed since its seq re-read; None when a full read is due (the log
    no longer covers its seq, or, if `bounded`, more than REFRESH_SHARE of it changed)."""
    tables = storage.tables
    seq = tables.last_seq(conn, generation)
    if seq is None or m.seq is None or seq < m.seq:  # the log was dropped and made again
        return None
    oldest = tables.oldest_seq(conn, generation)
    if oldest is not None and oldest > m.seq + 1:  # changes it has not seen were pruned
        return None
    changed = tables.changed_since(conn, generation, m.seq)
    if bounded and len(changed) > REFRESH_SHARE * m.n:  # (an empty matrix knows no width)
        return None
    found = tables.vectors_of(conn, generation, changed)
    for cid in changed:
        if cid in found:
            m.put(cid, *found[cid])
        else:
            m.remove(cid)
    m.key, m.seq = key, seq
    return m


def read_matrix(
    storage: VectorStorage,
    conn: Any,
    generation: int,
    key: tuple[int, str],
    connect: Callable[[], Any] | None = None,
) -> CentroidMatrix:
    """The generation's centroids in one preallocated float32 matrix (no second copy: the peak
    is the matrix itself): from the pack plus the changes since it when it is usable, else
    streamed from the row table."""
    seq = storage.tables.last_seq(conn, generation)
    if seq is not None:
        packed = read_packed(storage, conn, generation, key, seq, connect)
        if packed is not None:
            return packed
    return read_rows(storage, conn, generation, key, seq)


def room(n: int) -> int:
    """Rows to allocate for `n` chunks: room for the chunks later writes add, so they need no
    copy of the whole matrix."""
    return n + max(256, n // 8)


def pack_lag(
    storage: VectorStorage, conn: Any, generation: int, info: PackInfo, seq: int
) -> int | None:
    """Chunks changed since the pack; None if the log no longer covers them (or never did)."""
    if info.seq > seq:  # the log was dropped and made again
        return None
    oldest, newer = storage.tables.changes_since(conn, generation, info.seq)
    if oldest is not None and oldest > info.seq + 1:  # changes after the pack were pruned
        return None
    return newer


def read_packed(
    storage: VectorStorage,
    conn: Any,
    generation: int,
    key: tuple[int, str],
    seq: int,
    connect: Callable[[], Any] | None,
) -> CentroidMatrix | None:
    info = storage.pack.info(conn, generation)
    if info is None or not info.rows:
        return None
    lag = pack_lag(storage, conn, generation, info, seq)
    if lag is None:  # the rows' own vectors and the pack's, merged, are read instead
        return None
    # However far behind: the rows hold only what changed since the pack.
    packed = read_pack(conn, generation, info, room(info.rows + lag), connect, storage)
    if packed is None:
        return None
    m = CentroidMatrix(
        key,
        packed.seq,
        packed.rows,
        packed.ids,
        packed.vectors,
        packed.scope_of,
        packed.scope_ids,
    )
    return apply_changes(storage, conn, generation, m, key, bounded=False)


def refresh_pack(
    db: Database, generation: int, *, force: bool = False, storage: VectorStorage | None = None
) -> int | None:
    """Write the generation's packed matrix again if it is missing or behind by more than
    PACK_REFRESH_SHARE of its rows (or at all, with `force`); returns the rows packed (None:
    nothing to do). Cheap when the pack is current (two small queries); a rewrite at 100k
    chunks reads and writes ≈150 MB (1-4 s)."""
    storage = storage or sqlite_vector_storage()
    tables = storage.tables
    with db.lock:  # decided without the write lock first: most syncs have nothing to pack
        conn = db.conn
        seq = tables.last_seq(conn, generation)
        if seq is None or not (force or pack_due(storage, conn, generation, seq)):
            return None
    with db.transaction() as conn:  # one snapshot: the log's seq and the rows it covers
        seq = tables.last_seq(conn, generation)
        if seq is None or not (force or pack_due(storage, conn, generation, seq)):
            return None
        return storage.pack.write(conn, generation, seq)


def pack_due(storage: VectorStorage, conn: Any, generation: int, seq: int) -> bool:
    """Whether the generation's pack should be written (again) now that the log is at `seq`."""
    info = storage.pack.info(conn, generation)
    if info is not None and info.seq == seq:
        return False
    lag = pack_lag(storage, conn, generation, info, seq) if info is not None else None
    if info is not None and lag is not None:
        return lag > PACK_REFRESH_SHARE * max(info.rows, 1)
    if info is not None:  # the log no longer covers the pack's changes
        return True
    # No pack yet: worth one once the generation is large. (An index whose matrix table was
    # copied in before the log existed counts only what the log names: a row read it stays.)
    return storage.tables.logged_chunks(conn, generation) >= PACK_MIN_ROWS


def read_rows(
    storage: VectorStorage, conn: Any, generation: int, key: tuple[int, str], seq: int | None
) -> CentroidMatrix:
    """The generation's centroids streamed from the row table, ordered by chunk id."""
    n = storage.tables.count(conn, generation)
    size = room(n)  # pages of np.empty never written are never made resident
    ids = np.zeros(size, dtype=np.int64)
    scope_of = np.full(size, -1, dtype=np.int32)
    scope_ids: dict[str, int] = {}
    vectors: np.ndarray | None = None
    i = 0
    for batch in storage.tables.rows(conn, generation, 4096):
        if i >= n:
            break
        rows = batch[: n - i]
        block = decode_many([r[2] for r in rows])
        if vectors is None:
            vectors = np.empty((size, block.shape[1]), dtype=np.float32)
        vectors[i : i + len(rows)] = block
        ids[i : i + len(rows)] = [r[0] for r in rows]
        scope_of[i : i + len(rows)] = [scope_ids.setdefault(r[1], len(scope_ids)) for r in rows]
        i += len(rows)
    matrix = vectors if vectors is not None else np.zeros((0, 1), dtype=np.float32)
    return CentroidMatrix(key, seq, i, ids, matrix, scope_of, scope_ids)
