"""sqlite-vec's vec0 table as the one stored copy of the centroids (memory/store/vec0_pack.py,
issue 22): read as the pack by any process, rows and block pack giving up their copies once it
is in step, nothing lost when another process (numpy-only) writes, when its log is pruned, or
when an older version's table is made again."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from memory.search import matrix_cache
from memory.search.matrix_cache import refresh_pack
from memory.search.sqlite_vec import SqliteVecStore
from memory.search.vectors import NumpyStore
from memory.store import vector_pack
from memory.store.db import Database, open_database
from memory.store.vec0_pack import packable_dimensions, vec0_pack
from memory.store.vector_codec import encode
from memory.store.vector_names import matrix_table, pack_table, table_exists, vec0_seq_key
from memory.store.vector_pack import SqliteMatrixPack
from memory.store.vector_tables import SqliteVectorTables
from tests.test_matrix_pack import delete_chunks, edit_chunks, fresh_row_read, live_matrix
from tests.test_vectors import DIMS, first_search, insert_chunks, unit_rows

LONG = "telegram:chat:-1001234567890"  # longer than the 12 bytes vec0 keeps inline


@pytest.fixture(autouse=True)
def small_packs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(matrix_cache, "PACK_MIN_ROWS", 100)
    monkeypatch.setattr(vector_pack, "BLOCK_ROWS", 64)


def stored(db: Database, generation: int = 1) -> dict[int, tuple[str, bytes]]:
    """chunk id → (scope, stored blob), each row's own or else the pack's."""
    with db.lock:
        return {
            int(c): (s, bytes(b))
            for rows in SqliteVectorTables().rows(db.conn, generation, 50)
            for c, s, b in rows
        }


def rows_with_a_vector(db: Database, generation: int = 1) -> int:
    table = matrix_table(generation)
    return int(db.execute(f"SELECT count(vector) FROM {table}")[0][0])


def searcher(db: Database, backend: str) -> Any:
    """A new store on the file, its matrix read afresh by a first search."""
    other = open_database(db.path, vector_backend=backend)
    store: Any = NumpyStore(other) if backend == "numpy" else SqliteVecStore(other, DIMS)
    first_search(store, unit_rows(np.random.default_rng(0), 1)[0])
    return store


def test_the_vec0_table_holds_the_only_copy_and_reads_back_byte_for_byte(
    vec_db: Database,
) -> None:
    store = SqliteVecStore(vec_db, DIMS)
    rng = np.random.default_rng(61)
    vectors = unit_rows(rng, 300)
    scopes = ["", "chat-a", LONG] * 100
    ids = insert_chunks(vec_db, store, vectors, scopes)

    assert rows_with_a_vector(vec_db) == 0  # given up as soon as the table held them
    assert not table_exists(vec_db.conn, pack_table(1))
    assert refresh_pack(vec_db, 1) is None  # current already
    want = {cid: (s, encode(v)) for cid, s, v in zip(ids, scopes, vectors, strict=True)}
    assert stored(vec_db) == want  # scale and codes as the rows would have held them
    got = searcher(vec_db, "numpy")  # a numpy process reads it too, without the extension
    assert live_matrix(got) == fresh_row_read(vec_db)
    for query in unit_rows(rng, 3):
        for scope in ([""], [LONG], ["", "chat-a", LONG]):
            assert got.search(query, 50, 1, scope) == store.search(query, 50, 1, scope)


def test_both_backends_give_the_same_answers_from_their_own_copies(
    vec_db: Database, numpy_db: Database
) -> None:
    rng = np.random.default_rng(62)
    vectors, scopes = unit_rows(rng, 260), ["", "chat-a"] * 130
    vec_store, np_store = SqliteVecStore(vec_db, DIMS), NumpyStore(numpy_db)
    insert_chunks(vec_db, vec_store, vectors, scopes)
    insert_chunks(numpy_db, np_store, vectors, scopes)
    refresh_pack(numpy_db, 1)
    assert table_exists(numpy_db.conn, pack_table(1))  # numpy: its block pack
    a, b = searcher(vec_db, "sqlite-vec"), searcher(numpy_db, "numpy")
    for query in unit_rows(rng, 5):
        assert a.search(query, 40, 1, ["", "chat-a"]) == b.search(query, 40, 1, ["", "chat-a"])


def test_writes_deletes_and_edits_keep_the_matrix_equal_to_a_fresh_read(
    vec_db: Database,
) -> None:
    store = SqliteVecStore(vec_db, DIMS)
    rng = np.random.default_rng(63)
    ids = insert_chunks(vec_db, store, unit_rows(rng, 1100), ["", LONG] * 550)  # 2 vec0 chunks
    live = searcher(vec_db, "sqlite-vec")
    delete_chunks(vec_db, store, ids[:40])  # dead slots the table keeps
    edit_chunks(vec_db, store, ids[50:70], rng)
    ids += insert_chunks(vec_db, store, unit_rows(rng, 30), ["chat-c"] * 30)

    assert rows_with_a_vector(vec_db) == 0
    first_search(live, unit_rows(rng, 1)[0])  # the live matrix follows the log
    assert live_matrix(live) == fresh_row_read(vec_db)
    assert live_matrix(searcher(vec_db, "sqlite-vec")) == fresh_row_read(vec_db)
    with vec_db.lock:
        pack = vec0_pack(vec_db.conn, 1)
        assert pack is not None and pack.rows() == 1090
        assert pack.dead_slots() == 60  # deleted and edited (the last chunk reuses its own)


def test_a_numpy_process_writing_meanwhile_loses_nothing(vec_db: Database) -> None:
    store = SqliteVecStore(vec_db, DIMS)
    rng = np.random.default_rng(64)
    ids = insert_chunks(vec_db, store, unit_rows(rng, 200), [""] * 200)
    numpy_db = open_database(vec_db.path, vector_backend="numpy")
    other = NumpyStore(numpy_db)
    edit_chunks(numpy_db, other, ids[:30], rng)  # the vec0 table falls behind
    delete_chunks(numpy_db, other, ids[30:40])
    want = fresh_row_read(vec_db)
    assert len(want) == 190
    assert live_matrix(searcher(numpy_db, "numpy")) == want

    assert refresh_pack(numpy_db, 1) == 190  # behind: a block pack is written instead
    assert table_exists(numpy_db.conn, pack_table(1)) and rows_with_a_vector(numpy_db) == 0
    assert fresh_row_read(vec_db) == want
    numpy_db.close()

    store.catch_up(1)  # sqlite-vec catches up: its table is the pack again
    assert not table_exists(vec_db.conn, pack_table(1))
    assert rows_with_a_vector(vec_db) == 0
    assert fresh_row_read(vec_db) == want
    assert live_matrix(searcher(vec_db, "sqlite-vec")) == want


def test_a_full_copy_keeps_the_vectors_the_rows_lean_on_it_for(
    vec_db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SqliteVecStore(vec_db, DIMS)
    rng = np.random.default_rng(65)
    insert_chunks(vec_db, store, unit_rows(rng, 150), [""] * 150)
    want = stored(vec_db)
    with vec_db.transaction() as conn:  # its seq lost: the next catch-up copies everything
        conn.execute("DELETE FROM meta WHERE key = ?", (vec0_seq_key(1),))
    assert vec0_pack(vec_db.conn, 1) is None  # (and no longer read as the pack meanwhile)

    store.catch_up(1)

    assert stored(vec_db) == want
    assert rows_with_a_vector(vec_db) == 0 and not table_exists(vec_db.conn, pack_table(1))


@pytest.mark.parametrize("by", ["a write", "compaction"])
def test_an_older_versions_table_is_made_again_to_hold_the_vectors_once(
    vec_db: Database, by: str
) -> None:
    rng = np.random.default_rng(66)
    store = SqliteVecStore(vec_db, DIMS)
    ids = insert_chunks(vec_db, store, unit_rows(rng, 150), ["", LONG] * 75)
    want = stored(vec_db)
    with vec_db.transaction() as conn:  # what the version before wrote: codes, no scales
        vector_pack.write_blocks(conn, 1, int(SqliteVectorTables().last_seq(conn, 1) or 0))
        conn.execute("DROP TABLE memory_vec_g1")
        conn.execute(
            "CREATE VIRTUAL TABLE memory_vec_g1 USING vec0(scope text, "
            f"embedding int8[{DIMS}] distance_metric=cosine)"
        )
        conn.executemany(
            "INSERT INTO memory_vec_g1(rowid, scope, embedding) VALUES (?, ?, vec_int8(?))",
            [(cid, s, b[6:]) for cid, (s, b) in want.items()],
        )
    assert packable_dimensions(vec_db.conn, 1) is None
    if by == "compaction":
        from memory.store.compact import compact, reclaimable

        assert reclaimable(vec_db) >= 150 * DIMS  # the block pack's copy
        compact(vec_db)
        with vec_db.lock:
            assert packable_dimensions(vec_db.conn, 1) == DIMS
        assert not table_exists(vec_db.conn, pack_table(1))
        assert stored(vec_db) == want
    vec_db.close()

    db = open_database(vec_db.path)
    store = SqliteVecStore(db, DIMS)
    edit_chunks(db, store, ids[:5], rng)  # the first write makes it again

    with db.lock:
        assert packable_dimensions(db.conn, 1) == DIMS
    assert not table_exists(db.conn, pack_table(1)) and rows_with_a_vector(db) == 0
    now = stored(db)
    assert {c: v for c, v in now.items() if c not in ids[:5]} == {
        c: v for c, v in want.items() if c not in ids[:5]
    }
    assert live_matrix(searcher(db, "sqlite-vec")) == fresh_row_read(db)
    db.close()


def test_a_table_whose_layout_is_not_known_here_is_not_read_as_the_pack(
    vec_db: Database,
) -> None:
    store = SqliteVecStore(vec_db, DIMS)
    insert_chunks(vec_db, store, unit_rows(np.random.default_rng(67), 120), [""] * 120)
    with vec_db.lock:
        assert vec0_pack(vec_db.conn, 1) is not None
    for change in (
        "UPDATE memory_vec_g1_info SET value = 'v9.9.9' WHERE key = 'CREATE_VERSION'",
        "DROP TABLE memory_vec_g1_metadatachunks01",
    ):
        with vec_db.transaction() as conn:
            conn.execute("SAVEPOINT probe")
            conn.execute(change)
            assert vec0_pack(conn, 1) is None
            assert SqliteMatrixPack().info(conn, 1) is None
            conn.execute("ROLLBACK TO probe")


def test_a_compaction_makes_a_table_with_many_deleted_slots_dense_again(
    vec_db: Database,
) -> None:
    from memory.store.compact import compact, reclaimable

    store = SqliteVecStore(vec_db, DIMS)
    rng = np.random.default_rng(68)
    ids = insert_chunks(vec_db, store, unit_rows(rng, 1100), ["", LONG] * 550)
    delete_chunks(vec_db, store, ids[:300])  # in vec0's first chunk: slots it never reuses
    want = fresh_row_read(vec_db)
    with vec_db.lock:
        pack = vec0_pack(vec_db.conn, 1)
        assert pack is not None and pack.dead_slots() == 300
    before = reclaimable(vec_db)
    assert before >= 300 * (DIMS + 32)

    compact(vec_db)

    with vec_db.lock:
        pack = vec0_pack(vec_db.conn, 1)
        assert pack is not None and pack.dead_slots() == 0 and pack.rows() == 800
    assert reclaimable(vec_db) < before
    assert fresh_row_read(vec_db) == want and rows_with_a_vector(vec_db) == 0
    assert not table_exists(vec_db.conn, pack_table(1))
    live = searcher(vec_db, "sqlite-vec")
    assert live_matrix(live) == want
    query = unit_rows(rng, 1)[0]
    assert live.search(query, 20, 1, [LONG]) == store.search_vec0(query, 20, 1, [LONG])
