"""The app and lifecycle stores of one agent on the configured backend, built from the one table
of implementations (memory/store/backends.py).

    stores = build_app_stores("sqlite", index.db)
    stores.sessions.current(key); stores.queue(claimant="cli-1").claim_next(key)
    db = open_postgres_store(settings)     # the agent's PostgreSQL schema, migrated and pooled
    index = open_memory_index(settings)    # the memory index on the configured backend
    db = open_agent_database(settings)     # the agent database alone (CLI commands)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app.config import ConfigError
from memory.index.index import MemoryIndex
from memory.store.backends import implementation
from memory.store.dreams_store import DreamRunStore, StagingLookups
from memory.store.forget_store import ForgetStore
from memory.store.intents_store import IntentRepository, ensure_intent_schema
from memory.store.jobs_store import JobStore
from memory.store.lineage import LineageRepository
from memory.store.pairing_store import PairingStore
from memory.store.queue_store import QueueStore
from memory.store.recall_signals import RecallSignalStore
from memory.store.sessions import SessionStore

if TYPE_CHECKING:
    from app.config import Settings
    from memory.store.postgres.database import PgDatabase


@dataclass(frozen=True)
class AppStores:
    """The application and lifecycle stores of one agent on one backend."""

    backend: str
    db: Any  # memory.store.db.Database | PgDatabase
    sessions: SessionStore
    pairing: PairingStore
    jobs: JobStore
    intents: IntentRepository
    signals: RecallSignalStore
    dream_runs: DreamRunStore
    staging: StagingLookups
    lineage: LineageRepository
    forget: ForgetStore

    def queue(self, claimant: str | None = None) -> QueueStore:
        """The inbound queue as seen by `claimant` (None: the gateway's channels)."""
        queue_class = implementation("QueueStore", self.backend)
        assert queue_class is not None  # every backend the factory builds has a queue
        made: QueueStore = queue_class(self.db, claimant=claimant)
        return made


def build_app_stores(backend: str, db: Any) -> AppStores:
    """Every app and lifecycle store of `backend` on `db` (an open SQLite `Database` or
    `PgDatabase`), from the one table of implementations."""

    def make(name: str) -> Any:
        found = implementation(name, backend)
        if found is None:
            raise ConfigError(f"No {backend} implementation of {name} yet.")
        return found(db)

    if backend == "sqlite":
        ensure_intent_schema(db)  # the SQLite stores create their tables on first use
    return AppStores(
        backend,
        db,
        sessions=make("SessionStore"),
        pairing=make("PairingStore"),
        jobs=make("JobStore"),
        intents=make("IntentRepository"),
        signals=make("RecallSignalStore"),
        dream_runs=make("DreamRunStore"),
        staging=make("StagingLookups"),
        lineage=make("LineageRepository"),
        forget=make("ForgetStore"),
    )


def open_agent_database(settings: Settings, *, vector_backend: str | None = None) -> Any:
    """The agent database of `settings` on the configured backend: its SQLite file (opened with
    `vector_backend`, default the memory settings'), or its PostgreSQL schema. The stores on it
    come from `memory.store.backends.store_for(name, db)`."""
    if settings.store.backend == "postgres":
        return open_postgres_store(settings)
    from memory.store.db import open_database

    return open_database(
        settings.database_path, vector_backend=vector_backend or settings.memory.vector_backend
    )


def open_memory_index(settings: Settings) -> MemoryIndex:
    """The memory index of `settings`' workspace on the configured backend: the agent SQLite
    file, or the agent's PostgreSQL schema (where the SQLite file is never opened)."""
    if settings.store.backend == "postgres":
        db = open_postgres_store(settings)
        try:
            return MemoryIndex(db, settings.workspace_dir, settings.memory)
        except BaseException:
            db.close()
            raise
    return MemoryIndex.open(settings.workspace_dir, settings.database_path, settings.memory)


def open_postgres_store(settings: Settings) -> PgDatabase:
    """The PostgreSQL database of `settings`' agent (its own schema), migrated and pooled."""
    from memory.store.postgres.database import agent_schema, open_postgres  # psycopg: on demand

    config = settings.store
    return open_postgres(
        config.dsn_text(),
        schema=agent_schema(settings.agent_id),
        min_size=config.pool_min_size,
        max_size=config.pool_max_size,
        timeout_s=config.connect_timeout_s,
    )
