"""memory/store/snapshot.py: a copy of a database another connection keeps writing is of one
moment, finishes, and is checked; facts and unknown migrations."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import memory.store.snapshot as snapshot
from memory.errors import DatabaseCorruptError, DatabaseError
from memory.store.backends import implementation
from memory.store.db import open_database
from memory.store.postgres.database import PgDatabase
from memory.store.postgres.index_rows import PgGenerations
from memory.store.postgres.sessions import PgSessionStore
from memory.store.postgres.snapshot import PgSnapshots
from memory.store.postgres.vectors import PgKnnIndex, PgVectorTables
from memory.store.sessions import SessionKey, SessionStore, SqliteSessionStore
from memory.store.snapshot import DatabaseSnapshots, SqliteSnapshots, unknown_migrations
from tests.pg_support import PgTestServer
from tests.store_backends import Backend


@dataclass
class Snapshotting:
    """A live database on one backend, its `DatabaseSnapshots`, and a way to read a copy."""

    backend: Backend
    snapshots: DatabaseSnapshots
    source: Path  # what `copy` is given: the SQLite file (PostgreSQL: the store's own schema)
    read_copy: Callable[[Path], SessionStore]  # the sessions of a copy (loaded, on PostgreSQL)


@pytest.fixture
def snapshotting(backend: Backend, request: pytest.FixtureRequest) -> Snapshotting:
    if backend.name == "sqlite":

        def read_sqlite(path: Path) -> SessionStore:
            return SqliteSessionStore(open_database(path, vector_backend="numpy"))

        return Snapshotting(backend, SqliteSnapshots(), Path(backend.location), read_sqlite)
    server: PgTestServer = request.getfixturevalue("pg_server")

    def read_pg(path: Path) -> SessionStore:
        target = server.open(server.new_database(), min_size=0, max_size=2)
        backend._opened.append(target)  # closed with the backend
        PgSnapshots(target).load(path)
        return PgSessionStore(target)

    return Snapshotting(backend, PgSnapshots(backend.db), Path("agents/main/agent.pgdump"), read_pg)


def test_a_copy_taken_while_another_connection_writes_is_of_one_moment(
    tmp_path: Path, snapshotting: Snapshotting, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend, snapshots = snapshotting.backend, snapshotting.snapshots
    store: SessionStore = implementation("SessionStore", backend.name)(backend.db)  # type: ignore[misc]
    session = store.current(SessionKey.owner_main())
    for i in range(300):  # some pages to copy
        store.append(session.id, "user", {"text": f"before {i} " + "x" * 400})
    writer: SessionStore = implementation("SessionStore", backend.name)(backend.reopen())  # type: ignore[misc]
    stop = threading.Event()
    written = [0]

    def write() -> None:
        while not stop.is_set():
            writer.append(session.id, "assistant", {"text": "during " + "y" * 400})
            written[0] += 1

    # SQLite: one page per step, hundreds of steps, each racing the writer. A copy that let a
    # write between steps restart it would start over again and again.
    monkeypatch.setattr(snapshot, "STEP_PAGES", 1)
    thread = threading.Thread(target=write)
    thread.start()
    dest = tmp_path / "copy"
    copying = threading.Thread(target=snapshots.copy, args=(snapshotting.source, dest))
    copying.start()
    copying.join(timeout=30)
    finished_while_writing = not copying.is_alive()
    stop.set()  # (a copy that restarts on every write ends only now)
    thread.join()
    copying.join()
    assert finished_while_writing
    assert written[0] > 0
    copied = snapshotting.read_copy(dest)
    seqs = [e.seq for e in copied.events(session.id)]
    assert seqs == list(range(1, len(seqs) + 1))  # no gap, no half transaction
    assert 300 <= len(seqs) <= 300 + written[0]
    assert snapshots.facts(dest).counts["transcript_events"] == len(seqs)


def test_a_damaged_postgres_snapshot_is_refused_and_loads_nothing(
    tmp_path: Path, pg_server: PgTestServer, pg_database: PgDatabase
) -> None:
    store = PgSessionStore(pg_database)
    session = store.current(SessionKey.owner_main())
    for i in range(50):
        store.append(session.id, "user", {"text": f"line {i} " + "z" * 300})
    dest = tmp_path / "copy"
    PgSnapshots(pg_database).copy(Path("agents/main/agent.pgdump"), dest)
    data = bytearray(dest.read_bytes())
    data[len(data) // 2] ^= 0xFF
    dest.write_bytes(bytes(data))
    target = pg_server.open(pg_server.new_database(), min_size=0, max_size=2)
    try:
        with pytest.raises(DatabaseCorruptError, match="damaged"):
            PgSnapshots(target).load(dest)
        assert PgSessionStore(target).events(session.id) == []
    finally:
        target.close()


def test_a_postgres_snapshot_is_loaded_only_into_an_empty_agent(
    tmp_path: Path, pg_database: PgDatabase
) -> None:
    PgSessionStore(pg_database).current(SessionKey.owner_main())
    dest = tmp_path / "copy"
    PgSnapshots(pg_database).copy(Path("agents/main/agent.pgdump"), dest)
    with pytest.raises(DatabaseError, match="already holds data"):
        PgSnapshots(pg_database).load(dest)


def test_facts_count_tables_and_read_migrations_without_changing_the_file(
    tmp_path: Path,
) -> None:
    snapshots: DatabaseSnapshots = SqliteSnapshots()
    path = tmp_path / "a.sqlite"
    open_database(path).close()
    before = path.read_bytes()
    facts = snapshots.facts(path)
    assert facts.counts["transcript_events"] == 0 and facts.counts["jobs"] is None
    assert "m001_memory_index" in facts.migrations["memory"]
    assert path.read_bytes() == before
    assert unknown_migrations(facts.migrations) == []
    assert unknown_migrations({"memory": ["m999_next"], "web": ["w001"]}) == [
        "memory/m999_next",
        "web/w001",
    ]


def test_a_postgres_snapshot_brings_back_an_index_generation_with_its_vectors(
    tmp_path: Path, pg_server: PgTestServer, pg_database: PgDatabase
) -> None:
    rng = np.random.default_rng(7)
    vectors = rng.standard_normal((40, 8)).astype(np.float32)
    with pg_database.transaction() as conn:
        generation = PgGenerations(pg_database).create_building(conn, {"dimensions": 8}, 0.0)
        PgGenerations(pg_database).activate(conn, generation, 0.0)
        PgVectorTables().add(conn, [(i + 1, generation, "", v) for i, v in enumerate(vectors)])
    dest = tmp_path / "copy"
    PgSnapshots(pg_database).copy(Path("agents/main/agent.pgdump"), dest)
    target = pg_server.open(pg_server.new_database(), min_size=0, max_size=2)
    try:
        PgSnapshots(target).load(dest)
        knn = PgKnnIndex(8)
        with pg_database.transaction() as a, target.transaction() as b:
            for query in vectors[:5]:
                assert knn.knn(b, query, 5, generation, [""]) == knn.knn(
                    a, query, 5, generation, [""]
                )
        with target.transaction() as conn:  # the ids go on after the loaded ones
            assert PgGenerations(target).create_building(conn, {"dimensions": 8}, 0.0) > generation
        assert PgSnapshots(target).facts(dest).counts == PgSnapshots(pg_database).facts(dest).counts
    finally:
        target.close()
