"""PostgreSQL's bounded keyword ranking (issue 19, search at 1M chunks): each token's document
frequency is kept in `memory_keyword_df` with the keyword rows (insert, delete, a rebuild's drop,
the migration filling it), and the capped statement ranks only the newest matches — with the
same ranks the old statement (every matching row scored, document frequencies counted over the
postings) gives, so results equal it wherever the cap is not reached."""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from memory.store.index_rows import ChunkRow
from memory.store.postgres.database import PgDatabase
from memory.store.postgres.index_rows import PgGenerations, PgIndexRows
from memory.store.postgres.keywords import K1, B, _frequency, parse_match
from memory.store.postgres.migrations import p001_keyword_df
from memory.store.postgres.search import PgSearchQueries, _stemmed_phrases
from memory.text import fts_body

RECOUNT = (
    "SELECT t, count(*) FROM memory_keywords, LATERAL (SELECT DISTINCT unnest(tokens) AS t) AS u "
    "GROUP BY t ORDER BY t"
)
KEPT = "SELECT token, rows FROM memory_keyword_df ORDER BY token"
WORDS = [
    "anna",
    "bees",
    "honey",
    "river",
    "dog",
    "dogs",
    "running",
    "runs",
    "cafe",
    "café",
    "kettle",
    "green",
    "train",
    "rain",
]
EXPRESSIONS = [
    '"bees"',
    '"anna" OR "dog"',
    '"bees" AND "honey"',
    '"running" OR "cafe" OR "kettle"',
    '"green kettle" OR "rain"',
    '"dog" AND "river runs"',
    '"dog dog" OR "bees honey bees"',  # phrases that can overlap themselves
    '"蓝色" OR "杯子"',  # CJK bigrams: one token each (memory/text.py `fts_body`)
    '"蓝"*',  # a one-character CJK query: a prefix
    '"bees" AND "杯"*',
    '"蓝色 色的 的杯"',
    '"anna" OR "bees" OR "honey" OR "river" OR "train"',
    '"nowhere"',
]


def chunk(generation: int, path: str, line: int, text: str) -> ChunkRow:
    return ChunkRow(
        generation, path, "memory", "owner", "", line, line, f"h{line}", text, None, None,
        fts_body(text), None,
    )  # fmt: skip


def unbounded_statement(phrases: Sequence[Sequence[str]], operator: str) -> tuple[str, list[Any]]:
    """The statement before this change (main `63fcffc`): every matching row scored, each
    phrase's document frequency counted over the rows holding any query word (here: over every
    row, so a prefix phrase is counted the same way)."""
    params: list[Any] = []
    freqs = [f"{_frequency(p, params)} AS f{i}" for i, p in enumerate(phrases)]
    hits = ", ".join(
        f"count(*) FILTER (WHERE f{i} > 0)::float8 AS h{i}" for i in range(len(phrases))
    )
    idfs = ", ".join(
        f"CASE WHEN ln((s.n - h.h{i} + 0.5) / (h.h{i} + 0.5)) > 0 "
        f"THEN ln((s.n - h.h{i} + 0.5) / (h.h{i} + 0.5)) ELSE 1e-6 END AS i{i}"
        for i in range(len(phrases))
    )
    score = " + ".join(
        f"i.i{i} * c.f{i} * {K1 + 1} / (c.f{i} + {K1} * ({1 - B} + {B} * c.dl / s.avgdl))"
        for i in range(len(phrases))
    )
    matched = (" OR " if operator == "OR" else " AND ").join(
        f"c.f{i} > 0" for i in range(len(phrases))
    )
    statement = (
        "WITH s AS (SELECT rows::float8 AS n, CASE WHEN rows > 0 THEN tokens::float8 / rows "
        "ELSE 1 END AS avgdl FROM memory_keyword_stats WHERE id = 1), "
        f"c AS (SELECT chunk_id, cardinality(tokens)::float8 AS dl, {', '.join(freqs)} "
        "FROM memory_keywords), "
        f"h AS (SELECT {hits} FROM c), "
        f"i AS (SELECT {idfs} FROM s, h) "
        f"SELECT c.chunk_id, -({score}) AS rank FROM c, i, s WHERE {matched}"
    )
    return statement, params


def unbounded(db: PgDatabase, match: str) -> list[tuple[int, float]]:
    """Every match with its rank by the old statement, newest first."""
    query = parse_match(match)
    statement, params = unbounded_statement(_stemmed_phrases(query), query.operator)
    rows = db.execute(statement + " ORDER BY chunk_id DESC", params)
    return [(int(cid), float(rank)) for cid, rank in rows]


def random_text(rng: random.Random) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(3, 30))]
    if rng.random() < 0.3:
        words.append(rng.choice(["蓝色的杯子", "杯子很蓝", "蓝"]))
    return " ".join(words).capitalize() + "."


def fill(db: PgDatabase, seed: int) -> tuple[PgDatabase, int, list[int]]:
    """Two generations of 150 random chunks each (the second a rebuild in progress)."""
    rng = random.Random(seed)
    generations, rows = PgGenerations(db), PgIndexRows(db)
    ids: list[int] = []
    with db.transaction() as conn:
        old = generations.create_building(conn, {"dimensions": 0}, 1.0)
        generations.activate(conn, old, 1.0)
        new = generations.create_building(conn, {"dimensions": 0}, 2.0)
        for n in range(300):
            g = old if n % 2 else new
            ids.append(rows.insert_chunk(conn, chunk(g, f"m{n % 7}.md", n, random_text(rng))))
    return db, old, ids


@pytest.fixture
def filled(pg_database: PgDatabase) -> Iterator[tuple[PgDatabase, int, list[int]]]:
    yield fill(pg_database, 19)


def test_document_frequencies_follow_inserts_deletes_and_a_rebuild(
    filled: tuple[PgDatabase, int, list[int]],
) -> None:
    db, old, ids = filled
    rows = PgIndexRows(db)
    assert db.execute(KEPT) == db.execute(RECOUNT)
    assert (
        dict(db.execute(KEPT))["bee"]
        == db.execute("SELECT count(*) FROM memory_keywords WHERE 'bee' = ANY(tokens)")[0][0]
    )

    with db.transaction() as conn:
        rows.delete_keywords(conn, ids[:40])  # an edited file's chunks
    assert db.execute(KEPT) == db.execute(RECOUNT)

    with db.transaction() as conn:
        rows.drop_keywords_of(conn, old)  # the rebuild swapped in: the old generation goes
    kept = db.execute(KEPT)
    assert kept == db.execute(RECOUNT) and all(n > 0 for _, n in kept)  # no token left at 0

    with db.transaction() as conn:
        rows.delete_keywords(conn, ids)
    assert db.execute(KEPT) == [] and db.execute(
        "SELECT rows, tokens FROM memory_keyword_stats"
    ) == [(0, 0)]


def test_a_failed_write_leaves_the_frequencies_as_they_were(
    filled: tuple[PgDatabase, int, list[int]],
) -> None:
    db, old, _ = filled
    postings = "SELECT token, chunk_id, tf, dl FROM memory_keyword_postings ORDER BY 1, 2"
    before, postings_before = db.execute(KEPT), db.execute(postings)
    with pytest.raises(RuntimeError), db.transaction() as conn:
        PgIndexRows(db).insert_chunk(conn, chunk(old, "x.md", 999, "zeppelin bees bees"))
        PgIndexRows(db).drop_keywords_of(conn, old)
        raise RuntimeError("the rebuild lost its lease")
    assert db.execute(KEPT) == before and db.execute(postings) == postings_before


def test_the_migration_fills_the_frequencies_from_existing_rows(
    filled: tuple[PgDatabase, int, list[int]],
) -> None:
    db, _, _ = filled
    expected = db.execute(RECOUNT)
    with db.transaction() as conn:
        conn.execute("DROP TABLE memory_keyword_df")
        p001_keyword_df(conn)  # as a schema made before this change is upgraded
    assert db.execute(KEPT) == expected


@pytest.mark.parametrize("match", EXPRESSIONS)
def test_ranks_equal_the_unbounded_statement_below_and_above_the_cap(
    filled: tuple[PgDatabase, int, list[int]], match: str
) -> None:
    db, _, _ = filled
    queries = PgSearchQueries(db)
    every = unbounded(db, match)
    if match == '"nowhere"':
        assert every == [] and queries.keyword_newest(match, 3000) == []
        return
    assert len(every) > 10, "the expression should find a fair share of rows"

    # Below the cap: every match, newest first, the same ranks.
    newest = queries.keyword_newest(match, 3000)
    assert [i for i, _ in newest] == [i for i, _ in every]
    assert [r for _, r in newest] == pytest.approx([r for _, r in every], rel=1e-12)

    # Above it: the newest `cap` matches only, each with the rank it has among them all.
    cap = len(every) // 3
    capped = queries.keyword_newest(match, cap)
    assert [i for i, _ in capped] == [i for i, _ in every[:cap]]
    assert [r for _, r in capped] == pytest.approx([r for _, r in every[:cap]], rel=1e-12)

    # Ranked (no cap): the best, in rank then id order, as before.
    best = sorted(every, key=lambda row: (row[1], row[0]))[:25]
    ranked = queries.keyword_ranked(match, 25)
    assert [i for i, _ in ranked] == [i for i, _ in best]
    assert [r for _, r in ranked] == pytest.approx([r for _, r in best], rel=1e-12)


@pytest.mark.parametrize("match", EXPRESSIONS)
def test_counts_read_from_the_frequencies_equal_the_rows_matched(
    filled: tuple[PgDatabase, int, list[int]], match: str
) -> None:
    db, _, _ = filled
    queries = PgSearchQueries(db)
    total = len(unbounded(db, match))
    assert queries.match_count(match, None) == total
    assert queries.match_count(match, 7) == min(total, 7)
