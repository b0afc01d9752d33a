"""Chunks that no workspace file backs (conversation transcripts): written into a generation of
the index by their source, kept by incremental syncs, and re-created on a full rebuild by the
index's rebuild hooks (memory/index/transcript_indexer.py replays every stored transcript)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from memory.embeddings.providers import EmbeddingProvider
from memory.errors import IndexingError
from memory.index.chunking import Chunk, hash_text, split_units
from memory.index.generations import Generations
from memory.index.rows import IndexRows, StoreFor, VecRow
from memory.index.sync import SyncPipeline, SyncReport
from memory.store.db import Database

# Chunk sources that no workspace file backs: an incremental sync never removes them.
VIRTUAL_SOURCES = frozenset({"sessions"})


@dataclass(frozen=True)
class VirtualChunk:
    """A chunk no workspace file backs; its line numbers are whatever its source counts."""

    start_line: int
    end_line: int
    text: str
    origin: str  # 'owner' | 'agent' | 'untrusted' | 'system'
    day: str | None = None  # YYYY-MM-DD when dated (temporal decay applies)


class VirtualChunks:
    """Reads and writes the virtual chunks of one MemoryIndex."""

    def __init__(
        self,
        *,
        db: Database,
        generations: Generations,
        rows: IndexRows,
        pipeline: SyncPipeline,
        provider: Callable[[], EmbeddingProvider | None],
        store_for: StoreFor,
    ) -> None:
        self.db = db
        self.generations = generations
        self.rows = rows
        self._pipeline = pipeline
        self._provider = provider
        self._store_for = store_for

    def _generation_for_write(self, generation: int | None) -> int:
        if generation is not None:
            return generation
        active = self.generations.active()
        if active is None:
            raise IndexingError("The memory index has not been built yet: run a sync first.")
        return active[0]

    def tail(self, path: str, generation: int | None) -> list[VirtualChunk]:
        """The chunks of `path` that start at its highest start line, oldest first."""
        gen = self._generation_for_write(generation)
        return [
            VirtualChunk(c.start_line, c.end_line, c.text, c.origin, c.day)
            for c in self.rows.repo.tail(gen, path)
        ]

    def add(
        self,
        path: str,
        source: str,
        scope: str,
        chunks: Sequence[VirtualChunk],
        *,
        replace_from_line: int | None,
        generation: int | None,
    ) -> int:
        """See MemoryIndex.add_virtual_chunks."""
        if source not in VIRTUAL_SOURCES:
            raise ValueError(f"{source!r} is not a virtual source ({sorted(VIRTUAL_SOURCES)})")
        gen = self._generation_for_write(generation)
        identity = self.generations.identity_of(gen)
        if identity is None:
            return 0  # swapped out meanwhile; the new generation replays from the source
        real = [Chunk(c.start_line, c.end_line, c.text, hash_text(c.text), None) for c in chunks]
        p = self._provider()
        vectors: dict[str, np.ndarray] = {}
        store = None
        built_with = (identity["provider"], identity["model"], identity["dimensions"])
        if p is not None and built_with == (p.provider, p.model, p.dimensions):
            # One vector per passage (a turn or a few short ones), as for files: a fact said in
            # one line of a long conversation chunk is not averaged away by the turns around it.
            units = [u for chunk in real for u in split_units(chunk)]
            vectors = self._pipeline.embed(units, SyncReport(gen, rebuilt=False), None)
            store = self._store_for(p.dimensions)
        with self.db.transaction() as conn:
            if not self.generations.repo.exists(conn, gen):
                return 0
            if replace_from_line is not None:
                self.rows.delete_chunks(conn, gen, path, replace_from_line)
            vec_rows: list[VecRow] = []
            for c, chunk in zip(chunks, real, strict=True):
                where = (path, source, c.origin, scope)
                units = split_units(chunk)
                self.rows.insert_chunk(conn, gen, where, chunk, c.day, units, vectors, vec_rows)
            if store is not None and vec_rows:
                store.add(conn, vec_rows)
            self.generations.bump_version(conn)
        return len(chunks)

    def delete(self, path: str, generation: int | None) -> int:
        """Remove every chunk of a virtual path; returns how many."""
        gen = self._generation_for_write(generation)
        with self.db.transaction() as conn:
            removed = self.rows.delete_chunks(conn, gen, path, None)
            self.generations.bump_version(conn)
        return removed
