"""The sync pipeline: bring a generation of the index in step with the Markdown files.

discover → stat (only regular files are opened, never blocking) → whole-file hash, skip
unchanged → chunk → embedding cache / model → rows, one transaction per file. A file that
cannot be read is recorded with what to do and skipped; the others are indexed.

Several processes share one database: a full rebuild is built only by the holder of the rebuild
lease (memory/index/generations.py); a sync that meets another process's rebuild works on the live
generation (and a write that finds its generation swapped out starts over on the new one), or
with `wait=True` waits for the rebuild to finish. Within a process, `SingleFlight`
(memory/index/single_flight.py) makes sync single-flight: calls arriving during a run coalesce
onto one following run. Reading one file safely is memory/index/reading.py.
"""

from __future__ import annotations

import logging
import os
import stat
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from memory.embeddings.providers import EmbeddingProvider
from memory.errors import IndexingError
from memory.files.workspace import MemoryFile, discover_memory_files
from memory.index.chunking import Chunk, chunk_markdown, split_units
from memory.index.embedcache import EmbeddingCache, ProgressCallback
from memory.index.generations import GenerationGone, Generations
from memory.index.reading import (
    BAD_NAME,
    MAX_FILE_BYTES,
    NOT_REGULAR,
    os_advice,
    read_memory_file,
    shown_path,
)
from memory.index.rows import IndexRows, StoreFor
from memory.memory_config import MemoryConfig
from memory.search.matrix_cache import refresh_pack
from memory.store.backends import backend_of, store_for
from memory.store.db import Database
from memory.store.index_generations import RebuildLeaseHolder
from memory.store.lineage import LineageRepository, file_origin

log = logging.getLogger(__name__)

__all__ = ["MAX_FILE_BYTES", "ProgressCallback", "RebuildStep", "SyncPipeline", "SyncReport"]

LEASE_POLL_SECONDS = 0.2
MAX_RESTARTS = 5  # a sync whose generation was swapped out starts over at most this often

RebuildStep = Callable[[int], None]  # fills a generation being built (e.g. transcripts)


@dataclass
class SyncReport:
    generation: int | None  # None: nothing is built yet (another process is building it)
    rebuilt: bool
    files_indexed: list[str] = field(default_factory=list)
    files_unchanged: int = 0
    files_removed: list[str] = field(default_factory=list)
    chunks_embedded: int = 0  # passages (the texts the model embeds) newly embedded
    chunks_from_cache: int = 0  # passages whose vectors came from the embedding cache
    problems: dict[str, str] = field(default_factory=dict)  # path -> what went wrong
    seconds: float = 0.0
    busy: str | None = None  # another process was rebuilding: who ("pid 12 on host")
    waited_for: str | None = None  # the rebuild this sync waited for, if it waited


FORGOTTEN_NOTE = (
    "indexed as empty: it is the note of session {session}, which `pinch memory forget` "
    "removed (a copy from a backup?); delete the file, or remove its `<!-- session: … -->` "
    "line to make it yours"
)
CURATED_FILES = frozenset({"MEMORY.md", "USER.md"})
UNTRUSTED_CURATED = (
    "holds a line marked `origin: untrusted` (from a fetched page or another person), so all of "
    "it counts as untrusted: its trigger entries are off and deep recall and Dreaming skip it; "
    "delete that line or its marker"
)


class SyncPipeline:
    """One sync of one MemoryIndex: decides rebuild or incremental, then runs it."""

    def __init__(
        self,
        *,
        db: Database,
        workspace: Path,
        config: MemoryConfig,
        generations: Generations,
        rows: IndexRows,
        cache: EmbeddingCache,
        provider: Callable[[], EmbeddingProvider | None],
        identity: Callable[[], dict[str, Any]],
        store_for: StoreFor,
        token: str,
    ) -> None:
        self.db = db
        self.workspace = workspace
        self.config = config
        self.generations = generations
        self.rows = rows
        self.cache = cache
        self._provider = provider
        self._identity = identity
        self._store_for = store_for
        self.token = token

    def run(
        self,
        *,
        force: bool,
        wait: bool,
        on_progress: ProgressCallback | None,
        on_wait: Callable[[str], None] | None,
        rebuild_steps: Sequence[RebuildStep],
    ) -> SyncReport:
        started = time.monotonic()
        self.generations.drop_retired()
        identity = self._identity()
        waited: str | None = None
        busy: RebuildLeaseHolder | None = None
        restarts = 0
        while True:
            other = self.generations.live_rebuild() if wait else None
            if other is not None and other.token != self.token:
                # Whatever this run wrote to the live generation, the swap would throw away.
                if waited is None and on_wait is not None:
                    on_wait(other.describe())
                waited = other.describe()
                self._wait_for(other)
                force = False  # the rebuild just finished is as fresh as ours would be
                continue
            files = self.discover()
            active = self.generations.active()
            if force or active is None or active[1] != identity:
                got = self.generations.begin_rebuild(identity, self.token)
                if isinstance(got, int):
                    report = self._rebuild(got, files, on_progress, rebuild_steps)
                    self._catch_up(report)
                    break
                if wait:
                    if waited is None and on_wait is not None:
                        on_wait(got.describe())
                    waited = got.describe()
                    self._wait_for(got)
                    force = False  # the rebuild just finished is as fresh as ours would be
                    continue
                busy = got
                if active is None or active[1] != identity:
                    report = SyncReport(active[0] if active else None, rebuilt=False)
                    break
            report = SyncReport(active[0], rebuilt=False)
            try:
                self._sync_generation(active[0], files, report, on_progress, None)
                break
            except GenerationGone:
                # A rebuild swapped in meanwhile: bring the new generation up to date.
                restarts += 1
                if restarts >= MAX_RESTARTS:
                    raise IndexingError(
                        "The index kept changing under this sync (other processes rebuilding "
                        "it); try `pinch memory index` again."
                    ) from None
        if report.generation is not None:
            # Here, not per file: one pack rewrite per sync at most, and only past a share.
            # (SQLite's in-process matrix only: PostgreSQL searches its own index.)
            if backend_of(self.db) == "sqlite":
                refresh_pack(self.db, report.generation)
            self._catch_up_store(report.generation)
        report.busy = busy.describe() if busy is not None else None
        report.waited_for = waited
        report.seconds = time.monotonic() - started
        return report

    def _catch_up_store(self, generation: int) -> None:
        """Let the vector store bring what it derives from the stored vectors up to date (a
        vec0 table another process's numpy-only writes left behind)."""
        if backend_of(self.db) == "sqlite":
            with self.db.lock:
                dims = self.generations.dimensions_of(self.db.conn, generation)
        else:
            with self.db.transaction() as conn:
                dims = self.generations.dimensions_of(conn, generation)
        store = self._store_for(dims)
        if store is not None:
            store.catch_up(generation)

    def discover(self) -> list[MemoryFile]:
        """The memory files to index (symbolic links left out; files with several hard links
        listed, and refused when read unless allowed, so they are reported)."""
        return discover_memory_files(self.workspace, self.config.extra_paths)

    def _wait_for(self, holder: RebuildLeaseHolder) -> None:
        while True:
            time.sleep(LEASE_POLL_SECONDS)
            now = self.generations.lease_holder()
            if now is None or now.token != holder.token or now.generation != holder.generation:
                return
            if not now.alive():
                return  # begin_rebuild takes the stale lease over

    def _rebuild(
        self,
        generation: int,
        files: list[MemoryFile],
        on_progress: ProgressCallback | None,
        steps: Sequence[RebuildStep],
    ) -> SyncReport:
        report = SyncReport(generation, rebuilt=True)
        try:
            self._sync_generation(generation, files, report, on_progress, self.token)
            for step in steps:
                step(generation)
            self.generations.swap_in(generation, self.token)
        except BaseException:
            # Leave the old generation serving; drop the partial build and free the lease.
            self.generations.abandon(generation, self.token)
            raise
        return report

    def _catch_up(self, report: SyncReport) -> None:
        """Index what changed while the rebuild ran (other processes wrote only to the old
        generation, which the swap dropped): one incremental pass over the new one."""
        assert report.generation is not None
        files = self.discover()
        extra = SyncReport(report.generation, rebuilt=False)
        try:
            self._sync_generation(report.generation, files, extra, None, None)
        except GenerationGone:
            return  # yet another rebuild swapped in; it read the files after ours
        report.files_indexed += [p for p in extra.files_indexed if p not in report.files_indexed]
        report.files_removed += extra.files_removed
        report.problems.update(extra.problems)
        report.chunks_embedded += extra.chunks_embedded
        report.chunks_from_cache += extra.chunks_from_cache

    @contextmanager
    def _writing(self, generation: int, token: str | None) -> Iterator[Any]:
        """A write transaction on `generation`, if this sync may still write to it."""
        with self.db.transaction() as conn:
            self.generations.check_writable(conn, generation, token)
            yield conn

    def _sync_generation(
        self,
        generation: int,
        files: list[MemoryFile],
        report: SyncReport,
        on_progress: ProgressCallback | None,
        token: str | None,
    ) -> None:
        known = self.rows.repo.sources(generation)
        present = {shown_path(f.rel_path) for f in files}
        for path in sorted(set(known) - present):
            with self._writing(generation, token) as conn:
                self.rows.delete_path(conn, generation, path)
                self.generations.bump_version(conn)
            report.files_removed.append(path)

        def problem(f: MemoryFile, message: str, st: os.stat_result | None = None) -> None:
            path = shown_path(f.rel_path)
            report.problems[path] = message
            with self._writing(generation, token) as conn:
                where = (path, f.source, f.origin)
                mtime, size = (st.st_mtime, st.st_size) if st is not None else (0.0, 0)
                self.rows.record_problem(conn, generation, where, mtime, size, message)

        pending: list[tuple[MemoryFile, os.stat_result, str, list[Chunk], str | None, str]] = []
        lineage: LineageRepository = store_for("LineageRepository", self.db)
        tombstones = lineage.tombstones()  # `pinch memory forget`
        for f in files:
            if shown_path(f.rel_path) != f.rel_path:
                problem(f, BAD_NAME)
                continue
            try:
                st = os.lstat(f.abs_path)
            except OSError as exc:
                problem(f, os_advice(exc))
                continue
            if not stat.S_ISREG(st.st_mode):
                problem(f, NOT_REGULAR, st)
                continue
            prev = known.get(f.rel_path)
            # A second hard link changes no mtime: such a file is read (and refused) again.
            linked = st.st_nlink > 1 and not self.config.allow_hard_links
            same = (
                prev is not None
                and prev.mtime == st.st_mtime
                and prev.size == st.st_size
                and prev.error is None
            )
            if same and not linked:
                report.files_unchanged += 1
                continue
            try:
                text, file_hash, warning = read_memory_file(
                    self.workspace, f, st, allow_hard_links=self.config.allow_hard_links
                )
            except IndexingError as exc:
                problem(f, str(exc), st)
                continue
            if warning:
                report.problems[f.rel_path] = warning
            if prev is not None and prev.hash == file_hash and prev.error is None:
                with self._writing(generation, token) as conn:  # touched, not changed
                    self.rows.touch_source(conn, generation, f.rel_path, st)
                report.files_unchanged += 1
                continue
            forgotten = tombstones.forgotten_note(f.rel_path, text)
            if forgotten is not None:  # restored from a backup: nothing of it comes back
                warning = FORGOTTEN_NOTE.format(session=forgotten)
                report.problems[f.rel_path] = warning
                log.warning("%s: %s", f.rel_path, warning)
            text = tombstones.redact(f.rel_path, text)
            chunks = chunk_markdown(
                text, tokens=self.config.chunking.tokens, overlap=self.config.chunking.overlap
            )
            # A file that mixes origins counts as its lowest, every chunk of it too: an owner's
            # line next to a fetched page's is not trusted on its own (appended entries are marked).
            origin = file_origin(text, f.origin)
            if origin == "untrusted" and f.rel_path in CURATED_FILES and not warning:
                warning = UNTRUSTED_CURATED
                report.problems[f.rel_path] = warning
                log.warning("%s: %s", f.rel_path, warning)
            pending.append((f, st, file_hash, chunks, warning, origin))

        units = [u for p in pending for c in p[3] for u in split_units(c)]
        vectors = self.embed(units, report, on_progress, generation, token)
        p = self._provider()
        store = self._store_for(p.dimensions if p else None)
        for f, st, file_hash, chunks, warning, origin in pending:
            with self._writing(generation, token) as conn:
                self.rows.write_file(
                    conn, generation, f, st, file_hash, chunks, vectors, store, warning, origin
                )
                self.generations.bump_version(conn)
            report.files_indexed.append(f.rel_path)

    def embed(
        self,
        items: Sequence[Any],
        report: SyncReport,
        on_progress: ProgressCallback | None,
        generation: int | None = None,
        token: str | None = None,
    ) -> dict[str, np.ndarray]:
        """Vectors for the items' hashes (cache first); a rebuild beats its lease per batch."""
        p = self._provider()
        if p is None or not items:
            return {}

        def beat(conn: Any) -> None:
            if token is not None and generation is not None:
                self.generations.check_writable(conn, generation, token)

        vectors, from_cache, embedded = self.cache.embed(
            p, items, on_progress=on_progress, on_batch=beat
        )
        report.chunks_from_cache += from_cache
        report.chunks_embedded += embedded
        return vectors
