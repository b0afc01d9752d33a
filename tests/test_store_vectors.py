"""The vector repositories, written against their interfaces (`VectorTables`, `MatrixPack`,
`KnnIndex`), on both backends: SQLite (sqlite-vec for the KNN index) and PostgreSQL (pgvector's
HNSW index with an exact re-rank). Small random vectors."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memory.store.db import open_database
from memory.store.index_generations import GenerationRepository, SqliteGenerations
from memory.store.postgres.index_rows import PgGenerations
from memory.store.postgres.vectors import PgKnnIndex, PgMatrixPack, PgVectorTables
from memory.store.vector_codec import decode
from memory.store.vector_knn import KnnIndex, SqliteVecIndex
from memory.store.vector_pack import MatrixPack, SqliteMatrixPack
from memory.store.vector_tables import SqliteVectorTables, VectorTables, from_blob, to_blob
from tests.conftest import sqlite_vec_loads
from tests.pg_support import PgTestServer

DIMS = 8
GEN = 1

Opens = Callable[[], contextlib.AbstractContextManager[Any]]


@dataclass(frozen=True)
class VecDb:
    """One backend's database as the vector tests use it."""

    name: str
    transaction: Opens  # a write transaction
    connection: Opens  # a connection for reads, not inside a transaction
    second: Opens  # another connection to the same data (another process)
    generations: GenerationRepository


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[VecDb]:
    if request.param == "sqlite":
        path = tmp_path / "agent.sqlite"
        main = open_database(path)

        @contextlib.contextmanager
        def locked() -> Iterator[Any]:
            with main.lock:
                yield main.conn

        @contextlib.contextmanager
        def other() -> Iterator[Any]:
            second = open_database(path)
            try:
                with second.lock:
                    yield second.conn
            finally:
                second.close()

        yield VecDb("sqlite", main.transaction, locked, other, SqliteGenerations(main))
        main.close()
    else:
        server: PgTestServer = request.getfixturevalue("pg_server")
        pg = server.open(request.getfixturevalue("pg_dsn"), min_size=0, max_size=4)
        yield VecDb(
            "postgres", pg.transaction, pg.pool.connection, pg.pool.connection, PgGenerations(pg)
        )
        pg.close()


@pytest.fixture
def tables(db: VecDb) -> VectorTables:
    return SqliteVectorTables() if db.name == "sqlite" else PgVectorTables()


@pytest.fixture
def pack(db: VecDb) -> MatrixPack:
    return SqliteMatrixPack() if db.name == "sqlite" else PgMatrixPack()


@pytest.fixture
def knn(db: VecDb) -> KnnIndex:
    if db.name == "postgres":
        return PgKnnIndex(DIMS)
    if not sqlite_vec_loads():
        pytest.skip("sqlite-vec cannot be loaded by this Python's SQLite")
    return SqliteVecIndex(DIMS)


def vectors(seed: int, n: int) -> np.ndarray:
    m = np.random.default_rng(seed).standard_normal((n, DIMS)).astype(np.float32)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


def add(db: VecDb, tables: VectorTables, ids: list[int], scope: str = "", seed: int = 0) -> None:
    with db.transaction() as conn:
        tables.add(
            conn, [(i, GEN, scope, v) for i, v in zip(ids, vectors(seed, len(ids)), strict=True)]
        )


def stored(db: VecDb, tables: VectorTables) -> list[tuple[int, str, bytes]]:
    with db.connection() as conn:
        return [
            (int(cid), scope, bytes(blob))
            for batch in tables.rows(conn, GEN, 3)
            for cid, scope, blob in batch
        ]


def read(db: VecDb, fn: Any, *args: Any) -> Any:
    with db.connection() as conn:
        return fn(conn, *args)


# ---- VectorTables --------------------------------------------------------------------------


def test_a_blob_round_trips_as_float32() -> None:
    v = vectors(1, 1)[0]
    assert from_blob(to_blob(v)).tolist() == v.tolist()


def test_rows_come_in_chunk_id_order_whatever_order_they_were_added(
    db: VecDb, tables: VectorTables
) -> None:
    add(db, tables, [9, 2, 5, 7, 1])

    assert [cid for cid, _, _ in stored(db, tables)] == [1, 2, 5, 7, 9]
    assert read(db, tables.count, GEN) == 5


def test_adding_a_chunk_again_replaces_its_vector(db: VecDb, tables: VectorTables) -> None:
    add(db, tables, [1, 2], seed=1)
    add(db, tables, [2], scope="chat", seed=2)

    rows = {cid: (scope, blob) for cid, scope, blob in stored(db, tables)}
    assert sorted(rows) == [1, 2]
    assert rows[2][0] == "chat"
    # SQLite stores 8-bit codes, PostgreSQL float32: both decode to the vector written.
    expected = vectors(2, 1)[0]
    assert np.abs(decode(rows[2][1]) - expected).max() <= np.abs(expected).max() / 254 + 1e-7


def test_every_write_is_logged_under_a_higher_seq(db: VecDb, tables: VectorTables) -> None:
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


def test_changed_since_names_each_chunk_once(db: VecDb, tables: VectorTables) -> None:
    add(db, tables, [1, 2])
    add(db, tables, [1])
    add(db, tables, [1])

    assert sorted(read(db, tables.changed_since, GEN, 0)) == [1, 2]


def test_a_deleted_chunk_has_no_vector(db: VecDb, tables: VectorTables) -> None:
    add(db, tables, [1, 2, 3], scope="s")
    with db.transaction() as conn:
        tables.delete(conn, GEN, [2])

    found = read(db, tables.vectors_of, GEN, [1, 2, 3, 4])
    assert sorted(found) == [1, 3]
    assert found[1][0] == "s" and found[1][1].dtype == np.float32


def test_a_failed_transaction_leaves_neither_rows_nor_log(db: VecDb, tables: VectorTables) -> None:
    add(db, tables, [1])
    seq = read(db, tables.last_seq, GEN)
    with pytest.raises(RuntimeError), db.transaction() as conn:
        tables.add(conn, [(2, GEN, "", vectors(3, 1)[0])])
        raise RuntimeError("interrupted")

    assert [cid for cid, _, _ in stored(db, tables)] == [1]
    assert read(db, tables.last_seq, GEN) == seq


def test_dropping_a_generation_forgets_its_vectors_and_log(db: VecDb, tables: VectorTables) -> None:
    add(db, tables, [1, 2])
    with db.transaction() as conn:
        tables.drop_generation(conn, GEN)

    assert read(db, tables.last_seq, GEN) is None
    assert stored(db, tables) == []


def test_the_index_version_is_zero_until_the_index_is_written(
    db: VecDb, tables: VectorTables
) -> None:
    assert read(db, tables.index_version) == "0"


def test_a_snapshot_does_not_see_writes_made_after_it_began(
    db: VecDb, tables: VectorTables
) -> None:
    add(db, tables, [1])
    with db.second() as other:
        with tables.snapshot(other):
            before = tables.last_seq(other, GEN)
            add(db, tables, [2])
            assert tables.last_seq(other, GEN) == before
            assert tables.count(other, GEN) == 1
        assert tables.count(other, GEN) == 2


# ---- MatrixPack ----------------------------------------------------------------------------


def write_pack(db: VecDb, tables: VectorTables, pack: MatrixPack) -> int:
    with db.transaction() as conn:
        seq = tables.last_seq(conn, GEN)
        assert seq is not None
        return pack.write(conn, GEN, seq)


def test_there_is_no_pack_until_one_is_written(
    db: VecDb, tables: VectorTables, pack: MatrixPack
) -> None:
    add(db, tables, [1, 2])
    assert read(db, pack.info, GEN) is None


def test_a_pack_holds_the_rows_in_chunk_id_order_at_one_seq(
    db: VecDb, tables: VectorTables, pack: MatrixPack
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
    # the pack decodes to exactly what the rows decode to (SQLite stores 8-bit codes)
    assert unpacked == [(c, s, decode(b).tobytes()) for c, s, b in stored(db, tables)]


def test_a_missing_block_reads_as_none(db: VecDb, tables: VectorTables, pack: MatrixPack) -> None:
    add(db, tables, [1])
    write_pack(db, tables, pack)
    assert read(db, pack.block, GEN, 999) is None


def test_a_dropped_pack_is_gone(db: VecDb, tables: VectorTables, pack: MatrixPack) -> None:
    add(db, tables, [1, 2])
    write_pack(db, tables, pack)
    with db.transaction() as conn:
        pack.drop(conn, GEN)
    assert read(db, pack.info, GEN) is None


def test_dropping_the_generation_drops_its_pack(
    db: VecDb, tables: VectorTables, pack: MatrixPack
) -> None:
    add(db, tables, [1, 2])
    write_pack(db, tables, pack)
    with db.transaction() as conn:
        tables.drop_generation(conn, GEN)
    assert read(db, pack.info, GEN) is None


# ---- KnnIndex ------------------------------------------------------------------------------


def live_generation(db: VecDb) -> None:
    with db.transaction() as conn:  # the indexer's row for the generation (test set-up)
        made = db.generations.create_building(conn, {"dimensions": DIMS}, time.time())
        db.generations.activate(conn, made, time.time())
    assert made == GEN


def test_a_caught_up_index_answers_exactly_best_first_within_scope(
    db: VecDb, tables: VectorTables, knn: KnnIndex
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
    # (sqlite-vec compares 8-bit codes, the query's too: within a step of 1/127 at 8 dims)
    assert [s for _, s in found] == pytest.approx([sims[i] for i in expected], abs=1e-2)


def test_writes_it_has_not_caught_up_with_put_it_out_of_step(
    db: VecDb, tables: VectorTables, knn: KnnIndex
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


def test_only_a_generation_not_retired_is_live(db: VecDb, knn: KnnIndex) -> None:
    assert not read(db, knn.live, GEN)
    live_generation(db)
    assert read(db, knn.live, GEN)


def test_many_vectors_are_answered_exactly_best_first(
    db: VecDb, tables: VectorTables, knn: KnnIndex
) -> None:
    rows = vectors(6, 600)
    with db.transaction() as conn:
        tables.add(conn, [(i + 1, GEN, "", v) for i, v in enumerate(rows)])
        knn.catch_up(conn, GEN)
    query = vectors(7, 1)[0]

    found = read(db, knn.knn, query, 5, GEN, [""])

    sims = rows @ query
    expected = [int(i) + 1 for i in np.argsort(-sims, kind="stable")[:5]]
    assert [cid for cid, _ in found] == expected
