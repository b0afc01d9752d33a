"""Backups of an agent on PostgreSQL (`[store] backend = "postgres"`): the archive holds the
agent schema's snapshot (`agents/<id>/agent.pgdump`, one REPEATABLE READ transaction), the
manifest says what it is and counts it, no SQLite file is opened or made, and a restore loads
it into an empty agent schema of the configured database — or keeps it as a file, saying so,
when the target runs on SQLite."""

from __future__ import annotations

import json
import tarfile
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from app.automations.jobs import Jobs, NewJob, Schedule, Target
from app.backup.archive import make_backup
from app.backup.restore import RestoreError, restore_backup
from app.config import Settings, load_settings
from app.store_factory import build_app_stores, open_postgres_store
from memory.lifecycle.intents import IntentStore
from memory.store.intents_store import IntentScope
from memory.store.sessions import SessionKey
from tests.pg_support import PgTestServer


def pg_settings(home: Path, dsn: str, monkeypatch: pytest.MonkeyPatch) -> Settings:
    monkeypatch.setenv("PINCH_HOME", str(home))
    monkeypatch.setenv("PINCH_STORE__BACKEND", "postgres")
    monkeypatch.setenv("PINCH_STORE__DSN", dsn)
    settings = load_settings()
    (settings.workspace_dir / "memory").mkdir(parents=True)
    (settings.workspace_dir / "MEMORY.md").write_text("# Memory\n\nThe kettle is green.\n")
    return settings


def seed(settings: Settings, events: int = 5) -> None:
    db = open_postgres_store(settings)
    try:
        stores = build_app_stores("postgres", db)
        session = stores.sessions.current(SessionKey.owner_main("main"))
        for i in range(events):
            stores.sessions.append(session.id, "user", {"text": f"message {i} about the kettle"})
        now = datetime.now(UTC)
        Jobs(stores.jobs).create(
            NewJob(
                Schedule("cron", "0 9 * * *", "UTC", now),
                "reminder",
                "water the plants",
                Target("telegram", "111"),
                "main:telegram:direct:owner",
                owner_private=True,
            ),
            now,
        )
        IntentStore(db, stores.intents).create(
            IntentScope.of(SessionKey.owner_main("main"), "owner"),
            ["hangzhou"],
            "confirm the ticket",
            now=time.time(),
        )
        stores.pairing.create_request(
            "telegram", "500", "Pat", "ABCD2345", time.time(), ttl_s=3600, max_pending=3
        )
        stores.pairing.decide("ABCD2345", approve=True, now=time.time())
    finally:
        db.close()


def test_a_postgres_agent_is_backed_up_and_restored_into_an_empty_schema(
    tmp_path: Path, pg_server: PgTestServer, pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = pg_settings(tmp_path / "home", pg_dsn, monkeypatch)
    seed(settings)
    result = make_backup(settings, to=tmp_path / "backup.tar.gz")
    assert not settings.database_path.exists()  # the SQLite file was never made
    with tarfile.open(result.path) as tar:
        names = tar.getnames()
        manifest = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
    assert "agents/main/agent.pgdump" in names
    entry = manifest["databases"]["agents/main/agent.pgdump"]
    assert entry["engine"].startswith("postgresql 16")
    assert entry["counts"]["transcript_events"] == 5
    assert entry["counts"]["jobs"] == entry["counts"]["intents"] == 1
    assert entry["counts"]["pairing_approvals"] == 1
    assert {"memory", "gateway", "automations", "intents", "web"} <= set(entry["migrations"])

    target_dsn = pg_server.new_database()
    new = pg_settings(tmp_path / "restored", target_dsn, monkeypatch)
    new.workspace_dir.joinpath("MEMORY.md").unlink()  # an empty home to restore into
    new.workspace_dir.joinpath("memory").rmdir()
    new.workspace_dir.rmdir()
    new.home.rmdir()
    report = restore_backup(new, result.path)
    assert report.restored["transcript_events"] == 5
    assert any("loaded into the PostgreSQL schema pinch_main" in n for n in report.notes)
    db = open_postgres_store(new)
    try:
        stores = build_app_stores("postgres", db)
        session = stores.sessions.current(SessionKey.owner_main("main"))
        assert [e.content["text"] for e in stores.sessions.events(session.id)] == [
            f"message {i} about the kettle" for i in range(5)
        ]
        assert stores.pairing.is_approved("telegram", "500")
        assert [j.id for j in stores.jobs.jobs()] == [1]
    finally:
        db.close()
    assert (new.workspace_dir / "MEMORY.md").read_text() == "# Memory\n\nThe kettle is green.\n"


def test_a_postgres_snapshot_is_not_loaded_over_an_agent_that_has_data(
    tmp_path: Path, pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = pg_settings(tmp_path / "home", pg_dsn, monkeypatch)
    seed(settings)
    archive = make_backup(settings, to=tmp_path / "backup.tar.gz").path
    new_home = tmp_path / "restored"
    monkeypatch.setenv("PINCH_HOME", str(new_home))  # same database: it holds the agent
    with pytest.raises(RestoreError, match="already holds data"):
        restore_backup(load_settings(), archive)
    assert not new_home.exists()  # nothing restored
