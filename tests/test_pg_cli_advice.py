"""What a person meets trying PostgreSQL from the command line, on the run's real pgserver:
`pinch memory status` and `compact` on a PostgreSQL agent, and `pinch migrate` into a full
target, into a database where pgvector cannot be made, with an '@' in the DSN's password, and
stopped with Ctrl-C — each one line that says what to do, nothing half-written, no password."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner, Result
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from app.cli.main import main
from app.config import load_settings
from app.store_factory import open_postgres_store
from memory.store.agent_leases import GatewayProcess
from memory.store.postgres.agent_leases import PgAgentLeaseStore
from tests.pg_support import PgTestServer

SECRET = "hunter2-not-shown"
REPO = Path(__file__).resolve().parents[1]


def pinch(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


@pytest.fixture
def home(pinch_home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The default agent on SQLite with one note indexed (keyword search: no model to load)."""
    monkeypatch.setenv("PINCH_MEMORY__EMBEDDING__PROVIDER", "none")
    assert pinch("init").exit_code == 0
    note = pinch_home / "workspace" / "memory" / "kettle.md"
    note.write_text("# Kettle\n\nThe green kettle lives on the second shelf.\n" * 20)
    assert pinch("memory", "index").exit_code == 0
    return pinch_home


def _empty(dsn: str) -> str:
    """`dsn` without the agent schema its test database comes with, a password in it."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP SCHEMA pinch_main CASCADE")
    return make_conninfo(dsn, password=SECRET)


def _rows(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        found = conn.execute("SELECT count(*) FROM pinch_main.memory_chunks").fetchone()
    return int(found[0]) if found else 0


def test_status_and_compact_on_postgresql_show_the_schemas_size_and_the_notes(
    home: Path, pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    dsn = _empty(pg_dsn)
    assert pinch("migrate", "--to", "postgres", dsn).exit_code == 0
    monkeypatch.setenv("PINCH_STORE__BACKEND", "postgres")
    monkeypatch.setenv("PINCH_STORE__DSN", dsn)

    status = pinch("memory", "status")
    compact = pinch("memory", "compact")

    assert status.exit_code == 0, status.output
    size = next(line for line in status.output.splitlines() if line.startswith("database size"))
    assert " 0 kB" not in size and "of notes" in size  # was "0 kB for 0 kB of notes"
    assert compact.exit_code == 0, compact.output  # was a traceback (no `lock` on PostgreSQL)
    assert "PostgreSQL reclaims free space itself" in compact.output


def test_a_full_target_gets_the_advice_of_its_own_backend(
    home: Path, pg_dsn: str, tmp_path: Path
) -> None:
    dsn = _empty(pg_dsn)
    copy = tmp_path / "copy.sqlite"
    assert pinch("migrate", "--to", "postgres", dsn).exit_code == 0
    assert pinch("migrate", "--to", "sqlite", str(copy)).exit_code == 0

    to_postgres = pinch("migrate", "--to", "postgres", dsn)
    to_sqlite = pinch("migrate", "--to", "sqlite", str(copy))

    assert to_postgres.exit_code == 1 and "DROP SCHEMA pinch_main CASCADE" in to_postgres.output
    assert "PATH" not in to_postgres.output and SECRET not in to_postgres.output
    assert to_sqlite.exit_code == 1 and "Give a PATH that does not exist" in to_sqlite.output
    assert "DROP SCHEMA" not in to_sqlite.output
    assert len(to_sqlite.output.strip().splitlines()) == 1


def test_a_database_where_pgvector_cannot_be_made_says_what_to_run(
    home: Path, pg_server: PgTestServer
) -> None:
    name = f"novec_{os.getpid()}_{time.monotonic_ns()}"
    with psycopg.connect(pg_server.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {name} LOGIN")
        conn.execute(f"CREATE DATABASE {name} OWNER {name}")  # no vector, no superuser
    dsn = make_conninfo(pg_server.dsn, dbname=name, user=name, password=SECRET)

    result = pinch("migrate", "--to", "postgres", dsn)

    assert result.exit_code == 1
    assert "CREATE EXTENSION vector;" in result.output and SECRET not in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_a_raw_at_in_the_dsns_password_is_refused_and_none_of_it_shown(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dsn = "postgresql://pinch:hunter@2-not-shown@127.0.0.1:1/pinch"

    given = pinch("migrate", "--to", "postgres", dsn)
    monkeypatch.setenv("PINCH_STORE__BACKEND", "postgres")
    monkeypatch.setenv("PINCH_STORE__DSN", dsn)
    configured = pinch("memory", "status")

    for result in (given, configured):
        assert result.exit_code == 1 and "write each '@' in it as %40" in result.output
        assert "hunter" not in result.output and "not-shown" not in result.output


def test_ctrl_c_during_a_migrate_commits_nothing_and_a_second_run_copies(
    home: Path, pg_dsn: str
) -> None:
    dsn = _empty(pg_dsn)
    env = {**os.environ, "PINCH_STORE__DSN": dsn}
    # Hold the schema's lock (as a gateway starting on it would) so the copy is caught midway.
    with psycopg.connect(pg_dsn, autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(hashtextextended('pinch:pinch_main', 0))")
        child = subprocess.Popen(
            [sys.executable, "-m", "app.cli.main", "migrate", "--to", "postgres"],
            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        _wait_for_lock_wait(pg_dsn)
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=60)

    assert child.returncode == 1, out + err
    assert "Waiting for another process on the schema pinch_main" in err  # not silence
    assert err.strip().splitlines()[-1].startswith("Interrupted: nothing was committed")
    assert "Traceback" not in err and SECRET not in out + err
    assert pinch("migrate", "--to", "postgres", dsn).exit_code == 0  # safe to run again
    assert _rows(dsn) > 0


def _wait_for_lock_wait(dsn: str) -> None:
    """Until another session of this database waits for an advisory lock."""
    database = conninfo_to_dict(dsn)["dbname"]
    deadline = time.monotonic() + 60
    with psycopg.connect(dsn, autocommit=True) as conn:
        while time.monotonic() < deadline:
            waiting = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s "
                "AND wait_event_type = 'Lock' AND wait_event = 'advisory'",
                (database,),
            ).fetchone()
            if waiting and waiting[0]:
                return
            time.sleep(0.1)
    raise AssertionError("the migrate never reached the schema's lock")


def test_a_new_agent_never_inherits_a_removed_ones_kept_schema(
    home: Path, pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PINCH_STORE__BACKEND", "postgres")
    monkeypatch.setenv("PINCH_STORE__DSN", pg_dsn)
    for args in (["agents", "add", "carol"], ["agents", "add", "dave"]):
        assert pinch(*args).exit_code == 0
    note = home / "agents" / "carol" / "workspace" / "memory" / "vault.md"
    note.write_text("The vault code is 7741.\n")
    assert pinch("memory", "index", "--agent", "carol").exit_code == 0
    for name in ("carol", "dave"):
        assert pinch("agents", "remove", name, "--yes").exit_code == 0

    again = pinch("agents", "add", "carol")
    unused = pinch("agents", "add", "dave")  # its schema holds nothing: nothing to inherit

    assert again.exit_code == 1 and len(again.output.strip().splitlines()) == 1
    assert "DROP SCHEMA pinch_carol CASCADE" in again.output
    assert f"mv {home / 'removed' / 'carol-'}" in again.output
    assert not (home / "agents" / "carol").exists()
    assert unused.exit_code == 0, unused.output
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("DROP SCHEMA pinch_carol CASCADE")
    assert pinch("agents", "add", "carol").exit_code == 0
    found = pinch("memory", "search", "--agent", "carol", "vault code")
    assert "7741" not in found.output


def test_init_says_it_created_the_schema_only_when_it_did(
    pinch_home: Path, pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PINCH_STORE__BACKEND", "postgres")
    monkeypatch.setenv("PINCH_STORE__DSN", _empty(pg_dsn))

    first = pinch("init")
    second = pinch("init")

    assert first.exit_code == 0 and "created schema pinch_main in" in first.output
    assert second.exit_code == 0, second.output
    assert second.output.strip() == f"Already set up in {pinch_home}; nothing changed."


def test_a_folder_given_as_the_sqlite_path_is_named_a_folder(home: Path, tmp_path: Path) -> None:
    folder = tmp_path / "copies"
    folder.mkdir()

    result = pinch("migrate", "--to", "sqlite", str(folder))

    assert result.exit_code == 1 and len(result.output.strip().splitlines()) == 1
    assert f"{folder} is a folder: give the PATH of a new file" in result.output
    assert not list(folder.iterdir())


@pytest.mark.parametrize("age_s", [0, 3600])
def test_migrate_names_a_gateway_on_another_machine_holding_the_agents_lease(
    home: Path, pg_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, age_s: int
) -> None:
    dsn = _empty(pg_dsn)
    assert pinch("migrate", "--to", "postgres", dsn).exit_code == 0
    monkeypatch.setenv("PINCH_STORE__BACKEND", "postgres")
    monkeypatch.setenv("PINCH_STORE__DSN", dsn)
    db = open_postgres_store(load_settings())
    try:  # a gateway elsewhere took the lease `age_s` ago and (age 0) still renews it
        other = GatewayProcess("gw-elsewhere", "other-host", 4242)
        PgAgentLeaseStore(db).take(other, time.time() - age_s, 20.0, alive=lambda g: True)
    finally:
        db.close()

    result = pinch("migrate", "--to", "sqlite", str(tmp_path / "copy.sqlite"))

    assert result.exit_code == 0, result.output
    named = "A gateway (host other-host, pid 4242) holds agent 'main''s lease" in result.output
    assert named is (age_s == 0)  # a lease nobody renewed for an hour serves no one


def test_remove_is_refused_while_a_gateway_on_another_machine_holds_the_lease(
    home: Path, pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PINCH_STORE__BACKEND", "postgres")
    monkeypatch.setenv("PINCH_STORE__DSN", pg_dsn)
    assert pinch("agents", "add", "carol").exit_code == 0
    db = open_postgres_store(load_settings(agent_id="carol"))
    try:
        other = GatewayProcess("gw-elsewhere", "other-host", 4242)
        PgAgentLeaseStore(db).take(other, time.time(), 20.0, alive=lambda g: True)
    finally:
        db.close()

    result = pinch("agents", "remove", "carol", "--yes")

    assert result.exit_code == 1
    assert "A gateway is serving 'carol' (host other-host, pid 4242)" in result.output
    assert (home / "agents" / "carol" / "config.toml").is_file()


def test_a_dsn_naming_the_agents_own_database_another_way_is_not_a_target(
    home: Path, pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    dsn = _empty(pg_dsn)
    assert pinch("migrate", "--to", "postgres", dsn).exit_code == 0
    monkeypatch.setenv("PINCH_STORE__BACKEND", "postgres")
    monkeypatch.setenv("PINCH_STORE__DSN", dsn)
    before = _rows(dsn)
    same = make_conninfo(dsn, application_name="another-spelling")  # one database, two DSNs

    result = pinch("migrate", "--to", "postgres", same)

    assert result.exit_code == 1 and "already in that PostgreSQL database" in result.output
    assert "DROP SCHEMA" not in result.output  # which would drop the agent's own data
    assert _rows(dsn) == before > 0
