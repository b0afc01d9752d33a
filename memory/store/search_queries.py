"""The read queries a memory search makes over the index: FTS5 keyword ranking, chunk rows,
passage vectors, and the errors they can meet.

The tables (`memory_chunks`, `memory_passages` / `memory_units`, `embedding_cache`, the
`memory_fts` FTS5 index, `meta`) are written by the indexer; a search only reads them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from memory.errors import DatabaseCorruptError, DatabaseError
from memory.store.backends import store_for
from memory.store.cache_codec import center_of
from memory.store.chunk_text import read_texts
from memory.store.content_hash import StoredHash, cache_key_sql
from memory.store.db import Database, as_corruption, corruption_advice
from memory.store.index_embedcache import stored_vectors
from memory.store.passage_pack import cache_blobs, packed_rows
from memory.store.vector_codec import (
    CENTERED_MAGICS,
    decode_centered_many,
    decode_many,
    is_centered,
)
from memory.store.vector_tables import BATCH

# What SQLite says about a MATCH expression it cannot parse (as opposed to a database problem).
_FTS_QUERY_ERRORS = (
    "fts5: syntax error",
    "fts5: parser stack overflow",
    "unterminated string",
    "unknown special query",
    "fts5: column queries are not supported",
    "no such column",
)

# A loose passage row's hash as the cache keys it (the cache row it names is checked by it).
_UNIT_KEY = cache_key_sql("u.hash")

# (id, path, source, origin, start_line, end_line, text, importance, day, project)
ChunkRow = tuple[int, str, str, str, int, int, str, int | None, str | None, str | None]


class MalformedQuery(Exception):
    """The keyword expression cannot be parsed: it finds nothing (not a database problem)."""


@dataclass(frozen=True)
class PassageVectors:
    """The vectors of some chunks' passages: `spans[i]` = (chunk id, start line, end line) of
    row i of `matrix` (float32, one passage a row)."""

    spans: list[tuple[int, int, int]]
    matrix: np.ndarray


def best_of_newest(
    newest: list[tuple[int, float]], limit: int
) -> tuple[list[tuple[int, float]], int]:
    """`SearchQueries.keyword_newest_best` from `keyword_newest`'s rows."""
    return sorted(newest, key=lambda row: (row[1], -row[0]))[:limit], len(newest)


class SearchQueries(Protocol):
    """What a search reads from one index (one database), through one connection.

    Promises a second implementation must keep:
    - read-only: nothing here writes;
    - `keyword_ranked` orders by bm25 rank ascending (lower is better, ranks are negative), and
      `keyword_newest` by chunk id descending; both compute bm25 the way FTS5 does, over the
      whole index (every generation), so equal data gives equal ranks;
    - a keyword expression the engine cannot parse raises `MalformedQuery`, never a database
      error; a damaged database raises `DatabaseCorruptError`;
    - `in_scope`, `chunks` and `passage_vectors` return nothing for ids that no longer exist
      (a write may come between a search's reads); `passage_vectors` lists each chunk's
      passages together, in the order the store keeps them (the same every time);
    - `index_version` changes with every write to the index, so counts may be cached by it;
    - `since` (keyword_newest, keyword_newest_best, match_count) keeps only the chunks whose id
      is at least `since`: the same rows as without it, less those below, with the same ranks
      (bm25 still counts the whole index).
    """

    @property
    def identity(self) -> str:
        """Names the database (its file), so caches of counts can tell databases apart."""

    def index_version(self) -> str: ...

    def chunk_count(self, generation: int) -> int:
        """Chunks in the generation."""

    def newest_match_id(self, match: str, n: int) -> int | None:
        """The id of the `n`-th newest chunk (highest id first) `match` finds, in any
        generation; None when it finds fewer than `n`."""

    def keyword_ranked(self, match: str, limit: int) -> list[tuple[int, float]]:
        """(chunk id, bm25 rank) of the best `limit` chunks `match` finds, best first."""

    def keyword_newest(
        self, match: str, limit: int, since: int | None = None
    ) -> list[tuple[int, float]]:
        """(chunk id, bm25 rank) of the newest `limit` chunks `match` finds, newest first."""

    def keyword_newest_best(
        self, match: str, newest: int, limit: int, since: int | None = None
    ) -> tuple[list[tuple[int, float]], int]:
        """The best `limit` (bm25 rank ascending, the newer first on equal ranks) of the newest
        `newest` chunks `match` finds, and how many of those newest there were (fewer than
        `newest`: every match was ranked) — `best_of_newest` of `keyword_newest`."""

    def match_count(self, match: str, limit: int | None, since: int | None = None) -> int:
        """Chunks `match` finds, counting stops at `limit` (None: count them all)."""

    def in_scope(self, ids: list[int], generation: int, scopes: list[str]) -> set[int]:
        """The ids among `ids` that belong to the generation and one of the scopes."""

    def passage_vectors(self, chunk_ids: list[int]) -> PassageVectors | None:
        """The passages with vectors of these chunks (None: none has any)."""

    def chunks(self, ids: list[int]) -> list[ChunkRow]:
        """The rows of these chunks, in no particular order."""


def _lowest(since: int | None) -> int:
    """The lowest rowid a keyword read keeps: `since`, or any (SQLite's rowids are 64-bit)."""
    return -(2**63) if since is None else since


class SqliteSearchQueries:
    """`SearchQueries` on the agent's SQLite file (FTS5 for keywords)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    @property
    def identity(self) -> str:
        return str(self.db.path)

    def index_version(self) -> str:
        version = self.db.execute("SELECT value FROM meta WHERE key = 'index_version'")
        return str(version[0][0]) if version else "0"

    def chunk_count(self, generation: int) -> int:
        (n,) = self.db.execute(
            "SELECT count(*) FROM memory_chunks WHERE generation = ?", (generation,)
        )[0]
        return int(n)

    def _keyword(self, sql: str, params: tuple[Any, ...]) -> list[Any]:
        try:
            return self.db.execute(sql, params)
        except Exception as exc:
            if is_fts_query_error(exc):
                raise MalformedQuery(str(exc)) from exc
            raise

    def keyword_ranked(self, match: str, limit: int) -> list[tuple[int, float]]:
        rows = self._keyword(
            "SELECT rowid, bm25(memory_fts) AS r FROM memory_fts "
            "WHERE memory_fts MATCH ? ORDER BY r LIMIT ?",
            (match, limit),
        )
        return [(int(i), float(r)) for i, r in rows]

    def newest_match_id(self, match: str, n: int) -> int | None:
        if n <= 0:
            return None
        rows = self._keyword(
            "SELECT rowid FROM memory_fts WHERE memory_fts MATCH ? ORDER BY rowid DESC "
            "LIMIT 1 OFFSET ?",
            (match, n - 1),
        )
        return int(rows[0][0]) if rows else None

    def keyword_newest(
        self, match: str, limit: int, since: int | None = None
    ) -> list[tuple[int, float]]:
        # One pass of FTS5 in rowid order (it iterates its doclists that way, and seeks to
        # `since` in each).
        rows = self._keyword(
            "SELECT rowid, bm25(memory_fts) FROM memory_fts WHERE memory_fts MATCH ? "
            "AND rowid >= ? ORDER BY rowid DESC LIMIT ?",
            (match, _lowest(since), limit),
        )
        return [(int(i), float(r)) for i, r in rows]

    def keyword_newest_best(
        self, match: str, newest: int, limit: int, since: int | None = None
    ) -> tuple[list[tuple[int, float]], int]:
        # Ordered and cut by SQLite: ≈ 3-5 ms less than 3,000 rows brought into Python and
        # sorted there (bench/RESULTS.md), the same rows and ranks.
        rows = self._keyword(
            "WITH newest AS MATERIALIZED (SELECT rowid AS id, bm25(memory_fts) AS r "
            "FROM memory_fts WHERE memory_fts MATCH ? AND rowid >= ? ORDER BY rowid DESC "
            "LIMIT ?) "
            "SELECT id, r, (SELECT count(*) FROM newest) FROM newest ORDER BY r, id DESC LIMIT ?",
            (match, _lowest(since), newest, limit),
        )
        return [(int(i), float(r)) for i, r, _ in rows], int(rows[0][2]) if rows else 0

    def match_count(self, match: str, limit: int | None, since: int | None = None) -> int:
        (n,) = self._keyword(
            "SELECT count(*) FROM (SELECT 1 FROM memory_fts WHERE memory_fts MATCH ? "
            "AND rowid >= ? LIMIT ?)",
            (match, _lowest(since), -1 if limit is None else limit),
        )[0]
        return int(n)

    def in_scope(self, ids: list[int], generation: int, scopes: list[str]) -> set[int]:
        out: set[int] = set()
        smarks = ",".join("?" for _ in scopes)
        for i in range(0, len(ids), BATCH):
            part = ids[i : i + BATCH]
            marks = ",".join("?" for _ in part)
            out.update(
                int(r[0])
                for r in self.db.execute(
                    # Unary + keeps SQLite on primary-key lookups instead of scanning the whole
                    # generation through its (generation, path) index.
                    f"SELECT id FROM memory_chunks WHERE id IN ({marks}) AND +generation = ? "
                    f"AND +scope IN ({smarks})",
                    (*part, generation, *scopes),
                )
            )
        return out

    def passage_vectors(self, chunk_ids: list[int]) -> PassageVectors | None:
        # A passage's vector is stored once, in the embedding cache of its generation's model.
        # A chunk's passages are one packed row naming their cache rows by id (two statements:
        # the packed rows, then the cache rows by id; memory/store/passage_pack.py); chunks
        # without one have a row per passage (older indexes, rows copied from PostgreSQL), read
        # as before: `cache_row` names the cache row, checked by hash, or the row's own vector.
        packed = packed_rows(self.db.execute, chunk_ids)
        found = {cid for cid, _, _ in packed}
        refs = np.concatenate([s[:, 2] for _, _, s in packed]).tolist() if packed else []
        blobs = cache_blobs(self.db.execute, refs)
        kept: list[tuple[tuple[int, int, int], bytes, int | None]] = []
        for cid, gen, spans in packed:
            for start, end, ref in spans.tolist():
                blob = blobs.get(ref)
                if blob is not None:
                    kept.append(((cid, start, end), blob, gen))
        loose = self._loose_passages([c for c in chunk_ids if c not in found])
        if loose:
            kept = sorted(kept + loose, key=lambda k: k[0][0])  # (stable: each chunk in order)
        if not kept:
            return None
        return PassageVectors([s for s, _, _ in kept], self._decode(kept, {}))

    def _loose_passages(
        self, chunk_ids: list[int]
    ) -> list[tuple[tuple[int, int, int], bytes, int | None]]:
        """The vectors of chunks kept as a row per passage: (span, blob, generation when the
        blob is the cache's, else None)."""
        rows: list[Any] = []
        for i in range(0, len(chunk_ids), BATCH):
            part = chunk_ids[i : i + BATCH]
            marks = ",".join("?" for _ in part)
            rows += self.db.execute(
                "SELECT u.chunk_id, u.start_line, u.end_line, u.generation, u.hash, "
                "coalesce(u.vector, c.vector), u.vector IS NULL, u.cache_row "
                "FROM memory_units u LEFT JOIN embedding_cache c "
                f"ON u.vector IS NULL AND c.id = u.cache_row AND c.chunk_hash = {_UNIT_KEY} "
                "AND u.generation IN (SELECT id FROM memory_generations) "
                f"WHERE u.chunk_id IN ({marks}) ORDER BY u.chunk_id, u.id",
                part,
            )
        if not rows:
            return []
        missing: dict[int, tuple[list[StoredHash], list[int | None]]] = {}
        for r in rows:
            if r[5] is None:
                hashes, refs = missing.setdefault(int(r[3]), ([], []))
                hashes.append(r[4])
                refs.append(r[7])
        cached = {gen: stored_vectors(self.db, gen, h, refs) for gen, (h, refs) in missing.items()}
        kept: list[tuple[tuple[int, int, int], bytes, int | None]] = []
        for cid, start, end, gen, h, blob, from_cache, _ in rows:
            vector = blob if blob is not None else cached[int(gen)][0].get(h)
            if vector is not None:
                kept.append(((cid, start, end), vector, int(gen) if from_cache else None))
        return kept

    def _decode(self, kept: list[Any], cached: dict[int, Any]) -> Any:
        """The kept blobs as one float32 matrix: the cache's centered ones decoded around their
        model's center in one go (cache_codec), the rest as vector_codec.decode_many reads them."""
        blobs = [b for _, b, _ in kept]
        magics = {b[:2] for b in blobs}  # (sets, not a call per blob: ≈ 0.3 ms at 950)
        if not magics & CENTERED_MAGICS:
            return decode_many(blobs)
        gens = {gen for _, _, gen in kept}
        if len(gens) == 1 and None not in gens and magics <= CENTERED_MAGICS:
            by_gen = {next(iter(gens)): list(range(len(kept)))}  # the usual case
        else:
            by_gen = {}
            for i, (_, blob, gen) in enumerate(kept):
                if gen is not None and is_centered(blob):
                    by_gen.setdefault(gen, []).append(i)
        if not by_gen:
            return decode_many(blobs)
        for gen in by_gen:  # read by the join above: the generation's model is still wanted
            if gen not in cached:
                cached[gen] = stored_vectors(self.db, gen, [], [])
        centers: dict[int, Any] = {}
        with self.db.lock:
            for gen in by_gen:
                centers[gen] = center_of(self.db.conn, cached[gen][1])
                if centers[gen] is None:
                    raise ValueError("no center for the coded cached vectors of this index")
        if len(by_gen) == 1 and len(next(iter(by_gen.values()))) == len(kept):
            (gen,) = by_gen
            return decode_centered_many([b for _, b, _ in kept], centers[gen])  # the usual case
        parts: dict[int, Any] = {}
        for gen, at in by_gen.items():
            decoded = decode_centered_many([kept[i][1] for i in at], centers[gen])
            parts.update(zip(at, decoded, strict=True))
        rest = [i for i in range(len(kept)) if i not in parts]
        if rest:
            parts.update(zip(rest, decode_many([kept[i][1] for i in rest]), strict=True))
        return np.stack([parts[i] for i in range(len(kept))])

    def chunks(self, ids: list[int]) -> list[ChunkRow]:
        out: list[ChunkRow] = []
        for i in range(0, len(ids), BATCH):
            part = ids[i : i + BATCH]
            marks = ",".join("?" for _ in part)
            out += self.db.execute(
                "SELECT id, path, source, origin, start_line, end_line, text, importance, day, "
                f"project FROM memory_chunks WHERE id IN ({marks})",
                part,
            )
        with self.db.lock:  # the texts are stored compressed (memory/store/chunk_text.py)
            return read_texts(self.db.conn, out, 6)


def search_queries(db: Database) -> SearchQueries:
    """The search queries for `db`, on its backend (memory/store/backends.py)."""
    found: SearchQueries = store_for("SearchQueries", db)
    return found


def is_fts_query_error(exc: BaseException) -> bool:
    """True when `exc` is SQLite refusing a malformed FTS5 query, nothing worse."""
    if type(exc).__name__ != "OperationalError":
        return False
    message = str(exc)
    return any(m in message for m in _FTS_QUERY_ERRORS)


def is_database_error(exc: BaseException) -> bool:
    """True for an error raised by the database driver."""
    # sqlite3 and pysqlite3 each have their own DatabaseError class: match by module.
    return any(
        c.__name__ == "DatabaseError" and c.__module__.split(".")[0] in ("sqlite3", "pysqlite3")
        for c in type(exc).__mro__
    )


def search_failure(db: Database, exc: BaseException) -> DatabaseError:
    """The user-facing error for a database failure during a search."""
    message = str(exc)
    damaged = as_corruption(exc, db.path)
    if damaged is not None:
        return damaged
    if "locked" in message or "busy" in message:
        return DatabaseError(
            f"The agent database {db.path} is locked by another process ({message}); "
            "wait for it to finish (is `pinch memory index` running?) and search again."
        )
    # Damage shows up as other errors too (sqlite-vec: "vectors blob read error"): ask the file.
    try:
        problems = db.quick_check()
    except Exception:
        problems = []
    if problems:
        return DatabaseCorruptError(corruption_advice(db.path, problems[0]))
    return DatabaseError(
        f"Searching the memory index in {db.path} failed ({message}); run `pinch memory "
        "status`, and if it fails too rebuild the index with `pinch memory index --force`."
    )
