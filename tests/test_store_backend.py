"""Choosing the backend: `[store] backend = "postgres"` is refused at start while a store has no
PostgreSQL implementation (one line naming what is missing); the app stores are built from one
table on either backend; each agent has its own PostgreSQL schema; a server that cannot be
reached is advice, with the password never shown."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from psycopg.conninfo import make_conninfo

from app.cli.main import main
from app.config import ConfigError, load_settings
from app.store_backend import check_store_backend
from app.store_factory import build_app_stores, open_postgres_store
from memory.errors import DatabaseError
from memory.store.backends import IMPLEMENTATIONS, implementation, missing_stores
from memory.store.postgres.database import agent_schema, open_postgres
from memory.store.sessions import SessionKey
from tests.store_backends import Backend

DSN = "postgresql://pinch:hunter2-very-secret@127.0.0.1:1/pinch"


def test_every_store_has_both_implementations_and_each_name_resolves() -> None:
    assert missing_stores("sqlite") == []
    assert missing_stores("postgres") == []
    for name in IMPLEMENTATIONS:
        for backend in ("sqlite", "postgres"):
            found = implementation(name, backend)
            if found is None:
                continue
            assert isinstance(found, type), (name, backend)
            assert found.__module__.startswith("memory.store.")


def test_an_incomplete_backend_stops_pinch_with_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("app.store_backend.missing_stores", lambda backend: ["WebAuthStore"])
    monkeypatch.setattr("app.store_backend.WIRED_BACKENDS", ("sqlite",))
    monkeypatch.setenv("PINCH_STORE__BACKEND", "postgres")
    monkeypatch.setenv("PINCH_STORE__DSN", DSN)

    result = CliRunner().invoke(main, ["memory", "status"])

    assert result.exit_code == 1
    message = result.output.strip()
    assert len(message.splitlines()) == 1
    assert '[store] backend = "postgres" cannot run yet' in message
    assert "no postgres implementation of WebAuthStore" in message
    assert "still open the SQLite file" in message
    assert "hunter2" not in message


def test_a_backend_with_every_store_but_no_wiring_is_still_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("app.store_backend.missing_stores", lambda backend: [])
    monkeypatch.setattr("app.store_backend.WIRED_BACKENDS", ("sqlite",))
    monkeypatch.setenv("PINCH_STORE__BACKEND", "postgres")
    monkeypatch.setenv("PINCH_STORE__DSN", DSN)

    with pytest.raises(ConfigError, match="still open the SQLite file"):
        check_store_backend(load_settings())


def test_postgres_is_complete_and_wired_and_an_unreachable_server_is_one_line_of_advice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PINCH_STORE__BACKEND", "postgres")
    monkeypatch.setenv("PINCH_STORE__DSN", DSN)
    check_store_backend(load_settings())  # passes: every store, wired
    check_store_backend(load_settings(store={"backend": "sqlite"}))  # the default too

    result = CliRunner().invoke(main, ["jobs", "list"])

    assert result.exit_code == 1
    assert "Cannot use the PostgreSQL store" in result.output
    assert "PINCH_STORE__DSN" in result.output and "hunter2" not in result.output
    assert "Traceback" not in result.output


def test_every_app_store_is_built_from_the_table_on_both_backends(backend: Backend) -> None:
    stores = build_app_stores(backend.name, backend.db)
    key = SessionKey.owner_main()

    session = stores.sessions.current(key)
    queue = stores.queue()
    queued = queue.accept("cli", "1", str(key), "owner", '"hi"', 1.0)
    claimed = queue.claim_next(str(key))

    assert claimed is not None and [m.id for m in claimed.messages] == [queued]
    assert stores.queue(claimant="cli-1").claim_next(str(key)) is None
    assert stores.lineage.of_session(session.id) == [] and stores.intents.intents() == []
    assert stores.dream_runs.last_finished() is None and stores.jobs.jobs() == []


def test_each_agent_has_its_own_schema_and_nothing_crosses(pg_dsn: str) -> None:
    alice = open_postgres(pg_dsn, schema=agent_schema("alice"), min_size=0)
    bob = open_postgres(pg_dsn, schema=agent_schema("bob-2"), min_size=0)
    try:
        a = build_app_stores("postgres", alice)
        b = build_app_stores("postgres", bob)
        mine = a.sessions.current(SessionKey.owner_main("alice"))
        a.sessions.append(mine.id, "user", {"text": "only alice's"})

        assert b.sessions.all_sessions() == [] and b.sessions.get(mine.id) is None
        assert (alice.schema, bob.schema) == ("pinch_alice", "pinch_bob_2")
    finally:
        alice.close()
        bob.close()


def test_the_configured_store_opens_the_agents_schema(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PINCH_STORE__DSN", pg_dsn)
    db = open_postgres_store(load_settings(agent_id="home-office"))
    try:
        assert db.schema == "pinch_home_office"
        assert db.execute("SELECT current_schema()") == [("pinch_home_office",)]
    finally:
        db.close()


def test_an_unreachable_server_is_advice_without_the_password() -> None:
    with pytest.raises(DatabaseError) as err:
        open_postgres(DSN, timeout_s=2)

    message = str(err.value)
    assert "PINCH_STORE__DSN" in message and "hunter2" not in message
    assert "pinch:[redacted]@127.0.0.1" in message


def test_a_wrong_password_is_advice_without_the_password(pg_dsn: str) -> None:
    wrong = make_conninfo(pg_dsn, user="nobody_here", password="hunter2-very-secret")

    with pytest.raises(DatabaseError) as err:
        open_postgres(wrong, timeout_s=2)

    assert "hunter2" not in str(err.value)


def test_doctor_reports_the_incomplete_backend_as_its_config_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("app.store_backend.missing_stores", lambda backend: ["WebAuthStore"])
    monkeypatch.setenv("PINCH_STORE__BACKEND", "postgres")
    monkeypatch.setenv("PINCH_STORE__DSN", DSN)

    result = CliRunner().invoke(main, ["doctor", "--offline"])

    assert result.exit_code == 1
    assert "cannot run yet" in result.output and "hunter2" not in result.output
