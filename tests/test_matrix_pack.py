"""The packed centroid matrix: a full read from a few large blobs plus the change log since the
pack gives exactly the matrix a row-by-row read gives; a missing or stale pack is not used.

Real SQLite files, the real stores (and sqlite-vec where it loads), small vectors.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from memory.search import matrix_cache, matrix_pack
from memory.search.matrix_cache import refresh_pack
from memory.search.sqlite_vec import SqliteVecStore
from memory.search.vectors import NumpyStore, VectorStore
from memory.store import vector_pack, vector_readers, vector_tables
from memory.store.db import Database, open_database
from memory.store.vector_codec import decode
from memory.store.vector_pack import PackInfo, SqliteMatrixPack
from memory.store.vector_tables import pack_table
from tests.conftest import IndexFactory, WorkspaceFactory, use_config
from tests.test_vectors import (
    DIMS,
    bump_version,
    first_search,
    insert_chunks,
    make_store,
    reader_statements,
    unit_rows,
)

pack_info = SqliteMatrixPack().info


@pytest.fixture(autouse=True)
def small_packs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pack generations of a few hundred chunks, in blocks of 64 rows (several blocks)."""
    monkeypatch.setattr(matrix_cache, "PACK_MIN_ROWS", 100)
    monkeypatch.setattr(vector_pack, "BLOCK_ROWS", 64)


def db_of(backend: str, vec_db: Database, numpy_db: Database) -> Database:
    return vec_db if backend == "sqlite-vec" else numpy_db


def live_matrix(store: VectorStore) -> dict[int, tuple[str, bytes]]:
    """chunk id -> (scope, vector bytes) of the matrix the store searches."""
    m = store._cache._matrix  # type: ignore[attr-defined]
    assert m is not None
    names = {v: k for k, v in m.scope_ids.items()}
    return {
        int(m.ids[i]): (names[int(m.scope_of[i])], m.vectors[i].tobytes())
        for i in range(m.n)
        if m.scope_of[i] >= 0
    }


def fresh_row_read(db: Database, generation: int = 1) -> dict[int, tuple[str, bytes]]:
    """The stored vectors (each row's own, else the pack's), decoded (8-bit codes → float32)
    as the matrix holds them."""
    with db.lock:
        rows = [
            r for b in vector_tables.SqliteVectorTables().rows(db.conn, generation, 50) for r in b
        ]
    return {int(cid): (scope, decode(bytes(blob)).tobytes()) for cid, scope, blob in rows}


def delete_chunks(db: Database, store: VectorStore, ids: list[int]) -> None:
    with db.transaction() as conn:
        store.delete(conn, 1, ids)
        conn.executemany("DELETE FROM memory_chunks WHERE id = ?", [(i,) for i in ids])
        bump_version(conn)


def edit_chunks(db: Database, store: VectorStore, ids: list[int], rng: np.random.Generator) -> None:
    """New centroids (and the scope 'chat-b') for existing chunk ids (as the index rewrites a
    chunk: its vector deleted, then added)."""
    new = unit_rows(rng, len(ids))
    with db.transaction() as conn:
        store.delete(conn, 1, ids)
        store.add(conn, [(cid, 1, "chat-b", vec) for cid, vec in zip(ids, new, strict=True)])
        bump_version(conn)


def loaded_afresh(db: Database, backend: str) -> tuple[VectorStore, list[str]]:
    """A new store on `db`'s file whose first search reads the matrix; the SQL that read it."""
    other = open_database(db.path, vector_backend=backend)
    query = unit_rows(np.random.default_rng(0), 1)[0]
    if backend == "numpy":
        store: VectorStore = NumpyStore(other)
        return store, reader_statements(store, lambda: first_search(store, query))
    store = SqliteVecStore(other, DIMS)
    statements: list[str] = []  # it reads in the background, on a connection of its own
    real_open = vector_readers.open_reader

    def traced(d: Database) -> Database:
        r = real_open(d)
        r.conn.set_trace_callback(statements.append)
        return r

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(vector_readers, "open_reader", traced)
        first_search(store, query)
    return store, statements


def read_the_pack(sql: list[str]) -> bool:
    """The pack read whole, by its layout (not looked up in for a few rows): its blocks, or
    sqlite-vec's table where that is the pack (memory/store/vec0_pack.py)."""
    return any(
        "SELECT block, rows FROM memory_matrix_pack_g1" in s
        or "SELECT chunk_id, validity FROM memory_vec_g1_chunks" in s
        for s in sql
    )


def read_the_rows(sql: list[str]) -> bool:
    return any("memory_matrix_g1" in s and "ORDER BY chunk_id" in s for s in sql)


@pytest.mark.parametrize("backend", ["sqlite-vec", "numpy"])
def test_a_pack_plus_the_change_log_gives_the_matrix_a_row_read_gives(
    backend: str, vec_db: Database, numpy_db: Database
) -> None:
    db = db_of(backend, vec_db, numpy_db)
    store = make_store(backend, vec_db, numpy_db)
    rng = np.random.default_rng(21)
    ids = insert_chunks(db, store, unit_rows(rng, 400), ["", "chat-a"] * 200)
    first_search(store, unit_rows(rng, 1)[0])  # read row by row, then kept current by the log
    # (sqlite-vec: its table is the pack, current after every write: nothing to write)
    assert refresh_pack(db, 1) == (400 if backend == "numpy" else None)
    with db.lock:
        assert pack_info(db.conn, 1) == PackInfo(400, 400)
    # After the pack: adds (one in a new scope), deletes and edits, all within the log.
    ids += insert_chunks(db, store, unit_rows(rng, 20), ["chat-c"] * 20)
    delete_chunks(db, store, ids[10:30])
    edit_chunks(db, store, ids[50:60] + ids[405:410], rng)

    searcher, sql = loaded_afresh(db, backend)

    assert read_the_pack(sql) and not read_the_rows(sql)
    assert live_matrix(searcher) == fresh_row_read(db)
    for query in unit_rows(rng, 5):
        for scopes in ([""], ["chat-b"], ["", "chat-a", "chat-b", "chat-c"]):
            assert searcher.search(query, 500, 1, scopes) == store.search(query, 500, 1, scopes)


def test_a_matrix_loaded_from_the_pack_stays_current_through_later_writes(
    numpy_db: Database,
) -> None:
    store = NumpyStore(numpy_db)
    rng = np.random.default_rng(22)
    ids = insert_chunks(numpy_db, store, unit_rows(rng, 300), [""] * 300)
    refresh_pack(numpy_db, 1)
    searcher, sql = loaded_afresh(numpy_db, "numpy")
    assert read_the_pack(sql)
    for round_ in range(10):  # more rows than the reserved room, and freed rows used again
        delete_chunks(numpy_db, store, ids[round_ * 5 : round_ * 5 + 5])
        ids += insert_chunks(numpy_db, store, unit_rows(rng, 60), ["", "chat-a"] * 30)
        edit_chunks(numpy_db, store, [ids[-1]], rng)
        searcher.search(unit_rows(rng, 1)[0], 5, 1, [""])

        assert live_matrix(searcher) == fresh_row_read(numpy_db)


def test_without_a_pack_the_rows_are_read(numpy_db: Database) -> None:
    store = NumpyStore(numpy_db)
    insert_chunks(numpy_db, store, unit_rows(np.random.default_rng(23), 200), [""] * 200)

    searcher, sql = loaded_afresh(numpy_db, "numpy")

    assert read_the_rows(sql) and not read_the_pack(sql)
    assert live_matrix(searcher) == fresh_row_read(numpy_db)


def test_a_pack_whose_changes_the_log_no_longer_holds_is_not_used(
    numpy_db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(vector_tables, "LOG_KEEP", 5)
    store = NumpyStore(numpy_db)
    rng = np.random.default_rng(24)
    ids = insert_chunks(numpy_db, store, unit_rows(rng, 200), [""] * 200)
    refresh_pack(numpy_db, 1)
    for i in range(10):  # one at a time: the log keeps only the last few
        edit_chunks(numpy_db, store, [ids[i]], rng)

    searcher, sql = loaded_afresh(numpy_db, "numpy")

    assert read_the_rows(sql) and not read_the_pack(sql)
    assert live_matrix(searcher) == fresh_row_read(numpy_db)


def test_a_pack_more_than_a_quarter_behind_is_read_with_the_changes_since(
    numpy_db: Database,
) -> None:
    # (the rows hold a vector only when it changed since the pack: a row read reads the pack too)
    store = NumpyStore(numpy_db)
    rng = np.random.default_rng(25)
    ids = insert_chunks(numpy_db, store, unit_rows(rng, 200), [""] * 200)
    refresh_pack(numpy_db, 1)
    edit_chunks(numpy_db, store, ids[:60], rng)

    searcher, sql = loaded_afresh(numpy_db, "numpy")

    assert read_the_pack(sql) and not read_the_rows(sql)
    assert live_matrix(searcher) == fresh_row_read(numpy_db)


def test_a_small_generation_gets_no_pack(numpy_db: Database) -> None:
    store = NumpyStore(numpy_db)
    insert_chunks(numpy_db, store, unit_rows(np.random.default_rng(26), 99), [""] * 99)

    assert refresh_pack(numpy_db, 1) is None
    with numpy_db.lock:
        assert pack_info(numpy_db.conn, 1) is None


def test_the_pack_is_written_again_only_past_a_share_of_changes(numpy_db: Database) -> None:
    store = NumpyStore(numpy_db)
    rng = np.random.default_rng(27)
    ids = insert_chunks(numpy_db, store, unit_rows(rng, 400), [""] * 400)
    assert refresh_pack(numpy_db, 1) == 400
    assert refresh_pack(numpy_db, 1) is None  # current

    edit_chunks(numpy_db, store, ids[:20], rng)  # 5 %: the reader applies these
    assert refresh_pack(numpy_db, 1) is None
    edit_chunks(numpy_db, store, ids[20:21], rng)
    assert refresh_pack(numpy_db, 1) == 400
    with numpy_db.lock:
        info = pack_info(numpy_db.conn, 1)
        (seq,) = numpy_db.conn.execute(
            f"SELECT max(seq) FROM {vector_tables.log_table(1)}"
        ).fetchone()
    assert info is not None and info.seq == seq


def test_dropping_a_generation_drops_its_pack(numpy_db: Database) -> None:
    store = NumpyStore(numpy_db)
    insert_chunks(numpy_db, store, unit_rows(np.random.default_rng(28), 200), [""] * 200)
    refresh_pack(numpy_db, 1)

    with numpy_db.transaction() as conn:
        store.drop_generation(conn, 1)

    assert not numpy_db.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (pack_table(1),))


def test_a_sync_leaves_a_pack_current_with_the_log(
    make_workspace: WorkspaceFactory, make_index: IndexFactory, use_model: None
) -> None:
    ws = make_workspace(
        {f"memory/2026-01-{d:02d}.md": f"# Day {d}\n\nNote number {d}.\n" for d in range(1, 29)}
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(matrix_cache, "PACK_MIN_ROWS", 1)
        idx = make_index(ws, use_config())
        generation = idx.sync().generation
    assert generation is not None

    with idx.db.lock:
        info = pack_info(idx.db.conn, generation)
        (seq,) = idx.db.conn.execute(
            f"SELECT max(seq) FROM {vector_tables.log_table(generation)}"
        ).fetchone()
    assert info is not None and info.seq == seq
    assert (
        info.rows
        == idx.db.execute("SELECT count(*) FROM memory_chunks WHERE generation = ?", (generation,))[
            0
        ][0]
    )


def packed_rows(packed: matrix_pack.Packed) -> dict[int, tuple[str, bytes]]:
    names = {v: k for k, v in packed.scope_ids.items()}
    return {
        int(packed.ids[i]): (names[int(packed.scope_of[i])], packed.vectors[i].tobytes())
        for i in range(packed.rows)
    }


def test_the_pack_is_read_by_several_connections_at_once(numpy_db: Database) -> None:
    store = NumpyStore(numpy_db)
    insert_chunks(numpy_db, store, unit_rows(np.random.default_rng(29), 300), ["", "x"] * 150)
    refresh_pack(numpy_db, 1)
    mine: list[str] = []
    theirs: list[str] = []

    def connect() -> object:
        c = vector_readers.open_plain_reader(numpy_db)
        c.set_trace_callback(theirs.append)
        return c

    with numpy_db.lock:
        conn = numpy_db.conn
        info = pack_info(conn, 1)
        assert info is not None
        conn.set_trace_callback(mine.append)
        threaded = matrix_pack.read_pack(conn, 1, info, 400, connect)
        conn.set_trace_callback(None)
        alone = matrix_pack.read_pack(conn, 1, info, 400)

    assert threaded is not None and alone is not None
    assert not [s for s in mine if "WHERE block" in s]
    assert len([s for s in theirs if "WHERE block" in s]) == 5  # 300 rows in blocks of 64
    assert packed_rows(threaded) == packed_rows(alone) == fresh_row_read(numpy_db)


def test_a_pack_rewritten_while_it_is_read_is_read_on_the_callers_snapshot(
    numpy_db: Database, tmp_path: Path
) -> None:
    store = NumpyStore(numpy_db)
    rng = np.random.default_rng(30)
    ids = insert_chunks(numpy_db, store, unit_rows(rng, 300), [""] * 300)
    refresh_pack(numpy_db, 1)
    before = fresh_row_read(numpy_db)
    reader = open_database(tmp_path / "agent.sqlite", vector_backend="numpy")
    conn = reader.conn
    conn.execute("BEGIN")  # the snapshot the caller holds
    info = pack_info(conn, 1)
    assert info is not None
    edit_chunks(numpy_db, store, ids[:100], rng)
    assert refresh_pack(numpy_db, 1) == 300  # the pack is written again meanwhile

    packed = matrix_pack.read_pack(
        conn, 1, info, 400, lambda: vector_readers.open_plain_reader(reader)
    )
    conn.execute("COMMIT")
    reader.close()

    assert packed is not None and packed.seq == info.seq
    assert packed_rows(packed) == before != fresh_row_read(numpy_db)


def test_a_sync_with_nothing_to_pack_takes_no_write_lock(numpy_db: Database) -> None:
    store = NumpyStore(numpy_db)
    insert_chunks(numpy_db, store, unit_rows(np.random.default_rng(31), 50), [""] * 50)
    statements: list[str] = []
    numpy_db.conn.set_trace_callback(statements.append)

    assert refresh_pack(numpy_db, 1) is None  # too small to pack

    numpy_db.conn.set_trace_callback(None)
    assert not [s for s in statements if "BEGIN" in s]


@pytest.mark.parametrize(("backend", "parallel"), [("numpy", True), ("sqlite-vec", False)])
def test_only_a_search_that_waits_for_the_pack_reads_it_on_several_connections(
    backend: str, parallel: bool, vec_db: Database, numpy_db: Database
) -> None:
    db = db_of(backend, vec_db, numpy_db)
    insert_chunks(
        db,
        make_store(backend, vec_db, numpy_db),
        unit_rows(np.random.default_rng(32), 300),
        [""] * 300,
    )
    refresh_pack(db, 1)
    opened: list[object] = []
    real = vector_readers.open_plain_reader

    def counted(d: Database) -> object:
        opened.append(d)
        return real(d)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(vector_readers, "open_plain_reader", counted)
        searcher, sql = loaded_afresh(db, backend)

    assert read_the_pack(sql)
    assert bool(opened) == parallel  # sqlite-vec's vec0 answers while it reads in the background
    assert live_matrix(searcher) == fresh_row_read(db)
