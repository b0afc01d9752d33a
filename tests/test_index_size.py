"""Issue 22, database size: the keyword index keeps no copy of the text (contentless FTS5), the
cache keys and passage hashes are stored as bytes, the cache's vectors as 4-bit codes; deletes
and edits stay exact, and an index in the previous layout upgrades by itself keeping its
search results. Real SQLite files, both vector backends, the real USE model (512 dimensions).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from memory.index.index import MemoryIndex
from memory.store import cache_codec
from memory.store.cache_codec import float32_from_cache, wide_vectors
from memory.store.chunk_text import read_text
from memory.store.content_hash import CACHE_KEY_BYTES, hash_text
from memory.store.db import open_database
from memory.store.index_embedcache import (
    ModelKey,
    SqliteEmbeddingCache,
    requantise,
)
from memory.store.migrations import memory_set
from memory.store.search_queries import search_queries
from memory.store.vector_codec import (
    decode,
    decode4_many,
    decode6_many,
    decode7_many,
    decode_centered_many,
    encodable6,
    encodable7,
    encode,
    encode4_many,
    encode6_many,
    encode7_many,
    encode_many,
    is_4bit,
    is_6bit,
    is_7bit,
    is_centered,
    is_quantised,
)
from memory.text import fts_body
from tests.conftest import IndexFactory, WorkspaceFactory, sqlite_vec_loads, use_config
from tests.layout_support import m013_layout
from tests.test_compact_vectors import FILES as COMPACT_FILES

# test_compact_vectors' notes (with enough passages for a first batch to set a model's 4-bit
# center), and a plumber whose name only one chunk holds (the keyword deletes below).
FILES = {
    **COMPACT_FILES,
    "memory/2026-01-11.md": "# 2026-01-11\n\nThe plumber Zebulon fixed the kitchen tap.\n",
}
QUESTIONS = ("who lost a compass", "which bike does Anna ride", "what is the cat called")
BACKENDS = ["numpy", "sqlite-vec"]


@pytest.fixture
def four_bit(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cache's 4-bit form (not the default: memory/store/cache_codec.py CACHE_BITS)."""
    monkeypatch.setattr(cache_codec, "CACHE_BITS", 4)


def rows(idx: MemoryIndex, sql: str, *params: Any) -> list[Any]:
    return list(idx.db.execute(sql, params))


def keyword_ids(idx: MemoryIndex, word: str) -> list[int]:
    """Rowids the keyword index itself returns for `word` (no join with the chunk rows)."""
    return [i for i, _ in search_queries(idx.db).keyword_ranked(f'"{word}"', 50)]


def open_index(make_index: IndexFactory, workspace: Any, backend: str) -> MemoryIndex:
    if backend == "sqlite-vec" and not sqlite_vec_loads():
        pytest.skip("sqlite-vec cannot be loaded by this Python's SQLite")
    return make_index(workspace, use_config(vector_backend=backend))


def answers(idx: MemoryIndex) -> list[list[tuple[str, int]]]:
    return [[(h.path, h.start_line) for h in idx.search(q)][:3] for q in QUESTIONS]


# ---- the 4- and 6-bit codecs ------------------------------------------------------------------


def e5_like(seed: int, float32: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """200 unit vectors like e5's — every text near one direction (|mean| ≈ 0.9), the rest
    spread around it —, a question near the 8th, and the center of the first 50."""
    rng = np.random.default_rng(seed)
    common = rng.standard_normal(384).astype(np.float32)
    spread = rng.standard_normal((200, 384)).astype(np.float32)
    docs = 2.2 * common / np.linalg.norm(common) + spread / np.sqrt(384)
    docs /= np.linalg.norm(docs, axis=1, keepdims=True)
    query = docs[7] + 0.2 * rng.standard_normal(384).astype(np.float32) / np.sqrt(384)
    query /= np.linalg.norm(query)
    if float32:
        docs = docs.astype(np.float32)
    return docs, query, docs[:50].mean(axis=0)


def test_a_4bit_vector_is_half_the_8bit_one_and_keeps_the_ranking_close() -> None:
    docs, query, center = e5_like(3, float32=False)

    blobs = encode4_many(docs, center)

    assert all(is_4bit(b) and len(b) == 384 // 2 + 6 for b in blobs)
    assert len(encode(docs[0])) == 384 + 6
    back = decode4_many(blobs, center)
    with pytest.raises(ValueError):
        decode(blobs[0])  # never read without its center
    assert np.abs(back @ query - docs @ query).max() < 0.01
    assert np.abs(back @ query - docs @ query).mean() < 0.003
    assert int(np.argmax(back @ query)) == 7
    plain = [decode(b) for b in encode_many(docs - center)]  # 8-bit of the same residuals
    assert np.abs(np.array(plain) + center - docs).max() < np.abs(back - docs).max()


def centered_codec_holds(
    encoder: Any, decoder: Any, is_form: Any, bits: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """What every centered uniform form promises (6- and 7-bit): its length, never read without
    the center, each component within half a step of the residual's largest, the center itself
    exact, and rows of another centered form read back beside it in order. Returns (the score
    error against a question, the 8-bit codes' error)."""
    docs, query, center = e5_like(seed)
    blobs = encoder(docs, center)
    assert all(is_form(b) and is_centered(b) and len(b) == 384 * bits // 8 + 6 for b in blobs)
    back = decoder(blobs, center)
    with pytest.raises(ValueError):
        decode(blobs[0])  # never read without its center
    assert int(np.argmax(back @ query)) == 7
    steps = np.abs(docs - center).max(axis=1, keepdims=True) / (2 ** (bits - 1) - 1)
    assert (np.abs(back - docs) <= steps / 2 + 1e-6).all()
    assert (decoder(encoder(center[None, :], center), center) == center).all()
    mixed = [blobs[0], *encode4_many(docs[1:3], center), blobs[3]]
    together = decode_centered_many(mixed, center)
    assert np.allclose(together[[0, 3]], back[[0, 3]])
    assert np.allclose(together[1:3], decode4_many(mixed[1:3], center))
    eight = np.abs(np.array([decode(b) for b in encode_many(docs)]) @ query - docs @ query)
    return np.abs(back @ query - docs @ query), eight


def test_a_6bit_vector_is_three_quarters_of_the_8bit_one_and_nearly_as_close() -> None:
    error, eight = centered_codec_holds(encode6_many, decode6_many, is_6bit, 6, seed=4)

    docs, query, center = e5_like(4)
    four = np.abs(decode4_many(encode4_many(docs, center), center) @ query - docs @ query)
    assert error.mean() < 3 * eight.mean() and error.mean() < four.mean() / 2
    # a width whose 6-bit length a float32 blob could have stays 8-bit in the cache
    assert encodable6(384) and encodable6(512) and not encodable6(24)


def test_a_7bit_vector_saves_48_bytes_and_is_as_close_as_the_8bit_one() -> None:
    error, eight = centered_codec_holds(encode7_many, decode7_many, is_7bit, 7, seed=6)

    docs, query, center = e5_like(6)
    six = np.abs(decode6_many(encode6_many(docs, center), center) @ query - docs @ query)
    assert error.mean() < 1.5 * eight.mean() and error.mean() < six.mean() * 0.7
    # every one of the 127 codes (the grid's ends included) read back where it was written
    grid = np.tile(np.arange(-63, 64, dtype=np.float32), 4)[:384] / 63
    exact = decode7_many(encode7_many((center + grid)[None, :], center), center)[0]
    assert np.allclose(exact - center, grid, atol=1e-6)
    # 6- and 7-bit rows of one model read back together, in their order
    blobs = encode7_many(docs, center)
    mixed = [blobs[0], *encode6_many(docs[1:3], center), blobs[3]]
    together = decode_centered_many(mixed, center)
    assert np.allclose(together[[0, 3]], decode7_many(blobs, center)[[0, 3]])
    assert np.allclose(together[1:3], decode6_many(mixed[1:3], center))
    # a width whose 7-bit length a float32 blob could have stays 8-bit in the cache; nothing
    # to encode gives nothing
    assert encodable7(384) and encodable7(512) and not encodable7(48)
    assert encode7_many(docs[:0], center) == []


# ---- contentless keywords: deletes and edits stay exact ---------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_deleted_or_edited_chunk_is_never_found_by_keyword(
    make_workspace: WorkspaceFactory, make_index: IndexFactory, backend: str
) -> None:
    workspace = make_workspace(FILES)
    idx = open_index(make_index, workspace, backend)
    idx.sync()
    sql = rows(idx, "SELECT sql FROM sqlite_master WHERE name = 'memory_fts'")[0][0]
    assert "content = ''" in sql  # no second copy of the text
    assert len(keyword_ids(idx, "zebulon")) == 1 and len(keyword_ids(idx, "compass")) == 1

    (workspace / "memory" / "2026-01-11.md").unlink()
    text = FILES["memory/2026-01-10.md"].replace("compass", "map")
    (workspace / "memory" / "2026-01-10.md").write_text(text, encoding="utf-8")
    idx.sync()

    assert keyword_ids(idx, "zebulon") == [] and keyword_ids(idx, "compass") == []
    assert len(keyword_ids(idx, "map")) == 1 and len(keyword_ids(idx, "glacier")) == 1
    assert not [h for h in idx.search("Zebulon plumber") if "Zebulon" in h.snippet]
    # what FTS5 counts for ranking went with the rows: as many documents as chunks
    (chunks,) = rows(idx, "SELECT count(*) FROM memory_chunks")[0]
    assert search_queries(idx.db).match_count('"anna" OR "ben" OR "tom" OR "map"', None) == 3
    assert rows(idx, "SELECT count(*) FROM memory_fts_docsize")[0][0] == chunks
    idx.db.execute("INSERT INTO memory_fts(memory_fts) VALUES ('integrity-check')")


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_forced_rebuild_leaves_each_chunk_once_in_the_keyword_index(
    make_workspace: WorkspaceFactory, make_index: IndexFactory, backend: str
) -> None:
    workspace = make_workspace(FILES)
    idx = open_index(make_index, workspace, backend)
    idx.sync()
    before = answers(idx)

    idx.sync(force=True)

    (chunks,) = rows(idx, "SELECT count(*) FROM memory_chunks")[0]
    assert rows(idx, "SELECT count(*) FROM memory_fts_docsize")[0][0] == chunks
    live = {r[0] for r in rows(idx, "SELECT id FROM memory_chunks")}
    assert set(keyword_ids(idx, "compass")) <= live and len(keyword_ids(idx, "compass")) == 1
    assert answers(idx) == before


# ---- the previous layout upgrades by itself ---------------------------------------------------


def previous_layout(idx: MemoryIndex) -> None:
    """Turn the index into what the version before m009-m011 wrote: FTS5 with its own copy of
    every body, hashes as hex text, 8-bit cached vectors, an index on the passages'
    generation, and those migrations not recorded (with what m012-m013 changed undone too:
    plain chunk texts, the cache's unique key index, and m014's packed passages)."""
    with idx.db.transaction() as conn:
        m013_layout(conn)
        conn.execute("DROP INDEX embedding_cache_by_key")
        conn.execute(
            "CREATE TABLE cache_old (provider TEXT NOT NULL, model TEXT NOT NULL, "
            "chunk_hash TEXT NOT NULL, dimensions INTEGER NOT NULL, vector BLOB NOT NULL, "
            "created_at REAL NOT NULL, PRIMARY KEY (provider, model, chunk_hash))"
        )
        conn.execute(
            "INSERT INTO cache_old(rowid, provider, model, chunk_hash, dimensions, "
            "vector, created_at) SELECT rowid, * FROM embedding_cache"
        )
        conn.execute("DROP TABLE embedding_cache")
        conn.execute("ALTER TABLE cache_old RENAME TO embedding_cache")
        texts = conn.execute("SELECT id, text FROM memory_chunks").fetchall()
        conn.executemany(
            "UPDATE memory_chunks SET text = ? WHERE id = ?",
            [(read_text(conn, t), i) for i, t in texts],
        )
        conn.execute(
            "CREATE VIRTUAL TABLE memory_fts_old USING fts5("
            "body, tokenize = 'porter unicode61 remove_diacritics 2')"
        )
        conn.executemany(
            "INSERT INTO memory_fts_old(rowid, body) VALUES (?, ?)",
            [(i, fts_body(t)) for i, t in conn.execute("SELECT id, text FROM memory_chunks")],
        )
        conn.execute("DROP TABLE memory_fts")
        conn.execute("ALTER TABLE memory_fts_old RENAME TO memory_fts")
        conn.execute("UPDATE embedding_cache SET chunk_hash = lower(hex(chunk_hash))")
        conn.execute("UPDATE memory_units SET hash = lower(hex(hash))")
        cached = conn.execute(
            "SELECT rowid, provider, model, dimensions, vector FROM embedding_cache"
        ).fetchall()
        for rowid, provider, model, dims, blob in cached:
            (floats,) = float32_from_cache(conn, (provider, model, dims), [blob])
            conn.execute(
                "UPDATE embedding_cache SET vector = ? WHERE rowid = ?",
                (encode(decode(floats)), rowid),
            )
        conn.execute("DELETE FROM meta WHERE key LIKE 'cache_center:%'")
        conn.execute("CREATE INDEX memory_units_by_generation ON memory_units (generation)")
        conn.execute("CREATE INDEX memory_chunks_by_hash ON memory_chunks (hash)")
        names = (
            "m009_size_contentless_fts",
            "m010_size_binary_hashes",
            "m011_size_4bit_cache",
            "m012_size2_chunk_text",
            "m013_size2_cache_short_key",
            "m014_units_packed_passages",
        )
        for table in ("schema_migrations", "_migrations"):
            conn.executemany(f"DELETE FROM {table} WHERE name = ?", [(n,) for n in names])


@pytest.mark.parametrize("bits", [8, 7, 6, 4])
@pytest.mark.parametrize("backend", BACKENDS)
def test_an_index_in_the_previous_layout_upgrades_by_itself_keeping_its_answers(
    make_workspace: WorkspaceFactory,
    make_index: IndexFactory,
    backend: str,
    bits: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cache_codec, "CACHE_BITS", bits)
    workspace = make_workspace(FILES)
    idx = open_index(make_index, workspace, backend)
    idx.sync()
    before = answers(idx)
    previous_layout(idx)
    assert all(len(h) == 64 for (h,) in rows(idx, "SELECT hash FROM memory_units"))
    idx.close()

    idx = open_index(make_index, workspace, backend)  # the migrations run on open

    assert {m.__name__ for m in memory_set().migrations} <= {
        r[0] for r in rows(idx, "SELECT name FROM schema_migrations WHERE owner = 'memory'")
    }
    sql = rows(idx, "SELECT sql FROM sqlite_master WHERE name = 'memory_fts'")[0][0]
    assert "content = ''" in sql
    assert not rows(idx, "SELECT 1 FROM memory_units")  # every chunk's passages packed
    assert rows(idx, "SELECT count(*) FROM memory_passages") == rows(
        idx, "SELECT count(*) FROM memory_chunks"
    )
    assert all(
        isinstance(h, bytes) and len(h) == CACHE_KEY_BYTES
        for (h,) in rows(idx, "SELECT chunk_hash FROM embedding_cache")
    )
    cached = [bytes(v) for (v,) in rows(idx, "SELECT vector FROM embedding_cache")]
    if bits == 4:
        assert all(is_4bit(v) for v in cached)
    elif bits == 6:
        assert all(is_6bit(v) for v in cached)
    elif bits == 7:
        assert all(is_7bit(v) for v in cached)
    else:  # 8-bit codes stay as they were
        assert all(is_quantised(v) and not is_4bit(v) for v in cached)
    for gone in ("memory_units_by_generation", "memory_chunks_by_hash"):
        assert not rows(idx, "SELECT 1 FROM sqlite_master WHERE name = ?", gone)
    assert answers(idx) == before
    report = idx.sync()
    assert report.chunks_embedded == 0  # nothing embedded again
    # the migrated keyword rows are removed exactly like new ones
    (workspace / "memory" / "2026-01-11.md").unlink()
    idx.sync()
    assert keyword_ids(idx, "zebulon") == []
    idx.db.execute("INSERT INTO memory_fts(memory_fts) VALUES ('integrity-check')")


@pytest.mark.parametrize("bits", [4, 6, 7])
def test_a_models_center_comes_from_a_batch_big_enough_and_older_rows_follow_on_compaction(
    tmp_path: Any, bits: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cache_codec, "CACHE_BITS", bits)
    coded = {4: is_4bit, 6: is_6bit, 7: is_7bit}[bits]
    db = open_database(tmp_path / "agent.sqlite", vector_backend="numpy")
    try:
        cache = SqliteEmbeddingCache(db)
        key = ModelKey("test", "m", 64)
        rng = np.random.default_rng(5)
        common = rng.standard_normal(64).astype(np.float32)
        vectors = common + 0.3 * rng.standard_normal((13, 64)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        blobs = [(hash_text(f"text {i}"), v.astype("<f4").tobytes()) for i, v in enumerate(vectors)]

        with db.transaction() as conn:
            cache.put(conn, key, blobs[:3])  # too few for a center: 8-bit
        stored = [bytes(v) for (v,) in db.execute("SELECT vector FROM embedding_cache")]
        assert all(is_quantised(v) for v in stored)
        with db.transaction() as conn:
            cache.put(conn, key, blobs[3:])
        assert (
            sum(coded(bytes(v)) for (v,) in db.execute("SELECT vector FROM embedding_cache")) == 10
        )
        wide = (
            "SELECT count(*) FROM embedding_cache c JOIN embedding_models m "
            f"ON m.id = c.model_id WHERE {wide_vectors()}"
        )
        assert db.execute(wide)[0][0] == 3  # what a compaction still shrinks

        assert requantise(db) == 3
        assert all(coded(bytes(v)) for (v,) in db.execute("SELECT vector FROM embedding_cache"))
        back = cache.get(key, [h for h, _ in blobs])
        got = np.array([np.frombuffer(back[h], dtype="<f4") for h, _ in blobs])
        assert np.abs(np.sum(got * vectors, axis=1) - 1).max() < 0.02
        # keys are the digest's first bytes, handed out as the hex they came in as
        (key_blob,) = db.execute("SELECT chunk_hash FROM embedding_cache LIMIT 1")[0]
        assert (
            isinstance(key_blob, bytes)
            and len(key_blob) == CACHE_KEY_BYTES
            and set(back) == {h for h, _ in blobs}
        )
    finally:
        db.close()
