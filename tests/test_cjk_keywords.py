"""CJK bigrams as index tokens (issues 20/22/19): each CJK run is indexed as its overlapping
bigrams and its last character (memory/text.py `fts_body`), a query's bigram is one token and a
one-character query a prefix; on both backends. Deletes and re-indexing leave no stale token in
the contentless FTS5 index, and the "cjk_keywords" migrations upgrade an index of the old layout
(one token per character) in place, with the search results of a fresh build."""

from __future__ import annotations

import random
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from common.text import strip_comments
from memory.index.index import TOKENIZER_VERSION, MemoryIndex
from memory.store import chunk_text, index_rows
from memory.store.cjk_keywords import CJK_KEYWORDS, OLD_TOKENIZER
from memory.store.compact import compact
from memory.store.index_rows import ChunkRow
from memory.store.postgres.cjk_keywords import p001_cjk_bigram_keywords
from memory.store.postgres.database import PgDatabase
from memory.store.postgres.index_rows import PgGenerations, PgIndexRows
from memory.store.postgres.keywords import keyword_tokens, stemmed
from memory.store.postgres.search import PgSearchQueries
from memory.store.postgres.snapshot import PgSnapshots
from memory.store.schema import applied
from memory.store.search_queries import SqliteSearchQueries
from memory.text import _CJK_RUN, fts_body, fts_match_expression, query_terms
from tests.conftest import IndexFactory, WorkspaceFactory, keyword_config
from tests.pg_support import PgTestServer
from tests.test_schema import make_database_as_main_did_before_sets
from tests.test_store_search import copy_to_postgres

# Every note names Anna: tests/test_store_search.py's copy to PostgreSQL finds each chunk by it.
NOTES = {
    "MEMORY.md": "# Memory\n\nAnna 养了一只猫，名字叫小白。\n",
    "memory/2026-02-01.md": "# Feb 1\n\nAnna 的妈妈说下个月要搬家。\n",
    "memory/2026-02-02.md": "# Feb 2\n\nAnna 买了蓝色的杯子和一个茶壶。\n",
    "memory/2026-02-03.md": "# Feb 3\n\nAnna went to the bakery; no Chinese here.\n",
}
QUESTIONS = {  # question → the note it must find first
    "猫": "MEMORY.md",
    "搬家": "memory/2026-02-01.md",
    "妈妈什么时候搬家？": "memory/2026-02-01.md",
    "蓝色的杯子": "memory/2026-02-02.md",
    "茶": "memory/2026-02-02.md",
}
VOCAB = "SELECT term, doc, cnt FROM v ORDER BY term"


def old_body(text: str) -> str:
    """The keyword body before this change (main `d251034`): one token per CJK character."""
    return _CJK_RUN.sub(lambda m: " " + " ".join(m.group(0)) + " ", strip_comments(text))


def old_expression(terms: list[str], operator: str = "OR") -> str:
    """The expression before this change: a CJK bigram a phrase of its two characters."""
    quoted = [" ".join(t) if _CJK_RUN.fullmatch(t) else t for t in terms]
    return f" {operator} ".join(f'"{t}"' for t in quoted)


def fts5(bodies: list[tuple[int, str]]) -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:")
    conn.execute(
        "CREATE VIRTUAL TABLE f USING fts5(body, content = '', "
        "tokenize = 'porter unicode61 remove_diacritics 2')"
    )
    conn.executemany("INSERT INTO f(rowid, body) VALUES (?, ?)", bodies)
    return conn


def vocabulary(conn: Any, table: str) -> list[tuple[str, int, int]]:
    """(token, rows, occurrences) of every token the FTS5 `table` holds."""
    conn.execute(f"CREATE VIRTUAL TABLE temp.v USING fts5vocab(main, {table}, row)")
    try:
        return [tuple(r) for r in conn.execute(VOCAB).fetchall()]
    finally:
        conn.execute("DROP TABLE temp.v")


def assert_index_is_exactly_the_chunks(idx: MemoryIndex) -> None:
    """The FTS5 index holds exactly the tokens of today's bodies of the chunk rows (no stale
    token of a deleted or edited chunk), and FTS5's own integrity check passes."""
    conn = idx.db.conn
    conn.execute("INSERT INTO memory_fts(memory_fts, rank) VALUES ('integrity-check', 0)")
    chunks = conn.execute("SELECT id, text FROM memory_chunks").fetchall()
    fresh = fts5([(cid, fts_body(chunk_text.read_text(conn, text))) for cid, text in chunks])
    fresh.execute("CREATE VIRTUAL TABLE temp.v USING fts5vocab(main, f, row)")
    expected = [tuple(r) for r in fresh.execute(VOCAB).fetchall()]
    assert vocabulary(conn, "memory_fts") == expected
    assert any(re.fullmatch(r"[\u4e00-\u9fff]{2}", t) for t, _, _ in expected)  # bigram tokens


def first_paths(idx: MemoryIndex) -> dict[str, str | None]:
    out = {}
    for question in QUESTIONS:
        hits = idx.search(question, preset="keyword", record=False)
        out[question] = hits[0].path if hits else None
    return out


def test_fts_body_writes_bigrams_and_the_last_character() -> None:
    assert fts_body("妈妈说搬家").split() == ["妈妈", "妈说", "说搬", "搬家", "家"]
    assert fts_body("猫。Anna的狗").split() == ["猫", "。Anna", "的狗", "狗"]  # 。: no token
    body = fts_body("我喜欢蓝色的杯子 and tea")
    assert len(body.split()) == len("我喜欢蓝色的杯子") + 2  # a token per character, as before
    assert fts_match_expression(query_terms("猫")) == '"猫"*'
    assert fts_match_expression(query_terms("蓝色杯子")) == '"蓝色" OR "色杯" OR "杯子"'
    assert fts_match_expression(["妈妈说"]) == '"妈妈 妈说"'  # OpenClaw's whole runs


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_one_and_several_character_chinese_questions_find_their_chunk(
    backend: str,
    make_workspace: WorkspaceFactory,
    make_index: IndexFactory,
    request: pytest.FixtureRequest,
) -> None:
    idx = make_index(make_workspace(NOTES), keyword_config())
    idx.sync()
    assert first_paths(idx) == QUESTIONS
    queries: Any = SqliteSearchQueries(idx.db)
    copy = None
    if backend == "postgres":
        server: PgTestServer = request.getfixturevalue("pg_server")
        copy = copy_to_postgres(idx.db, server)
        queries = PgSearchQueries(copy)
    try:
        for question, path in QUESTIONS.items():
            match = fts_match_expression(query_terms(question))
            assert match is not None
            ranked = queries.keyword_ranked(match, 10)
            assert ranked, question
            assert queries.chunks([ranked[0][0]])[0][1] == path, question
            assert queries.match_count(match, None) == len(ranked)
        # a character inside a run (begins a bigram) and at its end (the last character)
        assert queries.match_count('"色"*', None) == 1 and queries.match_count('"壶"*', None) == 1
        assert queries.match_count('"鲸"*', None) == 0
    finally:
        if copy is not None:
            copy.close()


KANA_HANGUL = {
    "MEMORY.md": "# Memory\n\nAnna は東京タワーに行きました。\n",
    "memory/2026-03-01.md": "# Mar 1\n\nAnna 는 서울에서 김치를 먹었다.\n",
}


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_japanese_and_korean_pieces_are_tokens_too(
    backend: str,
    make_workspace: WorkspaceFactory,
    make_index: IndexFactory,
    request: pytest.FixtureRequest,
) -> None:
    idx = make_index(make_workspace(KANA_HANGUL), keyword_config())
    idx.sync()
    queries: Any = SqliteSearchQueries(idx.db)
    copy = None
    if backend == "postgres":
        copy = copy_to_postgres(idx.db, request.getfixturevalue("pg_server"))
        queries = PgSearchQueries(copy)
    try:
        for question, path in [
            ("東京", "MEMORY.md"),
            ("タワー", "MEMORY.md"),
            ("서울", "memory/2026-03-01.md"),
            ("김치", "memory/2026-03-01.md"),
            ("울", "memory/2026-03-01.md"),  # one character: a prefix
        ]:
            match = fts_match_expression(query_terms(question))
            assert match is not None
            ranked = queries.keyword_ranked(match, 10)
            assert [queries.chunks([i])[0][1] for i, _ in ranked] == [path], question
    finally:
        if copy is not None:
            copy.close()


def test_deletes_and_reindexing_leave_no_stale_token(
    make_workspace: WorkspaceFactory, make_index: IndexFactory
) -> None:
    ws = make_workspace(NOTES)
    idx = make_index(ws, keyword_config())
    idx.sync()
    assert_index_is_exactly_the_chunks(idx)

    (ws / "memory/2026-02-01.md").write_text("# Feb 1\n\nAnna 的爸爸说明年再搬家。\n")
    (ws / "memory/2026-02-02.md").unlink()
    idx.sync()
    assert_index_is_exactly_the_chunks(idx)
    assert first_paths(idx)["蓝色的杯子"] is None
    assert first_paths(idx)["搬家"] == "memory/2026-02-01.md"

    generation = idx.active_generation()
    idx.sync(force=True)  # a whole new generation; the old one's rows removed
    assert idx.active_generation() != generation
    assert_index_is_exactly_the_chunks(idx)


def test_bm25_of_bigram_tokens_equals_the_old_phrases() -> None:
    """Same tokens per run, so the same document lengths, and a bigram's rows and occurrences
    are the phrase's: the ranks are the old layout's (runs apart from one another, as a phrase
    of the old layout also matched across punctuation between two runs)."""
    rng = random.Random(20)
    chars = "妈说搬家猫蓝色杯子茶壶我的"
    texts = [
        " ".join(
            "".join(rng.choice(chars) for _ in range(rng.randint(1, 9)))
            if rng.random() < 0.6
            else rng.choice(["anna", "tea", "cups", "blue"])
            for _ in range(rng.randint(4, 24))
        )
        for _ in range(300)
    ]
    # two CJK runs never next to each other: an English word between them
    texts = [re.sub(rf"(?<=[{chars}]) (?=[{chars}])", " and ", t) for t in texts]
    old = fts5([(i, old_body(t)) for i, t in enumerate(texts, 1)])
    new = fts5([(i, fts_body(t)) for i, t in enumerate(texts, 1)])
    sql = "SELECT rowid, bm25(f) FROM f WHERE f MATCH ? ORDER BY rowid"
    for terms, operator in [
        (["妈说"], "OR"),
        (["搬家", "蓝色", "anna"], "OR"),
        (["杯子", "tea"], "AND"),
        (["猫"], "OR"),
        (["壶", "蓝色"], "OR"),
    ]:
        before = old.execute(sql, (old_expression(terms, operator),)).fetchall()
        after = new.execute(sql, (fts_match_expression(terms, operator=operator),)).fetchall()
        assert before, terms
        assert [r for r, _ in after] == [r for r, _ in before]
        assert [s for _, s in after] == pytest.approx([s for _, s in before], rel=1e-12)


def downgrade_to_the_old_layout(path: Path) -> None:
    """The database as main wrote it before this change: old bodies, the old tokenizer named,
    the "cjk_keywords" migration not applied."""
    conn = sqlite3.connect(path)
    rows = [
        (c, chunk_text.read_text(conn, t))
        for c, t in conn.execute("SELECT id, text FROM memory_chunks").fetchall()
    ]
    conn.execute("INSERT INTO memory_fts(memory_fts) VALUES ('delete-all')")
    conn.executemany(
        "INSERT INTO memory_fts(rowid, body) VALUES (?, ?)", [(c, old_body(t)) for c, t in rows]
    )
    conn.execute(
        "UPDATE memory_generations SET identity = json_set(identity, '$.tokenizer', ?)",
        (OLD_TOKENIZER,),
    )
    conn.execute("DELETE FROM schema_migrations WHERE owner = 'cjk_keywords'")
    conn.commit()
    new = conn.execute(
        "SELECT count(*) FROM memory_fts WHERE memory_fts MATCH ?", ('"搬家"',)
    ).fetchone()
    assert new == (0,)  # the old layout: a bigram is no token of it
    conn.close()


@pytest.mark.parametrize("compressed", [False, True], ids=["plain texts", "compressed texts"])
def test_the_migration_upgrades_an_old_layout_index_in_place(
    make_workspace: WorkspaceFactory,
    make_index: IndexFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    compressed: bool,
) -> None:
    if compressed:  # the memory set's m012 compresses texts before this set reads them
        monkeypatch.setattr(chunk_text, "DICT_MIN_BYTES", 50)
        monkeypatch.setattr(index_rows, "_DICT_LOOK_EVERY", 1)
    ws = make_workspace(NOTES)
    fresh = make_index(ws, keyword_config(), db_name="fresh.sqlite")
    fresh.sync()
    expected = first_paths(fresh)
    fresh.close()

    built = make_index(ws, keyword_config(), db_name="old.sqlite")
    built.sync()
    generation = built.active_generation()
    if compressed:
        compact(built.db)  # writes the texts compressed (the dictionary is made from them)
    built.close()
    downgrade_to_the_old_layout(tmp_path / "old.sqlite")

    if compressed:
        with sqlite3.connect(tmp_path / "old.sqlite") as raw:
            forms = {f for (f,) in raw.execute("SELECT DISTINCT typeof(text) FROM memory_chunks")}
        assert "blob" in forms
    idx = make_index(ws, keyword_config(), db_name="old.sqlite")  # opening migrates it
    assert applied(idx.db.conn, "cjk_keywords") == {"c001_cjk_bigram_keywords"}
    active = idx.active_generation()
    assert active is not None and active[1]["tokenizer"] == TOKENIZER_VERSION
    assert_index_is_exactly_the_chunks(idx)
    assert first_paths(idx) == expected == QUESTIONS
    report = idx.sync()  # nothing to rebuild: the generation says it has the new body
    assert not report.rebuilt and report.files_indexed == []
    assert generation is not None and idx.active_generation() == active
    assert active[0] == generation[0]


def test_a_database_from_before_migration_sets_gets_the_new_keyword_layout(
    tmp_path: Path,
) -> None:
    from memory.store.db import open_database

    path = tmp_path / "agent.sqlite"
    make_database_as_main_did_before_sets(path)
    db = open_database(path)
    assert applied(db.conn, "cjk_keywords") == {m.__name__ for m in CJK_KEYWORDS.migrations}
    db.close()


PG_TEXTS = ["Anna 的妈妈说要搬家。", "蓝色的杯子 and blue cups", "no Chinese at all", "猫"]


def write_old_layout(db: PgDatabase) -> int:
    """PG_TEXTS as keyword rows of the old layout, in an active generation naming it."""
    generations, rows = PgGenerations(db), PgIndexRows(db)
    with db.transaction() as conn:
        generation = generations.create_building(
            conn, {"dimensions": 0, "tokenizer": OLD_TOKENIZER}, 1.0
        )
        generations.activate(conn, generation, 1.0)
        for n, text in enumerate(PG_TEXTS):
            row = ChunkRow(
                generation, "a.md", "memory", "owner", "", n, n, f"h{n}", text, None, None,
                old_body(text), None,
            )  # fmt: skip
            rows.insert_chunk(conn, row)
    assert PgSearchQueries(db).match_count('"搬家"', None) == 0  # the old layout
    return generation


def assert_new_layout(db: PgDatabase, generation: int) -> None:
    texts = PG_TEXTS
    pg_database = db
    queries = PgSearchQueries(db)
    kept = pg_database.execute("SELECT body, tokens FROM memory_keywords ORDER BY chunk_id")
    assert kept == [(fts_body(t), stemmed(keyword_tokens(fts_body(t)))) for t in texts]
    recount = (
        "SELECT t, count(*) FROM memory_keywords, LATERAL (SELECT DISTINCT unnest(tokens) AS t) "
        "AS u GROUP BY t ORDER BY t"
    )
    assert pg_database.execute("SELECT token, rows FROM memory_keyword_df ORDER BY token") == (
        pg_database.execute(recount)
    )
    assert pg_database.execute("SELECT rows, tokens FROM memory_keyword_stats") == (
        pg_database.execute("SELECT count(*), sum(cardinality(tokens)) FROM memory_keywords")
    )
    assert PgGenerations(pg_database).identity_of(generation) == {
        "dimensions": 0,
        "tokenizer": TOKENIZER_VERSION,
    }
    assert queries.match_count('"搬家"', None) == 1
    assert queries.match_count('"猫"*', None) == 1 and queries.match_count('"蓝"*', None) == 1


def test_postgres_migration_rewrites_the_keyword_rows_and_their_frequencies(
    pg_database: PgDatabase,
) -> None:
    generation = write_old_layout(pg_database)
    with pg_database.transaction() as conn:
        p001_cjk_bigram_keywords(conn)
    assert_new_layout(pg_database, generation)


def test_a_postgres_backup_of_the_old_layout_is_restored_with_the_new_one(
    pg_database: PgDatabase, pg_server: PgTestServer, tmp_path: Path
) -> None:
    generation = write_old_layout(pg_database)
    pg_database.execute("DELETE FROM schema_migrations WHERE owner = 'cjk_keywords'")
    dump = tmp_path / "agent.pgdump"
    PgSnapshots(pg_database).copy(Path("agent"), dump)
    target = pg_server.open(pg_server.new_database(), min_size=0, max_size=2)
    try:
        PgSnapshots(target).load(dump)  # a fresh schema: its own migration ran on no rows
        assert_new_layout(target, generation)
    finally:
        target.close()
