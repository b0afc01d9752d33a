"""`pinch migrate --to sqlite` of an agent whose data PostgreSQL's own stores wrote: read back
through the SQLite stores, every session, transcript event, job, intent, trigger and fire is what
the PostgreSQL stores return."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from app.automations.jobs import Jobs, NewJob, Schedule, Target
from memory.store.db import open_database
from memory.store.intents_store import IntentScope, NewIntent, SqliteIntentRepository
from memory.store.jobs_store import SqliteJobStore
from memory.store.postgres.database import PgDatabase
from memory.store.postgres.intents import PgIntentRepository
from memory.store.postgres.jobs import PgJobStore
from memory.store.postgres.sessions import PgSessionStore
from memory.store.sessions import SessionKey, SqliteSessionStore
from tests.backup_support import pinch


def test_an_agent_written_on_postgresql_reads_the_same_from_its_sqlite_copy(
    pinch_home: Path,
    pg_database: PgDatabase,
    pg_dsn: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sessions, jobs, intents = (
        PgSessionStore(pg_database),
        PgJobStore(pg_database),
        PgIntentRepository(pg_database),
    )
    key = SessionKey.owner_main("main")
    first = sessions.current(key)
    for i in range(3):
        sessions.append(first.id, "user", {"text": f"message {i} 杭州"})
    sessions.reset(key, project="garden")
    sessions.append(sessions.current(key).id, "assistant", {"text": "a new start"})
    now = datetime(2026, 12, 1, 8, 30, 15, 123456, tzinfo=UTC)
    Jobs(jobs).create(
        NewJob(
            Schedule("cron", "0 9 * * *", "Europe/Berlin", now),
            "reminder",
            "water the plants",
            Target("telegram", "111"),
            str(key),
            owner_private=True,
        ),
        now,
    )
    scope = IntentScope.of(key, "owner")
    made = intents.create(
        NewIntent(scope, ("hangzhou ticket",), (("hangzhou", "ticket"),), "confirm", "owner",
                  3600.0, 3, time.time(), time.time() + 86400)
    )  # fmt: skip
    intents.fire_all([made.id], now=time.time(), session_key=str(key), excerpt="the ticket")
    intents.create(
        NewIntent(scope, ("museum", "蓝色 杯子"), (("museum",), ("蓝色", "杯子")), "remind",
                  "owner", 3600.0, 3, time.time(), time.time() + 86400)
    )  # fmt: skip

    monkeypatch.setenv("PINCH_STORE__BACKEND", "postgres")
    monkeypatch.setenv("PINCH_STORE__DSN", pg_dsn)
    copy = tmp_path / "copy.sqlite"
    pinch("migrate", "--to", "sqlite", str(copy))

    db = open_database(copy, vector_backend="numpy")
    try:
        s_sessions, s_jobs = SqliteSessionStore(db), SqliteJobStore(db)
        s_intents = SqliteIntentRepository(db)
        assert s_sessions.history(key) == sessions.history(key)  # order kept
        assert s_sessions.current(key) == sessions.current(key)
        for session in sessions.history(key):
            assert s_sessions.events(session.id) == sessions.events(session.id)
        assert s_jobs.jobs() == jobs.jobs() != []
        assert s_intents.intents(include_ended=True) == intents.intents(include_ended=True)
        assert s_intents.fires(made.id) == intents.fires(made.id) != []
        for terms in (["museum"], ["杯子"]):
            found = s_intents.matching_entries(scope, terms, now=time.time(), limit=5)
            assert found == intents.matching_entries(scope, terms, now=time.time(), limit=5)
            assert found
    finally:
        db.close()
