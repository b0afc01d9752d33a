"""The lifecycle stores (intents, recall signals, dream runs, forgetting, lineage), specified
through their Protocols, on both backends (`backend`: SQLite and PostgreSQL,
tests/store_backends.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from memory.store.dreaming_schema import apply_dreaming_migrations
from memory.store.dreams_store import (
    DreamRunStore,
    RunWrite,
    SqliteDreamRuns,
    SqliteStagingLookups,
    StagingLookups,
)
from memory.store.forget_store import ForgetStore, KeptNote, SessionErasure, SqliteForgetStore
from memory.store.index_generations import GenerationRepository, SqliteGenerations
from memory.store.index_rows import IndexRowRepository, SourceRow, SqliteIndexRows
from memory.store.intents_store import (
    IntentRepository,
    IntentScope,
    NewIntent,
    SqliteIntentRepository,
    ensure_intent_schema,
)
from memory.store.lineage import LineageRepository, LineageStore
from memory.store.postgres.dreams import PgDreamRuns, PgStagingLookups
from memory.store.postgres.index_rows import PgGenerations, PgIndexRows
from memory.store.postgres.intents import PgIntentRepository
from memory.store.postgres.lineage import PgForgetStore, PgLineageStore
from memory.store.postgres.sessions import PgSessionStore
from memory.store.postgres.signals import PgRecallSignals
from memory.store.recall_signals import RecallSignal, RecallSignalStore, Span, SqliteRecallSignals
from memory.store.sessions import SessionKey, SessionStore, SqliteSessionStore
from tests.store_backends import Backend, at_once

T0 = 1_770_000_000.0
SCOPE = IntentScope("main", "telegram", "direct:owner", "owner")
OTHER_CHAT = IntentScope("main", "telegram", "group:friends", "owner")


def _sqlite_intents(db: Any) -> IntentRepository:
    ensure_intent_schema(db)
    return SqliteIntentRepository(db)


INTENTS: dict[str, Callable[[Any], IntentRepository]] = {
    "sqlite": _sqlite_intents,
    "postgres": PgIntentRepository,
}
SIGNALS: dict[str, Callable[[Any], RecallSignalStore]] = {
    "sqlite": SqliteRecallSignals,
    "postgres": PgRecallSignals,
}
RUNS: dict[str, Callable[[Any], DreamRunStore]] = {
    "sqlite": SqliteDreamRuns,
    "postgres": PgDreamRuns,
}
LINEAGE: dict[str, Callable[[Any], LineageRepository]] = {
    "sqlite": LineageStore,
    "postgres": PgLineageStore,
}
FORGET: dict[str, Callable[[Any], ForgetStore]] = {
    "sqlite": SqliteForgetStore,
    "postgres": PgForgetStore,
}
STAGING: dict[str, Callable[[Any], StagingLookups]] = {
    "sqlite": SqliteStagingLookups,
    "postgres": PgStagingLookups,
}
GENERATIONS: dict[str, Callable[[Any], GenerationRepository]] = {
    "sqlite": SqliteGenerations,
    "postgres": PgGenerations,
}
ROWS: dict[str, Callable[[Any], IndexRowRepository]] = {
    "sqlite": SqliteIndexRows,
    "postgres": PgIndexRows,
}
SESSIONS: dict[str, Callable[[Any], SessionStore]] = {
    "sqlite": SqliteSessionStore,
    "postgres": PgSessionStore,
}


@pytest.fixture
def intents(backend: Backend) -> IntentRepository:
    return INTENTS[backend.name](backend.db)


@pytest.fixture
def signals(backend: Backend) -> RecallSignalStore:
    return SIGNALS[backend.name](backend.db)


@pytest.fixture
def runs(backend: Backend) -> DreamRunStore:
    return RUNS[backend.name](backend.db)


@pytest.fixture
def lineage(backend: Backend) -> LineageRepository:
    return LINEAGE[backend.name](backend.db)


@pytest.fixture
def forgetting(backend: Backend) -> ForgetStore:
    return FORGET[backend.name](backend.db)


def dreamed_before(backend: Backend) -> None:
    """The dream tables exist (SQLite creates them on the first dream; PostgreSQL at open)."""
    if backend.name == "sqlite":
        apply_dreaming_migrations(backend.db)


def new_intent(
    entries: tuple[str, ...] = ("hangzhou",),
    action: str = "confirm the ticket",
    *,
    scope: IntentScope = SCOPE,
    max_fires: int = 3,
    at: float = T0,
) -> NewIntent:
    terms = tuple(tuple(e.split()) for e in entries)
    return NewIntent(scope, entries, terms, action, "owner", 3600.0, max_fires, at, at + 86_400)


def signal(path: str, start: int, end: int, *, day: str = "2026-01-10") -> RecallSignal:
    return RecallSignal(path, start, end, "snip", "agent", "q1", day, 0.9, T0)


# ---- IntentRepository ---------------------------------------------------------------------


def test_intents_get_increasing_ids_and_list_oldest_first(intents: IntentRepository) -> None:
    first = intents.create(new_intent(("hangzhou",)))
    second = intents.create(new_intent(("ferry",), "book the ferry"))
    assert first.id < second.id and first.state == "armed"
    assert [i.id for i in intents.intents()] == [first.id, second.id]


def test_an_active_duplicate_is_returned_instead_of_a_new_intent(
    intents: IntentRepository,
) -> None:
    first = intents.create(new_intent())
    assert intents.create(new_intent(at=T0 + 10)) == first
    assert len(intents.intents()) == 1


def test_matching_entries_stay_in_scope(intents: IntentRepository) -> None:
    mine = intents.create(new_intent(("hangzhou east",)))
    intents.create(new_intent(("hangzhou",), scope=OTHER_CHAT))
    found = intents.matching_entries(SCOPE, ["east", "hangzhou"], now=T0 + 1, limit=10)
    assert found == [(mine.id, ("hangzhou", "east"))]


def test_matching_entries_return_at_most_the_limit(intents: IntentRepository) -> None:
    for n in range(5):
        intents.create(new_intent(("hangzhou",), f"action {n}"))
    assert len(intents.matching_entries(SCOPE, ["hangzhou"], now=T0 + 1, limit=3)) == 3


def test_an_intent_fires_once_per_cooldown(intents: IntentRepository) -> None:
    intent = intents.create(new_intent())
    assert intents.fire_all([intent.id], now=T0 + 1, session_key="k", excerpt="a") == [intent.id]
    assert intents.fire_all([intent.id], now=T0 + 2, session_key="k", excerpt="b") == []
    assert intents.matching_entries(SCOPE, ["hangzhou"], now=T0 + 2, limit=10) == []
    assert [f.excerpt for f in intents.fires(intent.id)] == ["a"]


def test_of_callers_firing_at_once_exactly_one_gets_the_fire(backend: Backend) -> None:
    intent = INTENTS[backend.name](backend.db).create(new_intent())
    stores = [INTENTS[backend.name](backend.reopen()) for _ in range(4)]

    fired = at_once(
        [
            lambda s=s: s.fire_all([intent.id], now=T0 + 1, session_key="k", excerpt="x")
            for s in stores
        ]
    )

    assert sorted(map(len, fired)) == [0, 0, 0, 1]
    assert len(stores[0].fires(intent.id)) == 1


def test_an_intent_created_at_once_is_stored_once(backend: Backend) -> None:
    stores = [INTENTS[backend.name](backend.reopen()) for _ in range(4)]

    made = at_once([lambda s=s: s.create(new_intent()) for s in stores])

    assert len({m.id for m in made}) == 1 and len(stores[0].intents()) == 1


def test_the_last_fire_ends_the_intent_and_its_entries(intents: IntentRepository) -> None:
    intent = intents.create(new_intent(max_fires=1))
    intents.fire_all([intent.id], now=T0 + 1, session_key="k", excerpt="")
    done = intents.get(intent.id)
    assert done is not None and done.state == "done" and done.ended_at == T0 + 1
    assert intents.matching_entries(SCOPE, ["hangzhou"], now=T0 + 99_999, limit=10) == []
    assert intents.intents() == [] and intents.intents(include_ended=True) == [done]


def test_cancel_ends_an_active_intent_once(intents: IntentRepository) -> None:
    intent = intents.create(new_intent())
    assert intents.cancel(intent.id, now=T0 + 5) is True
    assert intents.cancel(intent.id, now=T0 + 6) is False
    cancelled = intents.get(intent.id)
    assert cancelled is not None and cancelled.state == "cancelled"


def test_expire_due_ends_intents_past_their_expiry(intents: IntentRepository) -> None:
    intent = intents.create(new_intent())
    assert intents.expire_due(now=T0 + 100) == 0
    assert intents.expire_due(now=T0 + 86_400) == 1
    expired = intents.get(intent.id)
    assert expired is not None and expired.state == "expired"


def test_get_many_returns_those_that_exist(intents: IntentRepository) -> None:
    a = intents.create(new_intent(("one",), "a"))
    b = intents.create(new_intent(("two",), "b"))
    assert sorted(i.id for i in intents.get_many([b.id, a.id, 999])) == [a.id, b.id]


# ---- RecallSignalStore --------------------------------------------------------------------


def test_signals_added_are_found_by_overlapping_lines(signals: RecallSignalStore) -> None:
    signals.add([signal("memory/a.md", 3, 5), signal("memory/a.md", 10, 12)])
    signals.flush()
    assert [(s.start_line, s.end_line) for s in signals.overlapping("memory/a.md", 5, 9)] == [
        (3, 5)
    ]


def test_signals_are_counted_per_path_on_spans(signals: RecallSignalStore) -> None:
    signals.add([signal("memory/b.md", 1, 2), signal("memory/a.md", 3, 5), signal("x.md", 1, 1)])
    counts = signals.count_on([Span("memory/a.md", 4, 4), Span("memory/b.md")])
    assert list(counts.items()) == [("memory/a.md", 1), ("memory/b.md", 1)]


def test_prune_and_delete_path_remove_signals(signals: RecallSignalStore) -> None:
    signals.add([signal("a.md", 1, 1, day="2026-01-01"), signal("a.md", 2, 2, day="2026-02-01")])
    signals.add([signal("b.md", 1, 1, day="2026-02-01")])
    signals.flush()
    assert signals.prune("2026-01-15") == 1
    assert signals.delete_path("b.md") == 1
    assert signals.count_on([Span("a.md"), Span("b.md")]) == {"a.md": 1}


def test_a_disabled_store_records_nothing(signals: RecallSignalStore) -> None:
    signals.disable()
    signals.add([signal("a.md", 1, 1)])
    signals.flush()
    assert signals.count_on([Span("a.md")]) == {}


# ---- DreamRunStore ------------------------------------------------------------------------


def test_reading_a_database_that_never_dreamed_creates_nothing(
    runs: DreamRunStore, backend: Backend
) -> None:
    assert runs.last_finished() is None and runs.last_undoable() is None
    if backend.name == "sqlite":
        assert not backend.db.execute("SELECT 1 FROM sqlite_master WHERE name = 'dream_runs'")


def test_one_holder_has_the_lease_until_it_expires(runs: DreamRunStore) -> None:
    assert runs.acquire_lease("dream", "a", now=T0, lease_s=60)
    assert not runs.acquire_lease("dream", "b", now=T0 + 30, lease_s=60)
    runs.release_lease("dream", "b")  # not b's: a keeps it
    assert not runs.acquire_lease("dream", "b", now=T0 + 31, lease_s=60)
    assert runs.acquire_lease("dream", "b", now=T0 + 61, lease_s=60)


def test_of_dreamers_taking_the_lease_at_once_one_gets_it(backend: Backend) -> None:
    dreamed_before(backend)
    stores = [RUNS[backend.name](backend.reopen()) for _ in range(4)]

    got = at_once(
        [
            lambda s=s, i=i: s.acquire_lease("dream", f"h{i}", now=T0, lease_s=60)
            for i, s in enumerate(stores)
        ]
    )

    assert sorted(got) == [False, False, False, True]


def test_a_released_lease_can_be_taken(runs: DreamRunStore) -> None:
    assert runs.acquire_lease("dream", "a", now=T0, lease_s=60)
    runs.release_lease("dream", "a")
    assert runs.acquire_lease("dream", "b", now=T0 + 1, lease_s=60)


def test_a_finished_run_that_wrote_can_be_undone_once(
    runs: DreamRunStore, backend: Backend
) -> None:
    dreamed_before(backend)
    first = runs.start_run("nightly", started_at=T0)
    second = runs.start_run("manual", started_at=T0 + 1)
    assert second > first
    write = RunWrite("append", "memory/.dreams/MEMORY-x.md", "before", "h0", "h1")
    runs.finish_run(
        second, finished_at=T0 + 2, promoted=2, model_calls=1, tokens=10, write=write, outcome="ok"
    )
    last = runs.last_finished()
    assert last is not None and (last.run_id, last.outcome, last.undone) == (second, "ok", False)
    undoable = runs.last_undoable()
    assert undoable is not None and (undoable.run_id, undoable.preimage_text) == (second, "before")
    runs.mark_undone(second, at=T0 + 3)
    assert runs.last_undoable() is None
    assert [r["id"] for r in runs.recent(5)] == [second, first]


def test_a_failed_run_is_recorded_finished_with_its_reason(runs: DreamRunStore) -> None:
    runs.record_failed_run("nightly", "no model", at=T0)
    last = runs.last_finished()
    assert last is not None and last.outcome == "failed: no model"


def test_preimages_are_rewritten_and_post_hashes_moved(
    runs: DreamRunStore, backend: Backend
) -> None:
    dreamed_before(backend)
    run = runs.start_run("manual", started_at=T0)
    write = RunWrite("rewrite", "p.md", "keep\ndrop", "h0", "h1")
    runs.finish_run(
        run, finished_at=T0, promoted=1, model_calls=0, tokens=0, write=write, outcome=""
    )
    runs.rewrite_preimages(lambda text: text.replace("\ndrop", "") if "drop" in text else None)
    runs.replace_post_hash("h1", "h2")
    assert runs.preimage_texts() == [(run, "keep")]
    undoable = runs.last_undoable()
    assert undoable is not None and undoable.post_hash == "h2"


def test_staging_finds_the_origin_the_active_index_gives_a_file(backend: Backend) -> None:
    generations, rows = GENERATIONS[backend.name](backend.db), ROWS[backend.name](backend.db)
    with backend.db.transaction() as conn:
        old = generations.create_building(conn, {"dimensions": 4}, T0)
        rows.write_source(conn, SourceRow(old, "MEMORY.md", "memory", "agent", "h", 1.0, 1, None))
        generations.activate(conn, old, T0)
        new = generations.create_building(conn, {"dimensions": 4}, T0)
        rows.write_source(conn, SourceRow(new, "MEMORY.md", "memory", "owner", "h", 1.0, 1, None))

    staging = STAGING[backend.name](backend.db)
    assert staging.indexed_origin("MEMORY.md") == "agent"  # the active one, not the building
    assert staging.indexed_origin("USER.md") is None


def test_staging_tells_automated_sessions_apart(backend: Backend) -> None:
    sessions = SESSIONS[backend.name](backend.db)
    owner = sessions.current(SessionKey.owner_main())
    beat = sessions.current(SessionKey("main", "heartbeat", "direct", "owner"))
    job = sessions.current(SessionKey("main", "telegram", "direct", "owner", "job:7"))

    found = STAGING[backend.name](backend.db).automated_sessions({owner.id, beat.id, job.id})

    assert found == {beat.id, job.id}
    assert STAGING[backend.name](backend.db).automated_sessions(set()) == set()


# ---- ForgetStore and LineageRepository ----------------------------------------------------


def test_erase_removes_the_session_and_leaves_a_tombstone(
    backend: Backend,
    forgetting: ForgetStore,
    lineage: LineageRepository,
    signals: RecallSignalStore,
) -> None:
    sessions = SESSIONS[backend.name](backend.db)
    session = sessions.current(SessionKey.owner_main())
    sessions.append(session.id, "user", {"text": "hello"})
    lineage.record(session.id, "daily_entry", path="memory/2026-01-10.md", detail={"lines": 1})
    lineage.record(session.id, "session_note", path="memory/2026-01-10-trip.md")
    signals.add([signal("memory/2026-01-10.md", 3, 3), signal("memory/2026-01-10.md", 8, 9)])
    signals.flush()
    rows = lineage.of_session(session.id)
    forgetting.erase(
        SessionErasure(
            session.id,
            str(session.key),
            T0,
            [{"kind": "daily_entry", "path": "memory/2026-01-10.md"}],
            signal_spans=[Span("memory/2026-01-10.md", 3, 3)],
            cut_lines={"memory/2026-01-10.md": frozenset({3})},
            lineage_ids=[rows[0].id],
            kept_notes=[KeptNote("memory/2026-01-10-other.md", "edited by hand")],
        )
    )
    assert sessions.get(session.id) is None
    assert lineage.tombstone(session.id) == (T0, str(session.key))
    assert lineage.is_forgotten(session.id)
    left = lineage.of_session(session.id)
    assert [r.path for r in left] == ["memory/2026-01-10-trip.md", "memory/2026-01-10-other.md"]
    assert lineage.tombstones().kept_notes == {
        "memory/2026-01-10-trip.md",
        "memory/2026-01-10-other.md",
    }
    moved = signals.overlapping("memory/2026-01-10.md", 1, 100)
    assert [(s.start_line, s.end_line) for s in moved] == [(7, 8)]


def test_a_second_erase_replaces_the_tombstone(
    forgetting: ForgetStore, lineage: LineageRepository
) -> None:
    forgetting.erase(SessionErasure("gone", None, T0, []))
    forgetting.erase(SessionErasure("gone", "main:cli:direct:owner", T0 + 1, []))
    assert lineage.tombstone("gone") == (T0 + 1, "main:cli:direct:owner")
    assert lineage.forgotten_sessions() == frozenset({"gone"})


def test_an_intent_made_in_a_project_fires_only_in_that_project(
    intents: IntentRepository,
) -> None:
    apollo = IntentScope("main", "telegram", "direct:owner", "owner", None, "apollo")
    anywhere = intents.create(new_intent(("hangzhou",), "any project"))
    only = intents.create(new_intent(("hangzhou",), "apollo only", scope=apollo))

    assert intents.create(new_intent(("hangzhou",), "apollo only", scope=apollo)) == only
    assert only.scope.project == "apollo" and anywhere.scope.project is None
    in_apollo = intents.matching_entries(apollo, ["hangzhou"], now=T0 + 1, limit=10)
    elsewhere = intents.matching_entries(SCOPE, ["hangzhou"], now=T0 + 1, limit=10)
    assert sorted(i for i, _ in in_apollo) == sorted([anywhere.id, only.id])
    assert [i for i, _ in elsewhere] == [anywhere.id]
