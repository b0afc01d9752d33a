"""`SearchQueries` on PostgreSQL (memory/store/search_queries.py states the promises).

Keyword ranking (memory/store/postgres/keywords.py): the expression's tokens are stemmed as the
rows hold them; an expression of single words (what the presets write) is read from the postings
(`memory_keyword_postings`: each word's rows in id order with their counts and lengths), any
other (a phrase, a prefix) from the GIN index on `memory_keywords.tokens` (`&&` / `@>`); FTS5's
bm25 is computed by PostgreSQL over those candidates — only the newest `limit` of them for
`keyword_newest`, as SQLite's capped path ranks them — with the whole schema's row count,
average length and per-token document frequencies read from the tables kept with the keyword
rows: the same formula and the same tokens as SQLite, so equal data gives equal ranks, and a
capped search's cost does not grow with how many rows hold a word. Reads only.
"""

from __future__ import annotations

from typing import Any

from memory.store.postgres.database import PgDatabase
from memory.store.postgres.keywords import (
    KeywordQuery,
    bm25_statement,
    count_statement,
    is_prefix,
    matching,
    parse_match,
    postings_statement,
    reads_postings,
    stemmed,
)
from memory.store.search_queries import ChunkRow, PassageVectors, best_of_newest
from memory.store.vector_codec import decode_many


class PgSearchQueries:
    """`SearchQueries` on one agent's PostgreSQL schema."""

    def __init__(self, db: PgDatabase) -> None:
        self.db = db

    @property
    def identity(self) -> str:
        return f"{self.db.shown_dsn}#{self.db.schema}"

    def index_version(self) -> str:
        rows = self.db.execute("SELECT value FROM meta WHERE key = 'index_version'")
        return str(rows[0][0]) if rows else "0"

    def chunk_count(self, generation: int) -> int:
        rows = self.db.execute(
            "SELECT count(*) FROM memory_chunks WHERE generation = %s", (generation,)
        )
        return int(rows[0][0])

    def newest_match_id(self, match: str, n: int) -> int | None:
        query = parse_match(match)
        if n <= 0 or not any(query.phrases):
            return None
        phrases = _stemmed_phrases(query)
        if len(phrases) == 1 and reads_postings(phrases):
            # One word: a backward range of its postings, no row read — unless its document
            # frequency already says it has fewer.
            rows = self.db.execute(
                "SELECT p.chunk_id FROM memory_keyword_df AS d, LATERAL (SELECT chunk_id FROM "
                "memory_keyword_postings WHERE token = d.token ORDER BY chunk_id DESC "
                "OFFSET %s LIMIT 1) AS p WHERE d.token = %s AND d.rows >= %s",
                (n - 1, phrases[0][0], n),
            )
        else:
            params: list[Any] = []
            where = matching(phrases, query.operator, params)
            rows = self.db.execute(
                f"SELECT chunk_id FROM memory_keywords WHERE {where} ORDER BY chunk_id DESC "
                "OFFSET %s LIMIT 1",
                [*params, n - 1],
            )
        return int(rows[0][0]) if rows else None

    def _keyword(
        self, match: str, order: str, limit: int | None, newest: bool, since: int | None = None
    ) -> list[Any]:
        """(chunk id, bm25 rank) of the rows `match` finds, in `order`, at most `limit`; with
        `newest`, only the `limit` highest ids are ranked at all (bm25 never sees the rest);
        with `since`, only the rows from that id on."""
        query = parse_match(match)
        flat = [t for phrase in query.phrases for t in phrase]
        if not flat or (limit is not None and limit <= 0):
            return []
        phrases = _stemmed_phrases(query)
        cap = limit if newest else None
        tokens = [p[0] for p in phrases]
        if not reads_postings(phrases):
            statement, params = bm25_statement(phrases, query.operator, cap, since)
            rows = self.db.execute(*_ordered(statement, params, order, limit, newest))
        elif query.operator == "AND" and len(set(tokens)) > FREE_JOINS:
            rows = self._rarest_first(tokens, order, limit, newest, since)
        else:
            statement, params = postings_statement(tokens, query.operator, cap, since=since)
            rows = self.db.execute(*_ordered(statement, params, order, limit, newest))
        return [(int(cid), float(rank)) for cid, rank in rows]

    def _rarest_first(
        self, tokens: list[str], order: str, limit: int | None, newest: bool, since: int | None
    ) -> list[Any]:
        """An AND of many words from the postings, joined rarest first in the order written:
        PostgreSQL's search for the best order of 8 joins took 21 ms of planning for 24 ms of
        work at 100k chunks (bench/RESULTS.md); the rarest word first is the order it would
        pick, known from the frequencies in one indexed read."""
        with self.db.transaction() as conn:
            conn.execute("SET LOCAL join_collapse_limit = 1")
            known = dict(
                conn.execute(
                    "SELECT token, rows FROM memory_keyword_df WHERE token = ANY(%s)", (tokens,)
                ).fetchall()
            )
            rarest = sorted(range(len(tokens)), key=lambda i: (known.get(tokens[i], 0), i))
            statement, params = postings_statement(
                tokens, "AND", limit if newest else None, join_order=rarest, since=since
            )
            return list(conn.execute(*_ordered(statement, params, order, limit, newest)))

    def keyword_ranked(self, match: str, limit: int) -> list[tuple[int, float]]:
        return self._keyword(match, "rank, chunk_id", limit, newest=False)

    def keyword_newest(
        self, match: str, limit: int, since: int | None = None
    ) -> list[tuple[int, float]]:
        return self._keyword(match, "chunk_id DESC", limit, newest=True, since=since)

    def keyword_newest_best(
        self, match: str, newest: int, limit: int, since: int | None = None
    ) -> tuple[list[tuple[int, float]], int]:
        return best_of_newest(self.keyword_newest(match, newest, since), limit)

    def match_count(self, match: str, limit: int | None, since: int | None = None) -> int:
        query = parse_match(match)
        if not any(query.phrases) or (limit is not None and limit <= 0):
            return 0
        phrases = _stemmed_phrases(query)
        if since is not None and limit is not None and reads_postings(phrases):
            # Words alone, from a lower id: the postings' ranges, newest first, up to `limit`
            # (the GIN index would gather every row of each word before the range cuts them).
            return len(self._keyword(match, "chunk_id DESC", limit, newest=True, since=since))
        if (
            since is None
            and len(phrases) == 1
            and len(phrases[0]) == 1
            and not is_prefix(phrases[0])
        ):
            # One word: its document frequency, kept with the keyword rows (no posting read).
            rows = self.db.execute(
                "SELECT rows FROM memory_keyword_df WHERE token = %s", (phrases[0][0],)
            )
            found = int(rows[0][0]) if rows else 0
            return found if limit is None else min(found, limit)
        statement, params = count_statement(phrases, query.operator, limit, since)
        return int(self.db.execute(statement, params)[0][0])

    def in_scope(self, ids: list[int], generation: int, scopes: list[str]) -> set[int]:
        if not ids or not scopes:
            return set()
        rows = self.db.execute(
            "SELECT id FROM memory_chunks WHERE id = ANY(%s) AND generation = %s "
            "AND scope = ANY(%s)",
            (list(ids), generation, list(scopes)),
        )
        return {int(r[0]) for r in rows}

    def passage_vectors(self, chunk_ids: list[int]) -> PassageVectors | None:
        if not chunk_ids:
            return None
        rows: list[Any] = self.db.execute(
            "SELECT chunk_id, start_line, end_line, vector FROM memory_units "
            "WHERE chunk_id = ANY(%s) AND vector IS NOT NULL ORDER BY chunk_id, id",
            (list(chunk_ids),),
        )
        if not rows:
            return None
        # 8-bit codes (what this version writes) or float32 (an older version's rows), mixed
        matrix = decode_many([bytes(r[3]) for r in rows])
        return PassageVectors([(int(r[0]), int(r[1]), int(r[2])) for r in rows], matrix)

    def chunks(self, ids: list[int]) -> list[ChunkRow]:
        if not ids:
            return []
        rows = self.db.execute(
            "SELECT id, path, source, origin, start_line, end_line, text, importance, day, "
            "project FROM memory_chunks WHERE id = ANY(%s)",
            (list(ids),),
        )
        return [tuple(r) for r in rows]


# An AND of more distinct words than this is joined in a fixed order (`_rarest_first`).
FREE_JOINS = 3


def _ordered(
    statement: str, params: list[Any], order: str, limit: int | None, newest: bool
) -> tuple[str, list[Any]]:
    """The keyword statement ordered by `order`, and limited unless `newest` limited it."""
    statement += f" ORDER BY {order}"
    if limit is not None and not newest:
        return statement + " LIMIT %s", [*params, limit]
    return statement, params


def _stemmed_phrases(query: KeywordQuery) -> list[list[str]]:
    """The query's phrases with each token stemmed as the keyword rows hold them."""
    stems = stemmed([t for phrase in query.phrases for t in phrase])
    phrases, at = [], 0
    for phrase in query.phrases:
        phrases.append(stems[at : at + len(phrase)])
        at += len(phrase)
    return phrases
