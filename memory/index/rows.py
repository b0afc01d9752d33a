"""What an indexed chunk and file become in the index: a chunk row, its keyword body, its
passages with their vectors, its centroid in the vector store; and each file's source row.

The rows are kept by memory/store/index_rows.py. Every method here runs inside the caller's
write transaction (`conn`), so a file's chunks, keywords and vectors change together or not at
all.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from memory.files.workspace import MemoryFile, file_day
from memory.index.chunking import Chunk, Unit, split_units
from memory.search.vectors import VectorStore
from memory.store.index_rows import ChunkRow, IndexRowRepository, PassageRow, SourceRow
from memory.store.vector_tables import to_blob
from memory.text import fts_body

# The vector store of a generation's dimensions (None: that generation has no vectors here).
StoreFor = Callable[[int | None], VectorStore | None]
VecRow = tuple[int, int, str, np.ndarray]  # (chunk id, generation, scope, centroid)


class IndexRows:
    """Writes and deletes chunk, keyword, passage, vector and source rows."""

    def __init__(
        self,
        repo: IndexRowRepository,
        store_for: StoreFor,
        dimensions_of: Callable[[Any, int], int | None],
    ):
        self.repo = repo
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
        row = ChunkRow(
            generation=generation,
            path=path,
            source=source,
            origin=origin,
            scope=scope,
            start_line=chunk.start_line,
            end_line=chunk.end_line,
            hash=chunk.hash,
            text=chunk.text,
            importance=chunk.importance,
            day=day,
            keywords=fts_body(chunk.text),
            project=chunk.project,
        )
        cid = self.repo.insert_chunk(conn, row)
        found = [vectors[u.hash] for u in units if u.hash in vectors]
        passages = [
            PassageRow(
                u.start_line,
                u.end_line,
                u.hash,
                to_blob(vectors[u.hash]) if u.hash in vectors else None,
            )
            for u in units
        ]
        self.repo.insert_passages(conn, cid, generation, passages)
        if found:
            centroid = np.mean(np.vstack(found), axis=0)
            centroid /= float(np.linalg.norm(centroid)) or 1.0
            self.repo.set_centroid(conn, cid, to_blob(centroid))
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
        source = SourceRow(
            generation, f.rel_path, f.source, origin, file_hash, st.st_mtime, st.st_size, warning
        )
        self.repo.write_source(conn, source)

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
        self.repo.record_problem(conn, generation, where, mtime, size, message)

    def touch_source(self, conn: Any, generation: int, path: str, st: os.stat_result) -> None:
        """A file touched but not changed: remember its new mtime and size."""
        self.repo.touch_source(conn, generation, path, st.st_mtime, st.st_size)

    def delete_path(self, conn: Any, generation: int, path: str) -> None:
        """Remove a file's chunks and its source row."""
        self.delete_chunk_ids(conn, generation, self.repo.chunk_ids(conn, generation, path))
        self.repo.delete_source(conn, generation, path)

    def delete_chunks(self, conn: Any, generation: int, path: str, from_line: int | None) -> int:
        """Remove a path's chunks (those starting at or after `from_line`); returns how many."""
        ids = self.repo.chunk_ids(conn, generation, path, from_line)
        self.delete_chunk_ids(conn, generation, ids)
        return len(ids)

    def delete_chunk_ids(self, conn: Any, generation: int, ids: list[int]) -> None:
        """Remove chunks with their keyword rows, passages and vectors."""
        if not ids:
            return
        self.repo.delete_keywords(conn, ids)
        store = self._store_for(self._dimensions_of(conn, generation))
        if store is not None:
            store.delete(conn, generation, ids)
        self.repo.delete_chunks(conn, ids)
