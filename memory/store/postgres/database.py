"""Opening the PostgreSQL store: one connection pool per (DSN, agent schema), migrations applied
once at open, and errors worded as advice with the password never shown.

    db = open_postgres(dsn, schema="pinch_main")
    with db.transaction() as conn:          # one transaction: commit on exit, rollback on error
        conn.execute("UPDATE … WHERE id = %s", (1,))
    rows = db.execute("SELECT …", (…,))      # one statement on its own (autocommit)
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

import psycopg
from pgvector.psycopg import register_vector
from psycopg import sql
from psycopg_pool import ConnectionPool, PoolTimeout

from common.redact import redact
from memory.errors import DatabaseError
from memory.store.postgres.migrations import PG_SETS, apply_all
from memory.store.store_config import dsn_problem, redacted_dsn

SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


def agent_schema(agent_id: str) -> str:
    """The PostgreSQL schema of an agent's tables: `pinch_<agent id>` (lower case, '-' → '_')."""
    name = "pinch_" + agent_id.lower().replace("-", "_")
    if len(name) > 63 and SCHEMA_NAME.fullmatch(name[:63]):
        raise ValueError(
            f"The agent name {agent_id!r} is too long for PostgreSQL (its schema pinch_NAME "
            f"must fit 63 characters: at most {63 - len('pinch_')}): rename the agent to use it."
        )
    if not SCHEMA_NAME.fullmatch(name):
        raise ValueError(f"{agent_id!r} cannot name a PostgreSQL schema (letters, digits, _, -)")
    return name


@dataclass
class PgDatabase:
    """A pool of connections to one agent's schema, shared by the threads of one process.

    Every borrowed connection has `search_path` = the agent's schema, then `public` (where the
    `vector` extension lives). `transaction()` is READ COMMITTED, PostgreSQL's default: the
    stores take the row or advisory locks their promises need explicitly."""

    backend: ClassVar[str] = "postgres"  # memory/store/backends.py backend_of
    pool: ConnectionPool[psycopg.Connection[Any]]
    schema: str
    shown_dsn: str  # the DSN with its password redacted: what messages may show
    server_version: str
    created: bool = False  # this open made the schema (every migration was pending)
    # What a store keeps with the database it belongs to (recall signals waiting), by name.
    store_state: dict[str, Any] = field(default_factory=dict)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[psycopg.Connection[Any]]:
        """A connection inside one transaction: committed when the block ends, rolled back if
        it raises. DatabaseError with advice when no connection can be had."""
        with self._borrow() as conn, conn.transaction():
            yield conn

    def execute(self, statement: str, params: Any = ()) -> list[Any]:
        """All rows of one statement (none for a statement without a result), run on its own:
        the pool's connections are in autocommit, so a lone read costs one round trip, not a
        BEGIN and a COMMIT besides."""
        with self._borrow() as conn:
            cur = conn.execute(statement, params)
            return list(cur.fetchall()) if cur.description is not None else []

    @contextlib.contextmanager
    def _borrow(self) -> Iterator[psycopg.Connection[Any]]:
        try:
            with self.pool.connection() as conn:
                yield conn
        except PoolTimeout as exc:
            raise DatabaseError(
                f"No connection to the PostgreSQL store {self.shown_dsn} became free in time "
                "(is the server up? raise [store] pool_max_size if many turns run at once)."
            ) from exc
        except psycopg.OperationalError as exc:
            raise DatabaseError(_unreachable(self.shown_dsn, exc)) from exc

    def check_integrity(self) -> None:
        """Nothing to check from here: PostgreSQL guards its own pages (data checksums, WAL),
        and a damaged one surfaces as an error on the statement that reads it."""

    def close(self) -> None:
        self.pool.close()


def one_row(row: Any) -> Any:
    """The row a statement that always returns one (INSERT … RETURNING, count(*)) returned."""
    if row is None:
        raise DatabaseError("PostgreSQL returned no row where one was expected.")
    return row


def server_said(exc: BaseException, limit: int = 300) -> str:
    """The driver's error on one line, secrets redacted, ending as a sentence ends."""
    text = redact(" ".join(str(exc).split()))[:limit].rstrip()
    return text if text.endswith((".", "?", "!")) else text + "."


def setup_refused(shown_dsn: str, exc: BaseException) -> str:
    """Advice when the server refuses to make the agent's schema or the `vector` extension."""
    return (
        f"The PostgreSQL store {shown_dsn} refused to set up Pinch's tables: "
        f"{server_said(exc, 200)} As the "
        "database's owner (a superuser for the extension), run `CREATE EXTENSION vector;` "
        "(pgvector) in that database and `GRANT CREATE ON DATABASE … TO` Pinch's user, then "
        "run it again."
    )


def _unreachable(shown_dsn: str, exc: BaseException) -> str:
    return (
        f"Cannot use the PostgreSQL store {shown_dsn}: {server_said(exc)} Check the DSN "
        "(PINCH_STORE__DSN, or an agent's own PINCH_AGENTS__NAME__STORE__DSN) and that the "
        "server is running and reachable."
    )


def open_postgres(
    dsn: str,
    *,
    schema: str = "pinch_main",
    min_size: int = 1,
    max_size: int = 8,
    timeout_s: float = 10.0,
) -> PgDatabase:
    """Connect to PostgreSQL at `dsn`, create the agent's `schema` and apply every pending
    migration of the PostgreSQL stores, then open the pool. Raises DatabaseError with advice
    (the password redacted) when the server cannot be reached or refuses."""
    if not SCHEMA_NAME.fullmatch(schema):
        raise ValueError(f"{schema!r} is not a schema name Pinch uses")
    problem = dsn_problem(dsn)
    if problem:
        raise DatabaseError(problem)
    shown = redacted_dsn(dsn)
    try:
        with psycopg.connect(dsn, connect_timeout=max(1, int(timeout_s))) as conn:
            version = str(conn.execute("SHOW server_version").fetchone()[0])  # type: ignore[index]
            conn.commit()
            applied = apply_all(conn, schema)
    except psycopg.errors.InsufficientPrivilege as exc:
        raise DatabaseError(setup_refused(shown, exc)) from exc
    except psycopg.OperationalError as exc:
        raise DatabaseError(_unreachable(shown, exc)) from exc

    search_path = sql.SQL("SET search_path TO {}, public").format(sql.Identifier(schema))

    def configure(conn: psycopg.Connection[Any]) -> None:
        conn.execute(search_path)
        register_vector(conn)  # numpy arrays <-> pgvector's `vector`
        conn.commit()

    pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
        dsn,
        min_size=min_size,
        max_size=max_size,
        timeout=timeout_s,
        configure=configure,
        check=ConnectionPool.check_connection,  # a connection the server dropped is replaced
        # Autocommit: a lone statement is its own transaction; `transaction()` opens one
        # explicitly (BEGIN … COMMIT) wherever several statements must commit together.
        kwargs={"connect_timeout": max(1, int(timeout_s)), "autocommit": True},
        name=f"pinch-{schema}",
        open=True,
    )
    every = sum(len(s.migrations) for s in PG_SETS)
    return PgDatabase(pool, schema, shown, version, created=len(applied) == every)


def schema_bytes(dsn: str, schema: str, timeout_s: float = 3.0) -> tuple[int | None, str | None]:
    """What the agent's `schema` holds on disk (tables with their indexes and TOAST), read
    without creating or migrating anything: (bytes, None); (None, None) when the schema does
    not exist yet; (None, why) when the server cannot be asked (the password redacted)."""
    problem = dsn_problem(dsn)
    if problem:
        return None, problem
    try:
        with psycopg.connect(dsn, connect_timeout=max(1, int(timeout_s))) as conn:
            row = conn.execute(
                "SELECT count(*) > 0, coalesce(sum(pg_total_relation_size(c.oid)), 0) "
                "FROM pg_namespace n LEFT JOIN pg_class c ON c.relnamespace = n.oid "
                "AND c.relkind IN ('r', 'm') WHERE n.nspname = %s",
                (schema,),
            ).fetchone()
    except psycopg.Error as exc:
        return None, f"cannot ask {redacted_dsn(dsn)}: {server_said(exc, 160)}"
    exists, size = row if row is not None else (False, 0)
    return (int(size) if exists else None), None
