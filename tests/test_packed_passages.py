"""Issue 22 (helper units, migration m014): a chunk's passages packed in one row naming their
vectors by embedding cache id; the cache's ids kept by a VACUUM and never handed out twice; an
index in the layout before upgrading by itself with every answer, vector and portable row kept;
orphan pruning dropping exactly the vectors no passage names.

Real SQLite files, the real sqlite-vec and the real USE model (512 dimensions).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memory.errors import DatabaseError
from memory.index.index import MemoryIndex
from memory.store.cache_codec import float32_from_cache
from memory.store.compact import compact
from memory.store.index_embedcache import ModelKey, SqliteEmbeddingCache, prune_orphans
from memory.store.passage_pack import spans_of
from memory.store.search_queries import search_queries
from memory.store.transfer_sqlite import SqliteSource
from tests.conftest import IndexFactory, WorkspaceFactory, use_config
from tests.layout_support import m013_layout
from tests.migrate_support import sqlite_hashes
from tests.test_compact_vectors import FILES

QUESTIONS = ("who lost a compass", "which bike does Anna ride", "what did I buy at the market")


def rows(idx: MemoryIndex, sql: str, *params: Any) -> list[Any]:
    return list(idx.db.execute(sql, params))


def answers(idx: MemoryIndex) -> list[list[tuple[str, int, int, float]]]:
    return [
        [(h.path, h.start_line, h.end_line, round(h.score, 6)) for h in idx.search(q)]
        for q in QUESTIONS
    ]


def passages(idx: MemoryIndex) -> tuple[list[tuple[int, int, int]], np.ndarray]:
    ids = [r[0] for r in rows(idx, "SELECT id FROM memory_chunks ORDER BY id")]
    found = search_queries(idx.db).passage_vectors(ids)
    assert found is not None
    return found.spans, found.matrix


def cache_model(conn: Any) -> tuple[str, str, int]:
    """The one model the test's cache holds vectors of (provider, model, dimensions), in
    any layout (named by a number since m014, in the row before; its width the model's since
    m016, the row's before)."""
    numbered = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE name = 'embedding_models'"
    ).fetchone()
    table = "embedding_models" if numbered else "embedding_cache"
    provider, model = conn.execute(f"SELECT DISTINCT provider, model FROM {table}").fetchone()
    widths = {str(c[1]) for c in conn.execute("PRAGMA table_info(embedding_cache)")}
    table = "embedding_cache" if "dimensions" in widths else "embedding_models"
    (dims,) = conn.execute(f"SELECT DISTINCT dimensions FROM {table}").fetchone()
    return provider, model, int(dims)


def named_ids(idx: MemoryIndex) -> set[int]:
    """The cache ids the packed passages name."""
    return {
        int(ref)
        for (blob,) in rows(idx, "SELECT spans FROM memory_passages")
        for ref in spans_of(blob)[:, 2]
    }


def test_a_chunks_passages_are_one_row_naming_their_cached_vectors_by_id(
    make_workspace: WorkspaceFactory, make_index: IndexFactory
) -> None:
    idx = make_index(make_workspace(FILES), use_config())
    idx.sync()

    assert rows(idx, "SELECT count(*) FROM memory_units")[0][0] == 0
    (chunks,) = rows(idx, "SELECT count(*) FROM memory_chunks")[0]
    assert rows(idx, "SELECT count(*) FROM memory_passages")[0][0] == chunks
    cached = {int(i) for (i,) in rows(idx, "SELECT id FROM embedding_cache")}
    assert named_ids(idx) == cached  # every vector named, by id, nothing else stored
    spans, matrix = passages(idx)
    assert len(spans) == matrix.shape[0] > chunks and matrix.shape[1] == 512
    hits = idx.search("which bike does Anna ride")
    assert hits and hits[0].path == "USER.md" and "Gazelle" in hits[0].snippet


def test_an_index_in_the_layout_before_upgrades_keeping_every_answer_vector_and_row(
    make_workspace: WorkspaceFactory, make_index: IndexFactory, tmp_path: Path
) -> None:
    workspace = make_workspace(FILES)
    idx = make_index(workspace, use_config())
    idx.sync()
    before = answers(idx), passages(idx)
    path = idx.db.path
    with sqlite_hashes(path) as portable:
        pass
    with idx.db.transaction() as conn:
        m013_layout(conn)
        # one name a VACUUM renumbered (found again by hash), one chunk with a vector of its
        # own (an index older than the cache's vectors): it keeps its rows
        conn.execute("UPDATE memory_units SET cache_row = cache_row + 1 WHERE id = 1")
        (own,) = conn.execute("SELECT max(chunk_id) FROM memory_units").fetchone()
        own_rows = conn.execute(
            "SELECT u.id, c.vector FROM memory_units u JOIN embedding_cache c "
            "ON c.rowid = u.cache_row WHERE u.chunk_id = ?",
            (own,),
        ).fetchall()
        floats = float32_from_cache(conn, cache_model(conn), [v for _, v in own_rows])
        conn.executemany(  # (as such an index kept them: float32)
            "UPDATE memory_units SET vector = ? WHERE id = ?",
            [(f, i) for (i, _), f in zip(own_rows, floats, strict=True)],
        )
    assert rows(idx, "SELECT count(*) FROM memory_units")[0][0] > 0
    idx.close()

    idx = make_index(workspace, use_config())  # m014 runs on open

    (units,) = rows(idx, "SELECT count(*) FROM memory_units WHERE chunk_id = ?", own)[0]
    assert units > 0 and rows(idx, "SELECT count(*) FROM memory_units")[0][0] == units
    assert (
        rows(idx, "SELECT count(*) FROM memory_passages")[0][0]
        == rows(idx, "SELECT count(*) FROM memory_chunks WHERE id != ?", own)[0][0]
    )
    spans, matrix = passages(idx)
    assert spans == before[1][0] and np.array_equal(matrix, before[1][1])
    assert answers(idx) == before[0]
    with sqlite_hashes(path) as after:
        # the portable rows (`pinch migrate`): the same ids, hashes and vectors
        assert after["memory_units"] == portable["memory_units"]
        assert after["embedding_cache"] == portable["embedding_cache"]
    assert idx.sync().chunks_embedded == 0


def test_cache_ids_survive_a_vacuum_and_are_never_handed_out_again(
    make_workspace: WorkspaceFactory, make_index: IndexFactory
) -> None:
    workspace = make_workspace(FILES)
    idx = make_index(workspace, use_config())
    idx.sync()
    (workspace / "memory" / "2026-01-10.md").unlink()  # its vectors are no passage's now
    idx.sync()
    with idx.db.transaction() as conn:
        assert prune_orphans(conn, now=time.time() + 7200) > 0
    kept = dict(rows(idx, "SELECT id, chunk_hash FROM embedding_cache"))
    (top,) = rows(idx, "SELECT seq FROM sqlite_sequence WHERE name = 'embedding_cache'")[0]
    assert len(kept) < top  # holes where the dropped rows were
    before = answers(idx), passages(idx)

    compact(idx.db)  # VACUUM

    assert dict(rows(idx, "SELECT id, chunk_hash FROM embedding_cache")) == kept
    spans, matrix = passages(idx)
    assert spans == before[1][0] and np.array_equal(matrix, before[1][1])
    assert answers(idx) == before[0]
    with idx.db.transaction() as conn:
        SqliteEmbeddingCache(idx.db).put(
            conn, ModelKey("test", "m", 4), [("ab" * 32, np.ones(4, "<f4").tobytes())]
        )
    (new,) = rows(
        idx, "SELECT id FROM embedding_cache WHERE chunk_hash = ?", bytes.fromhex("ab" * 14)
    )[0]
    assert new > top


def test_orphan_pruning_drops_exactly_the_vectors_no_passage_names(
    make_workspace: WorkspaceFactory, make_index: IndexFactory
) -> None:
    workspace = make_workspace(FILES)
    idx = make_index(workspace, use_config())
    idx.sync()
    (workspace / "USER.md").write_text("# User\n\n- Anna prefers coffee now.\n")
    (workspace / "memory" / "2026-01-10.md").unlink()
    idx.sync()
    with idx.db.transaction() as conn:
        # a vector of another model, and one only a passage row of the older layout names
        # by hash (a chunk left unpacked: its passages carry vectors of their own)
        SqliteEmbeddingCache(idx.db).put(
            conn, ModelKey("test", "m", 4), [("cd" * 32, np.ones(4, "<f4").tobytes())]
        )
        (loose_hash,) = conn.execute(
            "SELECT chunk_hash FROM embedding_cache WHERE id = (SELECT min(id) FROM "
            "embedding_cache WHERE id NOT IN (SELECT value FROM json_each(?)))",
            (str(sorted(named_ids(idx))),),
        ).fetchone()
        conn.execute(
            "INSERT INTO memory_units(chunk_id, generation, start_line, end_line, hash, vector) "
            "SELECT id, generation, start_line, end_line, ?, X'00' FROM memory_chunks LIMIT 1",
            (loose_hash,),
        )
    all_ids = {int(i) for (i,) in rows(idx, "SELECT id FROM embedding_cache")}
    kept_by_hash = {int(i) for (i,) in rows(
        idx, "SELECT id FROM embedding_cache WHERE chunk_hash = ?", loose_hash
    )}  # fmt: skip
    named = named_ids(idx) | kept_by_hash
    assert all_ids - named  # the edited and the deleted file's vectors, and the other model's

    with idx.db.transaction() as conn:
        assert prune_orphans(conn, now=time.time()) == 0  # within the grace period
        pruned = prune_orphans(conn, now=time.time() + 7200)

    assert pruned == len(all_ids - named)
    assert {int(i) for (i,) in rows(idx, "SELECT id FROM embedding_cache")} == named


def test_migrate_refuses_a_source_in_the_layout_before_with_advice(
    make_workspace: WorkspaceFactory, make_index: IndexFactory
) -> None:
    """`pinch migrate` reads its source without migrating it: an older layout is refused (it
    would be read wrongly), with what to run first; nothing is changed."""
    idx = make_index(make_workspace(FILES), use_config())
    idx.sync()
    with idx.db.transaction() as conn:
        m013_layout(conn)
    path = idx.db.path
    idx.close()

    with pytest.raises(DatabaseError, match="pinch memory status"):
        SqliteSource(path)


def test_the_passage_read_gives_each_passage_its_own_vector_and_skips_a_lost_one(
    make_workspace: WorkspaceFactory, make_index: IndexFactory
) -> None:
    idx = make_index(make_workspace(FILES), use_config())
    idx.sync()
    ids = [r[0] for r in rows(idx, "SELECT id FROM memory_chunks ORDER BY id")]
    cached = dict(rows(idx, "SELECT id, vector FROM embedding_cache"))
    packed = {c: spans_of(b) for c, b in rows(idx, "SELECT chunk_id, spans FROM memory_passages")}
    # One passage's vector gone (a write between a search's reads): it alone is left out.
    lost = int(packed[ids[0]][0, 2])
    idx.db.execute("DELETE FROM embedding_cache WHERE id = ?", (lost,))
    asked = [ids[-1], *ids, ids[0]]  # any order, a chunk twice, an id that does not exist

    found = search_queries(idx.db).passage_vectors([*asked, 10**9])

    assert found is not None
    expected = [
        (c, int(s), int(e), int(ref))
        for c in sorted(set(ids))
        for s, e, ref in packed[c].tolist()
        if ref != lost
    ]
    assert found.spans == [(c, s, e) for c, s, e, _ in expected]
    with idx.db.lock:
        model = cache_model(idx.db.conn)
        one_by_one = [
            np.frombuffer(float32_from_cache(idx.db.conn, model, [cached[r]])[0], dtype="<f4")
            for *_, r in expected
        ]
    assert np.array_equal(found.matrix, np.stack(one_by_one))
