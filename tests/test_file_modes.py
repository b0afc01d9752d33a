"""Everything Pinch creates is private to its owner: folders 0700, files 0600, under any umask.

Each test runs under umask 022 (the usual default, which would give 0755 / 0644).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from app.cli.main import main
from memory.files.writes import WorkspaceWriter
from memory.store.db import open_database


@pytest.fixture(autouse=True)
def umask_022() -> Iterator[None]:
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def init() -> str:
    result = CliRunner().invoke(main, ["init"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_init_makes_the_home_and_its_folders_0700(pinch_home: Path) -> None:
    init()
    for folder in (pinch_home, pinch_home / "workspace", pinch_home / "workspace" / "memory"):
        assert mode(folder) == 0o700, folder
    assert mode(pinch_home / "agents") == 0o700
    assert mode(pinch_home / "agents" / "main") == 0o700


def test_init_makes_config_memory_files_and_database_0600(pinch_home: Path) -> None:
    init()
    ws = pinch_home / "workspace"
    for path in (
        pinch_home / "config.toml",
        ws / "USER.md",
        ws / "MEMORY.md",
        ws / "SOUL.md",
        pinch_home / "agents" / "main" / "agent.sqlite",
    ):
        assert mode(path) == 0o600, path


def test_the_database_journal_files_are_0600(tmp_path: Path) -> None:
    db = open_database(tmp_path / "agent.sqlite")
    try:
        db.execute("CREATE TABLE note(text)")
        db.execute("INSERT INTO note VALUES ('a chat secret')")
        wal, shm = Path(f"{db.path}-wal"), Path(f"{db.path}-shm")
        assert wal.exists() and shm.exists()
        assert (mode(db.path), mode(wal), mode(shm)) == (0o600, 0o600, 0o600)
    finally:
        db.close()


def test_opening_a_database_tightens_a_too_open_file(tmp_path: Path) -> None:
    path = tmp_path / "agent.sqlite"
    open_database(path).close()
    os.chmod(path, 0o644)
    open_database(path).close()
    assert mode(path) == 0o600


def test_init_tightens_a_too_open_existing_home_and_says_so(pinch_home: Path) -> None:
    init()
    os.chmod(pinch_home, 0o755)
    output = init()
    assert mode(pinch_home) == 0o700
    assert "tightened" in output and str(pinch_home) in output


def test_init_tightens_a_too_open_workspace_outside_the_home_and_says_so(
    pinch_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workspace = tmp_path / "notes-vault"  # an existing folder of the owner's, not in the home
    workspace.mkdir(mode=0o755)
    monkeypatch.setenv("PINCH_WORKSPACE", str(workspace))

    output = init()

    assert mode(workspace) == 0o700
    assert f"tightened {workspace}" in output


def test_memory_writes_create_private_files_and_folders(tmp_path: Path) -> None:
    ws = tmp_path / "workspace"
    ws.mkdir(mode=0o700)
    writer = WorkspaceWriter(ws)
    rel = writer.append_daily_log("a note", now=datetime(2026, 1, 10, 9, 0))
    writer.write_file("memory/projects/new.md", "# New\n")
    assert mode(ws / rel) == 0o600
    assert mode(ws / "memory") == 0o700 and mode(ws / "memory" / "projects") == 0o700
    assert mode(ws / "memory" / "projects" / "new.md") == 0o600


def test_the_command_line_keeps_files_it_creates_private(pinch_home: Path) -> None:
    """Files made by libraries under the CLI (the chat history, SQLite) get 0600 too."""
    from app.cli import main as cli

    seen: list[int] = []

    @cli.main.command("probe-umask")
    def probe() -> None:
        path = pinch_home / "probe"
        pinch_home.mkdir(parents=True, exist_ok=True)
        path.write_text("x")
        seen.append(mode(path))

    try:
        CliRunner().invoke(cli.main, ["probe-umask"], catch_exceptions=False)
    finally:
        cli.main.commands.pop("probe-umask")
    assert seen == [0o600]
    assert os.umask(0o022) == 0o022  # restored after the command


@pytest.mark.parametrize("command", ["init", "agents add"])
def test_a_folder_every_user_may_write_to_is_refused_not_closed(
    pinch_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    shared = tmp_path / "shared-tmp"  # like /tmp: sticky and world-writable
    shared.mkdir()
    os.chmod(shared, 0o1777)
    monkeypatch.setenv("PINCH_MEMORY__EMBEDDING__PROVIDER", "none")
    if command == "init":
        monkeypatch.setenv("PINCH_WORKSPACE", str(shared))
        result = CliRunner().invoke(main, ["init"])
    else:
        assert CliRunner().invoke(main, ["init"]).exit_code == 0
        result = CliRunner().invoke(main, ["agents", "add", "ivy", "--workspace", str(shared)])

    assert result.exit_code == 1 and "every user may write to (like /tmp)" in result.output
    assert mode(shared) == 0o1777  # it was chmod-ed to 0700: /tmp closed to every other user
    assert not list(shared.iterdir())
    assert not (pinch_home / "agents" / "ivy" / "config.toml").exists()
