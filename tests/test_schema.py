"""Migration sets: each owner of tables (memory, gateway, …) has its own ordered list in the one
agent database, recorded in schema_migrations; databases made before sets existed migrate."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from app.gateway.queue import GatewayStore
from memory.store.cjk_keywords import CJK_KEYWORDS
from memory.store.db import _load_driver, open_database
from memory.store.gateway_schema import GATEWAY
from memory.store.migrations import MIGRATIONS
from memory.store.queue_store import SqliteQueueStore
from memory.store.schema import MigrationSet, applied, apply


def connect_raw(path: Path) -> Any:
    driver, _ = _load_driver(True)
    return driver.connect(str(path), isolation_level=None)


def make_database_as_main_did_before_sets(path: Path) -> None:
    """What today's main (one `_migrations` table, no sets) leaves on disk, plus some data."""
    conn = connect_raw(path)
    conn.execute("CREATE TABLE _migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)")
    for migration in MIGRATIONS:
        conn.execute("BEGIN")
        for statement in _statements(migration):
            conn.execute(statement)
        conn.execute("INSERT INTO _migrations VALUES (?, ?)", (migration.__name__, time.time()))
        conn.execute("COMMIT")
    conn.execute("INSERT INTO meta VALUES ('kept', 'yes')")
    conn.close()


def _statements(migration: Any) -> list[str]:
    collected: list[str] = []

    class Collect:
        def executescript(self, script: str) -> None:
            from memory.store.schema import _split_sql

            collected.extend(_split_sql(script))

        def execute(self, sql: str, params: Any = ()) -> Any:
            # A data migration reads rows before it rewrites them (m010, m011): a database
            # this old has none to read, and its parameterised reads are not DDL to replay.
            if not params:
                collected.append(sql)
            return NoRows()

    class NoRows:
        def fetchall(self) -> list[Any]:
            return []

        def fetchone(self) -> None:
            return None

    migration(Collect())
    return collected


def test_a_database_created_before_migration_sets_opens_and_migrates(tmp_path: Path) -> None:
    path = tmp_path / "agent.sqlite"
    make_database_as_main_did_before_sets(path)

    db = open_database(path)
    GatewayStore(SqliteQueueStore(db))

    assert db.execute("SELECT value FROM meta WHERE key = 'kept'") == [("yes",)]
    assert applied(db.conn, "memory") == {m.__name__ for m in MIGRATIONS}
    assert applied(db.conn, "gateway") == {m.__name__ for m in GATEWAY.migrations}
    assert db.execute("SELECT count(*) FROM _migrations") == [(len(MIGRATIONS),)]
    db.close()


def test_each_set_records_its_own_migrations(tmp_path: Path) -> None:
    db = open_database(tmp_path / "agent.sqlite")
    GatewayStore(SqliteQueueStore(db))

    owners = dict(db.execute("SELECT owner, count(*) FROM schema_migrations GROUP BY owner"))

    assert owners == {
        "memory": len(MIGRATIONS),
        "cjk_keywords": len(CJK_KEYWORDS.migrations),  # applied with the memory set on open
        "gateway": len(GATEWAY.migrations),
    }
    db.close()


def test_a_migration_with_the_same_name_in_another_set_is_its_own(tmp_path: Path) -> None:
    def m001_memory_index(conn: Any) -> None:  # same name as the memory set's first
        conn.executescript("CREATE TABLE other_owner_table (x INTEGER);")

    db = open_database(tmp_path / "agent.sqlite")

    assert apply(db.conn, MigrationSet("other", [m001_memory_index])) == ["m001_memory_index"]
    assert db.execute("SELECT count(*) FROM other_owner_table") == [(0,)]
    db.close()


def test_applying_a_set_again_applies_nothing(tmp_path: Path) -> None:
    db = open_database(tmp_path / "agent.sqlite")
    assert apply(db.conn, GATEWAY) == [m.__name__ for m in GATEWAY.migrations]

    assert apply(db.conn, GATEWAY) == []
    db.close()


def test_a_failing_migration_leaves_its_set_where_it_was(tmp_path: Path) -> None:
    def m001_ok(conn: Any) -> None:
        conn.executescript("CREATE TABLE ok_table (x INTEGER);")

    def m002_broken(conn: Any) -> None:
        conn.executescript("CREATE TABLE half_done (x INTEGER); CREATE TABLE oops (")

    conn = connect_raw(tmp_path / "agent.sqlite")

    with pytest.raises(Exception, match=r"syntax error|incomplete input"):
        apply(conn, MigrationSet("tests", [m001_ok, m002_broken]))

    assert applied(conn, "tests") == {"m001_ok"}
    assert not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'half_done'").fetchone()


def test_a_later_migration_appended_to_a_set_is_applied_on_the_next_open(
    tmp_path: Path,
) -> None:
    def m001_first(conn: Any) -> None:
        conn.executescript("CREATE TABLE first_table (x INTEGER);")

    def m002_second(conn: Any) -> None:
        conn.executescript("ALTER TABLE first_table ADD COLUMN y TEXT;")

    conn = connect_raw(tmp_path / "agent.sqlite")
    apply(conn, MigrationSet("tests", [m001_first]))

    assert apply(conn, MigrationSet("tests", [m001_first, m002_second])) == ["m002_second"]
