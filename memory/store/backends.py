"""Which implementation each store of the seam has on each backend: one table, read by the
composition root (app/store_backend.py) to build the stores and to refuse a backend that is not
complete — Pinch never half-runs on one database and half on another.

    missing_stores("postgres")                     # Protocols without an implementation there
    implementation("QueueStore", "postgres")       # the class (its module imported on demand)
    store_for("IntentRepository", db)              # the store on db's backend (the *_for helpers)

The table names classes ("module:Class") rather than importing them, so checking the backend at
the start of every `pinch` command costs nothing (no numpy, no psycopg).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

_PG = "memory.store.postgres"

# Protocol name -> "module:Class" of its implementation on each backend (None: not written yet).
IMPLEMENTATIONS: Mapping[str, Mapping[str, str | None]] = {
    "SessionStore": {
        "sqlite": "memory.store.sessions:SqliteSessionStore",
        "postgres": f"{_PG}.sessions:PgSessionStore",
    },
    "QueueStore": {
        "sqlite": "memory.store.queue_store:SqliteQueueStore",
        "postgres": f"{_PG}.queue:PgQueueStore",
    },
    "PairingStore": {
        "sqlite": "memory.store.pairing_store:SqlitePairingStore",
        "postgres": f"{_PG}.pairing:PgPairingStore",
    },
    "JobStore": {
        "sqlite": "memory.store.jobs_store:SqliteJobStore",
        "postgres": f"{_PG}.jobs:PgJobStore",
    },
    "IntentRepository": {
        "sqlite": "memory.store.intents_store:SqliteIntentRepository",
        "postgres": f"{_PG}.intents:PgIntentRepository",
    },
    "RecallSignalStore": {
        "sqlite": "memory.store.recall_signals:SqliteRecallSignals",
        "postgres": f"{_PG}.signals:PgRecallSignals",
    },
    "DreamRunStore": {
        "sqlite": "memory.store.dreams_store:SqliteDreamRuns",
        "postgres": f"{_PG}.dreams:PgDreamRuns",
    },
    "StagingLookups": {
        "sqlite": "memory.store.dreams_store:SqliteStagingLookups",
        "postgres": f"{_PG}.dreams:PgStagingLookups",
    },
    "LineageRepository": {
        "sqlite": "memory.store.lineage:LineageStore",
        "postgres": f"{_PG}.lineage:PgLineageStore",
    },
    "ForgetStore": {
        "sqlite": "memory.store.forget_store:SqliteForgetStore",
        "postgres": f"{_PG}.lineage:PgForgetStore",
    },
    "GenerationRepository": {
        "sqlite": "memory.store.index_generations:SqliteGenerations",
        "postgres": f"{_PG}.index_rows:PgGenerations",
    },
    "IndexRowRepository": {
        "sqlite": "memory.store.index_rows:SqliteIndexRows",
        "postgres": f"{_PG}.index_rows:PgIndexRows",
    },
    "EmbeddingCacheRepository": {
        "sqlite": "memory.store.index_embedcache:SqliteEmbeddingCache",
        "postgres": f"{_PG}.index_rows:PgEmbeddingCache",
    },
    "VectorTables": {
        "sqlite": "memory.store.vector_tables:SqliteVectorTables",
        "postgres": f"{_PG}.vectors:PgVectorTables",
    },
    "MatrixPack": {
        "sqlite": "memory.store.vector_pack:SqliteMatrixPack",
        "postgres": f"{_PG}.vectors:PgMatrixPack",
    },
    "KnnIndex": {
        "sqlite": "memory.store.vector_knn:SqliteVecIndex",
        "postgres": f"{_PG}.vectors:PgKnnIndex",
    },
    "SearchQueries": {
        "sqlite": "memory.store.search_queries:SqliteSearchQueries",
        "postgres": f"{_PG}.search:PgSearchQueries",
    },
    "AgentLeaseStore": {
        "sqlite": "memory.store.agent_leases:SqliteAgentLeaseStore",
        "postgres": f"{_PG}.agent_leases:PgAgentLeaseStore",
    },
    "DatabaseSnapshots": {
        "sqlite": "memory.store.snapshot:SqliteSnapshots",
        "postgres": f"{_PG}.snapshot:PgSnapshots",
    },
    "WebAuthStore": {
        "sqlite": "memory.store.web_store:SqliteWebAuthStore",
        "postgres": f"{_PG}.web:PgWebAuthStore",
    },
    "SessionOverview": {
        "sqlite": "memory.store.session_overview:SqliteSessionOverview",
        "postgres": f"{_PG}.web:PgSessionOverview",
    },
    "SourceListings": {
        "sqlite": "memory.store.source_listing:SqliteSourceListing",
        "postgres": f"{_PG}.web:PgSourceListing",
    },
}


def backend_of(db: object) -> str:
    """Which backend an open database is on: "sqlite" (`Database`) or "postgres" (`PgDatabase`)."""
    return str(getattr(db, "backend", "sqlite"))


def store_for(name: str, db: Any, **options: Any) -> Any:
    """Store `name` on the open database `db`, on whichever backend `db` is (`options`: the
    store's own, e.g. a queue's `claimant`)."""
    found = implementation(name, backend_of(db))
    if found is None:
        raise LookupError(f"No {backend_of(db)} implementation of {name}.")
    return found(db, **options)


def missing_stores(backend: str) -> list[str]:
    """The stores (Protocol names, in table order) without an implementation on `backend`."""
    return [name for name, by in IMPLEMENTATIONS.items() if by.get(backend) is None]


def implementation(name: str, backend: str) -> type | None:
    """The class implementing store `name` on `backend` (None: none yet)."""
    where = IMPLEMENTATIONS[name].get(backend)
    if where is None:
        return None
    module, _, cls = where.partition(":")
    found: type = getattr(importlib.import_module(module), cls)
    return found
