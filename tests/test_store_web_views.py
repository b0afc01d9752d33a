"""The web page's stores, each received as its interface and run on both backends (the
`backend` fixture, tests/store_backends.py): `WebAuthStore` (one-time login tokens, browser
sessions), `SessionOverview` (a page of sessions by last activity, usage per quarter hour) and
`SourceListings` (the index's files by kind, only the newest dated ones read out)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from memory.store.backends import implementation
from memory.store.index_generations import GenerationRepository
from memory.store.index_rows import IndexRowRepository, SourceRow
from memory.store.session_overview import USAGE_BUCKET_S, SessionOverview
from memory.store.sessions import SessionKey, SessionStore
from memory.store.source_listing import SourceListings
from memory.store.web_store import WebAuthStore
from tests.store_backends import Backend, at_once


def make(name: str, backend: Backend) -> Any:
    """Store `name` on `backend`, from the one table of implementations."""
    found = implementation(name, backend.name)
    assert found is not None, (name, backend.name)
    return found(backend.db)


@pytest.fixture
def sessions(backend: Backend) -> SessionStore:
    store: SessionStore = make("SessionStore", backend)
    store.current(SessionKey.owner_main())  # the owner's session is always there
    return store


@pytest.fixture
def overview(backend: Backend, sessions: SessionStore) -> SessionOverview:
    made: SessionOverview = make("SessionOverview", backend)
    return made


@pytest.fixture
def listings(backend: Backend) -> SourceListings:
    made: SourceListings = make("SourceListings", backend)
    return made


@pytest.fixture
def web_auth(backend: Backend) -> WebAuthStore:
    made: WebAuthStore = make("WebAuthStore", backend)
    return made


class Sources:
    """Writes an active index generation's source rows as the indexer does (source 'memory'
    for memory files, 'extra' for extra paths, 'sessions' for transcripts)."""

    def __init__(self, backend: Backend) -> None:
        self.db = backend.db
        self.generations: GenerationRepository = make("GenerationRepository", backend)
        self.rows: IndexRowRepository = make("IndexRowRepository", backend)
        with self.db.transaction() as conn:
            self.generation = self.generations.create_building(conn, {"dimensions": 0}, 0.0)
            self.generations.activate(conn, self.generation, 0.0)

    def add(self, files: dict[str, str]) -> None:
        with self.db.transaction() as conn:
            for path, source in files.items():
                row = SourceRow(self.generation, path, source, "owner", "h", 1.0, 10, None)
                self.rows.write_source(conn, row)
            self.generations.bump_version(conn)


def key(n: int, channel: str = "telegram") -> SessionKey:
    return SessionKey("main", channel, "direct", f"p{n}")


def test_sessions_come_newest_activity_first_a_page_at_a_time(
    sessions: SessionStore, overview: SessionOverview
) -> None:
    store = sessions
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
    sessions: SessionStore, overview: SessionOverview
) -> None:
    store = sessions
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
    backend: Backend, listings: SourceListings
) -> None:
    sources = Sources(backend)
    sources.add({f"memory/2025/2025-03-0{day}.md": "memory" for day in range(1, 6)})
    sources.add(
        {
            "MEMORY.md": "memory",
            "memory/2025-03-04-trip.md": "memory",
            "memory/projects.md": "memory",
            "notes/n.md": "extra",
            "sessions/telegram/abc.jsonl": "sessions",  # a transcript: never listed
        }
    )
    listing = listings.listing(sources.generation, newest=2)
    assert listing.counts == {"curated": 1, "daily": 5, "note": 1, "other": 1, "extra": 1}
    daily = sorted(f.path for f in listing.files if f.kind == "daily")
    assert daily == ["memory/2025/2025-03-04.md", "memory/2025/2025-03-05.md"]
    assert {f.path for f in listing.files if f.kind != "daily"} == {
        "MEMORY.md",
        "memory/2025-03-04-trip.md",
        "memory/projects.md",
        "notes/n.md",
    }


def test_the_listing_is_read_again_only_when_the_index_changed(
    backend: Backend, listings: SourceListings
) -> None:
    sources = Sources(backend)
    sources.add({"MEMORY.md": "memory", "memory/2025-03-01.md": "memory"})
    first = listings.listing(sources.generation, newest=30)
    assert listings.listing(sources.generation, newest=30) is first  # same index version: kept
    assert listings.listing(sources.generation, newest=1) is not first  # another question
    sources.add({"memory/2025-03-02.md": "memory"})  # a write changes the index version
    after = listings.listing(sources.generation, newest=30)
    assert first.counts["daily"] == 1 and after.counts["daily"] == 2
    assert "memory/2025-03-02.md" in {f.path for f in after.files}


# -- WebAuthStore --------------------------------------------------------------------------------


def test_a_login_token_is_redeemed_once_and_never_after_it_expired(web_auth: WebAuthStore) -> None:
    now = 1_000_000.0
    web_auth.add_token("t1", now, now + 600)
    web_auth.add_token("t2", now, now + 600)
    assert web_auth.redeem_token("t1", now + 1) is True
    assert web_auth.redeem_token("t1", now + 2) is False  # used
    assert web_auth.redeem_token("t2", now + 600) is False  # expired at expires_at
    assert web_auth.redeem_token("unknown", now) is False


def test_of_two_processes_redeeming_one_token_exactly_one_logs_in(backend: Backend) -> None:
    found = implementation("WebAuthStore", backend.name)
    assert found is not None
    stores: list[WebAuthStore] = [
        found(backend.db),
        found(backend.reopen()),
        found(backend.reopen()),
    ]
    now = time.time()
    stores[0].add_token("shared", now, now + 600)
    results = at_once([lambda s=s: s.redeem_token("shared", now) for s in stores])
    assert sorted(results) == [False, False, True]


def test_sessions_live_until_they_expire_or_end_and_prune_removes_the_expired(
    web_auth: WebAuthStore,
) -> None:
    now = 2_000_000.0
    web_auth.add_session("s1", now, now + 100)
    web_auth.add_session("s2", now, now + 100)
    assert web_auth.session_alive("s1", now + 99) and not web_auth.session_alive("s1", now + 100)
    web_auth.end_session("s2")
    assert not web_auth.session_alive("s2", now)
    web_auth.add_token("old", now, now + 10)
    web_auth.prune(now + 200)
    assert not web_auth.session_alive("s1", now)  # pruned, not merely expired
    web_auth.add_session("s1", now, now + 100)  # its hash is free again
    assert web_auth.session_alive("s1", now + 1)
