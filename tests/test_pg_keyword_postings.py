"""PostgreSQL's keyword side from postings (issue 19, search p95 at 1M chunks): each
(token, keyword row) once in `memory_keyword_postings` with its count and the row's length, kept
by triggers whatever writes the keyword rows (the index's inserts and deletes, a rebuild's drop,
an UPDATE such as the CJK migration's, a restore's COPY), filled by its migration from the rows
already there, never copied — and ranking from it gives the ids and ranks the token arrays give.
(A failed transaction leaves them as they were: tests/test_pg_keyword_bounds.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from memory.store.postgres.database import PgDatabase
from memory.store.postgres.index_rows import PgIndexRows
from memory.store.postgres.keyword_postings import p001_keyword_postings
from memory.store.postgres.keywords import bm25_statement, parse_match, reads_postings
from memory.store.postgres.search import PgSearchQueries, _stemmed_phrases
from memory.store.postgres.snapshot import PgSnapshots
from tests.pg_support import PgTestServer
from tests.test_pg_keyword_bounds import EXPRESSIONS, fill

# What the postings must hold: recounted from the keyword rows' token arrays.
RECOUNT = (
    "SELECT t, k.chunk_id, count(*), cardinality(k.tokens) FROM memory_keywords AS k, "
    "unnest(k.tokens) AS t GROUP BY k.chunk_id, t, cardinality(k.tokens) ORDER BY 1, 2"
)
KEPT = "SELECT token, chunk_id, tf, dl FROM memory_keyword_postings ORDER BY 1, 2"


def _parsed(match: str) -> tuple[list[list[str]], str]:
    query = parse_match(match)
    return _stemmed_phrases(query), query.operator


# The expressions the presets' keyword side writes (words and CJK bigrams): postings.
BY_POSTINGS = [m for m in EXPRESSIONS if reads_postings(_parsed(m)[0])] + [
    '"anna" AND "bees" AND "river" AND "green"',  # joined rarest first, in a fixed order
    '"bees" AND "bees" AND "honey" AND "rain" AND "train"',
]


@pytest.fixture
def filled(pg_database: PgDatabase) -> tuple[PgDatabase, int, list[int]]:
    return fill(pg_database, 23)


def test_the_presets_expressions_are_ranked_from_postings() -> None:
    assert '"anna" OR "dog"' in BY_POSTINGS and '"蓝色" OR "杯子"' in BY_POSTINGS
    assert '"bees"' in BY_POSTINGS and '"bees" AND "honey"' in BY_POSTINGS
    # Phrases of several tokens and prefixes keep the token arrays' statement.
    for match in ('"dog" AND "river runs"', '"green kettle" OR "rain"', '"蓝"*'):
        assert match not in BY_POSTINGS


def test_postings_follow_inserts_updates_deletes_and_a_rebuild(
    filled: tuple[PgDatabase, int, list[int]],
) -> None:
    db, old, ids = filled
    rows = PgIndexRows(db)
    kept = db.execute(KEPT)
    assert kept == db.execute(RECOUNT) and len(kept) > 300
    assert any(tf > 1 for _, _, tf, _ in kept)  # repeated words counted, not listed twice

    with db.transaction() as conn:
        rows.delete_keywords(conn, ids[:40])  # an edited file's chunks
    assert db.execute(KEPT) == db.execute(RECOUNT)

    with db.transaction() as conn:  # rows rewritten in place (the CJK migration does this)
        conn.execute(
            "UPDATE memory_keywords SET tokens = tokens || ARRAY['zeppelin'] "
            "WHERE chunk_id = ANY(%s)",
            (ids[40:60],),
        )
    assert db.execute(KEPT) == db.execute(RECOUNT)
    assert len(db.execute("SELECT 1 FROM memory_keyword_postings WHERE token = 'zeppelin'")) == 20

    with db.transaction() as conn:
        rows.drop_keywords_of(conn, old)  # the rebuild swapped in: the old generation goes
    assert db.execute(KEPT) == db.execute(RECOUNT)

    with db.transaction() as conn:
        conn.execute("TRUNCATE memory_keywords")
    assert db.execute(KEPT) == []


def test_the_migration_fills_the_postings_from_existing_rows(
    filled: tuple[PgDatabase, int, list[int]],
) -> None:
    db, _, ids = filled
    expected = db.execute(RECOUNT)
    with db.transaction() as conn:
        conn.execute("DROP TABLE memory_keyword_postings")
        conn.execute("DROP FUNCTION memory_keyword_postings_sync() CASCADE")  # and its triggers
        p001_keyword_postings(conn)  # as a schema made before this change is upgraded
    assert db.execute(KEPT) == expected
    with db.transaction() as conn:  # and the triggers it made keep them
        PgIndexRows(db).delete_keywords(conn, ids[:10])
    assert db.execute(KEPT) == db.execute(RECOUNT)


@pytest.mark.parametrize("match", BY_POSTINGS)
def test_postings_rank_as_the_token_arrays_do(
    filled: tuple[PgDatabase, int, list[int]], match: str
) -> None:
    db, _, _ = filled
    phrases, operator = _parsed(match)

    def arrays(cap: int | None) -> list[tuple[int, float]]:
        statement, params = bm25_statement(phrases, operator, cap)
        rows = db.execute(statement + " ORDER BY chunk_id DESC", params)
        return [(int(i), float(r)) for i, r in rows]

    queries = PgSearchQueries(db)
    every = arrays(None)
    if match == '"nowhere"':
        assert every == [] and queries.keyword_newest(match, 10) == []
        return
    assert len(every) > 10
    for cap in (3000, len(every) // 3, 1):
        got = queries.keyword_newest(match, cap)
        want = arrays(cap)
        assert [i for i, _ in got] == [i for i, _ in want] == [i for i, _ in every[:cap]]
        assert [r for _, r in got] == pytest.approx([r for _, r in want], rel=1e-12)
    best = sorted(every, key=lambda row: (row[1], row[0]))[:25]
    ranked = queries.keyword_ranked(match, 25)
    assert [i for i, _ in ranked] == [i for i, _ in best]
    assert [r for _, r in ranked] == pytest.approx([r for _, r in best], rel=1e-12)


def test_a_repeated_word_counts_twice_as_in_fts5(
    filled: tuple[PgDatabase, int, list[int]],
) -> None:
    db, _, _ = filled
    queries = PgSearchQueries(db)
    once = dict(queries.keyword_newest('"bees"', 3000))
    twice = dict(queries.keyword_newest('"bees" OR "bees"', 3000))
    assert once.keys() == twice.keys()
    assert all(twice[i] == pytest.approx(2 * once[i], rel=1e-12) for i in once)


def test_a_restored_copy_gets_its_postings_from_the_keyword_rows(
    filled: tuple[PgDatabase, int, list[int]], pg_server: PgTestServer, tmp_path: Path
) -> None:
    db, _, _ = filled
    dump = tmp_path / "agent.pgdump"
    PgSnapshots(db).copy(Path("agent"), dump)
    target = pg_server.open(pg_server.new_database(), min_size=0, max_size=2)
    try:
        PgSnapshots(target).load(dump)
        assert target.execute(KEPT) == db.execute(KEPT) == target.execute(RECOUNT)
        restored = PgSearchQueries(target).keyword_newest('"anna" OR "dog"', 3000)
        original = PgSearchQueries(db).keyword_newest('"anna" OR "dog"', 3000)
        assert [i for i, _ in restored] == [i for i, _ in original] and len(original) > 10
        assert [r for _, r in restored] == pytest.approx([r for _, r in original], rel=1e-12)
    finally:
        target.close()
