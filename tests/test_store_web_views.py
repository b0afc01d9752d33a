"""The web page's two read-only stores, each received as its interface: `SessionOverview` (a
page of sessions by last activity, usage per quarter hour) and `SourceListings` (the index's
files by kind, only the newest dated ones read out)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from memory.index.index import MemoryIndex
from memory.memory_config import EmbeddingConfig, MemoryConfig
from memory.store.db import Database, open_database
from memory.store.session_overview import (
    USAGE_BUCKET_S,
    SessionOverview,
    SqliteSessionOverview,
)
from memory.store.sessions import SessionKey, SqliteSessionStore
from memory.store.source_listing import SourceListings, SqliteSourceListing


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    database = open_database(tmp_path / "agent.sqlite", vector_backend="numpy")
    SqliteSessionStore(database).current(SessionKey.owner_main())  # the sessions tables
    yield database
    database.close()


@pytest.fixture
def overview(db: Database) -> SessionOverview:
    return SqliteSessionOverview(db)


def key(n: int, channel: str = "telegram") -> SessionKey:
    return SessionKey("main", channel, "direct", f"p{n}")


def test_sessions_come_newest_activity_first_a_page_at_a_time(
    db: Database, overview: SessionOverview
) -> None:
    store = SqliteSessionStore(db)
    ids = [store.current(key(n, "slack" if n % 2 else "telegram")).id for n in range(7)]
    store.append(ids[2], "user", {"text": "late words"})  # most recent activity
    first = overview.page(channel=None, offset=0, limit=3)
    assert first.total == 8 and len(first.rows) == 3  # and the owner's from the fixture
    assert first.rows[0].id == ids[2] and first.rows[0].events == 1
    assert first.rows[1].id == ids[6]  # then the newest created, never active
    rest = overview.page(channel=None, offset=3, limit=10)
    assert len(rest.rows) == 5 and not {r.id for r in rest.rows} & {r.id for r in first.rows}
    slack = overview.page(channel="slack", offset=0, limit=10)
    assert slack.total == 3 and all(r.key.channel == "slack" for r in slack.rows)
    assert overview.channels() == {"cli": 1, "slack": 3, "telegram": 4}


def test_usage_is_summed_per_quarter_hour_from_the_events_that_carry_it(
    db: Database, overview: SessionOverview
) -> None:
    store = SqliteSessionStore(db)
    sid = store.current(key(1)).id
    usage = {"input_tokens": 10, "output_tokens": 5, "cache_read_tokens": 30}
    store.append(sid, "user", {"text": "hi"})
    store.append(sid, "assistant", {"text": "a"}, usage)
    store.append(sid, "assistant", {"text": "b"}, {**usage, "cache_write_tokens": 7})
    rows = overview.usage_since(time.time() - 3600)
    assert sum(r.calls for r in rows) == 2
    assert sum(r.input_tokens for r in rows) == 20 and sum(r.cache_read_tokens for r in rows) == 60
    assert sum(r.cache_write_tokens for r in rows) == 7 and sum(r.output_tokens for r in rows) == 10
    assert all(r.at % USAGE_BUCKET_S == 0 for r in rows)
    assert overview.usage_since(time.time() + 3600) == []


def test_the_files_are_counted_by_kind_and_only_the_newest_dated_ones_listed(
    tmp_path: Path,
) -> None:
    ws = tmp_path / "ws"
    (ws / "memory" / "2025").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("# M\n")
    for day in range(1, 6):
        (ws / "memory" / "2025" / f"2025-03-0{day}.md").write_text(f"# {day}\n")
    (ws / "memory" / "2025-03-04-trip.md").write_text("# trip\n")
    (ws / "memory" / "projects.md").write_text("# p\n")
    (ws / "notes").mkdir()
    (ws / "notes" / "n.md").write_text("# n\n")
    config = MemoryConfig(embedding=EmbeddingConfig(provider="none"), extra_paths=["notes"])
    index = MemoryIndex.open(ws, tmp_path / "agent.sqlite", config)
    try:
        index.sync()
        active = index.active_generation()
        assert active is not None
        listings: SourceListings = SqliteSourceListing(index.db)
        listing = listings.listing(active[0], newest=2)
    finally:
        index.close()
    assert listing.counts == {"curated": 1, "daily": 5, "note": 1, "other": 1, "extra": 1}
    daily = sorted(f.path for f in listing.files if f.kind == "daily")
    assert daily == ["memory/2025/2025-03-04.md", "memory/2025/2025-03-05.md"]
    assert {f.path for f in listing.files if f.kind != "daily"} == {
        "MEMORY.md",
        "memory/2025-03-04-trip.md",
        "memory/projects.md",
        "notes/n.md",
    }


def test_the_listing_is_read_again_only_when_the_index_changed(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("# M\n")
    (ws / "memory" / "2025-03-01.md").write_text("# day one\n")
    config = MemoryConfig(embedding=EmbeddingConfig(provider="none"))
    index = MemoryIndex.open(ws, tmp_path / "agent.sqlite", config)
    try:
        index.sync()
        active = index.active_generation()
        assert active is not None
        listings = SqliteSourceListing(index.db)
        first = listings.listing(active[0], newest=30)
        assert listings.listing(active[0], newest=30) is first  # same index version: kept
        assert listings.listing(active[0], newest=1) is not first  # another question
        (ws / "memory" / "2025-03-02.md").write_text("# day two\n")
        index.sync()  # a write changes the index version: read again
        after = listings.listing(active[0], newest=30)
    finally:
        index.close()
    assert first.counts["daily"] == 1 and after.counts["daily"] == 2
    assert "memory/2025-03-02.md" in {f.path for f in after.files}
