"""Which database holds the agent's stores (`[store] backend`): the check the composition root
and every `pinch` command make before opening anything, and the factory of the app stores.

    check_store_backend(settings)          # ConfigError (one line) if the backend is incomplete
    stores = build_app_stores("sqlite", index.db)
    stores.sessions.current(key); stores.queue(claimant="cli-1").claim_next(key)

While a store has no PostgreSQL implementation (memory/store/backends.py), `backend =
"postgres"` is refused at start with the list of what is missing: Pinch never runs half on one
database and half on another.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app.config import ConfigError
from memory.store.backends import IMPLEMENTATIONS, missing_stores
from memory.store.dreams_store import DreamRunStore, StagingLookups
from memory.store.forget_store import ForgetStore
from memory.store.intents_store import IntentRepository, ensure_intent_schema
from memory.store.jobs_store import JobStore
from memory.store.lineage import LineageRepository
from memory.store.pairing_store import PairingStore
from memory.store.postgres.database import PgDatabase, agent_schema, open_postgres
from memory.store.queue_store import QueueStore
from memory.store.recall_signals import RecallSignalStore
from memory.store.sessions import SessionStore

if TYPE_CHECKING:
    from app.config import Settings


# Backends the composition root hands to the memory index, the agent and the gateway. A backend
# with every store implemented is still refused until it is wired here.
WIRED_BACKENDS = ("sqlite",)


def check_store_backend(settings: Settings) -> None:
    """Refuse a backend some store has no implementation on yet, or that the composition root
    does not wire yet, naming what is missing (one line)."""
    backend = settings.store.backend
    missing = missing_stores(backend)
    if not missing and backend in WIRED_BACKENDS:
        return
    parts = [f"no {backend} implementation of {', '.join(missing)}"] if missing else []
    if backend not in WIRED_BACKENDS:
        parts.append("the memory index, agent and gateway still open the SQLite file")
    raise ConfigError(
        f'[store] backend = "{backend}" cannot run yet: {"; ".join(parts)}. '
        'Set backend = "sqlite" (the default) for now.'
    )


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
        made: QueueStore = IMPLEMENTATIONS["QueueStore"][self.backend](self.db, claimant=claimant)  # type: ignore[misc]
        return made


def build_app_stores(backend: str, db: Any) -> AppStores:
    """Every app and lifecycle store of `backend` on `db` (an open SQLite `Database` or
    `PgDatabase`), from the one table of implementations."""

    def make(name: str) -> Any:
        implementation = IMPLEMENTATIONS[name][backend]
        if implementation is None:
            raise ConfigError(f"No {backend} implementation of {name} yet.")
        return implementation(db)

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


def open_postgres_store(settings: Settings) -> PgDatabase:
    """The PostgreSQL database of `settings`' agent (its own schema), migrated and pooled."""
    config = settings.store
    return open_postgres(
        config.dsn_text(),
        schema=agent_schema(settings.agent_id),
        min_size=config.pool_min_size,
        max_size=config.pool_max_size,
        timeout_s=config.connect_timeout_s,
    )
