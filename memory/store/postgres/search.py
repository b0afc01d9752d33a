"""`SearchQueries` on PostgreSQL (memory/store/search_queries.py states the promises).

Keyword ranking (memory/store/postgres/keywords.py): the expression's tokens are stemmed in SQL,
the GIN index on `memory_keywords.tokens` finds every row holding any of them (`&&`), and FTS5's
bm25 is computed by PostgreSQL over those candidates with the whole schema's row count and
average length — the same formula and the same tokens as SQLite, so equal data gives equal
ranks. Reads only.
"""

from __future__ import annotations

from typing import Any

from memory.store.postgres.database import PgDatabase
from memory.store.postgres.keywords import (
    KeywordQuery,
    bm25_statement,
    count_statement,
    parse_match,
    stemmed,
)
from memory.store.search_queries import ChunkRow, PassageVectors
from memory.store.vector_tables import from_blob


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

    def _keyword(self, match: str, order: str, limit: int | None) -> list[tuple[int, float]]:
        """(chunk id, bm25 rank) of the rows `match` finds, in `order`, at most `limit`."""
        query = parse_match(match)
        flat = [t for phrase in query.phrases for t in phrase]
        if not flat or (limit is not None and limit <= 0):
            return []
        with self.db.transaction() as conn:
            statement, params = bm25_statement(_stemmed_phrases(query), query.operator)
            statement += f" ORDER BY {order}"
            if limit is not None:
                statement += " LIMIT %s"
                params.append(limit)
            rows = conn.execute(statement, params).fetchall()
        return [(int(cid), float(rank)) for cid, rank in rows]

    def keyword_ranked(self, match: str, limit: int) -> list[tuple[int, float]]:
        return self._keyword(match, "rank, chunk_id", limit)

    def keyword_newest(self, match: str, limit: int) -> list[tuple[int, float]]:
        return self._keyword(match, "chunk_id DESC", limit)

    def match_count(self, match: str, limit: int | None) -> int:
        query = parse_match(match)
        if not any(query.phrases) or (limit is not None and limit <= 0):
            return 0
        statement, params = count_statement(_stemmed_phrases(query), query.operator, limit)
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
        matrix = from_blob(b"".join(bytes(r[3]) for r in rows)).reshape(len(rows), -1)
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


def _stemmed_phrases(query: KeywordQuery) -> list[list[str]]:
    """The query's phrases with each token stemmed as the keyword rows hold them."""
    stems = stemmed([t for phrase in query.phrases for t in phrase])
    phrases, at = [], 0
    for phrase in query.phrases:
        phrases.append(stems[at : at + len(phrase)])
        at += len(phrase)
    return phrases
