"""The passages' and the embedding cache's vectors on PostgreSQL as SQLite's 8-bit codes: new
rows are coded, an older schema's float32 rows search as before and the same as coded ones,
`pinch memory compact` codes them a batch per transaction (stopped midway, what it did stays
done and the rest still reads), and `pinch memory status` counts what that saves."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from app.cli.main import main
from memory.index.index import MemoryIndex
from memory.store.postgres import index_rows, vector_forms
from memory.store.postgres.database import PgDatabase
from memory.store.postgres.transfer import open_postgres_source, open_postgres_target
from memory.store.postgres.vector_forms import compact_vectors, vector_slack
from memory.store.transfer import transfer
from memory.store.transfer_sqlite import open_sqlite_source, open_sqlite_target
from memory.store.vector_codec import decode, encode, is_quantised
from tests.conftest import WorkspaceFactory, use_config
from tests.pg_support import SCHEMA, PgTestServer
from tests.test_pg_index import NOTES, QUERIES

DIMS = 512  # the bundled USE model's vectors


def open_pg(server: PgTestServer, dsn: str, workspace: Path) -> MemoryIndex:
    db: PgDatabase = server.open(dsn, min_size=0, max_size=4)
    return MemoryIndex(db, workspace, use_config())


def stored(dsn: str, table: str) -> list[bytes]:
    with psycopg.connect(dsn) as conn:
        conn.execute(f"SET search_path TO {SCHEMA}")
        return [bytes(v) for (v,) in conn.execute(f"SELECT vector FROM {table}")]


def hits_of(index: MemoryIndex) -> list[list[tuple[str, int, float]]]:
    return [
        [(h.path, h.start_line, h.score) for h in index.search(q, record=False)] for q in QUERIES
    ]


def assert_same_hits(a: list[list[Any]], b: list[list[Any]]) -> None:
    """The same hits in the same order, each score within the codes' error (≈ 0.0004)."""
    assert [[(p, s) for p, s, _ in q] for q in a] == [[(p, s) for p, s, _ in q] for q in b]
    for qa, qb in zip(a, b, strict=True):
        assert all(abs(x[2] - y[2]) < 2e-3 for x, y in zip(qa, qb, strict=True))


def build_float32(
    server: PgTestServer, dsn: str, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> MemoryIndex:
    """An index synced the way an older version wrote it (float32 passages and cache)."""
    index = open_pg(server, dsn, workspace)
    with monkeypatch.context() as patched:
        patched.setattr(index_rows, "compact_blobs", lambda blobs: list(blobs))
        index.sync()
    return index


def test_new_passages_and_cached_vectors_are_stored_as_8bit_codes(
    make_workspace: WorkspaceFactory, pg_server: PgTestServer, pg_dsn: str
) -> None:
    index = open_pg(pg_server, pg_dsn, make_workspace(NOTES))
    try:
        index.sync()
        assert hits_of(index)[0][0][0] in ("MEMORY.md", "memory/2026-01-03.md")
        units, cached = stored(pg_dsn, "memory_units"), stored(pg_dsn, "embedding_cache")
        assert units and cached
        assert all(is_quantised(v) and len(v) == DIMS + 6 for v in units + cached)
        # SQLite's own codec: a passage's codes are its cached vector's, byte for byte
        assert set(units) <= set(cached)
        assert all(encode(decode(v)) == v for v in units)
        assert vector_slack(index.db).rows == 0  # type: ignore[arg-type]
    finally:
        index.close()


def test_an_older_schemas_float32_rows_search_the_same_as_coded_ones(
    make_workspace: WorkspaceFactory,
    pg_server: PgTestServer,
    pg_dsn: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    workspace = make_workspace(NOTES)
    old = build_float32(pg_server, pg_dsn, workspace, monkeypatch)
    coded_dsn = pg_server.new_database()
    new = open_pg(pg_server, coded_dsn, workspace)
    try:
        new.sync()
        assert all(len(v) == 4 * DIMS for v in stored(pg_dsn, "memory_units"))
        assert all(is_quantised(v) for v in stored(coded_dsn, "memory_units"))
        assert_same_hits(hits_of(old), hits_of(new))
        # a sync after the upgrade reads the float32 cache and writes codes beside the old rows
        (workspace / "memory" / "2026-01-05.md").write_text("# Jan 5\n\nA walrus visited.\n")
        old.sync()
        kinds = {len(v) for v in stored(pg_dsn, "memory_units")}
        assert kinds == {4 * DIMS, DIMS + 6}  # both forms in one table, read together
        assert old.search("walrus", record=False)[0].path == "memory/2026-01-05.md"
    finally:
        old.close()
        new.close()


def test_compaction_codes_float32_rows_and_search_answers_the_same(
    make_workspace: WorkspaceFactory,
    pg_server: PgTestServer,
    pg_dsn: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    index = build_float32(pg_server, pg_dsn, make_workspace(NOTES), monkeypatch)
    try:
        before = hits_of(index)
        units, cached = stored(pg_dsn, "memory_units"), stored(pg_dsn, "embedding_cache")
        slack = vector_slack(index.db)  # type: ignore[arg-type]
        assert slack.rows == len(units) + len(cached)
        assert slack.saving == (len(units) + len(cached)) * (3 * DIMS - 6)
        assert index.status(space=True).reclaimable_bytes == slack.saving

        done = compact_vectors(index.db)  # type: ignore[arg-type]

        assert (done.units, done.cache, done.saving) == (len(units), len(cached), slack.saving)
        after_units = stored(pg_dsn, "memory_units")
        assert all(is_quantised(v) for v in after_units + stored(pg_dsn, "embedding_cache"))
        assert sorted(after_units) == sorted(encode(decode(v)) for v in units)
        assert_same_hits(hits_of(index), before)
        assert vector_slack(index.db).rows == 0  # type: ignore[arg-type]
        again = compact_vectors(index.db)  # type: ignore[arg-type]
        assert (again.units, again.cache) == (0, 0)
    finally:
        index.close()


def test_compaction_commits_each_batch_and_a_stop_midway_keeps_both_forms_readable(
    make_workspace: WorkspaceFactory,
    pg_server: PgTestServer,
    pg_dsn: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    index = build_float32(pg_server, pg_dsn, make_workspace(NOTES), monkeypatch)
    monkeypatch.setattr(vector_forms, "BATCH_ROWS", 1)
    monkeypatch.setattr(vector_forms, "VACUUM_ROWS", 2)
    seen: list[tuple[str, int]] = []

    def stop_after_three_batches(table: str, done: int) -> None:
        seen.append((table, done))
        if len(seen) == 3:
            raise KeyboardInterrupt

    try:
        before = hits_of(index)
        total = len(stored(pg_dsn, "memory_units"))
        assert total > 3
        with pytest.raises(KeyboardInterrupt):
            compact_vectors(index.db, progress=stop_after_three_batches)  # type: ignore[arg-type]
        assert seen == [("memory_units", 1), ("memory_units", 2), ("memory_units", 3)]
        lengths = sorted(len(v) for v in stored(pg_dsn, "memory_units"))
        assert lengths == [DIMS + 6] * 3 + [4 * DIMS] * (total - 3)  # three batches committed
        assert_same_hits(hits_of(index), before)

        seen.clear()
        done = compact_vectors(index.db, progress=lambda t, n: seen.append((t, n)))  # type: ignore[arg-type]
        assert done.units == total - 3
        assert [n for t, n in seen if t == "memory_units"] == list(range(1, total - 2))
        assert all(is_quantised(v) for v in stored(pg_dsn, "memory_units"))
        assert_same_hits(hits_of(index), before)
    finally:
        index.close()


def test_pinch_memory_compact_on_postgres_says_what_it_coded(
    make_workspace: WorkspaceFactory,
    pg_server: PgTestServer,
    pg_dsn: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    workspace = make_workspace(NOTES)
    build_float32(pg_server, pg_dsn, workspace, monkeypatch).close()
    units = len(stored(pg_dsn, "memory_units"))
    monkeypatch.setenv("PINCH_STORE__BACKEND", "postgres")
    monkeypatch.setenv("PINCH_STORE__DSN", pg_dsn)
    monkeypatch.setenv("PINCH_MEMORY__EMBEDDING__PROVIDER", "use")
    monkeypatch.setenv("PINCH_WORKSPACE", str(workspace))
    runner = CliRunner()

    first = runner.invoke(main, ["memory", "compact"])
    second = runner.invoke(main, ["memory", "compact"])

    assert first.exit_code == 0, first.output
    assert f"Compacted: {units:,} passage and " in first.output
    assert "cached vectors coded" in first.output and "VACUUM FULL" in first.output
    assert second.exit_code == 0 and "the vectors are 8-bit codes already" in second.output


def test_an_older_schemas_float32_vectors_migrate_both_ways_as_they_are(
    make_workspace: WorkspaceFactory,
    pg_server: PgTestServer,
    pg_dsn: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """float32 vectors that are not exactly some codes are kept whole (the copy is lossless
    and verifies), and come back to PostgreSQL as the same bytes."""
    build_float32(pg_server, pg_dsn, make_workspace(NOTES), monkeypatch).close()
    units = stored(pg_dsn, "memory_units")
    copy = tmp_path / "copy.sqlite"
    with open_postgres_source(pg_dsn, SCHEMA) as source, open_sqlite_target(copy) as target:
        assert transfer(source, target).ok
    with sqlite3.connect(copy) as conn:
        there = [bytes(v) for (v,) in conn.execute("SELECT vector FROM memory_units")]
    assert sorted(there) == sorted(units) and all(len(v) == 4 * DIMS for v in there)
    back = pg_server.new_database()
    with psycopg.connect(back, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {SCHEMA} CASCADE")
    with open_sqlite_source(copy) as source, open_postgres_target(back, SCHEMA) as target:
        assert transfer(source, target).ok
    assert sorted(stored(back, "memory_units")) == sorted(units)
    assert sorted(stored(back, "embedding_cache")) == sorted(stored(pg_dsn, "embedding_cache"))
