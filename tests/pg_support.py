"""A real PostgreSQL 16 with pgvector for the store tests: PyPI's `pgserver` (in the lock), ONE
server per test run in a temporary folder, stopped at the end; each test gets its own fresh
agent schema on it (CREATE SCHEMA takes milliseconds, a database from a template ~100 ms).

    def test_x(pg_dsn: str) -> None:               # the server's DSN (a fresh schema each test)
    def test_y(pg_database: PgDatabase) -> None:   # an open, migrated store in a fresh schema

If the server cannot start, the PostgreSQL half of the store tests is skipped with the reason —
or fails, under PINCH_TEST_STRICT=1 (CI), where a skip would hide an untested backend.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from memory.store.postgres.database import PgDatabase, open_postgres

# Read at import: the autouse `pinch_home` fixture removes every PINCH_* variable per test.
STRICT = bool(os.environ.get("PINCH_TEST_STRICT"))
_schema_numbers = itertools.count(1)


class PgTestServer:
    """The run's PostgreSQL server: its DSN, and a new empty schema name for each test."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    def new_schema(self) -> str:
        return f"pinch_t{os.getpid()}_{next(_schema_numbers)}"

    def open(self, schema: str, **pool: int) -> PgDatabase:
        return open_postgres(self.dsn, schema=schema, **pool)


def _start(folder: Path) -> tuple[object, str]:
    import pgserver

    server = pgserver.get_server(folder, cleanup_mode="stop")
    return server, str(server.get_uri())


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgTestServer]:
    """One pgserver for the whole run (a few seconds to start), in its own temporary folder."""
    folder = Path(tempfile.mkdtemp(prefix="pinch-pg-"))
    runtime = Path(tempfile.mkdtemp(prefix="pinch-pg-run-"))
    old_runtime = os.environ.get("XDG_RUNTIME_DIR")
    os.environ["XDG_RUNTIME_DIR"] = str(runtime)  # pgserver warns without one
    try:
        server, dsn = _start(folder)
    except Exception as exc:  # the binary is missing, the port or the folder refused, ...
        shutil.rmtree(folder, ignore_errors=True)
        why = f"PostgreSQL (pgserver) could not start for the store tests: {exc}"
        if STRICT:
            pytest.fail(why)
        pytest.skip(why)
    finally:
        if old_runtime is None:
            os.environ.pop("XDG_RUNTIME_DIR", None)
        else:
            os.environ["XDG_RUNTIME_DIR"] = old_runtime
    try:
        yield PgTestServer(dsn)
    finally:
        cleanup = getattr(server, "cleanup", None)
        if cleanup is not None:
            cleanup()
        shutil.rmtree(folder, ignore_errors=True)
        shutil.rmtree(runtime, ignore_errors=True)


@pytest.fixture
def pg_schema(pg_server: PgTestServer) -> str:
    """A schema name no other test uses (created by the first `open`)."""
    return pg_server.new_schema()


@pytest.fixture
def pg_database(pg_server: PgTestServer, pg_schema: str) -> Iterator[PgDatabase]:
    """An open, migrated PostgreSQL store in this test's own schema; closed after the test."""
    db = pg_server.open(pg_schema, min_size=0, max_size=6)
    yield db
    db.close()
