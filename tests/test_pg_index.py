"""The memory index on PostgreSQL (`[store] backend = "postgres"`): the real indexer writes the
agent schema through the PostgreSQL repositories (generations, rows, keyword tokens, embedding
cache, pgvector HNSW), search finds what it finds on SQLite, a rebuild swaps generations and
drops the old one's vectors, and `pinch memory index` / `pinch memory search` run on it without
ever making the SQLite file."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from app.cli.main import main
from app.config import load_settings
from memory.index.index import MemoryIndex
from memory.memory_config import MemoryConfig
from memory.store.postgres.database import PgDatabase
from tests.conftest import WorkspaceFactory, keyword_config, use_config
from tests.pg_support import PgTestServer

NOTES = {
    "MEMORY.md": "# Memory\n\nAnna keeps bees on the roof. Her kettle is green.\n",
    "USER.md": "# User\n\nThe owner lives in Hangzhou and drinks oolong tea.\n",
    "memory/2026-01-01.md": "# Jan 1\n\nAnna walked the dog by the river in the rain.\n",
    "memory/2026-01-02.md": "# Jan 2\n\nThe dog chased a zeppelin shadow. Anna laughed.\n",
    "memory/2026-01-03.md": "# Jan 3\n\nBought honey jars for the bees. 蓝色的罐子很好看。\n",
    "memory/2026-01-04.md": "# Jan 4\n\nBooked the train to Shanghai for the conference.\n",
}
QUERIES = ["bees", "where does the owner live", "dog river", "蓝色", "train trip", "green kettle"]


@pytest.fixture
def pg_index(pg_server: PgTestServer, pg_dsn: str) -> Iterator[tuple[PgTestServer, str]]:
    yield pg_server, pg_dsn


def open_pg(server: PgTestServer, dsn: str, workspace: Path, config: MemoryConfig) -> MemoryIndex:
    db: PgDatabase = server.open(dsn, min_size=0, max_size=4)
    return MemoryIndex(db, workspace, config)


def hits_of(index: MemoryIndex, query: str) -> list[tuple[str, int, float]]:
    return [(h.path, h.start_line, round(h.score, 3)) for h in index.search(query, record=False)]


def test_postgres_search_finds_what_sqlite_finds_with_vectors_and_keywords(
    make_workspace: WorkspaceFactory, tmp_path: Path, pg_index: tuple[PgTestServer, str]
) -> None:
    workspace = make_workspace(NOTES)
    sqlite = MemoryIndex.open(workspace, tmp_path / "agent.sqlite", use_config())
    pg = open_pg(*pg_index, workspace, use_config())
    try:
        sqlite.sync()
        report = pg.sync()
        assert report.generation is not None
        status = pg.status()
        assert status.files == len(NOTES) and status.chunks == sqlite.status().chunks
        assert status.vector_backend == "postgres-knn" and status.degraded is None
        for query in QUERIES:
            assert hits_of(pg, query) == hits_of(sqlite, query), query
    finally:
        sqlite.close()
        pg.close()


def test_an_edit_and_a_rebuild_on_postgres_keep_search_in_step(
    make_workspace: WorkspaceFactory, pg_index: tuple[PgTestServer, str]
) -> None:
    workspace = make_workspace(NOTES)
    pg = open_pg(*pg_index, workspace, use_config())
    try:
        pg.sync()
        first = pg.active_generation()
        (workspace / "memory" / "2026-01-05.md").write_text("# Jan 5\n\nA walrus visited.\n")
        pg.sync()
        assert pg.search("walrus", record=False)[0].path == "memory/2026-01-05.md"
        pg.sync(force=True)  # a full rebuild: a new generation swapped in
        second = pg.active_generation()
        assert first is not None and second is not None and second[0] > first[0]
        assert pg.search("walrus", record=False)[0].path == "memory/2026-01-05.md"
        tables = pg.db.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() "
            "AND tablename LIKE 'memory_matrix%%'"
        )
        assert {t for (t,) in tables} and all(
            t.endswith(f"_g{second[0]}") for (t,) in tables
        )  # the old generation's vector tables are gone
    finally:
        pg.close()


def test_pinch_memory_index_and_search_run_on_postgres_without_the_sqlite_file(
    make_workspace: WorkspaceFactory, pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PINCH_STORE__BACKEND", "postgres")
    monkeypatch.setenv("PINCH_STORE__DSN", pg_dsn)
    monkeypatch.setenv("PINCH_MEMORY__EMBEDDING__PROVIDER", "none")
    settings = load_settings()
    workspace = make_workspace(NOTES)
    monkeypatch.setenv("PINCH_WORKSPACE", str(workspace))
    runner = CliRunner()

    indexed = runner.invoke(main, ["memory", "index"])
    found = runner.invoke(main, ["memory", "search", "zeppelin"])
    status = runner.invoke(main, ["memory", "status"])

    assert indexed.exit_code == 0, indexed.output
    assert found.exit_code == 0 and "memory/2026-01-02.md" in found.output, found.output
    assert status.exit_code == 0 and "pinch_main" in status.output, status.output
    assert "hunter" not in status.output and not settings.database_path.exists()
    assert keyword_config().embedding.provider == "none"
