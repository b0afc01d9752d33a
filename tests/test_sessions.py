"""SessionStore: one current session per key, resumed after a restart; ordered, durable events.

Every store test runs on both backends (`backend`, tests/store_backends.py): a real SQLite file
in tmp_path and a fresh schema on the run's PostgreSQL; a "restart" opens the data again.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from memory.errors import SessionError
from memory.store import migrations
from memory.store.db import Database, open_database
from memory.store.migrations import MIGRATIONS, apply_migrations, m001_memory_index
from memory.store.postgres.sessions import PgSessionStore
from memory.store.sessions import SessionKey, SessionStore, SqliteSessionStore
from tests.store_backends import Backend

OWNER = SessionKey("main", "telegram", "direct", "12345")
GROUP = SessionKey("main", "telegram", "group", "-100777")


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "agent.sqlite"


@pytest.fixture
def db(db_path: Path) -> Iterator[Database]:
    database = open_database(db_path)
    yield database
    database.close()


# The implementations of the `SessionStore` interface, by backend (tests/store_backends.py).
STORES: dict[str, Callable[[Any], SessionStore]] = {
    "sqlite": SqliteSessionStore,
    "postgres": PgSessionStore,
}


@pytest.fixture
def store(backend: Backend) -> SessionStore:
    return STORES[backend.name](backend.db)


# ---- keys -------------------------------------------------------------------------------------


def test_key_text_form_round_trips_with_and_without_thread() -> None:
    threaded = SessionKey("main", "slack", "channel", "C1", "171.2")
    assert str(OWNER) == "main:telegram:direct:12345"
    assert str(threaded) == "main:slack:channel:C1:thread:171.2"
    assert SessionKey.parse(str(OWNER)) == OWNER
    assert SessionKey.parse(str(threaded)) == threaded


def test_key_parts_containing_colons_round_trip() -> None:
    odd = SessionKey("main", "matrix", "direct", "@anna:example.org", "a:b%c")
    assert SessionKey.parse(str(odd)) == odd
    assert str(odd).count(":") == 5


@pytest.mark.parametrize(
    "text", ["main:cli:direct", "main:cli:direct:x:y", "main:cli:dm:owner", ""]
)
def test_parse_rejects_malformed_keys(text: str) -> None:
    with pytest.raises(ValueError):
        SessionKey.parse(text)


def test_direct_scope_drops_the_thread_group_scope_keeps_it() -> None:
    dm_thread = SessionKey("main", "slack", "direct", "U1", "99.1")
    channel_thread = SessionKey("main", "slack", "channel", "C1", "99.1")
    assert dm_thread.memory_scope == "main:slack:direct:U1"
    assert channel_thread.memory_scope == "main:slack:channel:C1:thread:99.1"
    assert not dm_thread.is_group and channel_thread.is_group and GROUP.is_group


def test_owner_cli_key() -> None:
    assert str(SessionKey.owner_cli()) == "main:cli:direct:owner"


def test_the_owners_main_key_is_the_terminal_key_so_old_conversations_continue() -> None:
    assert SessionKey.owner_main() == SessionKey.owner_cli()
    assert str(SessionKey.owner_direct("telegram")) == "main:telegram:direct:owner"


def test_only_the_owner_peer_in_a_direct_chat_is_the_owners_direct_chat() -> None:
    assert SessionKey.owner_direct("slack").is_owner_direct
    assert SessionKey("main", "cli", "direct", "owner", "work").is_owner_direct  # a named thread
    assert not SessionKey("main", "telegram", "direct", "555").is_owner_direct
    assert not SessionKey("main", "telegram", "group", "owner").is_owner_direct


# ---- sessions ---------------------------------------------------------------------------------


def test_current_creates_a_session_once(store: SessionStore) -> None:
    first = store.current(OWNER)
    assert len(first.id) == 32 and first.compactions == 0 and first.flushed_cycle == -1
    assert store.current(OWNER) == first
    assert store.get(first.id) == first


def test_each_key_has_its_own_session(store: SessionStore) -> None:
    assert store.current(OWNER).id != store.current(GROUP).id


def test_a_restart_resumes_the_current_session_and_its_events(backend: Backend) -> None:
    store = STORES[backend.name](backend.db)
    session = store.current(OWNER)
    store.append(session.id, "user", {"text": "remember the milk"})
    backend.db.close()

    again = STORES[backend.name](backend.reopen())
    resumed = again.current(OWNER)
    assert resumed.id == session.id
    assert [e.content for e in again.events(resumed.id)] == [{"text": "remember the milk"}]


def test_two_connections_agree_on_the_current_session(backend: Backend) -> None:
    a = STORES[backend.name](backend.db)
    b = STORES[backend.name](backend.reopen())
    assert a.current(OWNER).id == b.current(OWNER).id


def test_reset_archives_the_current_session_and_starts_fresh(store: SessionStore) -> None:
    old = store.current(OWNER)
    store.append(old.id, "user", {"text": "before the reset"})
    new = store.reset(OWNER)
    assert new.id != old.id
    assert store.current(OWNER) == new
    assert store.events(new.id) == []
    assert [e.content["text"] for e in store.events(old.id)] == ["before the reset"]
    assert [s.id for s in store.history(OWNER)] == [old.id, new.id]
    assert {s.id for s in store.all_sessions()} == {old.id, new.id}


def test_sessions_are_found_by_the_start_of_their_id(store: SessionStore) -> None:
    found = sorted([store.current(OWNER), store.current(GROUP), store.reset(OWNER)], key=str)
    ids = sorted(s.id for s in found)

    assert store.with_id_prefix(ids[0][:12]) == [s for s in found if s.id == ids[0]]
    assert store.with_id_prefix("") == []
    assert store.with_id_prefix("Z1") == [] and store.with_id_prefix("%") == []
    by_first = [s.id for c in "0123456789abcdef" for s in store.with_id_prefix(c, limit=9)]
    assert by_first == ids


def test_reset_without_a_current_session_just_starts_one(store: SessionStore) -> None:
    fresh = store.reset(OWNER)
    assert store.current(OWNER) == fresh
    assert store.history(OWNER) == [fresh]


# ---- events -----------------------------------------------------------------------------------


def test_events_are_numbered_in_order(store: SessionStore) -> None:
    session = store.current(OWNER)
    kinds = ["user", "assistant", "tool_call", "tool_result", "assistant"]
    appended = [store.append(session.id, k, {"text": str(i)}) for i, k in enumerate(kinds)]
    assert [e.seq for e in appended] == [1, 2, 3, 4, 5]
    assert store.events(session.id) == appended
    assert [e.seq for e in store.events(session.id, after_seq=3)] == [4, 5]
    assert [e.seq for e in store.events(session.id, kinds=["assistant"])] == [2, 5]
    assert [e.seq for e in store.events(session.id, after_seq=1, limit=2)] == [2, 3]


def test_sessions_number_their_events_independently(store: SessionStore) -> None:
    a, b = store.current(OWNER), store.current(GROUP)
    store.append(a.id, "user", {"text": "a"})
    assert store.append(b.id, "user", {"text": "b"}).seq == 1
    assert store.append(a.id, "user", {"text": "a"}).seq == 2


def test_an_appended_event_is_committed_when_append_returns(
    store: SessionStore, backend: Backend
) -> None:
    session = store.current(OWNER)
    store.append(session.id, "user", {"text": "durable"})

    other = STORES[backend.name](backend.reopen())  # another connection sees it at once
    assert [(e.seq, e.kind, e.content) for e in other.events(session.id)] == [
        (1, "user", {"text": "durable"})
    ]


def test_sqlite_stores_the_event_as_written(db: Database, db_path: Path) -> None:
    store = SqliteSessionStore(db)
    session = store.current(OWNER)
    store.append(session.id, "user", {"text": "durable"})
    other = sqlite3.connect(db_path)
    try:
        rows = other.execute(
            "SELECT seq, kind, content FROM transcript_events WHERE session_id = ?", (session.id,)
        ).fetchall()
    finally:
        other.close()
    assert rows == [(1, "user", '{"text": "durable"}')]


def test_append_restores_the_connection_sync_level(db: Database) -> None:
    store = SqliteSessionStore(db)
    before = db.execute("PRAGMA synchronous")
    store.append(store.current(OWNER).id, "user", {"text": "x"})
    assert db.execute("PRAGMA synchronous") == before


def test_concurrent_appends_to_one_session_get_distinct_gap_free_seqs(
    backend: Backend,
) -> None:
    import threading

    session = STORES[backend.name](backend.db).current(OWNER)
    stores = [STORES[backend.name](backend.db), STORES[backend.name](backend.reopen())]
    seqs: list[int] = []
    lock = threading.Lock()

    def append_five(s: SessionStore) -> None:
        for i in range(5):
            event = s.append(session.id, "user", {"text": str(i)})
            with lock:
                seqs.append(event.seq)

    threads = [threading.Thread(target=append_five, args=(s,)) for s in stores * 2]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert sorted(seqs) == list(range(1, 21))


def test_content_and_usage_round_trip(store: SessionStore) -> None:
    session = store.current(OWNER)
    usage = {"input_tokens": 120, "output_tokens": 30, "model": "claude-x"}
    content = {"id": "t1", "name": "memory_search", "input": {"query": "蓝色", "n": [1, 2]}}
    event = store.append(session.id, "tool_call", content, usage)
    assert store.events(session.id) == [event]
    assert event.content == content and event.usage == usage and event.created_at > 0


def test_append_refuses_unknown_sessions_and_kinds(store: SessionStore) -> None:
    with pytest.raises(SessionError, match="No session"):
        store.append("0" * 32, "user", {"text": "x"})
    with pytest.raises(ValueError, match="kind"):
        store.append(store.current(OWNER).id, "shout", {"text": "x"})


def test_latest_compaction(store: SessionStore) -> None:
    session = store.current(OWNER)
    assert store.latest_compaction(session.id) is None
    store.append(session.id, "compaction", {"summary": "one", "first_kept_seq": 1})
    store.append(session.id, "user", {"text": "x"})
    second = store.append(session.id, "compaction", {"summary": "two", "first_kept_seq": 2})
    assert store.latest_compaction(session.id) == second


def test_flush_and_compaction_counters_persist(store: SessionStore, backend: Backend) -> None:
    session = store.current(OWNER)
    assert store.increment_compactions(session.id).compactions == 1
    store.mark_flushed(session.id, 1)
    again = STORES[backend.name](backend.reopen()).get(session.id)
    assert again is not None and (again.compactions, again.flushed_cycle) == (1, 1)
    with pytest.raises(SessionError):
        store.mark_flushed("missing", 1)


def test_usage_totals_sum_the_model_calls(store: SessionStore) -> None:
    session = store.current(OWNER)
    store.append(session.id, "user", {"text": "hi"})
    store.append(
        session.id,
        "assistant",
        {"text": "a"},
        {"input_tokens": 100, "output_tokens": 5, "cache_read_tokens": 80},
    )
    store.append(
        session.id,
        "assistant",
        {"text": "b"},
        {"input_tokens": 50, "output_tokens": 7, "cache_write_tokens": 9, "model": "m"},
    )
    assert store.usage_totals(session.id) == {
        "input_tokens": 150,
        "output_tokens": 12,
        "cache_read_tokens": 80,
        "cache_write_tokens": 9,
        "calls": 2,
    }


# ---- migration --------------------------------------------------------------------------------


def _schema(conn: sqlite3.Connection) -> list[tuple[str, str, str]]:
    return conn.execute(
        "SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' "
        "ORDER BY type, name"
    ).fetchall()


def test_m002_upgrades_a_database_created_with_m001_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = tmp_path / "old.sqlite"
    conn = sqlite3.connect(old, isolation_level=None)
    with monkeypatch.context() as m:
        m.setattr(migrations, "MIGRATIONS", [m001_memory_index])
        assert apply_migrations(conn) == ["m001_memory_index"]
    conn.close()

    upgraded = open_database(old)
    store = SqliteSessionStore(upgraded)
    session = store.current(OWNER)
    store.append(session.id, "user", {"text": "after the upgrade"})
    upgraded.close()
    fresh = open_database(tmp_path / "fresh.sqlite")
    fresh.close()

    a, b = sqlite3.connect(old), sqlite3.connect(tmp_path / "fresh.sqlite")
    try:
        assert _schema(a) == _schema(b)
        names = [r[0] for r in a.execute("SELECT name FROM _migrations ORDER BY name")]
    finally:
        a.close()
        b.close()
    assert names == [m.__name__ for m in MIGRATIONS]
    assert "m002_sessions" in names


def test_a_sessions_project_is_kept_and_a_reset_can_carry_it(store: SessionStore) -> None:
    session = store.current(OWNER)
    assert session.project is None  # not chosen: the default applies

    chosen = store.set_project(session.id, "apollo")
    assert chosen.project == "apollo" and store.current(OWNER).project == "apollo"
    assert store.set_project(session.id, "").project == ""  # `/project none`
    assert store.reset(OWNER, project="apollo").project == "apollo"
    assert store.current(OWNER).project == "apollo"
    with pytest.raises(SessionError):
        store.set_project("0" * 32, "apollo")
