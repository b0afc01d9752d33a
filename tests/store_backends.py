"""The two backends the store tests run against: `backend` is parametrised "sqlite" and
"postgres", so every test taking it (or a store fixture built from it) runs on both.

    QUEUES = {"sqlite": SqliteQueueStore, "postgres": PgQueueStore}

    @pytest.fixture
    def queue(backend: Backend) -> QueueStore:
        return QUEUES[backend.name](backend.db)

`backend.reopen()` is a second, independent connection to the same data (another process, or
the same one after a restart); it is closed after the test.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from memory.store.db import open_database

BACKENDS = ("sqlite", "postgres")


@dataclass
class Backend:
    name: str  # "sqlite" | "postgres"
    db: Any  # memory.store.db.Database | memory.store.postgres.database.PgDatabase
    location: str  # the SQLite file's path or the PostgreSQL DSN (for another process)
    _open: Callable[[], Any]
    _opened: list[Any] = field(default_factory=list)

    def reopen(self) -> Any:
        """Another connection (SQLite) or pool (PostgreSQL) on the same data."""
        db = self._open()
        self._opened.append(db)
        return db

    def close(self) -> None:
        for db in [*self._opened, self.db]:
            with contextlib.suppress(Exception):  # a test may have closed it already
                db.close()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """The agent's store on SQLite (a file in tmp_path) or PostgreSQL (a fresh database on the
    run's pgserver, started only when a PostgreSQL test runs)."""
    if request.param == "sqlite":
        path = tmp_path / "agent.sqlite"

        def open_sqlite() -> Any:
            return open_database(path, vector_backend="numpy")

        made = Backend("sqlite", open_sqlite(), str(path), open_sqlite)
    else:
        server = request.getfixturevalue("pg_server")
        dsn = request.getfixturevalue("pg_dsn")

        def open_pg() -> Any:
            return server.open(dsn, min_size=0, max_size=6)

        made = Backend("postgres", open_pg(), dsn, open_pg)
    yield made
    made.close()


def at_once(calls: list[Callable[[], Any]]) -> list[Any]:
    """Run `calls` in threads released together (a barrier); their results, in call order."""
    import threading

    barrier = threading.Barrier(len(calls))
    results: list[Any] = [None] * len(calls)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        barrier.wait()
        try:
            results[i] = calls[i]()
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results
