"""Issue 22 (helper h-cache, migration m016): the embedding cache's rows hold their model's
number, the first 14 bytes of the text's hash and the vector, nothing else — 11 to a 4 KB page
at 384 dimensions — ; an index in the layout before upgrades keeping every id, vector and answer;
how recently a row was written still keeps it from orphan pruning; PostgreSQL keys its cache
the same way, so a copy either way is found by the other backend's lookups.

Real SQLite files (dbstat through the standard library's sqlite3), the real USE model (512
dimensions), a real PostgreSQL (pgserver).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest

from memory.errors import DatabaseError
from memory.store import index_embedcache
from memory.store.content_hash import CACHE_KEY_BYTES, hash_text
from memory.store.db import open_database
from memory.store.index_embedcache import ModelKey, SqliteEmbeddingCache, prune_orphans
from memory.store.postgres.database import PgDatabase
from memory.store.postgres.index_rows import PgEmbeddingCache
from memory.store.postgres.transfer import open_postgres_source, open_postgres_target
from memory.store.transfer import transfer
from memory.store.transfer_sqlite import open_sqlite_source, open_sqlite_target
from memory.store.vector_codec import is_7bit
from tests.conftest import IndexFactory, WorkspaceFactory, use_config
from tests.layout_support import WRITTEN_AT, m015_layout, whole_hashes
from tests.pg_support import SCHEMA, PgTestServer
from tests.test_compact_vectors import FILES
from tests.test_packed_passages import answers, rows

PAGE = 4096
PAGE_HEADER = 8  # a table b-tree leaf page's


def e5_like(n: int, seed: int = 1) -> np.ndarray:
    """`n` unit vectors of 384 dimensions near one direction, as e5 gives."""
    rng = np.random.default_rng(seed)
    common = rng.standard_normal(384)
    docs = 2.2 * common / np.linalg.norm(common) + rng.standard_normal((n, 384)) / np.sqrt(384)
    return (docs / np.linalg.norm(docs, axis=1, keepdims=True)).astype("<f4")


def cached(conn: Any) -> dict[int, tuple[bytes, bytes, tuple[str, str, int]]]:
    """{id: (key, stored vector, (provider, model, width))} of the cache as it is now."""
    return {
        int(i): (bytes(k), bytes(v), (str(p), str(m), int(d)))
        for i, k, v, p, m, d in conn.execute(
            "SELECT c.id, c.chunk_hash, c.vector, m.provider, m.model, m.dimensions "
            "FROM embedding_cache c JOIN embedding_models m ON m.id = c.model_id"
        )
    }


# ---- the row -----------------------------------------------------------------------------------


def test_a_384_dimension_7bit_row_takes_at_most_371_bytes_so_11_fit_a_page(
    tmp_path: Path,
) -> None:
    """Measured by SQLite itself (dbstat), in the worst case the key length allows for: a model
    numbered 2 (1 byte in the row; number 1 takes none) and ids past 2,097,151 (a 4-byte varint
    instead of 3) — a 16-byte key would make that row 373 bytes, 10 to a page."""
    path = tmp_path / "agent.sqlite"
    db = open_database(path, vector_backend="numpy")
    cache = SqliteEmbeddingCache(db)
    vectors = e5_like(220)
    with db.transaction() as conn:
        cache.put(conn, ModelKey("other", "m", 4), [(hash_text("x"), bytes(16))])  # number 1
        conn.execute("UPDATE sqlite_sequence SET seq = 2097151 WHERE name = 'embedding_cache'")
        cache.put(
            conn,
            ModelKey("local", "e5", 384),
            [(hash_text(f"text {i}"), v.tobytes()) for i, v in enumerate(vectors)],
        )
        conn.execute("DELETE FROM embedding_cache WHERE model_id = 1")
    db.conn.execute("VACUUM")
    db.close()

    with sqlite3.connect(path) as conn:  # (the standard library's: it has dbstat)
        assert conn.execute(
            "SELECT min(id), min(model_id), min(length(vector)) FROM embedding_cache"
        ).fetchone() == (2097152, 2, 342)
        assert all(is_7bit(v) for (v,) in conn.execute("SELECT vector FROM embedding_cache"))
        pages = conn.execute(
            "SELECT ncell, unused FROM dbstat WHERE name = 'embedding_cache' "
            "AND pagetype = 'leaf' ORDER BY pageno"
        ).fetchall()
    assert sum(n for n, _ in pages) == 220
    per_row = [(PAGE - PAGE_HEADER - unused) / n for n, unused in pages]
    assert max(per_row) <= 371  # cell and cell pointer
    assert [n for n, _ in pages] == [11] * 20


# ---- the layout before upgrades by itself ----------------------------------------------------


def test_an_index_in_the_m015_layout_upgrades_keeping_every_id_vector_and_answer(
    make_workspace: WorkspaceFactory, make_index: IndexFactory
) -> None:
    workspace = make_workspace(FILES)
    idx = make_index(workspace, use_config())
    idx.sync()
    before = answers(idx), cached(idx.db.conn)
    with idx.db.transaction() as conn:
        whole = whole_hashes(conn)
        m015_layout(conn)
        # another model cached at two widths, as the layout before allowed; and an id handed
        # out and deleted, which is never handed out again
        conn.execute("INSERT INTO embedding_models(id, provider, model) VALUES (7, 't', 'm')")
        conn.executemany(
            "INSERT INTO embedding_cache(model_id, chunk_hash, dimensions, vector, created_at) "
            "VALUES (7, ?, ?, ?, ?)",
            [(bytes([n]) * 32, d, bytes(4 * d), WRITTEN_AT) for n, d in ((1, 8), (2, 4), (3, 4))],
        )
        conn.execute(
            "INSERT INTO embedding_cache SELECT id + 1, 7, 'x', 4, vector, 0 FROM "
            "embedding_cache WHERE id = (SELECT max(id) FROM embedding_cache)"
        )
        (counter,) = conn.execute(
            "DELETE FROM embedding_cache WHERE chunk_hash = 'x' RETURNING id"
        ).fetchone()
    assert {len(k) for (k,) in rows(idx, "SELECT chunk_hash FROM embedding_cache")} == {32}
    assert rows(idx, "SELECT seq FROM sqlite_sequence WHERE name = 'embedding_cache'") == [
        (counter,)
    ]
    idx.close()

    idx = make_index(workspace, use_config())  # m016 runs on open

    after = cached(idx.db.conn)
    others = {i: after.pop(i) for i in [i for i, (_, _, m) in after.items() if m[0] == "t"]}
    assert after == before[1]  # every id with its key, vector and model
    assert {k for k, _, _ in after.values()} <= set(whole)  # the texts' whole hashes, cut
    assert sorted(others.values()) == [
        (bytes([1]) * CACHE_KEY_BYTES, bytes(32), ("t", "m", 8)),
        (bytes([2]) * CACHE_KEY_BYTES, bytes(16), ("t", "m", 4)),
        (bytes([3]) * CACHE_KEY_BYTES, bytes(16), ("t", "m", 4)),
    ]
    models = dict(rows(idx, "SELECT dimensions, id FROM embedding_models WHERE model = 'm'"))
    assert models == {4: 7, 8: 8}  # the width most rows have keeps the number
    assert rows(idx, "SELECT seq FROM sqlite_sequence WHERE name = 'embedding_cache'") == [
        (counter,)
    ]
    columns = [c[1] for c in rows(idx, "PRAGMA table_info(embedding_cache)")]
    assert columns == ["id", "model_id", "chunk_hash", "vector"]
    assert answers(idx) == before[0]
    assert idx.sync().chunks_embedded == 0  # every text found by its whole hash, cut
    with idx.db.transaction() as conn:
        SqliteEmbeddingCache(idx.db).put(conn, ModelKey("t", "m", 4), [("cd" * 32, bytes(16))])
    assert rows(idx, "SELECT max(id) FROM embedding_cache") == [(counter + 1,)]


# ---- how recently a row was written -----------------------------------------------------------


def test_a_vector_cached_within_the_hour_is_kept_when_older_ones_are_pruned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No passage names these vectors; the ones written (or replaced in place) within the grace
    period are kept, by their ids, as a time in each row kept them before m016."""
    db = open_database(tmp_path / "agent.sqlite")
    cache = SqliteEmbeddingCache(db)
    key = ModelKey("local", "e5", 4)
    clock = [1_800_000_000.0]
    monkeypatch.setattr(index_embedcache.time, "time", lambda: clock[0])

    def put(texts: list[str]) -> None:
        with db.transaction() as conn:
            cache.put(conn, key, [(hash_text(t), bytes(16)) for t in texts])

    def kept() -> set[str]:
        found = cache.get(key, [hash_text(t) for t in [*old, *new]])
        return {t for t in [*old, *new] if hash_text(t) in found}

    old, new = [f"old {i}" for i in range(5)], [f"new {i}" for i in range(3)]
    put(old)
    clock[0] += 3000
    put(new)
    put(old[-1:])  # replaced in place: written now, its id kept
    with db.transaction() as conn:
        assert prune_orphans(conn, now=clock[0]) == 0
        assert prune_orphans(conn, now=clock[0] + 700) == 4  # an hour after the first put
    assert kept() == {*new, old[-1]}
    with db.transaction() as conn:
        assert prune_orphans(conn, now=clock[0] + 3660) == 4
    assert kept() == set()
    clock[0] += 86_400
    put(["later"])
    assert db.execute("SELECT count(*) FROM embedding_cache_writes") == [(1,)]  # the old: gone
    db.close()


# ---- PostgreSQL keys its cache the same way ---------------------------------------------------


def test_postgres_cuts_an_older_schemas_keys_as_sqlite_does_and_still_finds_them(
    pg_server: PgTestServer, pg_dsn: str
) -> None:
    key = ModelKey("local", "e5", 4)
    texts = [hash_text(f"text {i}") for i in range(3)]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:  # the schema before p002
        conn.execute(f"SET search_path TO {SCHEMA}")
        conn.execute("ALTER TABLE embedding_cache ADD COLUMN created_at double precision")
        conn.cursor().executemany(
            "INSERT INTO embedding_cache VALUES ('local', 'e5', %s, 4, %s, 1.5)",
            [(h, np.full(4, i, "<f4").tobytes()) for i, h in enumerate([*texts, "made-up"])],
        )
        conn.execute("DELETE FROM schema_migrations WHERE name = 'p002_cache_short_key'")
    older = pytest.raises(DatabaseError, match="older version's layout")
    with older, open_postgres_source(pg_dsn, SCHEMA):  # (read as it is, never migrated)
        pass

    db: PgDatabase = pg_server.open(pg_dsn, min_size=0, max_size=2)  # p002 runs
    try:
        stored = {str(h) for (h,) in db.execute("SELECT chunk_hash FROM embedding_cache")}
        assert stored == {h[: 2 * CACHE_KEY_BYTES] for h in texts} | {"made-up"}
        columns = [
            c
            for (c,) in db.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = %s "
                "AND table_name = 'embedding_cache' ORDER BY ordinal_position",
                (SCHEMA,),
            )
        ]
        assert columns == ["provider", "model", "chunk_hash", "dimensions", "vector"]
        found = PgEmbeddingCache(db).get(key, [*texts, hash_text("another")])
        assert {h: np.frombuffer(v, "<f4")[0] for h, v in found.items()} == {
            h: i for i, h in enumerate(texts)
        }
        assert PgEmbeddingCache(db).get(ModelKey("local", "e5", 8), texts) == {}
    finally:
        db.close()


def test_the_cache_copied_either_way_is_found_by_the_other_backends_lookups(
    make_workspace: WorkspaceFactory,
    make_index: IndexFactory,
    pg_server: PgTestServer,
    pg_dsn: str,
    tmp_path: Path,
) -> None:
    idx = make_index(make_workspace(FILES), use_config())
    idx.sync()
    with idx.db.lock:
        texts = [h.hex() for h in whole_hashes(idx.db.conn).values()]
        (model,) = idx.db.conn.execute("SELECT provider, model, dimensions FROM embedding_models")
    key = ModelKey(*model)
    here = SqliteEmbeddingCache(idx.db).get(key, texts)
    assert len(here) == idx.db.execute("SELECT count(*) FROM embedding_cache")[0][0] > 0
    with open_sqlite_source(idx.db.path) as source, open_postgres_target(pg_dsn, SCHEMA) as target:
        assert transfer(source, target).ok

    db: PgDatabase = pg_server.open(pg_dsn, min_size=0, max_size=2)
    try:
        there = PgEmbeddingCache(db).get(key, texts)
    finally:
        db.close()
    assert set(there) == set(here)
    assert all(
        np.allclose(np.frombuffer(there[h], "<f4"), np.frombuffer(here[h], "<f4")) for h in here
    )

    back = tmp_path / "back.sqlite"
    with open_postgres_source(pg_dsn, SCHEMA) as source, open_sqlite_target(back) as target:
        assert transfer(source, target).ok
    copy = open_database(back, vector_backend="numpy")
    try:
        assert set(SqliteEmbeddingCache(copy).get(key, texts)) == set(here)
    finally:
        copy.close()
