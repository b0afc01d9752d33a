"""The memory index: keeps the agent database's chunks, keywords and vectors in step with the
Markdown files, and answers searches.

Files are the source of truth; everything here can be rebuilt from them. An index *generation*
is one complete build. Incremental syncs update the active generation file by file; a full
rebuild (`sync(force=True)`, or a changed embedding model / chunking) fills a new generation
beside the active one and swaps it in, in one transaction, only when complete — searches keep
using the old one meanwhile, and a killed rebuild leaves only rows that the next sync removes.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from memory.chunking import Chunk, Unit, chunk_markdown, hash_text, split_units
from memory.config import MemoryConfig
from memory.db import Database, open_database
from memory.embeddings import EmbeddingError, EmbeddingProvider, create_provider
from memory.errors import IndexingError
from memory.filters import SearchFilter
from memory.presets import SearchPreset, get_preset
from memory.search import SearchHit, run_search
from memory.signals import record_recall
from memory.text import fts_body
from memory.vectors import (
    NumpyStore,
    SqliteVecStore,
    VectorStore,
    drop_vec_table,
    from_blob,
    to_blob,
)
from memory.workspace import MemoryFile, discover_memory_files, file_day

TOKENIZER_VERSION = "pinch-fts-v1"  # bump when fts_body() or chunking rules change
PASSAGES_VERSION = "units-v2"  # bump when split_units() or how passages are stored changes
MAX_FILE_BYTES = 10 * 1024 * 1024
STALE_BUILD_SECONDS = 600

ProgressCallback = Callable[[int, int, str], None]  # (done_chunks, total_chunks, current_path)
# Chunk sources that no workspace file backs (conversation transcripts, memory/transcripts.py):
# an incremental sync never removes them, and a rebuild re-creates them through `rebuild_hooks`.
VIRTUAL_SOURCES = frozenset({"sessions"})
RebuildHook = Callable[["MemoryIndex", int], None]  # (index, the generation being built)


@dataclass(frozen=True)
class VirtualChunk:
    """A chunk no workspace file backs; its line numbers are whatever its source counts."""

    start_line: int
    end_line: int
    text: str
    origin: str  # 'owner' | 'agent' | 'untrusted' | 'system'
    day: str | None = None  # YYYY-MM-DD when dated (temporal decay applies)


@dataclass
class SyncReport:
    generation: int
    rebuilt: bool
    files_indexed: list[str] = field(default_factory=list)
    files_unchanged: int = 0
    files_removed: list[str] = field(default_factory=list)
    chunks_embedded: int = 0  # passages (the texts the model embeds) newly embedded
    chunks_from_cache: int = 0  # passages whose vectors came from the embedding cache
    problems: dict[str, str] = field(default_factory=dict)  # path -> what went wrong
    seconds: float = 0.0


@dataclass
class IndexStatus:
    workspace: str
    database: str
    generation: int | None
    files: int
    chunks: int
    provider: str
    model: str
    dimensions: int | None
    vector_backend: str
    degraded: str | None  # why search is keyword-only, if it is
    sqlite_version: str
    driver: str
    pending_rebuild: bool
    problems: dict[str, str]
    cache_entries: int
    dirty_files: list[str] | None = None  # --deep: files changed since the last sync


class MemoryIndex:
    """The memory index of one workspace inside one agent database."""

    def __init__(self, db: Database, workspace: Path, config: MemoryConfig) -> None:
        self.db = db
        self.workspace = workspace
        self.config = config
        self._provider: EmbeddingProvider | None = None
        self._provider_error: str | None = None
        self._provider_loaded = False
        self._stores: dict[int, VectorStore] = {}
        self._owned_build: int | None = None  # the generation this object is building
        self._query_cache: dict[tuple[str, str, str], np.ndarray] = {}
        # Run on a full rebuild, after the files and before the swap, to fill the new
        # generation with chunks that files do not back. Transcripts by default.
        self.rebuild_hooks: list[RebuildHook] = [_replay_transcripts]

    @classmethod
    def open(
        cls, workspace: Path, db_path: Path, config: MemoryConfig | None = None
    ) -> MemoryIndex:
        config = config or MemoryConfig()
        db = open_database(db_path, vector_backend=config.vector_backend)
        return cls(db, workspace, config)

    def close(self) -> None:
        self.db.close()

    # ---- embedding provider -------------------------------------------------------------

    @property
    def provider(self) -> EmbeddingProvider | None:
        """The embedding provider, loaded on first use; None means keyword-only (degraded)."""
        if not self._provider_loaded:
            self._provider_loaded = True
            try:
                self._provider = create_provider(self.config.embedding)
            except EmbeddingError as exc:
                self._provider_error = str(exc)
        return self._provider

    def degraded_reason(self) -> str | None:
        if self.provider is None:
            if self._provider_error:
                return f"keyword-only: the embedding model failed to load ({self._provider_error})"
            return 'keyword-only: [memory.embedding] provider = "none"'
        return None

    def identity(self) -> dict[str, Any]:
        p = self.provider
        return {
            "provider": p.provider if p else "none",
            "model": p.model if p else "",
            "dimensions": p.dimensions if p else None,
            "chunk_tokens": self.config.chunking.tokens,
            "chunk_overlap": self.config.chunking.overlap,
            "tokenizer": TOKENIZER_VERSION,
            "passages": PASSAGES_VERSION,
        }

    def _store(self, dimensions: int | None) -> VectorStore | None:
        p = self.provider
        if p is None or not dimensions:
            return None
        if dimensions not in self._stores:
            if self.db.vec_version and self.config.vector_backend != "numpy":
                self._stores[dimensions] = SqliteVecStore(self.db, dimensions)
            else:
                self._stores[dimensions] = NumpyStore(self.db)
        return self._stores[dimensions]

    @property
    def vector_backend(self) -> str:
        if self.provider is None:
            return "none"
        if self.db.vec_version and self.config.vector_backend != "numpy":
            return "sqlite-vec"
        return "numpy"

    # ---- generations ----------------------------------------------------------------------

    def active_generation(self) -> tuple[int, dict[str, Any]] | None:
        rows = self.db.execute(
            "SELECT id, identity FROM memory_generations WHERE state = 'active' "
            "ORDER BY id DESC LIMIT 1"
        )
        return (int(rows[0][0]), json.loads(rows[0][1])) if rows else None

    def _bump_version(self, conn: Any) -> None:
        conn.execute(
            "INSERT INTO meta(key, value) VALUES ('index_version', '1') ON CONFLICT(key) DO "
            "UPDATE SET value = CAST(CAST(value AS INTEGER) + 1 AS TEXT)"
        )

    def _drop_generation_rows(self, conn: Any, generation: int, dimensions: int | None) -> None:
        conn.execute(
            "DELETE FROM memory_fts WHERE rowid IN "
            "(SELECT id FROM memory_chunks WHERE generation = ?)",
            (generation,),
        )
        store = self._store(dimensions)
        if store is not None:
            store.drop_generation(conn, generation)
        drop_vec_table(conn, generation)  # also when this run has no provider (degraded)
        conn.execute("DELETE FROM memory_units WHERE generation = ?", (generation,))
        conn.execute("DELETE FROM memory_chunks WHERE generation = ?", (generation,))
        conn.execute("DELETE FROM memory_sources WHERE generation = ?", (generation,))
        conn.execute("DELETE FROM memory_generations WHERE id = ?", (generation,))
        conn.execute("DELETE FROM meta WHERE key = ?", (f"build:{generation}",))

    def _cleanup_stale_builds(self) -> None:
        """Remove generations left behind by a killed or failed rebuild, or a half-done swap."""
        rows = self.db.execute(
            "SELECT g.id, g.dimensions, g.state, m.value FROM memory_generations g "
            "LEFT JOIN meta m ON m.key = 'build:' || g.id WHERE g.state != 'active'"
        )
        for gen, dims, state, owner in rows:
            if gen == self._owned_build:
                continue
            if state == "building" and owner and _builder_alive(json.loads(owner)):
                continue  # another process is rebuilding right now
            with self.db.transaction() as conn:
                self._drop_generation_rows(conn, gen, dims)

    def _heartbeat(self, conn: Any, generation: int) -> None:
        owner = {"pid": os.getpid(), "host": socket.gethostname(), "at": time.time()}
        conn.execute(
            "INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)",
            (f"build:{generation}", json.dumps(owner)),
        )

    # ---- sync -------------------------------------------------------------------------------

    def sync(
        self,
        *,
        force: bool = False,
        on_progress: ProgressCallback | None = None,
    ) -> SyncReport:
        """Bring the index in step with the files. Returns what changed and what failed."""
        started = time.monotonic()
        self._cleanup_stale_builds()
        files = discover_memory_files(self.workspace, self.config.extra_paths)
        identity = self.identity()
        active = self.active_generation()
        rebuild = force or active is None or active[1] != identity
        if rebuild:
            with self.db.transaction() as conn:
                cur = conn.execute(
                    "INSERT INTO memory_generations(identity, state, dimensions, created_at) "
                    "VALUES (?, 'building', ?, ?)",
                    (json.dumps(identity, sort_keys=True), identity["dimensions"], time.time()),
                )
                generation = int(cur.lastrowid)
                self._heartbeat(conn, generation)
            self._owned_build = generation
        else:
            assert active is not None
            generation = active[0]
        report = SyncReport(generation=generation, rebuilt=rebuild)
        try:
            self._sync_generation(generation, files, report, on_progress)
            if rebuild:
                for hook in self.rebuild_hooks:
                    hook(self, generation)
                self._swap_in(generation, active[0] if active else None)
        except BaseException:
            if rebuild:
                # Leave the old generation serving; drop the partial build.
                with self.db.transaction() as conn:
                    self._drop_generation_rows(conn, generation, identity["dimensions"])
            raise
        finally:
            self._owned_build = None
        report.seconds = time.monotonic() - started
        return report

    def _swap_in(self, generation: int, old: int | None) -> None:
        with self.db.transaction() as conn:
            if old is not None:
                conn.execute("UPDATE memory_generations SET state = 'retired' WHERE id = ?", (old,))
            conn.execute(
                "UPDATE memory_generations SET state = 'active', completed_at = ? WHERE id = ?",
                (time.time(), generation),
            )
            conn.execute("DELETE FROM meta WHERE key = ?", (f"build:{generation}",))
            self._bump_version(conn)
        if old is not None:
            dims = self.db.execute("SELECT dimensions FROM memory_generations WHERE id = ?", (old,))
            with self.db.transaction() as conn:
                self._drop_generation_rows(conn, old, dims[0][0] if dims else None)

    def _sync_generation(
        self,
        generation: int,
        files: list[MemoryFile],
        report: SyncReport,
        on_progress: ProgressCallback | None,
    ) -> None:
        known = {
            row[0]: (row[1], row[2], row[3], row[4])
            for row in self.db.execute(
                "SELECT path, hash, mtime, size, error FROM memory_sources WHERE generation = ?",
                (generation,),
            )
        }
        present = {f.rel_path for f in files}
        for path in sorted(set(known) - present):
            with self.db.transaction() as conn:
                self._delete_path(conn, generation, path)
                self._bump_version(conn)
            report.files_removed.append(path)

        pending: list[tuple[MemoryFile, os.stat_result, str, list[Chunk], str | None]] = []
        for f in files:
            try:
                st = f.abs_path.stat()
            except OSError as exc:
                report.problems[f.rel_path] = f"cannot read: {exc.strerror}"
                continue
            prev = known.get(f.rel_path)
            if prev and prev[1] == st.st_mtime and prev[2] == st.st_size and prev[3] is None:
                report.files_unchanged += 1
                continue
            try:
                text, file_hash, warning = self._read_text(f, st)
            except IndexingError as exc:
                report.problems[f.rel_path] = str(exc)
                self._record_problem(generation, f, st, str(exc))
                continue
            if warning:
                report.problems[f.rel_path] = warning
            if prev and prev[0] == file_hash and prev[3] is None:
                with self.db.transaction() as conn:  # touched, not changed
                    conn.execute(
                        "UPDATE memory_sources SET mtime = ?, size = ? "
                        "WHERE generation = ? AND path = ?",
                        (st.st_mtime, st.st_size, generation, f.rel_path),
                    )
                report.files_unchanged += 1
                continue
            chunks = chunk_markdown(
                text, tokens=self.config.chunking.tokens, overlap=self.config.chunking.overlap
            )
            pending.append((f, st, file_hash, chunks, warning))

        units = [u for _, _, _, chunks, _ in pending for c in chunks for u in split_units(c)]
        vectors = self._embed_all(units, report, on_progress)
        for f, st, file_hash, chunks, warning in pending:
            self._write_file(generation, f, st, file_hash, chunks, vectors, warning)
            report.files_indexed.append(f.rel_path)
            if self._owned_build == generation:
                with self.db.transaction() as conn:
                    self._heartbeat(conn, generation)

    def _read_text(self, f: MemoryFile, st: os.stat_result) -> tuple[str, str, str | None]:
        if st.st_size > MAX_FILE_BYTES:
            raise IndexingError(
                f"skipped: {st.st_size / 1e6:.1f} MB is over the {MAX_FILE_BYTES // 2**20} MB "
                "limit for one memory file; split it into smaller files"
            )
        data = f.abs_path.read_bytes()
        if b"\x00" in data:
            raise IndexingError("skipped: binary content (NUL bytes), not Markdown text")
        file_hash = hash_text(data.decode("latin-1"))
        try:
            return data.decode("utf-8"), file_hash, None
        except UnicodeDecodeError as exc:
            return (
                data.decode("utf-8", errors="replace"),
                file_hash,
                f"not valid UTF-8 (first bad byte at offset {exc.start}); indexed with "
                "replacement characters, the file itself was not changed",
            )

    def _record_problem(self, generation: int, f: MemoryFile, st: os.stat_result, msg: str) -> None:
        # Keep the previous chunks of the file (if any) and remember why it was skipped.
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT INTO memory_sources(generation, path, source, origin, hash, mtime, size, "
                "indexed_at, error) VALUES (?, ?, ?, ?, '', ?, ?, ?, ?) "
                "ON CONFLICT(generation, path) DO UPDATE SET error = excluded.error, "
                "mtime = excluded.mtime, size = excluded.size",
                (
                    generation,
                    f.rel_path,
                    f.source,
                    f.origin,
                    st.st_mtime,
                    st.st_size,
                    time.time(),
                    msg,
                ),
            )

    def _embed_all(
        self,
        chunks: Sequence[Chunk | Unit],
        report: SyncReport,
        on_progress: ProgressCallback | None,
    ) -> dict[str, np.ndarray]:
        """Vectors for the texts' hashes: from the cache, else embedded in batches and cached."""
        p = self.provider
        if p is None or not chunks:
            return {}
        hashes = list(dict.fromkeys(c.hash for c in chunks))
        found = self._cached_vectors(p, hashes)
        report.chunks_from_cache += len(found)
        missing = [c for c in dict((c.hash, c) for c in chunks).values() if c.hash not in found]
        total = len(missing)
        batch = self.config.embedding.batch_size
        for i in range(0, total, batch):
            part = missing[i : i + batch]
            if on_progress:
                on_progress(i, total, "")
            try:
                vecs = p.embed_documents([c.text for c in part])
            except EmbeddingError:
                raise
            except Exception as exc:  # a model library failing mid-run
                raise IndexingError(f"The embedding model failed: {exc}") from exc
            with self.db.transaction() as conn:
                conn.executemany(
                    "INSERT OR REPLACE INTO embedding_cache VALUES (?, ?, ?, ?, ?, ?)",
                    [
                        (p.provider, p.model, c.hash, p.dimensions, to_blob(v), time.time())
                        for c, v in zip(part, vecs, strict=True)
                    ],
                )
                if self._owned_build is not None:
                    self._heartbeat(conn, self._owned_build)
            for c, v in zip(part, vecs, strict=True):
                found[c.hash] = np.asarray(v, dtype=np.float32)
            report.chunks_embedded += len(part)
        if on_progress and total:
            on_progress(total, total, "")
        return found

    def _cached_vectors(self, p: EmbeddingProvider, hashes: Sequence[str]) -> dict[str, np.ndarray]:
        found: dict[str, np.ndarray] = {}
        for i in range(0, len(hashes), 500):
            part = list(hashes[i : i + 500])
            marks = ",".join("?" for _ in part)
            for h, blob in self.db.execute(
                f"SELECT chunk_hash, vector FROM embedding_cache WHERE provider = ? AND model = ? "
                f"AND dimensions = ? AND chunk_hash IN ({marks})",
                (p.provider, p.model, p.dimensions, *part),
            ):
                found[h] = from_blob(blob)
        return found

    def _delete_path(self, conn: Any, generation: int, path: str) -> None:
        ids = [
            int(r[0])
            for r in conn.execute(
                "SELECT id FROM memory_chunks WHERE generation = ? AND path = ?", (generation, path)
            )
        ]
        self._delete_chunk_ids(conn, generation, ids)
        conn.execute(
            "DELETE FROM memory_sources WHERE generation = ? AND path = ?", (generation, path)
        )

    def _delete_chunk_ids(self, conn: Any, generation: int, ids: list[int]) -> None:
        """Remove chunks with their keyword rows, passages and vectors."""
        if not ids:
            return
        conn.executemany("DELETE FROM memory_fts WHERE rowid = ?", [(i,) for i in ids])
        row = conn.execute(
            "SELECT dimensions FROM memory_generations WHERE id = ?", (generation,)
        ).fetchone()
        dims = row[0] if row else None
        store = self._store(dims)
        if store is not None:
            store.delete(conn, generation, ids)
        elif self.db.vec_version and dims:
            # No provider in this run, but the generation may have vectors: remove them too.
            SqliteVecStore(self.db, dims).delete(conn, generation, ids)
        conn.executemany("DELETE FROM memory_units WHERE chunk_id = ?", [(i,) for i in ids])
        conn.executemany("DELETE FROM memory_chunks WHERE id = ?", [(i,) for i in ids])

    def _insert_chunk(
        self,
        conn: Any,
        generation: int,
        where: tuple[str, str, str, str],  # path, source, origin, scope
        chunk: Chunk,
        day: str | None,
        units: Sequence[Unit],
        vectors: dict[str, np.ndarray],
        vec_rows: list[tuple[int, int, str, np.ndarray]],
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

    def _write_file(
        self,
        generation: int,
        f: MemoryFile,
        st: os.stat_result,
        file_hash: str,
        chunks: list[Chunk],
        vectors: dict[str, np.ndarray],
        warning: str | None = None,
    ) -> None:
        day = file_day(f.rel_path)
        store = self._store(self.provider.dimensions if self.provider else None)
        with self.db.transaction() as conn:
            self._delete_path(conn, generation, f.rel_path)
            vec_rows: list[tuple[int, int, str, np.ndarray]] = []
            for c in chunks:
                where = (f.rel_path, f.source, f.origin, "")
                self._insert_chunk(
                    conn, generation, where, c, day, split_units(c), vectors, vec_rows
                )
            if store is not None and vec_rows:
                store.add(conn, vec_rows)
            conn.execute(
                "INSERT INTO memory_sources(generation, path, source, origin, hash, mtime, size, "
                "indexed_at, error, warning) VALUES (?, ?, ?, ?, ?, ?, ?, ?, NULL, ?)",
                (
                    generation,
                    f.rel_path,
                    f.source,
                    f.origin,
                    file_hash,
                    st.st_mtime,
                    st.st_size,
                    time.time(),
                    warning,
                ),
            )
            self._bump_version(conn)

    # ---- chunks without files (transcripts) ---------------------------------------------

    def _generation_for_write(self, generation: int | None) -> int:
        if generation is not None:
            return generation
        active = self.active_generation()
        if active is None:
            raise IndexingError("The memory index has not been built yet: run a sync first.")
        return active[0]

    def virtual_tail(self, path: str, *, generation: int | None = None) -> list[VirtualChunk]:
        """The chunks of `path` that start at its highest start line (several when one long
        entry was split), oldest first; empty when the path has no chunks."""
        gen = self._generation_for_write(generation)
        rows = self.db.execute(
            "SELECT start_line, end_line, text, origin, day FROM memory_chunks "
            "WHERE generation = ? AND path = ? AND start_line = (SELECT max(start_line) "
            "FROM memory_chunks WHERE generation = ? AND path = ?) ORDER BY id",
            (gen, path, gen, path),
        )
        return [VirtualChunk(int(r[0]), int(r[1]), r[2], r[3], r[4]) for r in rows]

    def add_virtual_chunks(
        self,
        path: str,
        source: str,
        scope: str,
        chunks: Sequence[VirtualChunk],
        *,
        replace_from_line: int | None = None,
        generation: int | None = None,
    ) -> int:
        """Add chunks that no file backs to a generation (the active one by default).

        With `replace_from_line`, the path's chunks starting at or after that line are replaced
        in the same transaction. Vectors come through the provider and embedding cache when the
        generation was built with the current provider; otherwise the chunks are keyword-only
        until the next rebuild. Returns how many chunks were added.
        """
        if source not in VIRTUAL_SOURCES:
            raise ValueError(f"{source!r} is not a virtual source ({sorted(VIRTUAL_SOURCES)})")
        gen = self._generation_for_write(generation)
        rows = self.db.execute("SELECT identity FROM memory_generations WHERE id = ?", (gen,))
        if not rows:
            return 0  # swapped out meanwhile; the new generation replays from the source
        identity = json.loads(rows[0][0])
        real = [Chunk(c.start_line, c.end_line, c.text, hash_text(c.text), None) for c in chunks]
        p = self.provider
        vectors: dict[str, np.ndarray] = {}
        store = None
        built_with = (identity["provider"], identity["model"], identity["dimensions"])
        if p is not None and built_with == (p.provider, p.model, p.dimensions):
            vectors = self._embed_all(real, SyncReport(gen, rebuilt=False), None)
            store = self._store(p.dimensions)
        with self.db.transaction() as conn:
            if not conn.execute("SELECT 1 FROM memory_generations WHERE id = ?", (gen,)).fetchone():
                return 0
            if replace_from_line is not None:
                self._delete_chunks(conn, gen, path, replace_from_line)
            vec_rows: list[tuple[int, int, str, np.ndarray]] = []
            for c, chunk in zip(chunks, real, strict=True):
                unit = Unit(chunk.start_line, chunk.end_line, chunk.text, chunk.hash)
                where = (path, source, c.origin, scope)
                self._insert_chunk(conn, gen, where, chunk, c.day, [unit], vectors, vec_rows)
            if store is not None and vec_rows:
                store.add(conn, vec_rows)
            self._bump_version(conn)
        return len(chunks)

    def delete_virtual(self, path: str, *, generation: int | None = None) -> int:
        """Remove every chunk of a virtual path (e.g. a forgotten conversation)."""
        gen = self._generation_for_write(generation)
        with self.db.transaction() as conn:
            removed = self._delete_chunks(conn, gen, path, None)
            self._bump_version(conn)
        return removed

    def _delete_chunks(self, conn: Any, generation: int, path: str, from_line: int | None) -> int:
        sql = "SELECT id FROM memory_chunks WHERE generation = ? AND path = ?"
        params: tuple[Any, ...] = (generation, path)
        if from_line is not None:
            sql += " AND start_line >= ?"
            params += (from_line,)
        ids = [int(r[0]) for r in conn.execute(sql, params)]
        self._delete_chunk_ids(conn, generation, ids)
        return len(ids)

    def prime_embedding_cache(self, texts: Sequence[str], vectors: np.ndarray) -> None:
        """Store vectors for texts the index embeds — the passages `split_units` cuts chunks
        into — without running the model (benchmarks, imports)."""
        p = self.provider
        if p is None:
            raise IndexingError("No embedding provider is configured; nothing to prime.")
        with self.db.transaction() as conn:
            conn.executemany(
                "INSERT OR REPLACE INTO embedding_cache VALUES (?, ?, ?, ?, ?, ?)",
                [
                    (p.provider, p.model, hash_text(t), p.dimensions, to_blob(v), time.time())
                    for t, v in zip(texts, vectors, strict=True)
                ],
            )

    # ---- search -----------------------------------------------------------------------------

    def search(
        self,
        query: str,
        *,
        preset: str | SearchPreset | None = None,
        max_results: int | None = None,
        min_score: float | None = None,
        now: datetime | None = None,
        scopes: Sequence[str] = ("",),
        filter: SearchFilter | None = None,
    ) -> list[SearchHit]:
        """Hybrid search of the active generation. An empty index is synced first.

        `filter` (the agent's policy) replaces `scopes` and may also limit sources and origins.
        """
        if filter is not None:
            scopes = filter.scopes
        chosen = (
            preset if isinstance(preset, SearchPreset) else get_preset(preset or self.config.preset)
        )
        active = self.active_generation()
        if active is None:
            self.sync()
            active = self.active_generation()
            if active is None:
                return []
        generation, identity = active
        provider = self.provider
        if (
            provider is None
            or identity.get("provider") != provider.provider
            or (
                identity.get("model") != provider.model
                or identity.get("dimensions") != provider.dimensions
            )
        ):
            # The index was built with another model (rebuild pending): its vectors cannot be
            # compared with this model's queries, so search it by keyword until rebuilt.
            provider = None
        store = self._store(identity.get("dimensions")) if provider else None
        hits = run_search(
            self.db,
            generation,
            query,
            preset=chosen,
            embed_query=self._embed_query if provider else None,
            relevance_floor=getattr(provider, "relevance_floor", None),
            store=store,
            max_results=max_results,
            min_score=min_score,
            now=now or datetime.now(),
            scopes=list(scopes),
            admits=filter.admits if filter is not None else None,
        )
        record_recall(self.db, query, hits, now=now)  # Dreaming's signals; never blocks
        return hits

    def _embed_query(self, text: str) -> np.ndarray:
        """The query's vector, remembered for the last few queries (agents repeat themselves)."""
        p = self.provider
        assert p is not None
        key = (p.provider, p.model, text)
        vec = self._query_cache.pop(key, None)
        if vec is None:
            vec = p.embed_query(text)
        self._query_cache[key] = vec
        while len(self._query_cache) > 256:
            self._query_cache.pop(next(iter(self._query_cache)))
        return vec

    # ---- status -----------------------------------------------------------------------------

    def status(self, *, deep: bool = False) -> IndexStatus:
        active = self.active_generation()
        generation = active[0] if active else None
        identity = self.identity()
        files = chunks = 0
        problems: dict[str, str] = {}
        if generation is not None:
            files = int(
                self.db.execute(
                    "SELECT count(*) FROM memory_sources WHERE generation = ? AND error IS NULL",
                    (generation,),
                )[0][0]
            )
            chunks = int(
                self.db.execute(
                    "SELECT count(*) FROM memory_chunks WHERE generation = ?", (generation,)
                )[0][0]
            )
            problems = dict(
                self.db.execute(
                    "SELECT path, coalesce(error, warning) FROM memory_sources "
                    "WHERE generation = ? AND (error IS NOT NULL OR warning IS NOT NULL)",
                    (generation,),
                )
            )
        dirty: list[str] | None = None
        if deep:
            dirty = self._dirty_files(generation)
        cache = int(self.db.execute("SELECT count(*) FROM embedding_cache")[0][0])
        return IndexStatus(
            workspace=str(self.workspace),
            database=str(self.db.path),
            generation=generation,
            files=files,
            chunks=chunks,
            provider=identity["provider"],
            model=identity["model"],
            dimensions=identity["dimensions"],
            vector_backend=self.vector_backend,
            degraded=self.degraded_reason(),
            sqlite_version=self.db.sqlite_version,
            driver=self.db.driver,
            pending_rebuild=active is None or active[1] != identity,
            problems=problems,
            cache_entries=cache,
            dirty_files=dirty,
        )

    def _dirty_files(self, generation: int | None) -> list[str]:
        if generation is None:
            return [
                f.rel_path for f in discover_memory_files(self.workspace, self.config.extra_paths)
            ]
        known = dict(
            (r[0], r[1])
            for r in self.db.execute(
                "SELECT path, hash FROM memory_sources WHERE generation = ?", (generation,)
            )
        )
        dirty = []
        files = discover_memory_files(self.workspace, self.config.extra_paths)
        for f in files:
            try:
                h = hash_text(f.abs_path.read_bytes().decode("latin-1"))
            except OSError:
                dirty.append(f.rel_path)
                continue
            if known.get(f.rel_path) != h:
                dirty.append(f.rel_path)
        dirty.extend(sorted(set(known) - {f.rel_path for f in files}))
        return dirty


def _replay_transcripts(index: MemoryIndex, generation: int) -> None:
    from memory.transcripts import replay_transcripts  # imports this module; import when used

    replay_transcripts(index, generation)


def _builder_alive(owner: dict[str, Any]) -> bool:
    """Whether the process that started a rebuild still runs (and beat within 10 minutes)."""
    if time.time() - float(owner.get("at", 0)) > STALE_BUILD_SECONDS:
        return False
    if owner.get("host") != socket.gethostname():
        return True  # cannot tell; trust the heartbeat
    try:
        os.kill(int(owner["pid"]), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, KeyError, ValueError):
        return True
    return True
