"""The rows of one indexed chunk: memory_chunks, its memory_fts keyword row, its memory_units
passages and its centroid in the vector store; and the memory_sources row of each file.

Every function here runs inside the caller's write transaction (`conn`), so a file's chunks,
keywords and vectors change together or not at all.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from memory.files.workspace import MemoryFile, file_day
from memory.index.chunking import Chunk, Unit, split_units
from memory.search.vectors import VectorStore
from memory.store.vector_tables import to_blob
from memory.text import fts_body

# The vector store of a generation's dimensions (None: that generation has no vectors here).
StoreFor = Callable[[int | None], VectorStore | None]
VecRow = tuple[int, int, str, np.ndarray]  # (chunk id, generation, scope, centroid)


class IndexRows:
    """Writes and deletes chunk, keyword, passage, vector and source rows."""

    def __init__(self, store_for: StoreFor, dimensions_of: Callable[[Any, int], int | None]):
        self._store_for = store_for
        self._dimensions_of = dimensions_of

    def insert_chunk(
        self,
        conn: Any,
        generation: int,
        where: tuple[str, str, str, str],  # path, source, origin, scope
        chunk: Chunk,
        day: str | None,
        units: Sequence[Unit],
        vectors: dict[str, np.ndarray],
        vec_rows: list[VecRow],
    ) -> int:
        """Insert one chunk, its keyword row and its passages; queue the passages' vectors."""
        path, source, origin, scope = where
        cur = conn.execute(
            "INSERT INTO memory_chunks(generation, path, source, origin, scope, "
            "start_line, end_line, hash, text, importance, day) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                generation,
                path,
                source,
                origin,
                scope,
                chunk.start_line,
                chunk.end_line,
                chunk.hash,
                chunk.text,
                chunk.importance,
                day,
            ),
        )
        cid = int(cur.lastrowid)
        conn.execute(
            "INSERT INTO memory_fts(rowid, body) VALUES (?, ?)", (cid, fts_body(chunk.text))
        )
        found = [vectors[u.hash] for u in units if u.hash in vectors]
        conn.executemany(
            "INSERT INTO memory_units(chunk_id, generation, start_line, end_line, hash, vector) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            [
                (
                    cid,
                    generation,
                    u.start_line,
                    u.end_line,
                    u.hash,
                    to_blob(vectors[u.hash]) if u.hash in vectors else None,
                )
                for u in units
            ],
        )
        if found:
            centroid = np.mean(np.vstack(found), axis=0)
            centroid /= float(np.linalg.norm(centroid)) or 1.0
            conn.execute(
                "UPDATE memory_chunks SET centroid = ? WHERE id = ?", (to_blob(centroid), cid)
            )
            vec_rows.append((cid, generation, scope, centroid.astype(np.float32)))
        return cid

    def write_file(
        self,
        conn: Any,
        generation: int,
        f: MemoryFile,
        st: os.stat_result,
        file_hash: str,
        chunks: list[Chunk],
        vectors: dict[str, np.ndarray],
        store: VectorStore | None,
        warning: str | None = None,
        origin: str | None = None,  # the file's (its lowest line's); None: its default
    ) -> None:
        """Replace a file's rows with its new chunks, each of the file's origin."""
        day = file_day(f.rel_path)
        origin = origin or f.origin
        self.delete_path(conn, generation, f.rel_path)
        vec_rows: list[VecRow] = []
        for c in chunks:
            where = (f.rel_path, f.source, origin, "")
            self.insert_chunk(conn, generation, where, c, day, split_units(c), vectors, vec_rows)
        if store is not None and vec_rows:
            store.add(conn, vec_rows)
        conn.execute(
            "INSERT INTO memory_sources(generation, path, source, origin, hash, mtime, size, "
            "indexed_at, error, warning) VALUES (?, ?, ?, ?, ?, ?, ?, ?, NULL, ?)",
            (
                generation,
                f.rel_path,
                f.source,
                origin,
                file_hash,
                st.st_mtime,
                st.st_size,
                time.time(),
                warning,
            ),
        )

    def record_problem(
        self,
        conn: Any,
        generation: int,
        where: tuple[str, str, str],  # path, source, origin
        mtime: float,
        size: int,
        message: str,
    ) -> None:
        """Remember why a file was skipped; its previous chunks (if any) keep serving."""
        path, source, origin = where
        conn.execute(
            "INSERT INTO memory_sources(generation, path, source, origin, hash, mtime, size, "
            "indexed_at, error) VALUES (?, ?, ?, ?, '', ?, ?, ?, ?) "
            "ON CONFLICT(generation, path) DO UPDATE SET error = excluded.error, "
            "mtime = excluded.mtime, size = excluded.size",
            (generation, path, source, origin, mtime, size, time.time(), message),
        )

    def touch_source(self, conn: Any, generation: int, path: str, st: os.stat_result) -> None:
        """A file touched but not changed: remember its new mtime and size."""
        conn.execute(
            "UPDATE memory_sources SET mtime = ?, size = ? WHERE generation = ? AND path = ?",
            (st.st_mtime, st.st_size, generation, path),
        )

    def delete_path(self, conn: Any, generation: int, path: str) -> None:
        """Remove a file's chunks and its source row."""
        ids = [
            int(r[0])
            for r in conn.execute(
                "SELECT id FROM memory_chunks WHERE generation = ? AND path = ?", (generation, path)
            )
        ]
        self.delete_chunk_ids(conn, generation, ids)
        conn.execute(
            "DELETE FROM memory_sources WHERE generation = ? AND path = ?", (generation, path)
        )

    def delete_chunks(self, conn: Any, generation: int, path: str, from_line: int | None) -> int:
        """Remove a path's chunks (those starting at or after `from_line`); returns how many."""
        sql = "SELECT id FROM memory_chunks WHERE generation = ? AND path = ?"
        params: tuple[Any, ...] = (generation, path)
        if from_line is not None:
            sql += " AND start_line >= ?"
            params += (from_line,)
        ids = [int(r[0]) for r in conn.execute(sql, params)]
        self.delete_chunk_ids(conn, generation, ids)
        return len(ids)

    def delete_chunk_ids(self, conn: Any, generation: int, ids: list[int]) -> None:
        """Remove chunks with their keyword rows, passages and vectors."""
        if not ids:
            return
        conn.executemany("DELETE FROM memory_fts WHERE rowid = ?", [(i,) for i in ids])
        store = self._store_for(self._dimensions_of(conn, generation))
        if store is not None:
            store.delete(conn, generation, ids)
        conn.executemany("DELETE FROM memory_units WHERE chunk_id = ?", [(i,) for i in ids])
        conn.executemany("DELETE FROM memory_chunks WHERE id = ?", [(i,) for i in ids])
