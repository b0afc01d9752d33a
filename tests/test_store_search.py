"""The search repository, written against its interface (`SearchQueries`), on both backends:
the fixture yields a way to open an implementation on an index the real indexer wrote — on
SQLite itself, on PostgreSQL a copy made through the PostgreSQL index repositories (the indexer
writes to SQLite only so far)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from memory.index.index import MemoryIndex
from memory.store.db import Database
from memory.store.index_generations import SqliteGenerations
from memory.store.index_rows import ChunkRow, PassageRow
from memory.store.postgres.index_rows import PgGenerations, PgIndexRows
from memory.store.postgres.search import PgSearchQueries
from memory.store.search_queries import MalformedQuery, SearchQueries, SqliteSearchQueries
from memory.store.vector_tables import to_blob
from memory.text import fts_body
from tests.conftest import IndexFactory, WorkspaceFactory, keyword_config, use_config
from tests.pg_support import PgTestServer

Opener = Callable[[Database], SearchQueries]

NOTES = {
    "MEMORY.md": "# Memory\n\nAnna keeps bees on the roof.\n",
    "memory/2026-01-01.md": "# Jan 1\n\nAnna walked the dog by the river.\n",
    "memory/2026-01-02.md": "# Jan 2\n\nThe dog chased a zeppelin shadow. Anna laughed.\n",
    "memory/2026-01-03.md": "# Jan 3\n\nBought honey jars for the bees.\n",
}
EVERY = '"anna" OR "dog" OR "bees" OR "honey" OR "rain" OR "jan" OR "蓝"*'


def copy_to_postgres(source: Database, server: PgTestServer) -> Any:
    """A PostgreSQL database holding `source`'s active index, written through the PostgreSQL
    index repositories (chunk by chunk in id order, so ids keep their order)."""
    sqlite = SqliteSearchQueries(source)
    ids = sorted(i for i, _ in sqlite.keyword_ranked(EVERY, 10_000))
    active = SqliteGenerations(source).active()
    assert len(ids) == (sqlite.chunk_count(active[0]) if active else 0)  # every chunk copied
    db = server.open(server.new_database(), min_size=0, max_size=4)
    passages = sqlite.passage_vectors(ids)
    with db.transaction() as conn:
        generation = PgGenerations(db).create_building(conn, {"dimensions": 0}, 0.0)
        PgGenerations(db).activate(conn, generation, 0.0)
        rows = PgIndexRows(db)
        for chunk_row in sorted(sqlite.chunks(ids)):
            cid, path, src, origin, start, end, text, importance, day, project = chunk_row
            row = ChunkRow(
                generation,
                path,
                src,
                origin,
                "",
                start,
                end,
                "h",
                text,
                importance,
                day,
                fts_body(text),
                project,
            )
            new_id = rows.insert_chunk(conn, row)
            if passages is not None:
                rows.insert_passages(
                    conn,
                    new_id,
                    generation,
                    [
                        PassageRow(s, e, "h", to_blob(passages.matrix[i]))
                        for i, (c, s, e) in enumerate(passages.spans)
                        if c == cid
                    ],
                )
    return db


@pytest.fixture(params=["sqlite", "postgres"])
def open_queries(request: pytest.FixtureRequest) -> Any:
    if request.param == "sqlite":
        yield SqliteSearchQueries
        return
    server: PgTestServer = request.getfixturevalue("pg_server")
    copies: dict[str, Any] = {}

    def open_copy(source: Database) -> SearchQueries:
        key = str(source.path)
        if key not in copies:
            copies[key] = copy_to_postgres(source, server)
        return PgSearchQueries(copies[key])

    yield open_copy
    for db in copies.values():
        db.close()


@pytest.fixture
def index(make_workspace: WorkspaceFactory, make_index: IndexFactory) -> MemoryIndex:
    idx = make_index(make_workspace(NOTES), keyword_config())
    idx.sync()
    return idx


def generation(idx: MemoryIndex) -> int:
    active = idx.active_generation()
    assert active is not None
    return active[0]


def all_ids(queries: SearchQueries, idx: MemoryIndex) -> list[int]:
    return sorted(i for i, _ in queries.keyword_ranked('"anna" OR "dog" OR "bees"', 100))


def test_keyword_matches_come_best_bm25_rank_first(
    index: MemoryIndex, open_queries: Opener
) -> None:
    queries = open_queries(index.db)

    ranked = queries.keyword_ranked('"dog" OR "anna"', 10)

    assert len(ranked) >= 3
    assert [r for _, r in ranked] == sorted(r for _, r in ranked)
    assert all(r < 0 for _, r in ranked)
    assert queries.keyword_ranked('"dog" OR "anna"', 1) == ranked[:1]


def test_newest_keyword_matches_come_highest_id_first_with_the_same_ranks(
    index: MemoryIndex, open_queries: Opener
) -> None:
    queries = open_queries(index.db)

    newest = queries.keyword_newest('"anna"', 10)

    assert [i for i, _ in newest] == sorted((i for i, _ in newest), reverse=True)
    assert sorted(newest) == sorted(queries.keyword_ranked('"anna"', 10))
    assert queries.keyword_newest('"anna"', 1) == newest[:1]


@pytest.mark.parametrize("newest", [1, 2, 3, 50])
@pytest.mark.parametrize("limit", [1, 2, 10])
def test_the_best_of_the_newest_matches_are_the_newest_sorted_by_rank(
    index: MemoryIndex, open_queries: Opener, newest: int, limit: int
) -> None:
    queries = open_queries(index.db)
    match = '"anna" OR "dog" OR "bees"'
    rows = queries.keyword_newest(match, newest)

    best, matched = queries.keyword_newest_best(match, newest, limit)

    assert matched == len(rows) and (matched < newest) == (len(rows) < newest)
    # best rank first; of equal ranks the newer (higher id) first; only the newest `newest`
    assert best == sorted(rows, key=lambda r: (r[1], -r[0]))[:limit]
    assert set(best) <= set(rows) and len(best) == min(limit, len(rows))


def test_the_best_of_the_newest_of_nothing_is_nothing(
    index: MemoryIndex, open_queries: Opener
) -> None:
    assert open_queries(index.db).keyword_newest_best('"walrus"', 10, 5) == ([], 0)


@pytest.mark.parametrize("match", ['"unclosed', "AND OR ("])
def test_an_expression_that_cannot_be_parsed_is_a_malformed_query(
    index: MemoryIndex, open_queries: Opener, match: str
) -> None:
    queries = open_queries(index.db)
    for ask in (
        lambda: queries.keyword_ranked(match, 10),
        lambda: queries.keyword_newest(match, 10),
        lambda: queries.keyword_newest_best(match, 10, 5),
        lambda: queries.match_count(match, None),
    ):
        with pytest.raises(MalformedQuery):
            ask()


def test_match_counts_stop_at_the_limit(index: MemoryIndex, open_queries: Opener) -> None:
    queries = open_queries(index.db)

    every = queries.match_count('"anna"', None)

    assert every == len(queries.keyword_ranked('"anna"', 100)) >= 2
    assert queries.match_count('"anna"', 1) == 1
    assert queries.match_count('"nowhere"', None) == 0


@pytest.mark.parametrize(
    "match",
    ['"dog" AND "anna"', '"dog" OR "bees"', '"walked the dog"', '"dog the walked"', EVERY],
)
def test_a_count_is_the_number_of_rows_the_expression_ranks(
    index: MemoryIndex, open_queries: Opener, match: str
) -> None:
    queries = open_queries(index.db)
    ranked = len(queries.keyword_ranked(match, 100))

    assert queries.match_count(match, None) == ranked
    assert queries.match_count(match, 1) == min(ranked, 1)


@pytest.mark.parametrize(
    "match", ['"anna"', '"dog" AND "anna"', '"dog" OR "bees" OR "anna"', '"walked the dog"', EVERY]
)
def test_since_keeps_the_rows_from_that_id_on_with_the_same_ranks(
    index: MemoryIndex, open_queries: Opener, match: str
) -> None:
    queries = open_queries(index.db)
    every = queries.keyword_newest(match, 100)
    assert every
    for since in [*sorted({i for i, _ in every}), max(i for i, _ in every) + 1]:
        kept = [row for row in every if row[0] >= since]

        assert queries.keyword_newest(match, 100, since) == kept
        assert queries.keyword_newest(match, 1, since) == kept[:1]
        assert queries.keyword_newest_best(match, 100, 2, since) == (
            sorted(kept, key=lambda r: (r[1], -r[0]))[:2],
            len(kept),
        )
        assert queries.match_count(match, None, since) == len(kept)
        assert queries.match_count(match, 1, since) == min(1, len(kept))


@pytest.mark.parametrize("match", ['"anna"', '"dog" OR "bees"', '"walked the dog"', EVERY])
def test_the_nth_newest_match_counts_down_from_the_highest_id(
    index: MemoryIndex, open_queries: Opener, match: str
) -> None:
    queries = open_queries(index.db)
    ids = [i for i, _ in queries.keyword_newest(match, 100)]
    assert ids

    assert [queries.newest_match_id(match, k) for k in range(1, len(ids) + 1)] == ids
    assert queries.newest_match_id(match, len(ids) + 1) is None
    assert queries.newest_match_id(match, 0) is None
    assert queries.newest_match_id('"walrus"', 1) is None
    with pytest.raises(MalformedQuery):
        queries.newest_match_id('"unclosed', 1)


def test_in_scope_keeps_only_the_generation_and_scopes_asked_for(
    index: MemoryIndex, open_queries: Opener
) -> None:
    queries = open_queries(index.db)
    ids = all_ids(queries, index)
    gen = generation(index)

    assert queries.in_scope(ids, gen, [""]) == set(ids)
    assert queries.in_scope(ids, gen, ["some-chat"]) == set()
    assert queries.in_scope(ids, gen + 1, [""]) == set()
    assert queries.in_scope([*ids, 10**9], gen, [""]) == set(ids)  # a vanished id: left out


def test_chunks_are_the_rows_of_the_ids_that_exist(
    index: MemoryIndex, open_queries: Opener
) -> None:
    queries = open_queries(index.db)
    ids = all_ids(queries, index)

    rows = queries.chunks([*ids, 10**9])

    assert sorted(r[0] for r in rows) == ids
    by_path = {r[1]: r for r in rows}
    assert "Anna keeps bees" in by_path["MEMORY.md"][6]
    assert by_path["memory/2026-01-01.md"][8] == "2026-01-01"  # a dated log carries its day


# The indexer writes to SQLite only so far; on PostgreSQL the same promise is tested through the
# index repositories (tests/test_store_index.py).
@pytest.mark.parametrize("open_queries", ["sqlite"], indirect=True)
def test_the_chunk_count_and_index_version_follow_writes(
    index: MemoryIndex, open_queries: Opener
) -> None:
    queries = open_queries(index.db)
    gen = generation(index)
    count, version = queries.chunk_count(gen), queries.index_version()

    (index.workspace / "memory" / "2026-01-04.md").write_text("# Jan 4\n\nRain all day.\n")
    index.sync()

    assert queries.chunk_count(gen) == count + 1
    assert queries.index_version() != version


def test_databases_have_different_identities(
    index: MemoryIndex,
    open_queries: Opener,
    make_workspace: WorkspaceFactory,
    make_index: IndexFactory,
) -> None:
    other = make_index(make_workspace(NOTES, name="other"), keyword_config(), db_name="b.sqlite")

    assert open_queries(index.db).identity != open_queries(other.db).identity
    assert open_queries(index.db).identity == open_queries(index.db).identity


def test_a_keyword_only_index_has_no_passage_vectors(
    index: MemoryIndex, open_queries: Opener
) -> None:
    queries = open_queries(index.db)
    assert queries.passage_vectors(all_ids(queries, index)) is None


def test_passage_vectors_list_each_chunks_passages_together(
    use_model: None,
    make_workspace: WorkspaceFactory,
    make_index: IndexFactory,
    open_queries: Opener,
) -> None:
    idx = make_index(make_workspace(NOTES), use_config())
    idx.sync()
    queries = open_queries(idx.db)
    ids = all_ids(queries, idx)

    found = queries.passage_vectors([*ids, 10**9])

    assert found is not None
    assert found.matrix.dtype == np.float32 and found.matrix.shape[0] == len(found.spans)
    chunk_order = [cid for cid, _, _ in found.spans]
    assert set(chunk_order) == set(ids)
    assert chunk_order == sorted(chunk_order, key=chunk_order.index)  # grouped, not interleaved
    again = queries.passage_vectors([*ids, 10**9])
    assert again is not None and again.spans == found.spans
    assert np.array_equal(again.matrix, found.matrix)


MIXED = {
    **NOTES,
    "memory/2026-01-04.md": "# 1月4日\n\n我喜欢蓝色的杯子。Anna 也喜欢蓝色。\n",
    "memory/2026-01-05.md": "# Jan 5\n\nRunning with the dogs; the runners ran past cafés.\n",
    # Words PostgreSQL's Snowball stemmer (or its stop list) would stem otherwise than FTS5's
    # Porter: the PostgreSQL store stems with Porter, so they match the same way.
    "memory/2026-01-06.md": "# Jan 6\n\nWe always communicated above the campus, buying clay.\n",
}


@pytest.mark.parametrize(
    "match",
    [
        '"anna" OR "dog"',
        '"bees" AND "honey"',
        '"蓝色" OR "杯子"',
        '"蓝"*',  # a one-character CJK query: every token its occurrences begin
        '"anna" AND "蓝"*',
        '"喜欢 欢蓝 蓝色"',  # OpenClaw's whole CJK run: the phrase of its bigrams
        '"running" OR "cafe"',
        '"dogs"',
        '"communicate" OR "always" OR "above"',
        '"buy" AND "campus"',
    ],
)
def test_postgres_ranks_what_sqlite_ranks_with_the_same_bm25(
    make_workspace: WorkspaceFactory,
    make_index: IndexFactory,
    pg_server: PgTestServer,
    match: str,
) -> None:
    idx = make_index(make_workspace(MIXED), keyword_config())
    idx.sync()
    sqlite = SqliteSearchQueries(idx.db)
    copy = copy_to_postgres(idx.db, pg_server)
    try:
        postgres = PgSearchQueries(copy)

        def by_place(queries: SearchQueries) -> list[tuple[str, int, float]]:
            ranked = queries.keyword_ranked(match, 50)
            where = {r[0]: (r[1], r[4]) for r in queries.chunks([i for i, _ in ranked])}
            return [(*where[i], rank) for i, rank in ranked]

        expected, found = by_place(sqlite), by_place(postgres)
        assert expected, "the expression should find something"
        assert [p[:2] for p in found] == [p[:2] for p in expected]
        assert [p[2] for p in found] == pytest.approx([p[2] for p in expected], abs=1e-6)
    finally:
        copy.close()
