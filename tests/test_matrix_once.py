"""Each chunk's centroid stored once: a generation's pack holds the vectors, its row table keeps
a chunk's vector only until the next pack (memory/store/vector_pack.py). Writes after a pack
are seen by readers in other processes, both vector backends read what the other wrote, a
rebuild's new generation is packed and the old one dropped, and an index that stored them twice
upgrades by itself with every vector and answer kept.

Real SQLite files and stores; random unit vectors, or the USE model for whole indexes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memory.index.index import MemoryIndex
from memory.search import matrix_cache
from memory.search.matrix_cache import refresh_pack
from memory.search.sqlite_vec import SqliteVecStore
from memory.search.vectors import NumpyStore
from memory.store import vector_pack
from memory.store.compact import compact, space_usage
from memory.store.db import Database
from memory.store.vector_codec import decode, encode
from memory.store.vector_names import matrix_table, pack_table, table_exists
from memory.store.vector_pack import SqliteMatrixPack
from memory.store.vector_tables import SqliteVectorTables
from tests.conftest import IndexFactory, WorkspaceFactory, sqlite_vec_loads, use_config
from tests.test_matrix_pack import delete_chunks, edit_chunks, fresh_row_read
from tests.test_vectors import DIMS, STEP, insert_chunks, unit_rows

ROOT = Path(__file__).resolve().parent.parent
QUESTIONS = ("who lost a compass", "which bike does Anna ride", "what is the cat called")


@pytest.fixture(autouse=True)
def small_packs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pack generations of a few chunks, in blocks of 64 rows (several blocks)."""
    monkeypatch.setattr(matrix_cache, "PACK_MIN_ROWS", 1)
    monkeypatch.setattr(vector_pack, "BLOCK_ROWS", 64)


def rows_with_a_vector(db: Database, generation: int = 1) -> int:
    sql = f"SELECT count(*) FROM {matrix_table(generation)} WHERE vector IS NOT NULL"
    return int(db.execute(sql)[0][0])


def stored(db: Database, generation: int = 1) -> dict[int, tuple[str, bytes]]:
    """chunk id -> (scope, stored vector blob): each row's own, else the pack's."""
    with db.lock:
        batches = list(SqliteVectorTables().rows(db.conn, generation, 50))
    return {cid: (scope, blob) for batch in batches for cid, scope, blob in batch}


def test_a_pack_takes_the_rows_vectors_and_a_later_write_keeps_only_its_own(
    numpy_db: Database,
) -> None:
    store = NumpyStore(numpy_db)
    rng = np.random.default_rng(40)
    vectors = unit_rows(rng, 300)
    ids = insert_chunks(numpy_db, store, vectors, ["", "chat-a"] * 150)
    assert rows_with_a_vector(numpy_db) == 300  # no pack yet: the rows hold them

    assert refresh_pack(numpy_db, 1) == 300
    assert rows_with_a_vector(numpy_db) == 0
    pack = SqliteMatrixPack()
    with numpy_db.lock:
        info = pack.info(numpy_db.conn, 1)
    assert info is not None and info.rows == 300

    edit_chunks(numpy_db, store, ids[:3], rng)  # three chunks written again
    delete_chunks(numpy_db, store, ids[3:5])

    assert rows_with_a_vector(numpy_db) == 3
    with numpy_db.lock:
        assert pack.info(numpy_db.conn, 1) == info  # the pack was not written again
    expected = {
        cid: (s, encode(v)) for cid, s, v in zip(ids, ["", "chat-a"] * 150, vectors, strict=True)
    }
    now = stored(numpy_db)
    assert set(now) == set(ids) - set(ids[3:5])
    assert {c: now[c] for c in ids[5:]} == {c: expected[c] for c in ids[5:]}
    assert all(now[c][0] == "chat-b" and now[c][1] != expected[c][1] for c in ids[:3])

    assert refresh_pack(numpy_db, 1, force=True) == 298  # every vector kept, byte for byte
    assert rows_with_a_vector(numpy_db) == 0
    assert stored(numpy_db) == now


def test_the_first_pack_leaves_the_row_tables_pages_free_not_nearly_empty(
    numpy_db: Database,
) -> None:
    """Packing a generation whose rows hold every vector writes its row table again: the pages
    the vectors filled become free pages (counted, reused, given back by a compaction) instead
    of pages kept ≈ 4 % full that only a VACUUM found; a later pack empties its few rows in
    place. Every vector and scope is kept, byte for byte."""
    store = NumpyStore(numpy_db)
    rng = np.random.default_rng(41)
    scopes = ["", "chat-a"] * 1000
    ids = insert_chunks(numpy_db, store, unit_rows(rng, 2000), scopes)
    before = stored(numpy_db)
    free_before = space_usage(numpy_db).free_bytes

    assert refresh_pack(numpy_db, 1) == 2000
    assert rows_with_a_vector(numpy_db) == 0
    assert stored(numpy_db) == before
    freed = space_usage(numpy_db).free_bytes - free_before
    assert freed >= 2000 * DIMS  # the vectors' pages, now free (emptied in place: none)
    with numpy_db.lock:
        columns = [r[1] for r in numpy_db.conn.execute(f"PRAGMA table_info({matrix_table(1)})")]
    assert columns == ["chunk_id", "scope", "vector"]

    edit_chunks(numpy_db, store, ids[:3], rng)
    assert refresh_pack(numpy_db, 1, force=True) == 2000
    assert rows_with_a_vector(numpy_db) == 0
    now = stored(numpy_db)
    assert {c: now[c] for c in ids[3:]} == {c: before[c] for c in ids[3:]}
    assert compact(numpy_db).free_bytes == 0


READER = """
import json, sys
from pathlib import Path
import numpy as np
from memory.search.vectors import NumpyStore
from memory.store.db import open_database

store = NumpyStore(open_database(Path(sys.argv[1]), vector_backend="numpy"))
query = np.ones(int(sys.argv[2]), dtype=np.float32)
for line in sys.stdin:
    store.search(query / np.linalg.norm(query), 5, 1, ["", "chat-b"])  # brings it up to date
    m = store._cache._matrix
    names = {v: k for k, v in m.scope_ids.items()}
    rows = {
        int(m.ids[i]): [names[int(m.scope_of[i])], m.vectors[i].tobytes().hex()]
        for i in range(m.n) if m.scope_of[i] >= 0
    }
    print(json.dumps(rows), flush=True)
"""


def test_a_reader_in_another_process_sees_writes_after_the_pack_and_after_a_repack(
    numpy_db: Database,
) -> None:
    store = NumpyStore(numpy_db)
    rng = np.random.default_rng(41)
    ids = insert_chunks(numpy_db, store, unit_rows(rng, 300), [""] * 300)
    refresh_pack(numpy_db, 1)
    reader = subprocess.Popen(
        [sys.executable, "-c", READER, str(numpy_db.path), str(DIMS)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert reader.stdin is not None and reader.stdout is not None

    def readers_matrix() -> dict[int, tuple[str, bytes]]:
        reader.stdin.write("search\n")  # type: ignore[union-attr]
        reader.stdin.flush()  # type: ignore[union-attr]
        found = json.loads(reader.stdout.readline())  # type: ignore[union-attr]
        return {int(c): (s, bytes.fromhex(v)) for c, (s, v) in found.items()}

    try:
        assert readers_matrix() == fresh_row_read(numpy_db)  # loaded from the pack
        edit_chunks(numpy_db, store, ids[:4], rng)
        delete_chunks(numpy_db, store, ids[4:6])
        ids += insert_chunks(numpy_db, store, unit_rows(rng, 3), [""] * 3)
        assert rows_with_a_vector(numpy_db) == 7
        assert readers_matrix() == fresh_row_read(numpy_db)  # the log's rows, read

        # Written again after the pack was rewritten: the reader's earlier changes now live only
        # in the new pack, and it is still behind by the ones after.
        edit_chunks(numpy_db, store, ids[10:12], rng)
        assert refresh_pack(numpy_db, 1, force=True) == 301
        assert rows_with_a_vector(numpy_db) == 0
        edit_chunks(numpy_db, store, ids[:2], rng)
        assert readers_matrix() == fresh_row_read(numpy_db)
    finally:
        reader.stdin.close()
        reader.wait(timeout=30)


def test_sqlite_vec_searches_what_numpy_packed_and_numpy_what_sqlite_vec_wrote(
    vec_db: Database, tmp_path: Path
) -> None:
    from memory.store.db import open_database

    numpy_side = open_database(tmp_path / "agent.sqlite", vector_backend="numpy")
    numpy = NumpyStore(numpy_side)
    rng = np.random.default_rng(42)
    ids = insert_chunks(numpy_side, numpy, unit_rows(rng, 300), ["", "chat-a"] * 150)
    refresh_pack(numpy_side, 1)
    edit_chunks(numpy_side, numpy, ids[:5], rng)  # after the pack: in their rows
    assert rows_with_a_vector(numpy_side) == 5
    vec = SqliteVecStore(vec_db, DIMS)
    queries = unit_rows(rng, 5)

    vec.catch_up(1)  # vec0 copied in full from the pack and the rows
    assert vec.count(1) == 300
    for q in queries:
        want = numpy.search(q, 20, 1, ["", "chat-b"])
        assert vec.search_vec0(q, 20, 1, ["", "chat-b"]) == want  # (re-scored exactly)
        got = vec.search(q, 20, 1, ["", "chat-b"])
        assert [c for c, _ in got] == [c for c, _ in want]
        assert np.allclose([s for _, s in got], [s for _, s in want], atol=STEP)

    more = insert_chunks(vec_db, vec, unit_rows(rng, 4), ["chat-b"] * 4)
    edit_chunks(vec_db, vec, ids[200:202], rng)
    assert vec.wait_loaded(10)
    for q in queries:
        want = vec.search(q, 30, 1, ["", "chat-b"])
        assert numpy.search(q, 30, 1, ["", "chat-b"]) == want
        assert vec.search_vec0(q, 30, 1, ["", "chat-b"]) == want
    assert set(more) <= set(stored(numpy_side))
    numpy.close()
    numpy_side.close()
    vec.close()


def open_index(make_index: IndexFactory, workspace: Path, backend: str) -> MemoryIndex:
    if backend == "sqlite-vec" and not sqlite_vec_loads():
        pytest.skip("sqlite-vec cannot be loaded by this Python's SQLite")
    return make_index(workspace, use_config(vector_backend=backend))


def answers(idx: MemoryIndex) -> list[list[tuple[str, int, float]]]:
    return [
        [(h.path, h.start_line, round(h.score, 6)) for h in idx.search(q, preset=preset)]
        for q in QUESTIONS
        for preset in ("pinch", "vector")
    ]


def generation_of(idx: MemoryIndex) -> int:
    return int(idx.db.execute("SELECT id FROM memory_generations WHERE state = 'active'")[0][0])


@pytest.mark.parametrize("backend", ["numpy", "sqlite-vec"])
def test_a_rebuilds_new_generation_is_packed_and_the_old_one_dropped(
    make_workspace: WorkspaceFactory, make_index: IndexFactory, backend: str, use_model: None
) -> None:
    from tests.test_index_size import FILES

    idx = open_index(make_index, make_workspace(FILES), backend)
    idx.sync()
    old = generation_of(idx)
    before = answers(idx)
    assert rows_with_a_vector(idx.db, old) == 0

    assert idx.sync(force=True).rebuilt
    new = generation_of(idx)

    assert new != old
    for name in (matrix_table(old), pack_table(old)):
        assert not table_exists(idx.db.conn, name)
    assert rows_with_a_vector(idx.db, new) == 0
    with idx.db.lock:
        info = SqliteMatrixPack().info(idx.db.conn, new)
    chunks = idx.db.execute("SELECT count(*) FROM memory_chunks WHERE generation = ?", (new,))
    assert info is not None and info.rows == chunks[0][0]
    assert answers(idx) == before


def stored_twice(idx: MemoryIndex) -> None:
    """Turn the index into what the version before m015 wrote: every row keeps its vector
    (NOT NULL) beside the pack's copy, and m015 not recorded."""
    generation = generation_of(idx)
    vectors = stored(idx.db, generation)
    table = matrix_table(generation)
    with idx.db.transaction() as conn:
        conn.execute(f"DROP TABLE {table}")
        conn.execute(
            f"CREATE TABLE {table} "
            "(chunk_id INTEGER PRIMARY KEY, scope TEXT NOT NULL, vector BLOB NOT NULL)"
        )
        conn.executemany(
            f"INSERT INTO {table} VALUES (?, ?, ?)",
            [(cid, scope, blob) for cid, (scope, blob) in vectors.items()],
        )
        for records in ("schema_migrations", "_migrations"):
            conn.execute(f"DELETE FROM {records} WHERE name = 'm015_matrix_vectors_once'")


@pytest.mark.parametrize("backend", ["numpy", "sqlite-vec"])
def test_an_index_storing_its_centroids_twice_upgrades_keeping_every_vector_and_answer(
    make_workspace: WorkspaceFactory, make_index: IndexFactory, backend: str, use_model: None
) -> None:
    from tests.test_index_size import FILES

    workspace = make_workspace(FILES)
    idx = open_index(make_index, workspace, backend)
    idx.sync()
    generation = generation_of(idx)
    before, vectors = answers(idx), stored(idx.db, generation)
    stored_twice(idx)
    assert rows_with_a_vector(idx.db, generation) == len(vectors)
    idx.close()

    idx = open_index(make_index, workspace, backend)  # the migration runs on open

    assert rows_with_a_vector(idx.db, generation) == 0
    assert stored(idx.db, generation) == vectors  # byte for byte
    assert answers(idx) == before
    assert idx.sync().chunks_embedded == 0  # nothing embedded again
    (workspace / "memory" / "2026-01-11.md").write_text("# Note\n\nThe heron is back.\n")
    idx.sync()  # a write after the upgrade (and the pack written again: a tenth changed)
    assert idx.search("grey heron", preset="vector")[0].path == "memory/2026-01-11.md"


def test_a_stored_vector_decodes_to_the_matrix_row_it_came_from(numpy_db: Database) -> None:
    """(The pack hands out a row's vector in the row table's form: codes and scale intact.)"""
    store = NumpyStore(numpy_db)
    vectors = unit_rows(np.random.default_rng(43), 130)
    ids = insert_chunks(numpy_db, store, vectors, [""] * 130)
    refresh_pack(numpy_db, 1)
    got: dict[int, Any] = stored(numpy_db)
    for cid, v in zip(ids, vectors, strict=True):
        assert got[cid][1] == encode(v)
        assert np.array_equal(decode(got[cid][1]), decode(encode(v)))
