"""Each chunk's centroid stored once on PostgreSQL: in its generation's pgvector column, read
back as the very float32 numbers written. A sync writes no `bytea` copy, no
`memory_chunks.centroid` and no pack; an older schema (all three) is upgraded by dropping them
and searches the same; its backups restore and it migrates to SQLite as before."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest
from pgvector.psycopg import register_vector

from memory.index.index import MemoryIndex
from memory.store.postgres import migrations
from memory.store.postgres.snapshot import PgSnapshots, read_header
from memory.store.postgres.transfer import open_postgres_source
from memory.store.postgres.vectors import PgKnnIndex, PgMatrixPack, PgVectorTables
from memory.store.transfer import transfer
from memory.store.transfer_sqlite import open_sqlite_target
from memory.store.vector_tables import from_blob, to_blob
from tests.conftest import WorkspaceFactory, use_config
from tests.pg_support import SCHEMA, PgTestServer
from tests.test_pg_index import NOTES
from tests.test_pg_vector_codes import hits_of, open_pg

GENERATION = 1
ONE_COPY = ["chunk_id", "scope", "embedding"]  # a generation's table: the centroid once


def connect(dsn: str) -> psycopg.Connection[Any]:
    conn = psycopg.connect(dsn, autocommit=True)
    conn.execute(f"SET search_path TO {SCHEMA}, public")
    register_vector(conn)
    return conn


def columns_of(conn: psycopg.Connection[Any], table: str) -> list[str]:
    rows = conn.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = %s "
        "AND table_name = %s ORDER BY ordinal_position",
        (SCHEMA, table),
    )
    return [str(c) for (c,) in rows]


def vector_tables(conn: psycopg.Connection[Any]) -> list[str]:
    rows = conn.execute(
        "SELECT tablename FROM pg_tables WHERE schemaname = %s AND tablename LIKE "
        "'memory_matrix%%' ORDER BY tablename",
        (SCHEMA,),
    )
    return [str(t) for (t,) in rows]


def make_older(dsn: str) -> dict[int, bytes]:
    """Turn a synced schema into the layout older versions wrote: the float32 `bytea` copy in
    each matrix row, `memory_chunks.centroid`, a pack (as `pinch migrate` from SQLite left), and
    the upgrade not yet recorded. Returns the chunks' float32 blobs."""
    with connect(dsn) as conn:
        rows = conn.execute(
            f"SELECT chunk_id, embedding FROM memory_matrix_g{GENERATION}", binary=True
        ).fetchall()
        blobs = {int(c): to_blob(v.to_numpy()) for c, v in rows}
        with conn.transaction():
            PgMatrixPack().write(conn, GENERATION, 1)
            conn.execute(f"ALTER TABLE memory_matrix_g{GENERATION} ADD COLUMN vector bytea")
            for cid, blob in blobs.items():
                conn.execute(
                    f"UPDATE memory_matrix_g{GENERATION} SET vector = %s WHERE chunk_id = %s",
                    (blob, cid),
                )
                conn.execute("UPDATE memory_chunks SET centroid = %s WHERE id = %s", (blob, cid))
            conn.execute("DELETE FROM schema_migrations WHERE owner = 'centroids_once'")
    return blobs


def indexed_then_older(
    pg_server: PgTestServer, dsn: str, workspace: Path
) -> tuple[list[Any], dict[int, bytes]]:
    """`workspace` indexed on this version's layout, its hits for the questions, then
    `make_older`: (the hits, the chunks' float32 blobs)."""
    index = open_pg(pg_server, dsn, workspace)
    try:
        index.sync()
        before = hits_of(index)
    finally:
        index.close()
    return before, make_older(dsn)


def test_a_sync_stores_each_centroid_once_in_the_pgvector_column(
    make_workspace: WorkspaceFactory, pg_server: PgTestServer, pg_dsn: str
) -> None:
    index = open_pg(pg_server, pg_dsn, make_workspace(NOTES))
    try:
        index.sync()
        assert hits_of(index)[0]
    finally:
        index.close()
    with connect(pg_dsn) as conn:
        assert vector_tables(conn) == [
            f"memory_matrix_g{GENERATION}",
            f"memory_matrix_log_g{GENERATION}",
        ]
        assert columns_of(conn, f"memory_matrix_g{GENERATION}") == [
            "chunk_id",
            "scope",
            "embedding",
        ]
        chunks, with_centroid = conn.execute(
            "SELECT count(*), count(centroid) FROM memory_chunks"
        ).fetchone()
        assert chunks > 0 and with_centroid == 0
        stored = conn.execute(f"SELECT count(*) FROM memory_matrix_g{GENERATION}").fetchone()
        assert stored == (chunks,)


def test_the_exact_rerank_reads_the_very_floats_the_older_bytea_held(
    make_workspace: WorkspaceFactory, pg_server: PgTestServer, pg_dsn: str
) -> None:
    _, blobs = indexed_then_older(pg_server, pg_dsn, make_workspace(NOTES))
    with connect(pg_dsn) as conn:
        read = PgVectorTables().vectors_of(conn, GENERATION, list(blobs))
        assert {cid: to_blob(v) for cid, (_, v) in read.items()} == blobs
        full = [r for batch in PgVectorTables().rows(conn, GENERATION, 2) for r in batch]
        assert {cid: blob for cid, _, blob in full} == blobs
        query = from_blob(next(iter(blobs.values()))) + 0.01
        scopes = [s for (s,) in conn.execute("SELECT DISTINCT scope FROM memory_chunks")]
        found = PgKnnIndex(len(query)).knn(conn, query, 3, GENERATION, scopes)
        # the re-rank older versions did, from the bytea copy (the same scan of the scopes)
        rows = conn.execute(
            f"SELECT chunk_id, vector FROM memory_matrix_g{GENERATION} WHERE scope = ANY(%s)",
            (scopes,),
        ).fetchall()
        matrix = np.frombuffer(b"".join(bytes(r[1]) for r in rows), dtype="<f4").reshape(
            len(rows), -1
        )
        norms = np.linalg.norm(matrix, axis=1) * np.linalg.norm(query)
        sims = (matrix @ query) / norms
        exact = sorted(
            ((int(r[0]), float(x)) for r, x in zip(rows, sims.tolist(), strict=True)),
            key=lambda p: (-p[1], p[0]),
        )[:3]
        assert found == exact  # the same floats as the bytea copy gave, to the bit


def test_an_older_schema_is_upgraded_in_place_and_searches_the_same(
    make_workspace: WorkspaceFactory, pg_server: PgTestServer, pg_dsn: str
) -> None:
    workspace = make_workspace(NOTES)
    before, _ = indexed_then_older(pg_server, pg_dsn, workspace)
    with connect(pg_dsn) as conn:
        assert f"memory_matrix_pack_g{GENERATION}" in vector_tables(conn)
        assert "vector" in columns_of(conn, f"memory_matrix_g{GENERATION}")

    upgraded = open_pg(pg_server, pg_dsn, workspace)  # opening migrates the schema
    try:
        with connect(pg_dsn) as conn:
            assert columns_of(conn, f"memory_matrix_g{GENERATION}") == ONE_COPY
            assert f"memory_matrix_pack_g{GENERATION}" not in vector_tables(conn)
            # the old centroids stay readable (nothing writes them now)
            assert conn.execute("SELECT count(centroid) FROM memory_chunks").fetchone()[0] > 0
        assert hits_of(upgraded) == before
        (workspace / "memory" / "2026-01-05.md").write_text("# Jan 5\n\nA walrus visited.\n")
        upgraded.sync()
        assert upgraded.search("walrus", record=False)[0].path == "memory/2026-01-05.md"
    finally:
        upgraded.close()


def test_a_backup_of_an_older_schema_restores_with_each_centroid_once(
    make_workspace: WorkspaceFactory,
    pg_server: PgTestServer,
    pg_dsn: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    workspace = make_workspace(NOTES)
    before, _ = indexed_then_older(pg_server, pg_dsn, workspace)
    dump = tmp_path / "agent.pgdump"
    with monkeypatch.context() as older:  # opened as an older version would: not upgraded
        older.setattr(migrations, "PG_SETS", migrations.PG_SETS[:-1])
        snapshots = PgSnapshots(pg_server.open(pg_dsn, min_size=0))
        try:
            snapshots.copy(Path("agent"), dump)
        finally:
            snapshots.db.close()
    tables = {t["name"]: [c for c, _ in t["columns"]] for t in read_header(dump)["tables"]}
    assert "vector" in tables[f"memory_matrix_g{GENERATION}"]
    assert f"memory_matrix_pack_g{GENERATION}" in tables

    target_dsn = pg_server.new_database()
    target = pg_server.open(target_dsn, min_size=0)
    try:
        PgSnapshots(target).load(dump)
    finally:
        target.close()
    with connect(target_dsn) as conn:
        assert columns_of(conn, f"memory_matrix_g{GENERATION}") == [
            "chunk_id",
            "scope",
            "embedding",
        ]
        assert f"memory_matrix_pack_g{GENERATION}" not in vector_tables(conn)
    restored = open_pg(pg_server, target_dsn, workspace)
    try:
        assert hits_of(restored) == before
    finally:
        restored.close()


def test_an_older_schema_migrates_to_sqlite_and_verifies(
    make_workspace: WorkspaceFactory, pg_server: PgTestServer, pg_dsn: str, tmp_path: Path
) -> None:
    workspace = make_workspace(NOTES)
    _, blobs = indexed_then_older(pg_server, pg_dsn, workspace)
    copy = tmp_path / "copy.sqlite"
    with open_postgres_source(pg_dsn, SCHEMA) as source, open_sqlite_target(copy) as target:
        report = transfer(source, target)
    assert report.ok
    assert f"memory_matrix_pack_g{GENERATION}" in report.derived
    with sqlite3.connect(copy) as conn:
        packed = conn.execute(f"SELECT sum(rows) FROM memory_matrix_pack_g{GENERATION}")
        assert packed.fetchone()[0] == len(blobs)
    sqlite = MemoryIndex.open(workspace, copy, use_config())
    try:
        assert sqlite.search("bees", record=False)
    finally:
        sqlite.close()
