"""The rows of the memory index, as stored: `memory_chunks` (one indexed chunk), its
`memory_fts` keyword row, its passages (one packed `memory_passages` row naming their vectors
in the embedding cache, memory/store/passage_pack.py; or a `memory_units` row each), and the
`memory_sources` row of each indexed file (or why it was skipped). The chunks' and files'
SHA-256 hashes are stored as the digest's 32 bytes (migration m018) and read back as the hex
text `hash_text` makes (memory/store/content_hash.py).

What goes into the rows — chunking, keyword bodies, vectors, centroids — is decided in
memory/index/; this module only reads and writes them. Methods that take a `conn` run inside the
caller's write transaction (`Database.transaction()`), so a file's chunks, keywords, passages and
source row change together or not at all. Vectors arrive as packed float32 blobs.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from memory.store.chunk_text import (
    current_dictionary,
    ensure_dictionary,
    pack_text,
    read_text,
    read_texts,
)
from memory.store.content_hash import cache_key, hash_of_stored, stored_hash
from memory.store.db import Database
from memory.store.index_embedcache import cache_rows
from memory.store.passage_pack import delete_generation, delete_packed, insert_packed, packable
from memory.text import fts_body

# The keyword index holds no copy of the text (`content=''`, migration m009): a row is removed by
# handing FTS5 the body it was inserted with, which is `fts_body(text)` of the chunk row (the
# index's identity names the tokenizer version, so a change of `fts_body` means a new
# generation). Removing a whole generation rebuilds the keywords of what stays instead, when
# that is no more work: exact whatever `fts_body` the dropped rows were written with.
_FTS_DELETE = "INSERT INTO memory_fts(memory_fts, rowid, body) VALUES ('delete', ?, ?)"
_FTS_INSERT = "INSERT INTO memory_fts(rowid, body) VALUES (?, ?)"
_BATCH = 500
# Chunks inserted between two looks for a text dictionary while there is none (it is made once
# the index holds enough text: memory/store/chunk_text.py).
_DICT_LOOK_EVERY = 64


@dataclass(frozen=True)
class ChunkRow:
    """One chunk as stored; `keywords` is the body of its full-text row (memory/text.py
    `fts_body(text)`: SQLite indexes that, recomputed, since it keeps no copy to delete by)."""

    generation: int
    path: str
    source: str
    origin: str
    scope: str
    start_line: int
    end_line: int
    hash: str
    text: str
    importance: int | None
    day: str | None
    keywords: str
    project: str | None = None  # its `<!-- project: NAME -->` tag (memory/project_tags.py)


@dataclass(frozen=True)
class PassageRow:
    """One passage of a chunk: its line range, text hash and vector (None: not embedded)."""

    start_line: int
    end_line: int
    hash: str
    vector: bytes | None


@dataclass(frozen=True)
class SourceRow:
    """An indexed file: what it held when indexed (hash, mtime, size)."""

    generation: int
    path: str
    source: str
    origin: str
    hash: str
    mtime: float
    size: int
    warning: str | None


@dataclass(frozen=True)
class SourceState:
    """What the index remembers of a file: enough to tell whether it changed."""

    hash: str
    mtime: float
    size: int
    error: str | None


@dataclass(frozen=True)
class StoredChunk:
    """A chunk read back: its line range, text, origin and day."""

    start_line: int
    end_line: int
    text: str
    origin: str
    day: str | None


class IndexRowRepository(Protocol):
    """Chunk, keyword, passage and source rows of the index, per generation.

    Promises: a chunk id is unique across generations, and a new chunk's id is larger than that
    of every chunk present (an id may come back only after its chunk was deleted, with its
    keyword row and vectors); the id is also its keyword row's id and the vector stores' key;
    passages keep their insertion order; a (generation, path) has at most one source row; reads
    are ordered as each method says. `conn` is the caller's open write transaction;
    methods without it read on their own.
    """

    def insert_chunk(self, conn: Any, row: ChunkRow) -> int:
        """Insert the chunk and its keyword row; returns the chunk id."""
        ...

    def insert_passages(
        self, conn: Any, chunk_id: int, generation: int, passages: Sequence[PassageRow]
    ) -> None:
        """Insert the chunk's passages, in the given order."""
        ...

    def set_centroid(self, conn: Any, chunk_id: int, vector: bytes) -> None: ...

    def chunk_ids(
        self, conn: Any, generation: int, path: str, from_line: int | None = None
    ) -> list[int]:
        """Ids of the path's chunks (starting at or after `from_line` when given)."""
        ...

    def delete_keywords(self, conn: Any, chunk_ids: Sequence[int]) -> None: ...

    def delete_chunks(self, conn: Any, chunk_ids: Sequence[int]) -> None:
        """Remove the chunks and their passages (their keyword rows go by delete_keywords)."""
        ...

    def tail(self, generation: int, path: str) -> list[StoredChunk]:
        """The path's chunks that start at its highest start line, in insertion order."""
        ...

    def tagged_chunks(self, generation: int) -> list[tuple[str, int, str, str]]:
        """(path, start line, text, project) of the generation's project-tagged chunks."""
        ...

    def chunk_count(self, generation: int) -> int: ...

    def write_source(self, conn: Any, row: SourceRow) -> None:
        """Record a file as indexed (its previous source row was deleted in this transaction)."""
        ...

    def record_problem(
        self,
        conn: Any,
        generation: int,
        where: tuple[str, str, str],  # path, source, origin
        mtime: float,
        size: int,
        message: str,
    ) -> None:
        """Record why a file was skipped: a new source row, or the error, mtime and size of the
        existing one (whose hash and chunks stay)."""
        ...

    def touch_source(
        self, conn: Any, generation: int, path: str, mtime: float, size: int
    ) -> None: ...

    def delete_source(self, conn: Any, generation: int, path: str) -> None: ...

    def sources(self, generation: int) -> dict[str, SourceState]:
        """Every source row of the generation, by path."""
        ...

    def indexed_file_count(self, generation: int) -> int:
        """Source rows without an error."""
        ...

    def problems(self, generation: int) -> dict[str, str]:
        """path -> error (or else warning) of the source rows that have one."""
        ...

    def drop_keywords_of(self, conn: Any, generation: int) -> None:
        """Remove the keyword rows of every chunk of the generation."""
        ...

    def drop_generation(self, conn: Any, generation: int) -> None:
        """Remove the generation's passages, chunks and source rows."""
        ...


class SqliteIndexRows:
    """IndexRowRepository on the agent SQLite file."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._until_look = 0

    def _text_dictionary(self, conn: Any) -> tuple[bytes, bytes] | None:
        """The dictionary chunk texts are compressed with, read in the caller's transaction
        (one `meta` row; never cached across transactions: one that made it may roll back).
        While there is none it is looked for every `_DICT_LOOK_EVERY` chunks, and made once
        the index holds enough text."""
        found = current_dictionary(conn)
        if found is None:
            self._until_look -= 1
            if self._until_look <= 0:
                self._until_look = _DICT_LOOK_EVERY
                found = ensure_dictionary(conn)
        return found

    def insert_chunk(self, conn: Any, row: ChunkRow) -> int:
        # The text compressed (memory/store/chunk_text.py): read back with read_text.
        cur = conn.execute(
            "INSERT INTO memory_chunks(generation, path, source, origin, scope, "
            "start_line, end_line, hash, text, importance, day, project) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                row.generation,
                row.path,
                row.source,
                row.origin,
                row.scope,
                row.start_line,
                row.end_line,
                stored_hash(row.hash),
                pack_text(row.text, self._text_dictionary(conn)),
                row.importance,
                row.day,
                row.project,
            ),
        )
        cid = int(cur.lastrowid)
        # (fts_body of the text, not `row.keywords`, which is the same for every caller: the
        # body a delete recomputes must be the one inserted.)
        conn.execute(_FTS_INSERT, (cid, fts_body(row.text)))
        return cid

    def insert_passages(
        self, conn: Any, chunk_id: int, generation: int, passages: Sequence[PassageRow]
    ) -> None:
        # Each vector is stored once: in the embedding cache, where every embedded passage's
        # vector already is (memory/index/embedcache.py). A chunk whose passages all have one
        # is one packed row naming them by cache id (memory/store/passage_pack.py); otherwise
        # each passage is a `memory_units` row with its hash as the cache keys it (`vector`
        # NULL, `cache_row` the cache id when there is one).
        refs = cache_rows(conn, generation, [p.hash for p in passages])
        spans = [(p.start_line, p.end_line, refs.get(p.hash)) for p in passages]
        if spans and packable(spans):
            named = [(s, e, c) for s, e, c in spans if c is not None]
            insert_packed(conn, chunk_id, generation, named)
            return
        conn.executemany(
            "INSERT INTO memory_units(chunk_id, generation, start_line, end_line, hash, "
            "cache_row) VALUES (?, ?, ?, ?, ?, ?)",
            [
                (
                    chunk_id,
                    generation,
                    p.start_line,
                    p.end_line,
                    cache_key(p.hash),
                    refs.get(p.hash),
                )
                for p in passages
            ],
        )

    def set_centroid(self, conn: Any, chunk_id: int, vector: bytes) -> None:
        """Nothing: the centroid is stored once, in the generation's matrix table (the vector
        store's); `memory_chunks.centroid` is only read from indexes older than that table."""

    def chunk_ids(
        self, conn: Any, generation: int, path: str, from_line: int | None = None
    ) -> list[int]:
        sql = "SELECT id FROM memory_chunks WHERE generation = ? AND path = ?"
        params: tuple[Any, ...] = (generation, path)
        if from_line is not None:
            sql += " AND start_line >= ?"
            params += (from_line,)
        return [int(r[0]) for r in conn.execute(sql, params)]

    def delete_keywords(self, conn: Any, chunk_ids: Sequence[int]) -> None:
        ids = list(chunk_ids)
        for i in range(0, len(ids), _BATCH):
            part = ids[i : i + _BATCH]
            marks = ",".join("?" for _ in part)
            rows = conn.execute(
                f"SELECT id, text FROM memory_chunks WHERE id IN ({marks})", part
            ).fetchall()
            conn.executemany(
                _FTS_DELETE, [(int(cid), fts_body(read_text(conn, text))) for cid, text in rows]
            )

    def delete_chunks(self, conn: Any, chunk_ids: Sequence[int]) -> None:
        delete_packed(conn, chunk_ids)
        conn.executemany("DELETE FROM memory_units WHERE chunk_id = ?", [(i,) for i in chunk_ids])
        conn.executemany("DELETE FROM memory_chunks WHERE id = ?", [(i,) for i in chunk_ids])

    def tail(self, generation: int, path: str) -> list[StoredChunk]:
        rows = self.db.execute(
            "SELECT start_line, end_line, text, origin, day FROM memory_chunks "
            "WHERE generation = ? AND path = ? AND start_line = (SELECT max(start_line) "
            "FROM memory_chunks WHERE generation = ? AND path = ?) ORDER BY id",
            (generation, path, generation, path),
        )
        with self.db.lock:
            rows = read_texts(self.db.conn, rows, 2)
        return [StoredChunk(int(r[0]), int(r[1]), r[2], r[3], r[4]) for r in rows]

    def tagged_chunks(self, generation: int) -> list[tuple[str, int, str, str]]:
        rows = self.db.execute(
            "SELECT path, start_line, text, project FROM memory_chunks "
            "WHERE generation = ? AND project IS NOT NULL ORDER BY path, start_line",
            (generation,),
        )
        with self.db.lock:
            rows = read_texts(self.db.conn, rows, 2)
        return [(r[0], int(r[1]), r[2], r[3]) for r in rows]

    def chunk_count(self, generation: int) -> int:
        return int(
            self.db.execute(
                "SELECT count(*) FROM memory_chunks WHERE generation = ?", (generation,)
            )[0][0]
        )

    def write_source(self, conn: Any, row: SourceRow) -> None:
        conn.execute(
            "INSERT INTO memory_sources(generation, path, source, origin, hash, mtime, size, "
            "indexed_at, error, warning) VALUES (?, ?, ?, ?, ?, ?, ?, ?, NULL, ?)",
            (
                row.generation,
                row.path,
                row.source,
                row.origin,
                stored_hash(row.hash),
                row.mtime,
                row.size,
                time.time(),
                row.warning,
            ),
        )

    def record_problem(
        self,
        conn: Any,
        generation: int,
        where: tuple[str, str, str],
        mtime: float,
        size: int,
        message: str,
    ) -> None:
        path, source, origin = where
        conn.execute(
            "INSERT INTO memory_sources(generation, path, source, origin, hash, mtime, size, "
            "indexed_at, error) VALUES (?, ?, ?, ?, '', ?, ?, ?, ?) "
            "ON CONFLICT(generation, path) DO UPDATE SET error = excluded.error, "
            "mtime = excluded.mtime, size = excluded.size",
            (generation, path, source, origin, mtime, size, time.time(), message),
        )

    def touch_source(self, conn: Any, generation: int, path: str, mtime: float, size: int) -> None:
        conn.execute(
            "UPDATE memory_sources SET mtime = ?, size = ? WHERE generation = ? AND path = ?",
            (mtime, size, generation, path),
        )

    def delete_source(self, conn: Any, generation: int, path: str) -> None:
        conn.execute(
            "DELETE FROM memory_sources WHERE generation = ? AND path = ?", (generation, path)
        )

    def sources(self, generation: int) -> dict[str, SourceState]:
        return {
            row[0]: SourceState(hash_of_stored(row[1]), row[2], row[3], row[4])
            for row in self.db.execute(
                "SELECT path, hash, mtime, size, error FROM memory_sources WHERE generation = ?",
                (generation,),
            )
        }

    def indexed_file_count(self, generation: int) -> int:
        return int(
            self.db.execute(
                "SELECT count(*) FROM memory_sources WHERE generation = ? AND error IS NULL",
                (generation,),
            )[0][0]
        )

    def problems(self, generation: int) -> dict[str, str]:
        return dict(
            self.db.execute(
                "SELECT path, coalesce(error, warning) FROM memory_sources "
                "WHERE generation = ? AND (error IS NOT NULL OR warning IS NOT NULL)",
                (generation,),
            )
        )

    def drop_keywords_of(self, conn: Any, generation: int) -> None:
        dropped, kept = conn.execute(
            "SELECT count(*) FILTER (WHERE generation = ?), count(*) FILTER (WHERE generation != ?)"
            " FROM memory_chunks",
            (generation, generation),
        ).fetchone()
        if not dropped:
            return
        if kept > dropped:
            ids = conn.execute("SELECT id FROM memory_chunks WHERE generation = ?", (generation,))
            self.delete_keywords(conn, [int(r[0]) for r in ids.fetchall()])
            return
        conn.execute("INSERT INTO memory_fts(memory_fts) VALUES ('delete-all')")
        cursor = conn.execute(
            "SELECT id, text FROM memory_chunks WHERE generation != ? ORDER BY id", (generation,)
        )
        while rows := cursor.fetchmany(_BATCH):
            conn.executemany(
                _FTS_INSERT, [(int(cid), fts_body(read_text(conn, text))) for cid, text in rows]
            )

    def drop_generation(self, conn: Any, generation: int) -> None:
        # (by chunk: the passages' own generation column has no index since m010)
        delete_generation(conn, generation)
        conn.execute(
            "DELETE FROM memory_units WHERE chunk_id IN "
            "(SELECT id FROM memory_chunks WHERE generation = ?)",
            (generation,),
        )
        conn.execute("DELETE FROM memory_chunks WHERE generation = ?", (generation,))
        conn.execute("DELETE FROM memory_sources WHERE generation = ?", (generation,))
