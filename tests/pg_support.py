"""A real PostgreSQL 16 with pgvector for the store tests: PyPI's `pgserver` (in the lock), ONE
server per test run in a temporary folder, stopped at the end; each test gets its own fresh
database on it, copied from a template database the migrations were applied to once (CREATE
DATABASE … TEMPLATE: ~0.1 s idle, where migrating a fresh schema takes close to a second),
two made ahead in a background thread while the tests run. The server runs without fsync: its
data dies with the run anyway.

    def test_y(pg_database: PgDatabase) -> None:   # an open, migrated store in a fresh database

If the server cannot start, the PostgreSQL half of the store tests is skipped with the reason —
or fails, under PINCH_TEST_STRICT=1 (CI), where a skip would hide an untested backend.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from memory.store.postgres.database import PgDatabase, open_postgres

# Read at import: the autouse `pinch_home` fixture removes every PINCH_* variable per test.
STRICT = bool(os.environ.get("PINCH_TEST_STRICT"))
_numbers = itertools.count(1)
SCHEMA = "pinch_main"  # the agent schema in every test database
TEMPLATE = "pinch_template"
# A test server only: its data is thrown away with the run, so durability is not worth the time.
_FAST = ("fsync = off", "full_page_writes = off", "synchronous_commit = off")


class PgTestServer:
    """The run's PostgreSQL server: `new_database()` gives each test a migrated database."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        with psycopg.connect(dsn, autocommit=True) as conn:
            for setting in _FAST:
                conn.execute(f"ALTER SYSTEM SET {setting}")
            conn.execute("SELECT pg_reload_conf()")
            conn.execute(f"CREATE DATABASE {TEMPLATE}")
        open_postgres(make_conninfo(dsn, dbname=TEMPLATE), schema=SCHEMA, min_size=0).close()
        # The next databases are made in the background while tests run (CREATE DATABASE takes
        # 0.1 s on an idle machine, close to 1 s on a busy one).
        self._maker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pg-test-db")
        self._ready: deque[Future[str]] = deque(self._maker.submit(self._create) for _ in range(2))

    def _create(self) -> str:
        name = f"pinch_t{next(_numbers)}"
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE}")
        return make_conninfo(self.dsn, dbname=name)

    def new_database(self) -> str:
        """The DSN of a new database holding the migrated, empty agent schema."""
        self._ready.append(self._maker.submit(self._create))
        return self._ready.popleft().result()

    def close(self) -> None:
        self._maker.shutdown(wait=True, cancel_futures=True)

    def open(self, dsn: str, **pool: int) -> PgDatabase:
        return open_postgres(dsn, schema=SCHEMA, **pool)


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
    test_server = None
    try:
        test_server = PgTestServer(dsn)  # a failing migration is an error here, not a skip
        yield test_server
    finally:
        if test_server is not None:
            test_server.close()
        cleanup = getattr(server, "cleanup", None)
        if cleanup is not None:
            cleanup()
        shutil.rmtree(folder, ignore_errors=True)
        shutil.rmtree(runtime, ignore_errors=True)


@pytest.fixture
def pg_dsn(pg_server: PgTestServer) -> str:
    """The DSN of this test's own database (the agent schema migrated, empty)."""
    return pg_server.new_database()


@pytest.fixture
def pg_database(pg_server: PgTestServer, pg_dsn: str) -> Iterator[PgDatabase]:
    """An open, migrated PostgreSQL store in this test's own database; closed after it."""
    db = pg_server.open(pg_dsn, min_size=0, max_size=6)
    yield db
    db.close()
