"""The agent database: migrations, WAL, the SQLite driver and sqlite-vec, and the errors a user
can meet when the file is broken or busy."""

from __future__ import annotations

import platform
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest

import memory.store.db
from memory.errors import DatabaseError
from memory.store import migrations
from memory.store.db import _load_driver, open_database
from memory.store.migrations import MIGRATIONS, apply_migrations


def schema(conn: Any) -> list[tuple[str, str, str, str | None]]:
    return list(
        conn.execute(
            "SELECT type, name, tbl_name, sql FROM sqlite_master "
            "WHERE name != '_migrations' ORDER BY type, name"
        ).fetchall()
    )


def connect_raw(path: Path) -> Any:
    """A plain connection through the same SQLite library Pinch uses (pysqlite3 here)."""
    driver, _ = _load_driver(True)
    return driver.connect(str(path), isolation_level=None)


# ---- migrations -----------------------------------------------------------------------------


def test_a_fresh_database_records_every_migration(tmp_path: Path) -> None:
    db = open_database(tmp_path / "agent.sqlite")

    names = [row[0] for row in db.execute("SELECT name FROM _migrations ORDER BY name")]

    assert names == sorted(m.__name__ for m in MIGRATIONS)
    db.close()


def test_migrating_again_applies_nothing(tmp_path: Path) -> None:
    open_database(tmp_path / "agent.sqlite").close()
    conn = connect_raw(tmp_path / "agent.sqlite")

    assert apply_migrations(conn) == []
    assert conn.execute("SELECT count(*) FROM _migrations").fetchone()[0] == len(MIGRATIONS)


def test_reopening_keeps_the_data(tmp_path: Path) -> None:
    db = open_database(tmp_path / "agent.sqlite")
    db.execute("INSERT INTO meta(key, value) VALUES ('hello', 'world')")
    db.close()

    db = open_database(tmp_path / "agent.sqlite")

    assert db.execute("SELECT value FROM meta WHERE key = 'hello'") == [("world",)]
    db.close()


def test_a_fresh_schema_equals_one_migrated_step_by_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fresh = open_database(tmp_path / "fresh.sqlite")
    stepwise = connect_raw(tmp_path / "stepwise.sqlite")

    for n in range(1, len(MIGRATIONS) + 1):
        monkeypatch.setattr(migrations, "MIGRATIONS", MIGRATIONS[:n])
        assert apply_migrations(stepwise) == [MIGRATIONS[n - 1].__name__]

    assert schema(stepwise) == schema(fresh.conn)
    assert schema(fresh.conn)  # not trivially equal
    fresh.close()


def test_a_failing_migration_leaves_nothing_half_applied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def m999_broken(conn: Any) -> None:
        conn.executescript("CREATE TABLE half_done (x INTEGER); CREATE TABLE oops (")

    monkeypatch.setattr(migrations, "MIGRATIONS", [*MIGRATIONS, m999_broken])
    conn = connect_raw(tmp_path / "agent.sqlite")

    with pytest.raises(Exception, match=r"syntax error|incomplete input"):
        apply_migrations(conn)

    names = {row[0] for row in conn.execute("SELECT name FROM _migrations")}
    assert names == {m.__name__ for m in MIGRATIONS}
    assert not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'half_done'").fetchone()


def test_the_database_runs_in_wal_mode(tmp_path: Path) -> None:
    db = open_database(tmp_path / "agent.sqlite")

    assert db.execute("PRAGMA journal_mode") == [("wal",)]
    db.close()


def test_the_database_folder_is_created(tmp_path: Path) -> None:
    db = open_database(tmp_path / "agents" / "main" / "agent.sqlite")

    assert (tmp_path / "agents" / "main" / "agent.sqlite").is_file()
    db.close()


def test_transaction_rolls_back_on_error(tmp_path: Path) -> None:
    db = open_database(tmp_path / "agent.sqlite")

    with pytest.raises(RuntimeError), db.transaction() as conn:
        conn.execute("INSERT INTO meta(key, value) VALUES ('k', 'v')")
        raise RuntimeError("boom")

    assert db.execute("SELECT count(*) FROM meta WHERE key = 'k'") == [(0,)]
    db.close()


# ---- driver and sqlite-vec ------------------------------------------------------------------


@pytest.mark.skipif(
    platform.machine() not in ("x86_64", "AMD64") or sys.platform != "linux",
    reason="pysqlite3-binary wheels (SQLite that can load extensions) exist for Linux x86_64",
)
def test_sqlite_vec_loads_through_pysqlite3_on_this_machine(tmp_path: Path) -> None:
    db = open_database(tmp_path / "agent.sqlite")

    assert db.vector_backend == "sqlite-vec"
    assert db.driver == "pysqlite3"  # the stdlib sqlite3 here cannot load extensions
    assert db.vec_version and db.vec_version.startswith("v")
    db.close()


def test_without_extension_loading_the_numpy_backend_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        memory.store.db, "_load_driver", lambda want_extensions: (sqlite3, "sqlite3")
    )
    if hasattr(sqlite3.connect(":memory:"), "enable_load_extension"):
        pytest.skip("this Python's sqlite3 can load extensions")

    db = open_database(tmp_path / "agent.sqlite")

    assert (db.driver, db.vec_version, db.vector_backend) == ("sqlite3", None, "numpy")
    db.close()


def test_vector_backend_numpy_does_not_load_sqlite_vec(tmp_path: Path) -> None:
    db = open_database(tmp_path / "agent.sqlite", vector_backend="numpy")

    assert db.vector_backend == "numpy"
    db.close()


def test_requiring_sqlite_vec_where_it_cannot_load_is_an_error_with_advice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(memory.store.db, "_try_load_vec", lambda conn: None)

    with pytest.raises(DatabaseError, match=r"pysqlite3-binary.*vector_backend"):
        open_database(tmp_path / "agent.sqlite", vector_backend="sqlite-vec")


# ---- broken and busy files ------------------------------------------------------------------


def test_a_corrupt_file_is_reported_with_advice_and_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "agent.sqlite"
    garbage = b"this is not a database, just some bytes \x00\xff" * 200
    path.write_bytes(garbage)

    with pytest.raises(DatabaseError) as err:
        open_database(path)

    message = str(err.value)
    assert "not a valid SQLite database" in message
    assert f"mv {path} {path}.broken" in message
    assert "pinch memory index" in message
    assert path.read_bytes() == garbage
    assert sorted(p.name for p in tmp_path.iterdir()) == ["agent.sqlite"]


def test_a_database_locked_while_opening_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(memory.store.db, "BUSY_TIMEOUT_S", 0.2)
    path = tmp_path / "agent.sqlite"
    other = connect_raw(path)  # a database another program made, not yet in WAL mode
    other.execute("CREATE TABLE t (x)")
    other.execute("BEGIN EXCLUSIVE")

    with pytest.raises(DatabaseError, match=r"locked by another process.*Stop it or wait"):
        open_database(path)
    other.execute("ROLLBACK")
    other.close()


def test_a_gateway_waits_for_a_database_another_gateway_is_creating(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Several gateways starting at once create and migrate the same agents' databases: the
    one that finds it locked tries again (memory/store/db.py opened_when_free) instead of
    stopping; an error that is not a lock is not retried."""
    import threading
    import time

    from memory.store.db import opened_when_free

    monkeypatch.setattr(memory.store.db, "BUSY_TIMEOUT_S", 0.2)
    path = tmp_path / "agent.sqlite"
    locked = threading.Event()

    def another_gateway() -> None:  # holds the lock for a second, then lets go
        other = connect_raw(path)
        other.execute("CREATE TABLE t (x)")
        other.execute("BEGIN EXCLUSIVE")
        locked.set()
        time.sleep(1.0)
        other.execute("ROLLBACK")
        other.close()

    released = threading.Thread(target=another_gateway)
    released.start()
    assert locked.wait(10)
    tries: list[int] = []

    def open_once() -> Any:
        tries.append(1)
        return open_database(path)

    db = opened_when_free(open_once, first_wait_s=0.5)
    released.join()
    assert len(tries) >= 2  # the first found it locked; a later one opened it
    assert db.execute("SELECT count(*) FROM t") == [(0,)]
    db.close()
    broken = tmp_path / "broken.sqlite"
    broken.write_bytes(b"not a database" * 100)
    tries.clear()
    with pytest.raises(DatabaseError, match="not a valid SQLite database"):
        opened_when_free(lambda: (tries.append(1), open_database(broken)))
    assert len(tries) == 1


def test_a_write_while_another_process_writes_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(memory.store.db, "BUSY_TIMEOUT_S", 0.2)
    path = tmp_path / "agent.sqlite"
    db = open_database(path)
    other = connect_raw(path)
    other.execute("BEGIN EXCLUSIVE")

    with pytest.raises(DatabaseError, match="locked by another process"), db.transaction():
        pass
    # Reading still works in WAL mode while the other writer holds its lock.
    assert db.execute("SELECT count(*) FROM _migrations") == [(len(MIGRATIONS),)]
    other.execute("ROLLBACK")
    other.close()
    db.close()


def test_an_uncreatable_folder_is_reported(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")

    with pytest.raises(DatabaseError, match=r"Cannot create.*PINCH_HOME"):
        open_database(blocker / "agents" / "agent.sqlite")


# ---- one active generation ------------------------------------------------------------------


def add_generation(conn: Any, state: str) -> int:
    cur = conn.execute(
        "INSERT INTO memory_generations(identity, state, dimensions, created_at) "
        "VALUES ('{}', ?, NULL, 0)",
        (state,),
    )
    return int(cur.lastrowid)


def test_the_schema_allows_one_active_generation(tmp_path: Path) -> None:
    db = open_database(tmp_path / "agent.sqlite")
    add_generation(db.conn, "active")

    with pytest.raises(Exception, match="UNIQUE constraint failed"):
        add_generation(db.conn, "active")

    add_generation(db.conn, "building")  # beside it: fine
    db.close()


def test_migrating_keeps_the_newest_of_several_active_generations(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What three parallel first indexes left behind before the schema forbade it.
    conn = connect_raw(tmp_path / "agent.sqlite")
    before = [m for m in MIGRATIONS if m.__name__ < "m006"]
    monkeypatch.setattr(migrations, "MIGRATIONS", before)
    apply_migrations(conn)
    ids = [add_generation(conn, "active") for _ in range(3)]
    conn.execute("INSERT INTO meta(key, value) VALUES ('build:9', '{}')")
    monkeypatch.setattr(migrations, "MIGRATIONS", MIGRATIONS)

    apply_migrations(conn)

    states = conn.execute("SELECT id, state FROM memory_generations ORDER BY id").fetchall()
    assert states == [(ids[0], "retired"), (ids[1], "retired"), (ids[2], "active")]
    assert conn.execute("SELECT count(*) FROM meta WHERE key LIKE 'build:%'").fetchone() == (0,)


def test_one_sqlite_library_serves_every_connection_of_a_process(tmp_path: Path) -> None:
    # Two copies of SQLite in one process don't see each other's POSIX locks on a file.
    with_vectors = open_database(tmp_path / "a.sqlite", vector_backend="auto")
    without = open_database(tmp_path / "a.sqlite", vector_backend="numpy")
    try:
        assert type(with_vectors.conn).__module__ == type(without.conn).__module__
    finally:
        with_vectors.close()
        without.close()
