"""Issue 22 (helper size2): the embedding cache without the unique index of its whole key —
an index of the hash's first 8 bytes finds the rows, the whole key is compared, and `put`
keeps (provider, model, hash) unique, replacing a key's row in place (its rowid, which
passages name, kept). Real SQLite files."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from memory.store.db import open_database
from memory.store.index_embedcache import ModelKey, SqliteEmbeddingCache, lookup

KEY = ModelKey("local", "e5", 8)
E5_ROWS = (
    "SELECT c.id, c.chunk_hash FROM embedding_cache c "
    "JOIN embedding_models m ON m.id = c.model_id WHERE m.model = 'e5'"
)


def vec(seed: int) -> bytes:
    v = np.random.default_rng(seed).standard_normal(8).astype("<f4")
    return (v / np.linalg.norm(v)).astype("<f4").tobytes()


def test_keys_sharing_their_first_bytes_are_told_apart_and_stay_unique(tmp_path: Path) -> None:
    db = open_database(tmp_path / "a.sqlite")
    cache = SqliteEmbeddingCache(db)
    twin_a, twin_b = "ab" * 8 + "0" * 48, "ab" * 8 + "1" * 48  # the same first 8 bytes
    with db.transaction() as conn:
        cache.put(conn, KEY, [(twin_a, vec(1)), (twin_b, vec(2)), (twin_a, vec(3))])
        cache.put(conn, ModelKey("local", "other", 8), [(twin_a, vec(4))])
    rows = db.execute(E5_ROWS)
    assert len(rows) == 2  # twin_a once: the last of the batch
    got = cache.get(KEY, [twin_a, twin_b, "cd" * 32])
    assert set(got) == {twin_a, twin_b}
    close = np.frombuffer(got[twin_a], "<f4") @ np.frombuffer(vec(3), "<f4")
    assert close > 0.99  # (8-bit codes: within half a step)
    before = dict((bytes(h), r) for r, h in rows)

    with db.transaction() as conn:
        cache.put(conn, KEY, [(twin_b, vec(5))])  # replaced in place

    after = dict((bytes(h), r) for r, h in db.execute(E5_ROWS))
    assert after == before
    with db.lock:
        found = lookup(db.conn, "local", "e5", [bytes.fromhex(twin_b)], 8)
        assert set(found) == {bytes.fromhex(twin_b)}
        assert lookup(db.conn, "local", "e5", [bytes.fromhex(twin_b)], 16) == {}
    names = [
        n
        for (n,) in db.execute("SELECT name FROM sqlite_master WHERE tbl_name = 'embedding_cache'")
    ]
    assert "embedding_cache_by_key" in names
    assert not [n for n in names if n.startswith("sqlite_autoindex")]
    db.close()


def test_a_lookup_never_returns_another_texts_or_another_models_vector(tmp_path: Path) -> None:
    """Since m016 the key is the hash's first 14 bytes (content_hash.cache_key): hashes that
    differ only in the 14th byte are told apart, and a text cached for another model, or for
    the same model at another width, is never returned; (provider, model, key) stays unique —
    caching a text at another width replaces its row in place, keeping the id."""
    db = open_database(tmp_path / "a.sqlite")
    cache = SqliteEmbeddingCache(db)
    near = "cd" * 13 + "00" + "ef" * 18, "cd" * 13 + "01" + "ef" * 18  # 13 bytes in common
    with db.transaction() as conn:
        cache.put(conn, KEY, [(near[0], vec(1)), (near[1], vec(2))])
        cache.put(conn, ModelKey("local", "e6", 8), [(near[0], vec(3))])
    for h, seed in zip(near, (1, 2), strict=True):
        got = cache.get(KEY, [h])
        assert np.frombuffer(got[h], "<f4") @ np.frombuffer(vec(seed), "<f4") > 0.99
    other = cache.get(ModelKey("local", "e6", 8), list(near))
    assert set(other) == {near[0]}
    assert np.frombuffer(other[near[0]], "<f4") @ np.frombuffer(vec(3), "<f4") > 0.99
    assert cache.get(ModelKey("local", "e5", 16), list(near)) == {}
    with db.lock:  # the stored 32-byte form of a hash finds the row too
        assert set(lookup(db.conn, "local", "e5", [bytes.fromhex(near[1])], 8)) == {
            bytes.fromhex(near[1])
        }
    (first,) = db.execute(E5_ROWS + " AND c.chunk_hash = ?", (bytes.fromhex(near[0])[:14],))

    wide = np.ones(16, "<f4").tobytes()
    with db.transaction() as conn:
        cache.put(conn, ModelKey("local", "e5", 16), [(near[0], wide)])

    assert db.execute("SELECT count(*) FROM embedding_cache") == [(3,)]
    assert set(cache.get(ModelKey("local", "e5", 16), list(near))) == {near[0]}
    assert set(cache.get(KEY, list(near))) == {near[1]}
    assert db.execute(
        "SELECT id FROM embedding_cache WHERE chunk_hash = ? AND model_id = "
        "(SELECT id FROM embedding_models WHERE model = 'e5' AND dimensions = 16)",
        (bytes.fromhex(near[0])[:14],),
    ) == [(first[0],)]
    db.close()
