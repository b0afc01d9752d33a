"""The memory index: keeps the agent database's chunks, keywords and vectors in step with the
Markdown files, and answers searches.

Files are the source of truth; everything here can be rebuilt from them. `MemoryIndex` is a thin
facade over the parts: memory/index/generations.py (which build serves, the rebuild lease),
memory/index/sync.py (the sync pipeline; single_flight.py), memory/index/embedcache.py (the
embedding cache), memory/index/rows.py (chunk, keyword, passage and vector rows),
memory/index/virtual.py (chunks no file backs) and memory/index/transcript_indexer.py
(conversations).
Their rows are kept by the repositories in memory/store/index_*.py. An index *generation* is one
complete build. Incremental syncs update the active generation file by file; a full rebuild
(`sync(force=True)`, or a changed embedding model / chunking) fills a new generation beside the
active one and swaps it in, in one transaction, only when complete — searches keep using the old
one meanwhile, and a killed rebuild leaves only rows that the next sync removes. Several
processes may share the database: only one builds at a time (the lease), and the others keep
serving and updating the live generation.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from memory.embeddings.providers import EmbeddingError, EmbeddingProvider, create_provider
from memory.errors import IndexingError
from memory.index.embedcache import EmbeddingCache
from memory.index.generations import STALE_LEASE_SECONDS, Generations
from memory.index.reading import MAX_FILE_BYTES
from memory.index.rows import IndexRows
from memory.index.single_flight import SingleFlight
from memory.index.status import IndexStatus, dirty_files
from memory.index.sync import ProgressCallback, SyncPipeline, SyncReport
from memory.index.transcript_indexer import replay_transcripts
from memory.index.virtual import VIRTUAL_SOURCES, VirtualChunk, VirtualChunks
from memory.memory_config import MemoryConfig
from memory.project_tags import count_project_entries
from memory.search.filters import SearchFilter
from memory.search.hybrid import SearchHit, run_search
from memory.search.knn_store import KnnStore
from memory.search.presets import SearchPreset, get_preset
from memory.search.schedule import calibrate_after_load
from memory.search.signal_recording import record_recall
from memory.search.sqlite_vec import SqliteVecStore
from memory.search.vectors import NumpyStore, VectorStore
from memory.store.backends import backend_of, store_for
from memory.store.compact import notes_bytes, reclaimable, space_usage
from memory.store.db import Database, open_database
from memory.store.vector_names import drop_vec_table

if TYPE_CHECKING:
    from memory.store.postgres.database import PgDatabase

log = logging.getLogger(__name__)

__all__ = [
    "MAX_FILE_BYTES",
    "STALE_LEASE_SECONDS",
    "VIRTUAL_SOURCES",
    "IndexStatus",
    "MemoryIndex",
    "ProgressCallback",
    "SyncReport",
    "VirtualChunk",
]

# Bump when fts_body() or chunking rules change. v3: CJK runs as bigram tokens
# (memory/store/cjk_keywords.py rebuilds a v2 index's keyword rows in place and renames it).
TOKENIZER_VERSION = "pinch-fts-v3"
PASSAGES_VERSION = "units-v4"  # bump when split_units() or how passages are stored changes
ORIGINS_VERSION = "file-lowest-v1"  # bump when how chunks get their origin changes
# Bump when how vectors are stored changes. "once-int8-v1": a passage's vector only in the
# embedding cache, every vector as 8-bit codes (memory/store/vector_codec.py); an index built
# before is rebuilt from the files and the cache by the next sync, then compacted.
VECTORS_VERSION = "once-int8-v1"

# A rebuild re-creates chunks no file backs through `rebuild_hooks` (transcripts by default).
RebuildHook = Callable[["MemoryIndex", int], None]  # (index, the generation being built)
StoreFactory = Callable[[int], VectorStore]  # the vector store for vectors of N dimensions
_FROM_CONFIG: Any = object()


class MemoryIndex:
    """The memory index of one workspace inside one agent database.

    `provider` (default: made from `config.embedding` on first use; None = keyword-only) and
    `vector_store` (default: sqlite-vec when loaded, else numpy, per `config.vector_backend`)
    can be injected. Safe to share between threads; `sync()` is single-flight.
    """

    def __init__(
        self,
        db: Database | PgDatabase,
        workspace: Path,
        config: MemoryConfig,
        *,
        provider: EmbeddingProvider | None = _FROM_CONFIG,
        vector_store: StoreFactory | None = None,
    ) -> None:
        # The agent database: SQLite's `Database`, or PostgreSQL's pool (the repositories are
        # taken from memory/store/backends.py for whichever it is).
        self.db: Any = db
        self.workspace = workspace
        self.config = config
        self._provider: EmbeddingProvider | None = None
        self._provider_error: str | None = None
        self._provider_loaded = provider is not _FROM_CONFIG
        if self._provider_loaded:
            self._provider = provider
        self._make_store = vector_store or self._default_store
        self._stores: dict[int, VectorStore] = {}
        self._query_cache: dict[tuple[str, str, str], np.ndarray] = {}
        # Run on a full rebuild, after the files and before the swap, to fill the new
        # generation with chunks that files do not back. Transcripts by default.
        self.rebuild_hooks: list[RebuildHook] = [replay_transcripts]
        self.backend = backend_of(db)  # "sqlite", or "postgres" (memory/store/backends.py)
        row_repo = store_for("IndexRowRepository", db)
        generations = store_for("GenerationRepository", db)
        agent_db: Any = cast(Any, db)  # the parts use what both offer (transaction, execute)
        self.generations = Generations(agent_db, generations, row_repo, self._drop_vectors)
        self.rows = IndexRows(row_repo, self._store_for_rows, self.generations.dimensions_of)
        cache = store_for("EmbeddingCacheRepository", db)
        self.cache = EmbeddingCache(agent_db, cache, config.embedding.batch_size)
        self._pipeline = SyncPipeline(
            db=agent_db,
            workspace=workspace,
            config=config,
            generations=self.generations,
            rows=self.rows,
            cache=self.cache,
            provider=lambda: self.provider,
            identity=self.identity,
            store_for=lambda dims: self._store(dims),
            token=uuid.uuid4().hex,  # tells this index's lease from another's in one process
        )
        self._flight = SingleFlight()
        self._virtual = VirtualChunks(
            db=agent_db,
            generations=self.generations,
            rows=self.rows,
            pipeline=self._pipeline,
            provider=lambda: self.provider,
            store_for=lambda dims: self._store(dims),
        )

    @classmethod
    def open(
        cls,
        workspace: Path,
        db_path: Path,
        config: MemoryConfig | None = None,
        *,
        provider: EmbeddingProvider | None = _FROM_CONFIG,
        vector_store: StoreFactory | None = None,
    ) -> MemoryIndex:
        config = config or MemoryConfig()
        db = open_database(db_path, vector_backend=config.vector_backend)
        return cls(db, workspace, config, provider=provider, vector_store=vector_store)

    def warm(self) -> None:
        """Get ready to search soon, in the background: load the embedding model and start
        reading the active generation's vectors (≈150 MB at 100k chunks). For long-running
        processes (the chat, the gateway); a one-off command should not pay for it."""
        try:
            active = self.active_generation()
            if active is None or self.provider is None:
                return
            generation, identity = active
            store = self._store(identity.get("dimensions"))
            if store is not None and identity.get("model") == self.provider.model:
                store.preload(generation)
            calibrate = getattr(self.provider, "calibrate_query_cores", None)
            if getattr(self.provider, "query_cores_measured", True):
                calibrate = None
            threading.Thread(
                target=calibrate_after_load, args=(store, calibrate), name="warm-up", daemon=True
            ).start()
        except Exception:  # a warm-up only: the first search reads what it needs itself
            log.warning(
                "Could not start reading the vectors ahead of the first search", exc_info=True
            )

    def close(self) -> None:
        for store in self._stores.values():
            store.close()
        self.db.close()

    # ---- embedding provider and vector store ----------------------------------------------

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
        """Why search is keyword-only now, if it is (None: vectors are searched)."""
        if self.provider is None:
            if self._provider_error:
                return f"keyword-only: the embedding model failed to load ({self._provider_error})"
            return 'keyword-only: [memory.embedding] provider = "none"'
        active = self.active_generation()
        if active is not None and not self._vectors_comparable(active[1]):
            return (
                "keyword-only until the index is rebuilt for the new embedding model: "
                "run `pinch memory index`"
            )
        return None

    def _vectors_comparable(self, identity: dict[str, Any]) -> bool:
        """Whether a generation built with `identity` holds vectors of this run's model (a
        model change leaves it keyword-only until rebuilt: vectors of two models never mix)."""
        p = self.provider
        return p is not None and (
            identity.get("provider"),
            identity.get("model"),
            identity.get("dimensions"),
        ) == (p.provider, p.model, p.dimensions)

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
            "origins": ORIGINS_VERSION,
            "vectors": VECTORS_VERSION,
        }

    def _default_store(self, dimensions: int) -> VectorStore:
        if self.backend != "sqlite":  # the database's own index (pgvector HNSW)
            return KnnStore(self.db, dimensions)
        if self.db.vec_version and self.config.vector_backend != "numpy":
            return SqliteVecStore(self.db, dimensions)
        return NumpyStore(self.db)

    def _store(self, dimensions: int | None) -> VectorStore | None:
        p = self.provider
        if p is None or not dimensions:
            return None
        if dimensions not in self._stores:
            self._stores[dimensions] = self._make_store(dimensions)
        return self._stores[dimensions]

    def _store_for_rows(self, dimensions: int | None) -> VectorStore | None:
        store = self._store(dimensions)
        if store is None and dimensions:
            # No provider in this run, but the generation may have vectors: remove them too.
            if self.backend != "sqlite":
                return KnnStore(self.db, dimensions)
            if self.db.vec_version:
                return SqliteVecStore(self.db, dimensions)
            return NumpyStore(self.db)
        return store

    def _drop_vectors(self, conn: Any, generation: int, dimensions: int | None) -> None:
        store = self._store(dimensions)
        if store is not None:
            store.drop_generation(conn, generation)
        if self.backend == "sqlite":
            drop_vec_table(conn, generation)  # also when this run has no provider (degraded)
        elif store is None and dimensions:  # no provider in this run: its vectors go too
            KnnStore(self.db, dimensions).drop_generation(conn, generation)

    @property
    def vector_backend(self) -> str:
        p = self.provider
        if p is None:
            return "none"
        store = self._store(p.dimensions)
        return store.name if store is not None else "none"

    # ---- generations and sync ---------------------------------------------------------------

    def active_generation(self) -> tuple[int, dict[str, Any]] | None:
        return self.generations.active()

    def sync(
        self,
        *,
        force: bool = False,
        on_progress: ProgressCallback | None = None,
        wait: bool = False,
        on_wait: Callable[[str], None] | None = None,
    ) -> SyncReport:
        """Bring the index in step with the files. Returns what changed and what failed.

        Single-flight: a call made while another thread syncs waits for one following run
        (shared by every such call) and returns its report. When another process is rebuilding
        the index, this works on the live generation (`report.busy` says who rebuilds) — or,
        with `wait=True`, first waits for that rebuild to finish (`on_wait(who)` is called once).
        """

        def run(force_now: bool, wait_now: bool) -> SyncReport:
            steps = [lambda gen, hook=hook: hook(self, gen) for hook in self.rebuild_hooks]
            return self._pipeline.run(
                force=force_now,
                wait=wait_now,
                on_progress=on_progress,
                on_wait=on_wait,
                rebuild_steps=steps,
            )

        return self._flight.run(force, wait, run)

    # ---- chunks without files (transcripts) ---------------------------------------------

    def virtual_tail(self, path: str, *, generation: int | None = None) -> list[VirtualChunk]:
        """The chunks of `path` that start at its highest start line (several when one long
        entry was split), oldest first; empty when the path has no chunks."""
        return self._virtual.tail(path, generation)

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
        until the next rebuild. Returns how many chunks were added (0 when the generation was
        swapped out meanwhile: the new one replays from the source).
        """
        return self._virtual.add(
            path,
            source,
            scope,
            chunks,
            replace_from_line=replace_from_line,
            generation=generation,
        )

    def delete_virtual(self, path: str, *, generation: int | None = None) -> int:
        """Remove every chunk of a virtual path (e.g. a forgotten conversation)."""
        return self._virtual.delete(path, generation)

    def prime_embedding_cache(self, texts: Sequence[str], vectors: np.ndarray) -> None:
        """Store vectors for texts the index embeds — the passages `split_units` cuts chunks
        into — without running the model (benchmarks, imports)."""
        p = self.provider
        if p is None:
            raise IndexingError("No embedding provider is configured; nothing to prime.")
        self.cache.prime(p, texts, vectors)

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
        record: bool = True,
        project: str | None = None,
    ) -> list[SearchHit]:
        """Hybrid search of the active generation. An empty index is synced first.

        `filter` (the agent's policy) replaces `scopes` and may also limit sources and origins.
        `record=False`: a check, not a recall: it leaves no signal for Dreaming.
        `project`: the active project; its tagged hits get the preset's `project_boost`.
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
        # Built with another model (rebuild pending or under way): its vectors cannot be
        # compared with this model's queries, so it is searched by keyword until rebuilt.
        provider = self.provider if self._vectors_comparable(identity) else None
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
            project=project,
            multicore_query=bool(getattr(provider, "multicore_query", False)),
        )
        if record:
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

    def project_counts(self) -> dict[str, int]:
        """How many entries (list items, paragraphs) of indexed memory each project tags, by
        name; an entry shared by overlapping chunks counts once."""
        active = self.active_generation()
        if active is None:
            return {}
        return count_project_entries(self.rows.repo.tagged_chunks(active[0]))

    def status(self, *, deep: bool = False, space: bool = False) -> IndexStatus:
        """What is indexed and how; `deep`: also which files changed since; `space`: also what
        a compaction would give back (reads every passage's hash: ≈ 1-2 s at 100k chunks)."""
        active = self.active_generation()
        generation = active[0] if active else None
        identity = self.identity()
        files = chunks = 0
        problems: dict[str, str] = {}
        repo = self.rows.repo
        if generation is not None:
            files = repo.indexed_file_count(generation)
            chunks = repo.chunk_count(generation)
            problems = repo.problems(generation)
        dirty: list[str] | None = None
        if deep:
            indexed = repo.sources(generation) if generation is not None else None
            dirty = dirty_files(
                self.workspace,
                self._pipeline.discover(),
                indexed,
                allow_hard_links=self.config.allow_hard_links,
            )
        cache = self.cache.count()
        building = self.generations.live_rebuild()
        sqlite = self.backend == "sqlite"
        usage = space_usage(self.db)
        notes = notes_bytes(self.db, generation) if generation is not None else 0
        embedding = self.config.embedding
        return IndexStatus(
            workspace=str(self.workspace),
            database=str(self.db.path) if sqlite else f"{self.db.shown_dsn} ({self.db.schema})",
            generation=generation,
            files=files,
            chunks=chunks,
            provider=identity["provider"],
            model=identity["model"],
            dimensions=identity["dimensions"],
            vector_backend=self.vector_backend,
            degraded=self.degraded_reason(),
            sqlite_version=self.db.sqlite_version if sqlite else "",
            driver=self.db.driver if sqlite else f"PostgreSQL {self.db.server_version}",
            pending_rebuild=active is None or active[1] != identity,
            problems=problems,
            cache_entries=cache,
            dirty_files=dirty,
            rebuilding=building.describe() if building is not None else None,
            file_bytes=usage.file_bytes,
            free_bytes=usage.free_bytes,
            notes_bytes=notes,
            reclaimable_bytes=reclaimable(self.db) if space else None,
            engine=embedding.engine if embedding.provider == "local" else None,
            leftover_chunks=self.generations.leftover_chunks(),
        )
