"""memory/store/snapshot.py: a copy of a database another connection keeps writing is of one
moment, finishes, and is checked; facts and unknown migrations."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

import memory.store.snapshot as snapshot
from memory.store.db import open_database
from memory.store.sessions import SessionKey, SqliteSessionStore
from memory.store.snapshot import DatabaseSnapshots, SqliteSnapshots, unknown_migrations


@pytest.fixture
def snapshots() -> DatabaseSnapshots:
    return SqliteSnapshots()


def test_a_copy_taken_while_another_connection_writes_is_of_one_moment(
    tmp_path: Path, snapshots: DatabaseSnapshots, monkeypatch: pytest.MonkeyPatch
) -> None:
    live = tmp_path / "live.sqlite"
    db = open_database(live, vector_backend="numpy")
    store = SqliteSessionStore(db)
    session = store.current(SessionKey.owner_main())
    for i in range(300):  # some pages to copy
        store.append(session.id, "user", {"text": f"before {i} " + "x" * 400})
    writer_db = open_database(live, vector_backend="numpy")
    writer = SqliteSessionStore(writer_db)
    stop = threading.Event()
    written = [0]

    def write() -> None:
        while not stop.is_set():
            writer.append(session.id, "assistant", {"text": "during " + "y" * 400})
            written[0] += 1

    # One page per step: hundreds of steps, each racing the writer. A copy that let a write
    # between steps restart it would start over again and again.
    monkeypatch.setattr(snapshot, "STEP_PAGES", 1)
    thread = threading.Thread(target=write)
    thread.start()
    copying = threading.Thread(target=snapshots.copy, args=(live, tmp_path / "copy.sqlite"))
    copying.start()
    copying.join(timeout=30)
    finished_while_writing = not copying.is_alive()
    stop.set()  # (a copy that restarts on every write ends only now)
    thread.join()
    copying.join()
    assert finished_while_writing
    assert written[0] > 0
    copied = SqliteSessionStore(open_database(tmp_path / "copy.sqlite", vector_backend="numpy"))
    seqs = [e.seq for e in copied.events(session.id)]
    assert seqs == list(range(1, len(seqs) + 1))  # no gap, no half transaction
    assert 300 <= len(seqs) <= 300 + written[0]
    assert snapshots.facts(tmp_path / "copy.sqlite").counts["transcript_events"] == len(seqs)
    db.close()
    writer_db.close()


def test_facts_count_tables_and_read_migrations_without_changing_the_file(
    tmp_path: Path, snapshots: DatabaseSnapshots
) -> None:
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
