"""The vector repositories, written against their interfaces (`VectorTables`, `MatrixPack`,
`KnnIndex`): each fixture yields an implementation, today the SQLite one, so a second store can
be parametrised in and held to the same promises. Real SQLite files, small random vectors."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memory.store.db import Database, open_database
from memory.store.vector_knn import KnnIndex, SqliteVecIndex
from memory.store.vector_pack import MatrixPack, SqliteMatrixPack
from memory.store.vector_tables import SqliteVectorTables, VectorTables, from_blob, to_blob
from tests.conftest import sqlite_vec_loads

DIMS = 8
GEN = 1


@pytest.fixture(params=["sqlite"])
def tables(request: pytest.FixtureRequest) -> VectorTables:
    return SqliteVectorTables()


@pytest.fixture(params=["sqlite"])
def pack(request: pytest.FixtureRequest) -> MatrixPack:
    return SqliteMatrixPack()


@pytest.fixture(params=["sqlite-vec"])
def knn(request: pytest.FixtureRequest) -> KnnIndex:
    if not sqlite_vec_loads():
        pytest.skip("sqlite-vec cannot be loaded by this Python's SQLite")
    return SqliteVecIndex(DIMS)


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    database = open_database(tmp_path / "agent.sqlite")
    yield database
    database.close()


def vectors(seed: int, n: int) -> np.ndarray:
    m = np.random.default_rng(seed).standard_normal((n, DIMS)).astype(np.float32)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


def add(db: Database, tables: VectorTables, ids: list[int], scope: str = "", seed: int = 0) -> None:
    with db.transaction() as conn:
        tables.add(
            conn, [(i, GEN, scope, v) for i, v in zip(ids, vectors(seed, len(ids)), strict=True)]
        )


def stored(db: Database, tables: VectorTables) -> list[tuple[int, str, bytes]]:
    with db.lock:
        return [
            (int(cid), scope, bytes(blob))
            for batch in tables.rows(db.conn, GEN, 3)
            for cid, scope, blob in batch
        ]


def read(db: Database, fn: Any, *args: Any) -> Any:
    with db.lock:
        return fn(db.conn, *args)


# ---- VectorTables --------------------------------------------------------------------------


def test_a_blob_round_trips_as_float32() -> None:
    v = vectors(1, 1)[0]
    assert from_blob(to_blob(v)).tolist() == v.tolist()


def test_rows_come_in_chunk_id_order_whatever_order_they_were_added(
    db: Database, tables: VectorTables
) -> None:
    add(db, tables, [9, 2, 5, 7, 1])

    assert [cid for cid, _, _ in stored(db, tables)] == [1, 2, 5, 7, 9]
    assert read(db, tables.count, GEN) == 5


def test_adding_a_chunk_again_replaces_its_vector(db: Database, tables: VectorTables) -> None:
    add(db, tables, [1, 2], seed=1)
    add(db, tables, [2], scope="chat", seed=2)

    rows = {cid: (scope, blob) for cid, scope, blob in stored(db, tables)}
    assert sorted(rows) == [1, 2]
    assert rows[2] == ("chat", to_blob(vectors(2, 1)[0]))


def test_every_write_is_logged_under_a_higher_seq(db: Database, tables: VectorTables) -> None:
    assert read(db, tables.last_seq, GEN) is None  # nothing stored yet
    add(db, tables, [1, 2, 3])
    first = read(db, tables.last_seq, GEN)
    with db.transaction() as conn:
        tables.delete(conn, GEN, [2])
    add(db, tables, [3, 4])

    assert read(db, tables.last_seq, GEN) > first
    assert sorted(read(db, tables.changed_since, GEN, first)) == [2, 3, 4]
    assert read(db, tables.changes_since, GEN, first) == (first + 1, 3)
    assert read(db, tables.logged_chunks, GEN) == 4
    assert read(db, tables.oldest_seq, GEN) <= first  # nothing pruned yet


def test_changed_since_names_each_chunk_once(db: Database, tables: VectorTables) -> None:
    add(db, tables, [1, 2])
    add(db, tables, [1])
    add(db, tables, [1])

    assert sorted(read(db, tables.changed_since, GEN, 0)) == [1, 2]


def test_a_deleted_chunk_has_no_vector(db: Database, tables: VectorTables) -> None:
    add(db, tables, [1, 2, 3], scope="s")
    with db.transaction() as conn:
        tables.delete(conn, GEN, [2])

    found = read(db, tables.vectors_of, GEN, [1, 2, 3, 4])
    assert sorted(found) == [1, 3]
    assert found[1][0] == "s" and found[1][1].dtype == np.float32


def test_a_failed_transaction_leaves_neither_rows_nor_log(
    db: Database, tables: VectorTables
) -> None:
    add(db, tables, [1])
    seq = read(db, tables.last_seq, GEN)
    with pytest.raises(RuntimeError), db.transaction() as conn:
        tables.add(conn, [(2, GEN, "", vectors(3, 1)[0])])
        raise RuntimeError("interrupted")

    assert [cid for cid, _, _ in stored(db, tables)] == [1]
    assert read(db, tables.last_seq, GEN) == seq


def test_dropping_a_generation_forgets_its_vectors_and_log(
    db: Database, tables: VectorTables
) -> None:
    add(db, tables, [1, 2])
    with db.transaction() as conn:
        tables.drop_generation(conn, GEN)

    assert read(db, tables.last_seq, GEN) is None
    assert stored(db, tables) == []


def test_the_index_version_is_zero_until_the_index_is_written(
    db: Database, tables: VectorTables
) -> None:
    assert read(db, tables.index_version) == "0"


def test_a_snapshot_does_not_see_writes_made_after_it_began(
    db: Database, tables: VectorTables, tmp_path: Path
) -> None:
    add(db, tables, [1])
    other = open_database(tmp_path / "agent.sqlite")
    try:
        with other.lock, tables.snapshot(other.conn):
            before = tables.last_seq(other.conn, GEN)
            add(db, tables, [2])
            assert tables.last_seq(other.conn, GEN) == before
            assert tables.count(other.conn, GEN) == 1
        assert read(other, tables.count, GEN) == 2
    finally:
        other.close()


# ---- MatrixPack ----------------------------------------------------------------------------


def write_pack(db: Database, tables: VectorTables, pack: MatrixPack) -> int:
    with db.transaction() as conn:
        seq = tables.last_seq(conn, GEN)
        assert seq is not None
        return pack.write(conn, GEN, seq)


def test_there_is_no_pack_until_one_is_written(
    db: Database, tables: VectorTables, pack: MatrixPack
) -> None:
    add(db, tables, [1, 2])
    assert read(db, pack.info, GEN) is None


def test_a_pack_holds_the_rows_in_chunk_id_order_at_one_seq(
    db: Database, tables: VectorTables, pack: MatrixPack
) -> None:
    add(db, tables, [5, 3, 1], scope="a")
    add(db, tables, [4, 2], scope="b", seed=1)

    assert write_pack(db, tables, pack) == 5
    info = read(db, pack.info, GEN)
    assert info is not None and info.rows == 5 and info.seq == read(db, tables.last_seq, GEN)
    layout = read(db, pack.layout, GEN)
    assert [b for b, _ in layout] == list(range(len(layout)))
    assert sum(n for _, n in layout) == 5
    assert read(db, pack.dimensions, GEN) == DIMS
    unpacked = []
    for number, _ in layout:
        block = read(db, pack.block, GEN, number)
        assert block is not None and block.seq == info.seq
        unpacked += [
            (int(cid), block.scopes[code], block.vectors[i].tobytes())
            for i, (cid, code) in enumerate(zip(block.ids, block.scope_codes, strict=True))
        ]
    assert unpacked == stored(db, tables)


def test_a_missing_block_reads_as_none(
    db: Database, tables: VectorTables, pack: MatrixPack
) -> None:
    add(db, tables, [1])
    write_pack(db, tables, pack)
    assert read(db, pack.block, GEN, 999) is None


def test_a_dropped_pack_is_gone(db: Database, tables: VectorTables, pack: MatrixPack) -> None:
    add(db, tables, [1, 2])
    write_pack(db, tables, pack)
    with db.transaction() as conn:
        pack.drop(conn, GEN)
    assert read(db, pack.info, GEN) is None


def test_dropping_the_generation_drops_its_pack(
    db: Database, tables: VectorTables, pack: MatrixPack
) -> None:
    add(db, tables, [1, 2])
    write_pack(db, tables, pack)
    with db.transaction() as conn:
        tables.drop_generation(conn, GEN)
    assert read(db, pack.info, GEN) is None


# ---- KnnIndex ------------------------------------------------------------------------------


def live_generation(db: Database) -> None:
    with db.transaction() as conn:  # the indexer's row for the generation (test set-up)
        conn.execute(
            "INSERT INTO memory_generations(id, identity, state, dimensions, created_at) "
            "VALUES (?, '{}', 'active', ?, ?)",
            (GEN, DIMS, time.time()),
        )


def test_a_caught_up_index_answers_exactly_best_first_within_scope(
    db: Database, tables: VectorTables, knn: KnnIndex
) -> None:
    ids = list(range(1, 41))
    with db.transaction() as conn:
        rows = vectors(4, 40)
        tables.add(
            conn, [(i, GEN, "" if i % 2 else "chat", v) for i, v in zip(ids, rows, strict=True)]
        )
        knn.catch_up(conn, GEN)
    query = vectors(5, 1)[0]

    found = read(db, knn.knn, query, 10, GEN, [""])

    assert read(db, knn.in_step, GEN)
    assert read(db, knn.count, GEN) == 40
    sims = {i: float(rows[i - 1] @ query) for i in ids if i % 2}
    expected = sorted(sims, key=lambda i: (-sims[i], i))[:10]
    assert [cid for cid, _ in found] == expected
    assert [s for _, s in found] == pytest.approx([sims[i] for i in expected], abs=1e-5)


def test_writes_it_has_not_caught_up_with_put_it_out_of_step(
    db: Database, tables: VectorTables, knn: KnnIndex
) -> None:
    add(db, tables, [1, 2, 3])
    with db.transaction() as conn:
        knn.catch_up(conn, GEN)
    add(db, tables, [4])  # the other backend wrote: the log moved on, the index did not
    assert not read(db, knn.in_step, GEN)

    with db.transaction() as conn:
        knn.delete(conn, GEN, [2])
        tables.delete(conn, GEN, [2])
        knn.catch_up(conn, GEN)

    assert read(db, knn.in_step, GEN)
    query = vectors(0, 1)[0]
    assert sorted(cid for cid, _ in read(db, knn.knn, query, 10, GEN, [""])) == [1, 3, 4]


def test_only_a_generation_not_retired_is_live(db: Database, knn: KnnIndex) -> None:
    assert not read(db, knn.live, GEN)
    live_generation(db)
    assert read(db, knn.live, GEN)
