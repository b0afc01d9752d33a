"""`pinch memory dream` as a user meets it: undo (and its dry run), a missing API key, a
DREAMS.md it cannot write, dreaming turned off, and what `pinch memory status` says about the
last dream. The real command (click's CliRunner) over a real home, the real anthropic SDK
talking to the scripted FakeModelServer."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from app.cli.main import main
from tests.fakes.model_server import FakeModelServer, text_reply

MEMORY = "# MEMORY.md\n\n- The owner lives in Lisbon.\n"
NOTE = "The owner prefers window seats on long flights."
ADDED = text_reply('{"action": "added"}')


def pinch(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


@pytest.fixture
def server() -> Iterator[FakeModelServer]:
    with FakeModelServer(api_key="test-key") as s:
        yield s


@pytest.fixture
def home(pinch_home: Path, monkeypatch: pytest.MonkeyPatch, server: FakeModelServer) -> Path:
    """A home whose one daily-log note passes a lenient gate after one search."""
    return dream_home(pinch_home, monkeypatch, server)


def dream_home(pinch_home: Path, monkeypatch: pytest.MonkeyPatch, server: FakeModelServer) -> Path:
    """`pinch init` in `pinch_home` talking to `server`, with a lenient Dreaming gate, MEMORY.md
    and today's log holding NOTE, which one search has recalled (shared with the nightly job's
    tests)."""
    monkeypatch.setenv("PINCH_MEMORY__EMBEDDING__PROVIDER", "none")
    monkeypatch.setenv("PINCH_AGENT__MODEL", "claude-test")
    monkeypatch.setenv("PINCH_AGENT__API_BASE", server.url)
    monkeypatch.setenv("PINCH_AGENT__MAX_RETRIES", "0")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    for name in ("MIN_SCORE", "MIN_QUERIES", "MIN_RECALLS", "MIN_DAYS"):
        monkeypatch.setenv(f"PINCH_DREAMING__{name}", "0" if name == "MIN_SCORE" else "1")
    assert pinch("init").exit_code == 0
    ws = pinch_home / "workspace"
    (ws / "MEMORY.md").write_text(MEMORY, encoding="utf-8")
    today = datetime.now().date().isoformat()
    (ws / "memory" / f"{today}.md").write_text(f"# {today}\n\n- {NOTE}\n", encoding="utf-8")
    assert pinch("memory", "search", "window seats").exit_code == 0
    return pinch_home


def memory_md(home: Path) -> str:
    return (home / "workspace" / "MEMORY.md").read_text(encoding="utf-8")


def dream_runs(home: Path) -> int:
    db = sqlite3.connect(home / "agents" / "main" / "agent.sqlite")
    try:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master")}
        if "dream_runs" not in tables:
            return 0
        return int(db.execute("SELECT count(*) FROM dream_runs").fetchone()[0])
    finally:
        db.close()


def dream_and_promote(home: Path, server: FakeModelServer) -> None:
    server.script(ADDED)
    result = pinch("memory", "dream")
    assert result.exit_code == 0, result.output
    assert NOTE in memory_md(home)


# ---- --undo -----------------------------------------------------------------------------------


def test_undo_dry_run_says_what_it_would_restore_and_changes_nothing(
    home: Path, server: FakeModelServer
) -> None:
    dream_and_promote(home, server)
    after_dream = memory_md(home)
    result = pinch("memory", "dream", "--undo", "--dry-run")
    assert result.exit_code == 0, result.output
    assert "memory/.dreams/MEMORY-" in result.output  # which preimage
    assert "dream #1" in result.output  # which dream
    assert "1 entry would go" in result.output and NOTE in result.output
    assert "0 entries would come back" in result.output
    assert memory_md(home) == after_dream
    undo = pinch("memory", "dream", "--undo")  # the dry run did not use the undo up
    assert undo.exit_code == 0 and "restored" in undo.output
    assert memory_md(home) == MEMORY


def test_undo_with_a_phase_is_a_usage_error(home: Path, server: FakeModelServer) -> None:
    dream_and_promote(home, server)
    result = pinch("memory", "dream", "--undo", "--phase", "light")
    assert result.exit_code == 2
    assert "--phase" in result.output
    assert NOTE in memory_md(home)  # nothing was undone


# ---- the model cannot be used -----------------------------------------------------------------


def test_a_dream_without_an_api_key_stops_before_anything_happens(
    home: Path, server: FakeModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    result = pinch("memory", "dream")
    assert result.exit_code == 1
    assert "ANTHROPIC_API_KEY is not set" in result.output
    assert "--dry-run" in result.output  # what still works without a key
    assert "skipped" not in result.output
    assert memory_md(home) == MEMORY
    assert not (home / "workspace" / "DREAMS.md").exists()
    assert dream_runs(home) == 0 and server.requests == []


def test_a_rejected_api_key_stops_the_dream_at_the_first_call(
    home: Path, server: FakeModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "wrong-key")
    result = pinch("memory", "dream")
    assert result.exit_code == 1
    assert "rejected the API key" in result.output
    assert memory_md(home) == MEMORY
    assert not (home / "workspace" / "DREAMS.md").exists()


def test_a_dry_run_needs_no_api_key(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    result = pinch("memory", "dream", "--dry-run")
    assert result.exit_code == 0, result.output
    assert "window seats" in result.output and "would be added" in result.output


# ---- files the dream cannot write -------------------------------------------------------------


def test_an_unreadable_dreams_md_stops_the_dream_before_memory_changes(
    home: Path, server: FakeModelServer
) -> None:
    diary = home / "workspace" / "DREAMS.md"
    diary.write_bytes(b"# DREAMS.md\n\ncaf\xe9\n")  # Latin-1, not UTF-8
    server.script(ADDED)
    result = pinch("memory", "dream")
    assert result.exit_code == 1
    assert memory_md(home) == MEMORY
    assert "DREAMS.md is not valid UTF-8" in result.output
    assert "nothing was written" in result.output.lower()
    assert diary.read_bytes() == b"# DREAMS.md\n\ncaf\xe9\n"
    assert not (home / "workspace" / "memory" / ".dreams").exists()  # no preimage either
    assert server.requests == []  # checked before any model call


# ---- dreaming turned off ----------------------------------------------------------------------


def test_a_dream_while_disabled_fails_and_says_how_to_enable(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PINCH_DREAMING__ENABLED", "false")
    result = pinch("memory", "dream")
    assert result.exit_code == 1
    assert "disabled" in result.output and "enabled = true" in result.output
    dry = pinch("memory", "dream", "--dry-run")
    assert dry.exit_code == 0 and "disabled" in dry.output
    assert memory_md(home) == MEMORY


def test_undo_still_works_after_dreaming_is_turned_off(
    home: Path, server: FakeModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    dream_and_promote(home, server)
    monkeypatch.setenv("PINCH_DREAMING__ENABLED", "false")
    result = pinch("memory", "dream", "--undo")
    assert result.exit_code == 0, result.output
    assert "restored" in result.output
    assert memory_md(home) == MEMORY


# ---- pinch memory status ----------------------------------------------------------------------


def test_status_shows_the_last_dream_and_what_it_promoted(
    home: Path, server: FakeModelServer
) -> None:
    before = pinch("memory", "status")
    assert "last dream      none yet" in before.output
    assert "nightly at 03:00" in before.output
    dream_and_promote(home, server)
    after = pinch("memory", "status")
    assert after.exit_code == 0, after.output
    assert "promoted 1 of 1 candidates" in after.output


def test_status_says_why_the_last_dream_promoted_nothing(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PINCH_DREAMING__MIN_RECALLS", "3")
    assert pinch("memory", "dream").exit_code == 0
    out = pinch("memory", "status").output
    assert "nothing promoted: none of 1 candidates passed the gate" in out
    assert "recalls < 3" in out


def test_status_says_when_dreaming_is_off(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PINCH_DREAMING__ENABLED", "false")
    out = pinch("memory", "status").output
    assert "dreaming        off ([dreaming] enabled = false)" in out
