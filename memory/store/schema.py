"""Migration sets: each owner of tables in the one agent database keeps its own ordered list.

    GATEWAY = MigrationSet("gateway", [g001_pairing_and_queue])
    apply(db.conn, GATEWAY)          # applies what is pending, in order; returns the names

As simonw/llm keeps `embeddings_migrations` apart from its log tables, the memory index, the
gateway and later the scheduler each append to their own list, so adding a table never means
re-ordering somebody else's. Every applied migration is recorded once in
`schema_migrations(owner, name, applied_at)`. Never edit or reorder a migration that has
shipped; append a new one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from memory.errors import NewerSchemaError

Migration = Callable[[Any], None]


@dataclass(frozen=True)
class MigrationSet:
    """The ordered migrations of one owner (`name`: "memory", "gateway", …).

    `legacy_table` names an older recording table (`name TEXT, applied_at REAL`) that databases
    created before migration sets existed used for this owner: its rows count as applied, and
    new ones are written there too so older code reading it stays right."""

    name: str
    migrations: Sequence[Migration]
    legacy_table: str | None = None
    # Names an earlier version recorded for migrations now named otherwise: known, not newer.
    retired: Sequence[str] = ()


def newer_migrations(migration_set: MigrationSet, done: set[str]) -> list[str]:
    """The names among `done` (recorded for this set's owner) that this version does not know:
    a newer Pinch applied them, so its tables may hold what this code would misread."""
    known = {m.__name__ for m in migration_set.migrations} | set(migration_set.retired)
    return sorted(done - known)


def refuse_newer(sets: Sequence[MigrationSet], done: set[tuple[str, str]]) -> None:
    """NewerSchemaError if any of `sets` has a recorded (owner, name) in `done` this version
    does not know."""
    for migration_set in sets:
        owner = migration_set.name
        newer = newer_migrations(migration_set, {n for o, n in done if o == owner})
        if newer:
            raise newer_schema_error(owner, newer)


def newer_schema_error(owner: str, names: list[str]) -> NewerSchemaError:
    return NewerSchemaError(
        f"This database was changed by a newer version of Pinch: its {owner!r} tables carry "
        f"migration{'s' if len(names) > 1 else ''} {', '.join(names)}, which this version does "
        "not know, and reading them could give wrong answers or damage them. Run the version "
        "of Pinch that wrote it (upgrade this installation), or restore the backup taken "
        "before that upgrade (README: going back to an older version)."
    )


def applied(conn: Any, owner: str) -> set[str]:
    """Names of `owner`'s migrations recorded in the database."""
    _ensure_table(conn)
    rows = conn.execute("SELECT name FROM schema_migrations WHERE owner = ?", (owner,))
    return {row[0] for row in rows}


def apply(conn: Any, migration_set: MigrationSet) -> list[str]:
    """Apply `migration_set`'s pending migrations in order, each in its own transaction (so a
    failing one leaves nothing half-applied); return the names applied. Safe to run from several
    processes at once: each migration is re-checked under the write lock."""
    _ensure_table(conn)
    owner, legacy = migration_set.name, migration_set.legacy_table
    if legacy:
        _adopt_legacy_records(conn, owner, legacy)
    done = applied(conn, owner)
    newer = newer_migrations(migration_set, done)
    if newer:
        raise newer_schema_error(owner, newer)
    names: list[str] = []
    for migration in migration_set.migrations:
        name = migration.__name__
        if name in done:
            continue
        conn.execute("BEGIN IMMEDIATE")
        try:
            # Re-check under the write lock: another process may have just applied it.
            if conn.execute(
                "SELECT 1 FROM schema_migrations WHERE owner = ? AND name = ?", (owner, name)
            ).fetchone():
                conn.execute("ROLLBACK")
                continue
            migration(_NoScriptCommit(conn))
            now = time.time()
            conn.execute("INSERT INTO schema_migrations VALUES (?, ?, ?)", (owner, name, now))
            if legacy:
                conn.execute(f"INSERT OR IGNORE INTO {legacy} VALUES (?, ?)", (name, now))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        names.append(name)
    return names


def _ensure_table(conn: Any) -> None:
    conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations ("
        " owner TEXT NOT NULL, name TEXT NOT NULL, applied_at REAL NOT NULL,"
        " PRIMARY KEY (owner, name))"
    )


def _adopt_legacy_records(conn: Any, owner: str, table: str) -> None:
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {table} (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)"
    )
    conn.execute(
        f"INSERT OR IGNORE INTO schema_migrations SELECT ?, name, applied_at FROM {table}",
        (owner,),
    )


class _NoScriptCommit:
    """Run a migration's executescript statements inside the caller's transaction.

    `executescript` would COMMIT first; splitting on ';' is safe for our own DDL (no triggers).
    """

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    def executescript(self, script: str) -> None:
        for statement in _split_sql(script):
            self._conn.execute(statement)

    def execute(self, sql: str, params: Any = ()) -> Any:
        return self._conn.execute(sql, params)

    def executemany(self, sql: str, rows: Any) -> Any:
        return self._conn.executemany(sql, rows)


def _split_sql(script: str) -> list[str]:
    lines = [line.split("--", 1)[0] for line in script.splitlines()]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]
