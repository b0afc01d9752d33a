"""Which implementation each store of the seam has on each backend: one table, read by the
composition root (app/store_backend.py) to build the stores and to refuse a backend that is not
complete — Pinch never half-runs on one database and half on another.

    missing_stores("postgres")   # the Protocols without a PostgreSQL implementation yet
"""

from __future__ import annotations

from collections.abc import Mapping

from memory.store.dreams_store import SqliteDreamRuns, SqliteStagingLookups
from memory.store.forget_store import SqliteForgetStore
from memory.store.index_embedcache import SqliteEmbeddingCache
from memory.store.index_generations import SqliteGenerations
from memory.store.index_rows import SqliteIndexRows
from memory.store.intents_store import SqliteIntentRepository
from memory.store.jobs_store import SqliteJobStore
from memory.store.lineage import LineageStore
from memory.store.pairing_store import SqlitePairingStore
from memory.store.postgres.dreams import PgDreamRuns, PgStagingLookups
from memory.store.postgres.index_rows import PgEmbeddingCache, PgGenerations, PgIndexRows
from memory.store.postgres.intents import PgIntentRepository
from memory.store.postgres.jobs import PgJobStore
from memory.store.postgres.lineage import PgForgetStore, PgLineageStore
from memory.store.postgres.pairing import PgPairingStore
from memory.store.postgres.queue import PgQueueStore
from memory.store.postgres.search import PgSearchQueries
from memory.store.postgres.sessions import PgSessionStore
from memory.store.postgres.signals import PgRecallSignals
from memory.store.postgres.vectors import PgKnnIndex, PgMatrixPack, PgVectorTables
from memory.store.queue_store import SqliteQueueStore
from memory.store.recall_signals import SqliteRecallSignals
from memory.store.search_queries import SqliteSearchQueries
from memory.store.sessions import SqliteSessionStore
from memory.store.vector_knn import SqliteVecIndex
from memory.store.vector_pack import SqliteMatrixPack
from memory.store.vector_tables import SqliteVectorTables

# Protocol name -> its implementation on each backend (None: not written yet).
IMPLEMENTATIONS: Mapping[str, Mapping[str, type | None]] = {
    "SessionStore": {"sqlite": SqliteSessionStore, "postgres": PgSessionStore},
    "QueueStore": {"sqlite": SqliteQueueStore, "postgres": PgQueueStore},
    "PairingStore": {"sqlite": SqlitePairingStore, "postgres": PgPairingStore},
    "JobStore": {"sqlite": SqliteJobStore, "postgres": PgJobStore},
    "IntentRepository": {"sqlite": SqliteIntentRepository, "postgres": PgIntentRepository},
    "RecallSignalStore": {"sqlite": SqliteRecallSignals, "postgres": PgRecallSignals},
    "DreamRunStore": {"sqlite": SqliteDreamRuns, "postgres": PgDreamRuns},
    "StagingLookups": {"sqlite": SqliteStagingLookups, "postgres": PgStagingLookups},
    "LineageRepository": {"sqlite": LineageStore, "postgres": PgLineageStore},
    "ForgetStore": {"sqlite": SqliteForgetStore, "postgres": PgForgetStore},
    "GenerationRepository": {"sqlite": SqliteGenerations, "postgres": PgGenerations},
    "IndexRowRepository": {"sqlite": SqliteIndexRows, "postgres": PgIndexRows},
    "EmbeddingCacheRepository": {"sqlite": SqliteEmbeddingCache, "postgres": PgEmbeddingCache},
    "VectorTables": {"sqlite": SqliteVectorTables, "postgres": PgVectorTables},
    "MatrixPack": {"sqlite": SqliteMatrixPack, "postgres": PgMatrixPack},
    "KnnIndex": {"sqlite": SqliteVecIndex, "postgres": PgKnnIndex},
    "SearchQueries": {"sqlite": SqliteSearchQueries, "postgres": PgSearchQueries},
}


def missing_stores(backend: str) -> list[str]:
    """The stores (Protocol names, in table order) without an implementation on `backend`."""
    return [name for name, by in IMPLEMENTATIONS.items() if by.get(backend) is None]
