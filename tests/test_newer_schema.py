"""A database a newer Pinch migrated is refused with advice, and left as it was: this version
cannot know what a newer migration changed, so it neither reads nor writes it. Names an earlier
version recorded for migrations renamed since are known, not newer.

Real SQLite files through `open_database` and the CLI; a real PostgreSQL (pgserver)."""

from __future__ import annotations

import hashlib
import sqlite3
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from app.cli.main import main
from memory.errors import NewerSchemaError
from memory.store.db import open_database
from memory.store.intents_store import ensure_intent_schema
from tests.pg_support import PgTestServer
from tests.test_cli import home, workspace  # noqa: F401  (fixtures)


def record(path: Path, owner: str, name: str) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO schema_migrations VALUES (?, ?, ?)", (owner, name, time.time()))


def digest(path: Path) -> str:
    """What the database holds: its schema and every row."""
    with sqlite3.connect(path) as conn:
        return hashlib.sha256("\n".join(conn.iterdump()).encode()).hexdigest()


def test_a_database_with_a_migration_this_version_does_not_know_is_refused_untouched(
    tmp_path: Path,
) -> None:
    path = tmp_path / "agent.sqlite"
    open_database(path).close()
    record(path, "memory", "m099_from_a_newer_pinch")
    before = digest(path)

    with pytest.raises(NewerSchemaError) as refused:
        open_database(path)

    message = str(refused.value)
    assert str(path) in message and "m099_from_a_newer_pinch" in message
    assert "newer version of Pinch" in message and "backup" in message
    assert digest(path) == before  # no table or row changed


def test_names_an_earlier_version_gave_renamed_migrations_are_not_newer(tmp_path: Path) -> None:
    path = tmp_path / "agent.sqlite"
    db = open_database(path)
    ensure_intent_schema(db)
    db.close()
    record(path, "memory", "m013_size2_cache_by_key")
    record(path, "intents", "i002_projects_intent_project")

    db = open_database(path)
    assert ensure_intent_schema(db) == []
    db.close()


def test_the_cli_says_what_to_do_and_exits_without_a_traceback(workspace: Path) -> None:  # noqa: F811
    db = workspace.parent / "agents" / "main" / "agent.sqlite"
    assert CliRunner().invoke(main, ["memory", "index"]).exit_code == 0
    record(db, "memory", "m099_from_a_newer_pinch")

    result = CliRunner().invoke(main, ["memory", "status"])

    assert result.exit_code == 1, result.output
    assert "newer version of Pinch" in result.output and "Traceback" not in result.output


def test_postgresql_refuses_a_schema_a_newer_pinch_migrated(pg_server: PgTestServer) -> None:
    dsn = pg_server.new_database()
    db = pg_server.open(dsn, min_size=0, max_size=2)
    db.execute("INSERT INTO schema_migrations VALUES ('gateway', 'p099_from_a_newer_pinch', 0)")
    db.close()

    with pytest.raises(NewerSchemaError, match="p099_from_a_newer_pinch"):
        pg_server.open(dsn, min_size=0, max_size=2)
