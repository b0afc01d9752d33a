"""Nothing Pinch prints can drive the terminal: escape sequences and control characters in memory
files or model replies are stripped (common.printable.printable) from search output and piped
replies."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from app.cli.main import main
from common.printable import printable
from tests.fakes.model_server import FakeModelServer, text_reply

HOSTILE = "\x1b[2J\x1b]0;owned\x07\x1b[31mred\x1b[0m \x9b1m\u202eevil\x08\x00\r"


def test_printable_strips_escape_sequences_and_control_characters() -> None:
    assert printable(f"before {HOSTILE} after") == "before red evil after"


def test_printable_keeps_newlines_tabs_and_ordinary_unicode() -> None:
    text = "Zürich\tcafé\n東京 — “quotes” ✓\n"

    assert printable(text) == text


def test_an_escape_split_across_stream_pieces_cannot_survive() -> None:
    pieces = ["colour \x1b[3", "1m on"]

    assert "\x1b" not in "".join(printable(p) for p in pieces)


@pytest.fixture
def home(pinch_home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PINCH_MEMORY__EMBEDDING__PROVIDER", "none")
    assert CliRunner().invoke(main, ["init"]).exit_code == 0
    return pinch_home


def test_memory_search_prints_no_escape_sequences(home: Path) -> None:
    notes = home / "workspace" / "memory" / "2026-01-10.md"
    hostile = HOSTILE.replace("\x00", "")  # a NUL would make the file binary, not indexed
    notes.write_text(f"# 2026-01-10\n\n- Group message: dentist {hostile} on Tuesday.\n")

    assert CliRunner().invoke(main, ["memory", "index"]).exit_code == 0
    done = CliRunner().invoke(main, ["memory", "search", "dentist", "--preset", "keyword"])

    assert done.exit_code == 0, done.output
    assert "dentist" in done.stdout
    assert not any(ch in done.stdout for ch in "\x1b\x9b\x07\x08\x00\r\u202e")


@pytest.fixture
def server() -> Iterator[FakeModelServer]:
    with FakeModelServer() as fake:
        yield fake


def test_piped_chat_replies_carry_no_escape_sequences(
    home: Path, server: FakeModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in list(os.environ):
        if name.startswith("ANTHROPIC_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    monkeypatch.setenv("PINCH_AGENT__MODEL", "claude-test")
    monkeypatch.setenv("PINCH_AGENT__API_BASE", server.url)
    server.script(text_reply(f"Here: {HOSTILE} done."), text_reply(f"Streamed {HOSTILE}"))

    done = CliRunner().invoke(main, ["chat"], input="hello\nagain\n")

    assert done.exit_code == 0, done.output
    assert "Here: red evil done." in done.stdout
    assert not any(ch in done.stdout for ch in "\x1b\x9b\x07\x08\x00\r\u202e")


def test_memory_get_prints_no_escape_sequences(home: Path) -> None:
    notes = home / "workspace" / "memory" / "2026-01-10.md"
    hostile = HOSTILE.replace("\x00", "")  # a NUL would make the file binary, not readable
    notes.write_text(f"# 2026-01-10\n\n- Group message: dentist {hostile} on Tuesday.\n")

    done = CliRunner().invoke(main, ["memory", "get", "memory/2026-01-10.md"])

    assert done.exit_code == 0, done.output
    assert "dentist red evil on Tuesday." in done.stdout
    assert not any(ch in done.stdout for ch in "\x1b\x9b\x07\x08\x00\r\u202e")
