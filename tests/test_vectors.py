"""The vector stores: sqlite-vec and numpy find the same chunks with the same scores, filter by
scope, and see writes. Real SQLite files, random unit vectors, no model."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memory.search import matrix_cache
from memory.search.sqlite_vec import SqliteVecStore
from memory.search.vectors import NumpyStore, VectorStore
from memory.store import vector_tables
from memory.store.db import Database, open_database
from memory.store.vector_tables import matrix_table
from tests.conftest import (
    IndexFactory,
    WorkspaceFactory,
    keyword_config,
    sqlite_vec_loads,
    use_config,
)

DIMS = 32
# A vector's own cosine once stored as 8-bit codes (memory/store/vector_codec.py): within
# this of the float32 cosine at these few dimensions (≈ 1e-3 at 384).
STEP = 5e-3


def unit_rows(rng: np.random.Generator, n: int) -> np.ndarray:
    m = rng.standard_normal((n, DIMS)).astype(np.float32)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


def insert_chunks(
    db: Database, store: VectorStore, vectors: np.ndarray, scopes: list[str], generation: int = 1
) -> list[int]:
    """Chunks with these centroids, written the way the index writes them; returns their ids."""
    rows = []
    with db.transaction() as conn:
        conn.execute(
            "INSERT OR IGNORE INTO memory_generations(id, identity, state, dimensions, created_at) "
            "VALUES (?, '{}', 'active', ?, ?)",
            (generation, DIMS, time.time()),
        )
        for vec, scope in zip(vectors, scopes, strict=True):
            cur = conn.execute(
                "INSERT INTO memory_chunks(generation, path, source, origin, scope, start_line, "
                "end_line, hash, text, centroid) VALUES (?, 'f.md', 'memory', 'owner', ?, 1, 1, "
                "'h', 'text', ?)",
                (generation, scope, vec.astype("<f4").tobytes()),
            )
            rows.append((int(cur.lastrowid), generation, scope, vec))
        store.add(conn, rows)
        bump_version(conn)
    return [r[0] for r in rows]


def bump_version(conn: object) -> None:
    conn.execute(  # type: ignore[attr-defined]
        "INSERT INTO meta(key, value) VALUES ('index_version', '1') ON CONFLICT(key) "
        "DO UPDATE SET value = CAST(CAST(value AS INTEGER) + 1 AS TEXT)"
    )


def test_both_backends_return_the_same_chunks_and_scores(vec_db: Database, tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    vectors = unit_rows(rng, 3000)
    scopes = ["" if i % 3 else "chat-a" for i in range(3000)]
    vec_store = SqliteVecStore(vec_db, DIMS)
    insert_chunks(vec_db, vec_store, vectors, scopes)
    # The same file searched through numpy, on a connection without the extension.
    numpy_db = open_database(tmp_path / "agent.sqlite", vector_backend="numpy")
    numpy_store = NumpyStore(numpy_db)

    for query in unit_rows(rng, 20):
        a = vec_store.search(query, 50, 1, [""])
        b = numpy_store.search(query, 50, 1, [""])
        assert [i for i, _ in a] == [i for i, _ in b]
        assert [s for _, s in a] == pytest.approx([s for _, s in b], abs=1e-5)
    numpy_db.close()


def test_the_in_memory_search_finds_what_the_vec0_knn_finds(vec_db: Database) -> None:
    rng = np.random.default_rng(8)
    store = SqliteVecStore(vec_db, DIMS)
    insert_chunks(
        vec_db, store, unit_rows(rng, 3000), ["" if i % 4 else "chat-a" for i in range(3000)]
    )
    first_search(store, unit_rows(rng, 1)[0])  # the matrix is read: later searches use it

    for query in unit_rows(rng, 20):
        for scopes in ([""], ["", "chat-a"]):
            a = store.search(query, 200, 1, scopes)
            b = store.search_vec0(query, 200, 1, scopes)
            assert [i for i, _ in a] == [i for i, _ in b]
            assert [s for _, s in a] == pytest.approx([s for _, s in b], abs=1e-5)


def reader_statements(store: VectorStore, run: Callable[[], object]) -> list[str]:
    """The SQL `run` made the store execute on its read connection."""
    statements: list[str] = []
    store.reader().conn.set_trace_callback(statements.append)
    try:
        run()
    finally:
        store.reader().conn.set_trace_callback(None)
    return statements


def make_store(backend: str, vec_db: Database, numpy_db: Database) -> VectorStore:
    if backend == "sqlite-vec":
        return SqliteVecStore(vec_db, DIMS)
    return NumpyStore(numpy_db)


def first_search(store: VectorStore, query: np.ndarray) -> None:
    store.search(query, 5, 1, [""])
    if isinstance(store, SqliteVecStore):
        assert store.wait_loaded(10)


@pytest.mark.parametrize("backend", ["sqlite-vec", "numpy"])
def test_a_search_after_a_write_reads_only_the_changed_rows(
    backend: str, vec_db: Database, numpy_db: Database
) -> None:
    store = make_store(backend, vec_db, numpy_db)
    db = vec_db if backend == "sqlite-vec" else numpy_db
    rng = np.random.default_rng(9)
    ids = insert_chunks(db, store, unit_rows(rng, 400), [""] * 400)
    first_search(store, unit_rows(rng, 1)[0])
    target = unit_rows(rng, 1)
    (new_id,) = insert_chunks(db, store, target, [""])
    with db.transaction() as conn:
        store.delete(conn, 1, ids[:50])
        conn.executemany("DELETE FROM memory_chunks WHERE id = ?", [(i,) for i in ids[:50]])
        bump_version(conn)

    found: list[list[tuple[int, float]]] = []
    sql = reader_statements(store, lambda: found.append(store.search(target[0], 500, 1, [""])))

    assert not [s for s in sql if "ORDER BY chunk_id" in s or "MATCH" in s]  # no full read
    assert found[0][0] == (new_id, pytest.approx(1.0, abs=STEP))
    assert {i for i, _ in found[0]} == {*ids[50:], new_id}


def test_sqlite_vec_answers_through_vec0_while_the_matrix_is_read(vec_db: Database) -> None:
    rng = np.random.default_rng(11)
    store = SqliteVecStore(vec_db, DIMS)
    insert_chunks(vec_db, store, unit_rows(rng, 500), [""] * 500)
    query = unit_rows(rng, 1)[0]

    first: list[list[tuple[int, float]]] = []
    first_sql = reader_statements(store, lambda: first.append(store.search(query, 20, 1, [""])))
    assert store.wait_loaded(10)
    later: list[list[tuple[int, float]]] = []
    later_sql = reader_statements(store, lambda: later.append(store.search(query, 20, 1, [""])))

    assert [s for s in first_sql if "MATCH" in s]
    assert not [s for s in later_sql if "MATCH" in s]
    assert [i for i, _ in first[0]] == [i for i, _ in later[0]]


def test_a_reused_chunk_id_is_found_by_its_new_vector(numpy_db: Database) -> None:
    store = NumpyStore(numpy_db)
    rng = np.random.default_rng(10)
    ids = insert_chunks(numpy_db, store, unit_rows(rng, 20), [""] * 20)
    store.search(unit_rows(rng, 1)[0], 5, 1, [""])
    with numpy_db.transaction() as conn:  # SQLite hands the highest id out again
        store.delete(conn, 1, ids[-1:])
        conn.execute("DELETE FROM memory_chunks WHERE id = ?", (ids[-1],))
        bump_version(conn)
    target = unit_rows(rng, 1)
    (again,) = insert_chunks(numpy_db, store, target, ["chat-a"])

    assert again == ids[-1]
    assert store.search(target[0], 1, 1, ["chat-a"]) == [(again, pytest.approx(1.0, abs=STEP))]
    assert again not in {i for i, _ in store.search(target[0], 20, 1, [""])}


@pytest.mark.parametrize("backend", ["sqlite-vec", "numpy"])
def test_a_search_never_returns_another_scope(
    backend: str, vec_db: Database, numpy_db: Database
) -> None:
    db = vec_db if backend == "sqlite-vec" else numpy_db
    store: VectorStore = SqliteVecStore(db, DIMS) if backend == "sqlite-vec" else NumpyStore(db)
    rng = np.random.default_rng(1)
    vectors = unit_rows(rng, 200)
    ids = insert_chunks(db, store, vectors, ["chat-a"] * 100 + ["chat-b"] * 100)

    hits = store.search(vectors[150], 300, 1, ["chat-a"])

    assert len(hits) == 100
    assert {i for i, _ in hits} == set(ids[:100])


def test_numpy_sees_chunks_added_after_its_first_search(numpy_db: Database) -> None:
    store = NumpyStore(numpy_db)
    rng = np.random.default_rng(2)
    insert_chunks(numpy_db, store, unit_rows(rng, 10), [""] * 10)
    store.search(unit_rows(rng, 1)[0], 5, 1, [""])
    # Written through another store object (another process would do the same).
    target = unit_rows(rng, 1)
    (new_id,) = insert_chunks(numpy_db, NumpyStore(numpy_db), target, [""])

    (best, score) = store.search(target[0], 1, 1, [""])[0]

    assert best == new_id and score == pytest.approx(1.0, abs=STEP)


def test_numpy_without_its_matrix_table_reads_the_centroids(numpy_db: Database) -> None:
    store = NumpyStore(numpy_db)
    rng = np.random.default_rng(3)
    insert_chunks(numpy_db, store, unit_rows(rng, 50), [""] * 50)
    query = unit_rows(rng, 1)[0]
    before = store.search(query, 10, 1, [""])
    # An index written before the matrix table existed.
    with numpy_db.transaction() as conn:
        conn.execute(f"DROP TABLE {matrix_table(1)}")
        bump_version(conn)

    # (the centroid column is float32, the matrix table 8-bit codes: the same chunks, scores
    # within a step)
    again = dict(NumpyStore(numpy_db).search(query, 50, 1, [""]))
    assert all(again[i] == pytest.approx(s, abs=STEP) for i, s in before)


def test_equal_scores_come_back_lowest_chunk_id_first(numpy_db: Database) -> None:
    store = NumpyStore(numpy_db)
    same = np.tile(unit_rows(np.random.default_rng(4), 1), (5, 1))
    ids = insert_chunks(numpy_db, store, same, [""] * 5)

    assert [i for i, _ in store.search(same[0], 3, 1, [""])] == ids[:3]


def test_deleted_chunks_are_no_longer_found(numpy_db: Database) -> None:
    store = NumpyStore(numpy_db)
    rng = np.random.default_rng(5)
    vectors = unit_rows(rng, 20)
    ids = insert_chunks(numpy_db, store, vectors, [""] * 20)
    with numpy_db.transaction() as conn:
        store.delete(conn, 1, ids[:10])
        conn.executemany("DELETE FROM memory_chunks WHERE id = ?", [(i,) for i in ids[:10]])
        bump_version(conn)

    found = {i for i, _ in store.search(vectors[0], 20, 1, [""])}

    assert found == set(ids[10:])


def test_an_index_from_before_the_matrix_table_keeps_every_chunk_after_a_write(
    numpy_db: Database,
) -> None:
    store = NumpyStore(numpy_db)
    rng = np.random.default_rng(6)
    old = unit_rows(rng, 30)
    old_ids = insert_chunks(numpy_db, store, old, [""] * 30)
    with numpy_db.transaction() as conn:  # as written before the table existed
        conn.execute(f"DROP TABLE {matrix_table(1)}")
        bump_version(conn)

    (new_id,) = insert_chunks(numpy_db, store, unit_rows(rng, 1), [""])

    found = {i for i, _ in store.search(old[0], 100, 1, [""])}
    assert found == {*old_ids, new_id}


def test_a_matrix_kept_current_through_many_writes_equals_one_read_afresh(
    numpy_db: Database, tmp_path: Path
) -> None:
    store = NumpyStore(numpy_db)
    rng = np.random.default_rng(12)
    live = insert_chunks(numpy_db, store, unit_rows(rng, 300), [""] * 300)
    first_search(store, unit_rows(rng, 1)[0])
    for _ in range(30):  # more rows added than the matrix had room for, and rows freed
        gone = [live.pop(int(j)) for j in sorted(rng.choice(len(live), 10, False), reverse=True)]
        with numpy_db.transaction() as conn:
            store.delete(conn, 1, gone)
            conn.executemany("DELETE FROM memory_chunks WHERE id = ?", [(i,) for i in gone])
            bump_version(conn)
        live += insert_chunks(numpy_db, store, unit_rows(rng, 30), ["", "chat-a"] * 15)
        store.search(unit_rows(rng, 1)[0], 5, 1, [""])
    afresh = NumpyStore(open_database(tmp_path / "agent.sqlite", vector_backend="numpy"))

    for query in unit_rows(rng, 10):
        for scopes in ([""], ["chat-a"], ["", "chat-a"]):
            assert store.search(query, 50, 1, scopes) == afresh.search(query, 50, 1, scopes)
    assert len(store.search(query, 10_000, 1, ["", "chat-a"])) == len(live) == 900


def test_a_reader_behind_a_pruned_change_log_reads_the_matrix_again(
    numpy_db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(vector_tables, "LOG_KEEP", 5)
    store = NumpyStore(numpy_db)
    rng = np.random.default_rng(13)
    insert_chunks(numpy_db, store, unit_rows(rng, 100), [""] * 100)
    first_search(store, unit_rows(rng, 1)[0])
    targets = unit_rows(rng, 10)
    added = [insert_chunks(numpy_db, store, targets[i : i + 1], [""])[0] for i in range(10)]
    with numpy_db.transaction() as conn:
        (kept,) = conn.execute(f"SELECT count(*) FROM {vector_tables.log_table(1)}").fetchone()

    sql = reader_statements(store, lambda: store.search(targets[0], 1, 1, [""]))

    assert kept <= 6
    assert [s for s in sql if "ORDER BY chunk_id" in s]  # read in full: the log lost changes
    for target, cid in zip(targets, added, strict=True):
        assert store.search(target, 1, 1, [""])[0][0] == cid


@pytest.mark.parametrize("backend", ["sqlite-vec", "numpy"])
def test_searches_from_several_threads_during_writes_stay_exact(
    backend: str, vec_db: Database, numpy_db: Database
) -> None:
    store = make_store(backend, vec_db, numpy_db)
    db = vec_db if backend == "sqlite-vec" else numpy_db
    rng = np.random.default_rng(14)
    insert_chunks(db, store, unit_rows(rng, 400), [""] * 400)
    queries = unit_rows(rng, 4)
    errors: list[BaseException] = []
    stop = threading.Event()

    def search_until_stopped(query: np.ndarray) -> None:
        try:
            while not stop.is_set():
                store.search(query, 20, 1, [""])
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=search_until_stopped, args=(q,)) for q in queries]
    for t in threads:
        t.start()
    added = [insert_chunks(db, store, unit_rows(rng, 5), [""] * 5) for _ in range(20)]
    stop.set()
    for t in threads:
        t.join()
    if isinstance(store, SqliteVecStore):
        assert store.wait_loaded(10)

    assert errors == []
    assert len(store.search(queries[0], 1000, 1, [""])) == 400 + 5 * len(added)
    fresh = NumpyStore(db)
    for query in queries:
        assert store.search(query, 20, 1, [""]) == fresh.search(query, 20, 1, [""])
    fresh.close()


# ---- warm-up ----------------------------------------------------------------------------------


def test_a_numpy_search_after_a_preload_reads_no_vectors(numpy_db: Database) -> None:
    store = NumpyStore(numpy_db)
    rng = np.random.default_rng(11)
    insert_chunks(numpy_db, store, unit_rows(rng, 50), [""] * 50)
    query = unit_rows(rng, 1)[0]

    store.preload(1)
    assert store.wait_loaded(10)
    statements = reader_statements(store, lambda: store.search(query, 5, 1, [""]))

    assert not [s for s in statements if "memory_matrix" in s and "log" not in s]


def test_a_numpy_search_during_a_preload_waits_for_it_and_reads_once(
    numpy_db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = NumpyStore(numpy_db)
    rng = np.random.default_rng(12)
    ids = insert_chunks(numpy_db, store, unit_rows(rng, 40), [""] * 40)
    query = unit_rows(rng, 1)[0]
    reads: list[int] = []
    searching = threading.Event()
    real_read, real_search = matrix_cache.read_matrix, matrix_cache.MatrixCache.search

    def slow_read(*args: Any, **kwargs: Any) -> Any:
        reads.append(1)
        searching.wait(10)  # the preload's read goes on only once the search has begun
        return real_read(*args, **kwargs)

    def search(self: Any, *args: Any, **kwargs: Any) -> Any:
        searching.set()
        return real_search(self, *args, **kwargs)

    monkeypatch.setattr(matrix_cache, "read_matrix", slow_read)
    monkeypatch.setattr(matrix_cache.MatrixCache, "search", search)
    store.preload(1)
    found: list[list[tuple[int, float]]] = []
    searcher = threading.Thread(target=lambda: found.append(store.search(query, 5, 1, [""])))
    searcher.start()
    searcher.join(10)

    assert reads == [1]
    assert found and {cid for cid, _ in found[0]} <= set(ids)


def test_warm_on_an_index_never_built_does_nothing(
    make_workspace: WorkspaceFactory, make_index: IndexFactory
) -> None:
    idx = make_index(make_workspace({"MEMORY.md": "# Memory\n"}), keyword_config())

    idx.warm()  # no generation yet, keyword-only: nothing to read, nothing raised

    assert idx.active_generation() is None


def test_warm_starts_reading_the_active_generations_vectors(
    make_workspace: WorkspaceFactory, make_index: IndexFactory, use_model: None
) -> None:
    workspace = make_workspace({"MEMORY.md": "# Memory\n\n- The cat is called Tom.\n"})
    make_index(workspace, use_config(vector_backend="numpy")).sync()
    idx = make_index(workspace, use_config(vector_backend="numpy"))  # a process starting up

    idx.warm()
    store = idx._store(512)
    assert isinstance(store, NumpyStore) and store.wait_loaded(10)
    statements = reader_statements(store, lambda: idx.search("Tom", preset="vector"))

    assert not [s for s in statements if "memory_matrix" in s and "log" not in s]


def exact(store: VectorStore, query: np.ndarray, k: int = 30) -> list[int]:
    return [i for i, _ in store.search(query, k, 1, [""])]


def test_sqlite_vec_never_answers_from_a_vec0_table_a_numpy_process_left_behind(
    vec_db: Database, numpy_db: Database
) -> None:
    rng = np.random.default_rng(21)
    insert_chunks(vec_db, SqliteVecStore(vec_db, DIMS), unit_rows(rng, 100), [""] * 100)
    target = unit_rows(rng, 1)
    (new_id,) = insert_chunks(numpy_db, NumpyStore(numpy_db), target, [""])  # no vec0 row

    fresh = SqliteVecStore(vec_db, DIMS)  # a one-off search: nothing in memory yet
    found: list[list[tuple[int, float]]] = []
    sql = reader_statements(fresh, lambda: found.append(fresh.search(target[0], 5, 1, [""])))

    assert not [s for s in sql if "MATCH" in s]
    assert found[0][0] == (new_id, pytest.approx(1.0, abs=STEP))


def test_sqlite_vec_catches_its_vec0_table_up_with_numpy_deletes_and_reused_ids(
    vec_db: Database, numpy_db: Database
) -> None:
    rng = np.random.default_rng(22)
    ids = insert_chunks(vec_db, SqliteVecStore(vec_db, DIMS), unit_rows(rng, 100), [""] * 100)
    numpy = NumpyStore(numpy_db)
    with numpy_db.transaction() as conn:  # the highest id is handed out again below
        numpy.delete(conn, 1, ids[-5:])
        conn.executemany("DELETE FROM memory_chunks WHERE id = ?", [(i,) for i in ids[-5:]])
        bump_version(conn)
    target = unit_rows(rng, 1)
    (again,) = insert_chunks(numpy_db, numpy, target, [""])
    assert again == ids[-5]

    vec = SqliteVecStore(vec_db, DIMS)
    vec.catch_up(1)
    query = unit_rows(rng, 1)[0]

    assert vec.search_vec0(target[0], 1, 1, [""]) == [(again, pytest.approx(1.0, abs=STEP))]
    assert [i for i, _ in vec.search_vec0(query, 30, 1, [""])] == exact(NumpyStore(numpy_db), query)
    assert not set(ids[-4:]) & {i for i, _ in vec.search_vec0(query, 200, 1, [""])}
    # in step again: the next one-off search is answered by vec0 while the matrix loads
    sql = reader_statements(vec, lambda: vec.search(query, 5, 1, [""]))
    assert [s for s in sql if "MATCH" in s]


def test_a_sqlite_vec_write_after_numpy_writes_brings_vec0_in_step(
    vec_db: Database, numpy_db: Database
) -> None:
    rng = np.random.default_rng(23)
    vec = SqliteVecStore(vec_db, DIMS)
    insert_chunks(vec_db, vec, unit_rows(rng, 50), [""] * 50)
    insert_chunks(numpy_db, NumpyStore(numpy_db), unit_rows(rng, 30), [""] * 30)
    insert_chunks(vec_db, vec, unit_rows(rng, 10), [""] * 10)
    query = unit_rows(rng, 1)[0]

    assert [i for i, _ in vec.search_vec0(query, 90, 1, [""])] == exact(
        NumpyStore(numpy_db), query, 90
    )


def test_numpy_and_sqlite_vec_processes_on_one_database_find_the_same_notes(
    make_workspace: WorkspaceFactory, make_index: IndexFactory, use_model: None
) -> None:
    if not sqlite_vec_loads():
        pytest.skip("sqlite-vec cannot be loaded by this Python's SQLite")
    workspace = make_workspace(
        {
            "MEMORY.md": "# Memory\n\n- The cat is called Tom.\n",
            "memory/trips.md": "# Trips\n\nWe hiked the Dolomites in June.\n",
        }
    )
    make_index(workspace, use_config()).sync()  # sqlite-vec builds the index
    numpy = make_index(workspace, use_config(vector_backend="numpy"))
    (workspace / "memory" / "boat.md").write_text("# Boat\n\nThe sailing boat is moored at Kiel.\n")
    (workspace / "memory" / "trips.md").write_text("# Trips\n\nWe flew to Lisbon in May.\n")
    numpy.sync()
    questions = ["where is the yacht kept", "which city did we fly to", "mountain walking"]

    for question in questions:
        one_off = make_index(workspace, use_config())  # a fresh `pinch memory search`
        assert one_off.vector_backend == "sqlite-vec"
        got = [(h.path, h.start_line) for h in one_off.search(question, preset="vector")]
        want = [(h.path, h.start_line) for h in numpy.search(question, preset="vector")]
        assert got == want
    assert make_index(workspace, use_config()).search(questions[0], preset="vector")[0].path == (
        "memory/boat.md"
    )
