"""Issue 22: each vector stored once, as 8-bit codes; an older index upgrades by itself; a
compaction gives back what the cache holds beyond the index's needs; `pinch memory status`
shows the database beside the notes.

Real SQLite files, the real sqlite-vec and the real USE model (512 dimensions).
"""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np

from memory.index.index import MemoryIndex
from memory.store.cache_codec import float32_from_cache
from memory.store.compact import compact, reclaimable
from memory.store.index_embedcache import cache_slack, prune_orphans
from memory.store.passage_pack import passage_count
from memory.store.search_queries import search_queries
from memory.store.vector_codec import (
    decode,
    decode_many,
    encode,
    encode_many,
    is_7bit,
    is_quantised,
)
from tests.conftest import IndexFactory, WorkspaceFactory, use_config
from tests.layout_support import loose_passages

# Enough passages for a first cached batch that would set a model's 4-bit center.
GROCERIES = ("apples", "pears", "plums", "leeks", "onions", "rice", "flour", "lentils", "figs")
FILES = {
    "MEMORY.md": "# Memory\n\n- My cat is called Tom and he sleeps on the blue sofa.\n",
    "USER.md": "# User\n\n- Anna prefers tea to coffee.\n\n- Anna's bike is a green Gazelle.\n",
    "memory/2026-01-10.md": "# 2026-01-10\n\nWent hiking in the Alps with Ben.\n\n"
    "Ben lost his compass near the glacier.\n",
    "memory/2026-01-12.md": "# 2026-01-12\n\n"
    + "".join(f"- Errand {i}: bought {w} at the market.\n\n" for i, w in enumerate(GROCERIES)),
}


def rows(idx: MemoryIndex, sql: str, *params: Any) -> list[Any]:
    return list(idx.db.execute(sql, params))


# ---- the codec ----------------------------------------------------------------------------


def test_a_vector_comes_back_within_half_a_step_and_a_quarter_of_the_bytes() -> None:
    rng = np.random.default_rng(1)
    v = rng.standard_normal(384).astype(np.float32)
    v /= np.linalg.norm(v)

    blob = encode(v)

    assert is_quantised(blob) and len(blob) == 384 + 6
    assert np.abs(decode(blob) - v).max() <= np.abs(v).max() / 254 + 1e-7
    q = rng.standard_normal(384).astype(np.float32)
    q /= np.linalg.norm(q)
    assert abs(float(decode(blob) @ q) - float(v @ q)) < 2e-3


def test_float32_blobs_and_odd_widths_read_as_before() -> None:
    rng = np.random.default_rng(2)
    old = rng.standard_normal((3, 8)).astype("<f4")
    odd = rng.standard_normal(7).astype(np.float32)

    assert decode(old[0].tobytes()).tolist() == old[0].tolist()
    assert not is_quantised(encode(odd)) and decode(encode(odd)).tolist() == odd.tolist()
    mixed = [old[0].tobytes(), *encode_many(old[1:])]
    assert decode_many(mixed)[0].tolist() == old[0].tolist()
    assert np.abs(decode_many(mixed)[1:] - old[1:]).max() < 0.02


# ---- stored once ----------------------------------------------------------------------------


def test_passages_and_centroids_are_stored_once_and_search_reads_them(
    make_workspace: WorkspaceFactory, make_index: IndexFactory
) -> None:
    idx = make_index(make_workspace(FILES), use_config())
    idx.sync()

    # no copy in the passage rows nor in the chunk rows: the cache and the matrix hold them
    assert rows(idx, "SELECT count(*) FROM memory_units WHERE vector IS NOT NULL")[0][0] == 0
    assert rows(idx, "SELECT count(*) FROM memory_chunks WHERE centroid IS NOT NULL")[0][0] == 0
    cached = rows(idx, "SELECT vector FROM embedding_cache")
    # 7-bit codes around the model's center (cache_codec.CACHE_BITS)
    assert cached and all(is_7bit(v) and len(v) == 512 * 7 // 8 + 6 for (v,) in cached)
    ids = [r[0] for r in rows(idx, "SELECT id FROM memory_chunks")]
    found = search_queries(idx.db).passage_vectors(ids)
    with idx.db.lock:
        units = passage_count(idx.db.conn)
    assert found is not None and len(found.spans) == units and found.matrix.shape[1] == 512

    hits = idx.search("which bike does Anna ride")
    assert hits and hits[0].path == "USER.md" and "Gazelle" in hits[0].snippet


def old_format(idx: MemoryIndex) -> None:
    """Turn the index into what the previous version wrote: float32 everywhere, passage
    vectors copied into their rows, and a generation identity without "vectors"."""
    with idx.db.transaction() as conn:
        loose_passages(conn)
        cached = conn.execute(
            "SELECT c.id, m.provider, m.model, m.dimensions, c.vector FROM embedding_cache c "
            "JOIN embedding_models m ON m.id = c.model_id"
        ).fetchall()
        for rowid, provider, model, dims, blob in cached:
            conn.execute(
                "UPDATE embedding_cache SET vector = ? WHERE id = ?",
                (float32_from_cache(conn, (provider, model, dims), [blob])[0], rowid),
            )
        conn.execute(
            "UPDATE memory_units SET cache_row = NULL, vector = (SELECT c.vector FROM "
            "embedding_cache c WHERE c.chunk_hash = memory_units.hash)"
        )
        gen, identity = conn.execute(
            "SELECT id, identity FROM memory_generations WHERE state = 'active'"
        ).fetchone()
        old = {k: v for k, v in json.loads(identity).items() if k != "vectors"}
        conn.execute(
            "UPDATE memory_generations SET identity = ? WHERE id = ?", (json.dumps(old), gen)
        )


def test_an_older_index_is_searched_as_it_is_then_rebuilt_and_compacted_losing_nothing(
    make_workspace: WorkspaceFactory, make_index: IndexFactory
) -> None:
    workspace = make_workspace(FILES)
    idx = make_index(workspace, use_config())
    idx.sync()
    before = [(h.path, h.start_line) for h in idx.search("who lost a compass")]
    old_format(idx)

    assert idx.status().pending_rebuild
    # searched as it is meanwhile: its passage rows carry float32 vectors
    assert [(h.path, h.start_line) for h in idx.search("who lost a compass")] == before
    report = idx.sync()
    assert report.rebuilt and report.chunks_embedded == 0  # every vector from the cache
    assert not idx.status().pending_rebuild
    assert rows(idx, "SELECT count(*) FROM memory_units WHERE vector IS NOT NULL")[0][0] == 0
    assert [(h.path, h.start_line) for h in idx.search("who lost a compass")] == before

    assert cache_slack(idx.db.conn).float_rows > 0  # the cache is still float32
    assert reclaimable(idx.db) > 0
    compact(idx.db)
    assert cache_slack(idx.db.conn).float_rows == 0
    assert all(is_7bit(v) for (v,) in rows(idx, "SELECT vector FROM embedding_cache"))
    assert [(h.path, h.start_line) for h in idx.search("who lost a compass")] == before


def test_compaction_drops_only_cached_vectors_no_passage_names_once_they_are_old(
    make_workspace: WorkspaceFactory, make_index: IndexFactory
) -> None:
    workspace = make_workspace(FILES)
    idx = make_index(workspace, use_config())
    idx.sync()
    cached = rows(idx, "SELECT count(*) FROM embedding_cache")[0][0]
    (workspace / "memory" / "2026-01-10.md").unlink()
    idx.sync()

    # just written: another process may be about to name it
    assert cache_slack(idx.db.conn).orphan_rows == 0
    later = time.time() + 2 * 3600
    slack = cache_slack(idx.db.conn, now=later)
    assert slack.orphan_rows >= 1 and slack.orphan_bytes > 0
    with idx.db.transaction() as conn:
        assert prune_orphans(conn, now=later) == slack.orphan_rows
    assert rows(idx, "SELECT count(*) FROM embedding_cache")[0][0] == cached - slack.orphan_rows
    hits = idx.search("what is Anna's bike")
    assert hits and hits[0].path == "USER.md"
    assert idx.sync().chunks_embedded == 0  # nothing the index names was dropped


def test_a_passage_names_its_cache_row_and_a_wrong_name_falls_back_to_the_hash(
    make_workspace: WorkspaceFactory, make_index: IndexFactory
) -> None:
    idx = make_index(make_workspace(FILES), use_config())
    idx.sync()
    with idx.db.transaction() as conn:
        loose_passages(conn)  # (a chunk's passages packed name their cache rows by id alone)
    named = rows(
        idx,
        "SELECT count(*) FROM memory_units u JOIN embedding_cache c "
        "ON c.rowid = u.cache_row AND c.chunk_hash = u.hash",
    )[0][0]
    assert named == rows(idx, "SELECT count(*) FROM memory_units")[0][0]
    ids = [r[0] for r in rows(idx, "SELECT id FROM memory_chunks ORDER BY id")]
    before = search_queries(idx.db).passage_vectors(ids)
    # as if a VACUUM had renumbered the cache: every name now points at another row
    with idx.db.transaction() as conn:
        conn.execute("UPDATE memory_units SET cache_row = cache_row + 1")

    after = search_queries(idx.db).passage_vectors(ids)

    assert before is not None and after is not None and after.spans == before.spans
    assert np.array_equal(after.matrix, before.matrix)
