"""`pinch memory …` from the outside, on the bad input a user can meet: each gets one clear
line saying what went wrong and what to do, exit status 1 where nothing could be done, and no
file or database is changed. Real commands (click's runner) over a real home, keyword-only."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from app.cli.main import main
from memory.files.workspace import MAX_FILE_BYTES


def pinch(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


@pytest.fixture
def ws(pinch_home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PINCH_MEMORY__EMBEDDING__PROVIDER", "none")
    assert pinch("init").exit_code == 0
    return pinch_home / "workspace"


def test_memory_get_refuses_a_file_over_the_size_limit_with_the_index_s_advice(ws: Path) -> None:
    # A log dumped into memory/: reading it whole would cost several times its size in memory.
    line = b"all work and no play makes jack a dull boy\n"
    (ws / "memory" / "dump.md").write_bytes(line * (MAX_FILE_BYTES // len(line) + 10))

    got = pinch("memory", "get", "memory/dump.md", "--lines", "2")
    indexed = pinch("memory", "index")

    assert got.exit_code == 1
    assert "Traceback" not in got.output
    assert got.stderr.strip() == (
        "memory/dump.md cannot be read: 10.5 MB is over the 10 MB limit for one memory file; "
        "split it into smaller files."
    )
    assert "memory/dump.md: skipped: 10.5 MB is over the 10 MB limit" in indexed.stderr


def test_memory_get_reads_a_file_at_the_size_limit(ws: Path) -> None:
    (ws / "memory" / "full.md").write_bytes(b"- first line\n" + b"x" * (MAX_FILE_BYTES - 13))

    got = pinch("memory", "get", "memory/full.md", "--lines", "1")

    assert got.exit_code == 0, got.output
    assert got.stdout == "- first line\n"
