"""The `pinch` commands on PostgreSQL (`[store] backend = "postgres"`), run for real against the
scripted model server and the run's pgserver: `pinch init`, `pinch chat`, `pinch memory index`
and `search`, `pinch jobs`, `pinch memory dream`, `pinch memory forget`, `pinch intents`,
`pinch pairing`, `pinch web login`, `pinch backup` and `pinch restore` — each reads and writes
the agent's schema, and none ever makes or opens the SQLite file."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from app.automations.jobs import Jobs, NewJob, Schedule, Target
from app.cli.main import main
from app.config import Settings, load_settings
from app.store_factory import build_app_stores, open_postgres_store
from app.web.auth import digest
from memory.store.backends import store_for
from memory.store.sessions import SessionKey
from tests.fakes.model_server import FakeModelServer, text_reply
from tests.pg_support import PgTestServer

API_KEY = "test-key"


@pytest.fixture
def server() -> Iterator[FakeModelServer]:
    with FakeModelServer(api_key=API_KEY) as fake:
        yield fake


@pytest.fixture
def pg_home(
    pinch_home: Path, pg_dsn: str, server: FakeModelServer, monkeypatch: pytest.MonkeyPatch
) -> Settings:
    """An initialised home whose agent lives in PostgreSQL, the model the scripted server."""
    for name in list(os.environ):
        if name.startswith("ANTHROPIC_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
    monkeypatch.setenv("PINCH_AGENT__MODEL", "claude-test")
    monkeypatch.setenv("PINCH_AGENT__API_BASE", server.url)
    monkeypatch.setenv("PINCH_AGENT__MAX_RETRIES", "0")
    monkeypatch.setenv("PINCH_MEMORY__EMBEDDING__PROVIDER", "none")
    monkeypatch.setenv("PINCH_STORE__BACKEND", "postgres")
    monkeypatch.setenv("PINCH_STORE__DSN", pg_dsn)
    done = pinch("init")
    assert "Pinch is set up" in done.output  # the schema came with the test's database
    return load_settings()


def pinch(*args: str, input: str | None = None, ok: bool = True) -> Result:
    result = CliRunner().invoke(main, list(args), input=input)
    if ok:
        assert result.exit_code == 0, result.output
    return result


def no_sqlite(settings: Settings) -> None:
    assert not settings.database_path.exists()
    assert not list(settings.home.rglob("*.sqlite*"))


def test_chat_answers_and_keeps_the_transcript_in_postgres(
    pg_home: Settings, server: FakeModelServer
) -> None:
    server.script(text_reply("The kettle is green."), text_reply("Noted."))

    done = pinch("chat", input="what colour is the kettle?\nthanks\n")

    assert "The kettle is green." in done.output and "Noted." in done.output
    db = open_postgres_store(pg_home)
    try:
        stores = build_app_stores("postgres", db)
        session = stores.sessions.current(SessionKey.owner_main("main"))
        texts = [str(e.content) for e in stores.sessions.events(session.id)]
    finally:
        db.close()
    assert any("what colour is the kettle?" in t for t in texts)
    assert any("The kettle is green." in t for t in texts)
    no_sqlite(pg_home)


def test_memory_index_search_status_and_forget_run_on_postgres(
    pg_home: Settings, server: FakeModelServer
) -> None:
    server.script(text_reply("Noted."))
    pinch("chat", input="the dog chased a zeppelin shadow\n")
    note = pg_home.workspace_dir / "memory" / "2026-01-02.md"
    note.write_text("# Jan 2\n\nThe dog chased a zeppelin shadow.\n")

    pinch("memory", "index")
    found = pinch("memory", "search", "zeppelin").output
    status = pinch("memory", "status").output
    forgot = pinch("memory", "forget", "--session", "main:cli:direct:owner").output

    assert "memory/2026-01-02.md" in found
    assert "pinch_main" in status and "PostgreSQL 16" in status
    assert "Forgot session" in forgot and "transcript_events ×2" in forgot
    db = open_postgres_store(pg_home)
    try:
        stores = build_app_stores("postgres", db)
        assert stores.lineage.tombstones()  # it stays forgotten
    finally:
        db.close()
    no_sqlite(pg_home)


def test_jobs_dream_intents_pairing_and_web_login_run_on_postgres(pg_home: Settings) -> None:
    db = open_postgres_store(pg_home)
    try:
        now = datetime.now(UTC)
        Jobs(build_app_stores("postgres", db).jobs).create(
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
    finally:
        db.close()

    listed = pinch("jobs", "list").output
    shown = pinch("jobs", "show", "1").output
    dreamt = pinch("memory", "dream", "--dry-run").output
    login = pinch("web", "login").output
    intents = pinch("intents", "list").output
    pairing = pinch("pairing", "list").output

    assert "water the plants" in listed and "water the plants" in shown
    assert "dry run: nothing written" in dreamt
    assert intents.strip() and pairing.strip()
    token = login.split("token=", 1)[1].split()[0]
    db = open_postgres_store(pg_home)
    try:  # the one-time token is in the agent's schema, and redeems once
        web = store_for("WebAuthStore", db)
        assert web.redeem_token(digest(token), time.time())
        assert not web.redeem_token(digest(token), time.time())
    finally:
        db.close()
    no_sqlite(pg_home)


def test_backup_and_restore_commands_on_postgres(
    pg_home: Settings,
    pg_server: PgTestServer,
    tmp_path: Path,
    server: FakeModelServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server.script(text_reply("Hello."))
    pinch("chat", input="hello\n")
    archive = tmp_path / "b.tar.gz"

    pinch("backup", "--to", str(archive))

    assert archive.exists()
    monkeypatch.setenv("PINCH_HOME", str(tmp_path / "restored"))
    monkeypatch.setenv("PINCH_STORE__DSN", pg_server.new_database())
    restored = pinch("restore", str(archive)).output
    assert "loaded into the PostgreSQL schema pinch_main" in restored
    settings = load_settings()
    db = open_postgres_store(settings)
    try:
        stores = build_app_stores("postgres", db)
        session = stores.sessions.current(SessionKey.owner_main("main"))
        assert any("hello" in str(e.content) for e in stores.sessions.events(session.id))
    finally:
        db.close()
    no_sqlite(settings)


def test_agents_list_shows_the_schema_its_server_and_its_size_never_the_password(
    pg_home: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    pinch("memory", "index")
    pinch("agents", "add", "bob")
    agents = json.loads(pinch("agents", "list", "--json").output)["agents"]
    listed = next(a for a in agents if a["name"] == "main")

    assert listed["database"].startswith("postgres schema pinch_main at ")
    assert listed["database_bytes"] > 100_000 and "database_problem" not in listed
    assert "MB" in pinch("agents", "list").output or "kB" in pinch("agents", "list").output

    # A server that cannot be reached: said so for each agent, with the password hidden, and
    # asked once, not once per agent.
    monkeypatch.setenv("PINCH_STORE__DSN", "postgresql://pinch:s3cret@127.0.0.1:9/pinch")
    started = time.monotonic()
    text = pinch("agents", "list").output
    assert text.count("cannot ask postgresql://pinch:[redacted]@127.0.0.1:9/pinch") == 2
    assert "s3cret" not in text and time.monotonic() - started < 10
    no_sqlite(pg_home)
