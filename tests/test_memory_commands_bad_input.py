"""`pinch memory …` from the outside, on the bad input a user can meet: each gets one clear
line saying what went wrong and what to do, exit status 1 where nothing could be done, and no
file or database is changed. Real commands (click's runner) over a real home, keyword-only."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from app.cli.main import main
from memory.files.workspace import MAX_FILE_BYTES
from tests.test_index import kill_mid_rebuild


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


def test_links_that_lead_nowhere_are_listed_with_remove_it_not_extra_paths(ws: Path) -> None:
    memory = ws / "memory"
    (memory / "loop-a.md").symlink_to("loop-b.md")
    (memory / "loop-b.md").symlink_to("loop-a.md")
    (memory / "gone.md").symlink_to("/nonexistent/notes.md")

    indexed = pinch("memory", "index")
    status = pinch("memory", "status")

    assert indexed.exit_code == 0, indexed.output
    loop = "skipped: a symbolic link that leads back to itself (a loop); remove it"
    assert f"memory/loop-a.md: {loop} (`rm memory/loop-a.md`)" in indexed.stderr
    assert f"problem         memory/loop-b.md: {loop} (`rm memory/loop-b.md`)" in status.stdout
    gone = "skipped: a symbolic link to /nonexistent/notes.md, which does not exist; remove it"
    assert f"problem         memory/gone.md: {gone} (`rm memory/gone.md`)" in status.stdout
    assert "extra_paths" not in status.stdout


def test_an_extra_path_that_is_a_link_loop_says_so(
    ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop = tmp_path / "notes"
    loop.symlink_to(loop)
    monkeypatch.setenv("PINCH_MEMORY__EXTRA_PATHS", f'["{loop}"]')

    status = pinch("memory", "status")

    assert status.exit_code == 0, status.output
    assert (
        f"problem         {loop}: skipped: {loop} is a symbolic link that leads back to itself "
        "(a loop); fix the path in [memory] extra_paths"
    ) in status.stdout


def test_an_unclosed_html_comment_is_indexed_and_reported_until_closed(ws: Path) -> None:
    # Search finds the words after a lone `<!--`, but the snippet (and any Markdown viewer)
    # hides them: the owner must learn why a hit shows nothing of their note.
    note = ws / "memory" / "2026-01-07.md"
    text = "# Birds\n<!-- a note to self -->\nSeen today:\n<!-- draft\nflamingo at the lake\n"
    note.write_text(text)

    indexed = pinch("memory", "index")
    found = pinch("memory", "search", "flamingo", "--preset", "keyword")
    status = pinch("memory", "status")

    reported = "memory/2026-01-07.md: line 4 opens an HTML comment (`<!--`) that is never closed"
    assert indexed.exit_code == 0, indexed.output
    assert reported in indexed.stderr and "close the comment with `-->`" in indexed.stderr
    assert "memory/2026-01-07.md" in found.stdout
    assert f"problem         {reported}" in status.stdout
    assert note.read_text() == text

    note.write_text(text.replace("<!-- draft\n", "<!-- draft -->\n"))
    pinch("memory", "index")
    fixed = pinch("memory", "status")
    snippet = pinch("memory", "search", "flamingo", "--preset", "keyword")

    assert "2026-01-07.md" not in fixed.stdout
    assert "flamingo at the lake" in snippet.stdout


def test_a_text_file_with_a_stray_nul_byte_is_refused_with_how_to_repair_it(ws: Path) -> None:
    note = ws / "memory" / "2026-01-02.md"
    note.write_bytes(b"- the zebra crossing moved\n" + b"x" * 9000 + b"\x00\n")

    indexed = pinch("memory", "index")
    got = pinch("memory", "get", "memory/2026-01-02.md")

    assert indexed.exit_code == 0, indexed.output
    assert "memory/2026-01-02.md: skipped: it holds NUL bytes" in indexed.stderr
    assert "tr -d" in indexed.stderr
    # Read as the index decides, by the whole file (not its first 8 kB: that printed the note)
    assert got.exit_code == 1
    assert got.stderr.startswith("memory/2026-01-02.md cannot be read: it holds NUL bytes")
    assert "zebra" not in got.stdout


def test_status_before_any_index_says_none_is_built_and_what_to_run(ws: Path) -> None:
    # Also what a first `pinch memory index` killed midway leaves (its generation never swapped in).
    status = pinch("memory", "status")

    assert status.exit_code == 0, status.output
    assert "indexed         0 files, 0 chunks (no index built yet)" in status.stdout
    assert "run `pinch memory index`" in status.stdout
    assert "None" not in status.stdout


def test_index_runs_when_its_lock_cannot_be_made(ws: Path, pinch_home: Path) -> None:
    # The lock only spares a second run the same work; the database keeps runs correct.
    (pinch_home / "state").write_text("not a folder\n")
    (ws / "memory" / "2026-01-09.md").write_text("- The heron came back.\n")

    indexed = pinch("memory", "index")
    found = pinch("memory", "search", "heron", "--preset", "keyword")

    assert indexed.exit_code == 0, indexed.output
    assert "memory/2026-01-09.md" in found.stdout


def test_a_stopped_rebuild_s_leftovers_are_shown_by_status_and_dropped_by_compact(
    ws: Path, pinch_home: Path
) -> None:
    for day in range(1, 13):
        (ws / "memory" / f"2026-03-{day:02d}.md").write_text(
            f"- Day {day}: walked the dog by the harbour and fixed bike number {day}.\n"
        )
    assert pinch("memory", "index").exit_code == 0
    before = pinch("memory", "search", "harbour bike", "--preset", "keyword").stdout
    kill_mid_rebuild(ws, pinch_home / "agents" / "main" / "agent.sqlite", pinch_home / "m")

    status = pinch("memory", "status")
    compacted = pinch("memory", "compact")
    after = pinch("memory", "status")

    # Its rows sat in the keyword index beside the active generation's, unseen by status.
    assert "leftovers       1 chunk a stopped rebuild left" in status.stdout
    assert "`pinch memory compact` drops them" in status.stdout
    assert compacted.exit_code == 0, compacted.output
    assert "Dropped 1 chunk a stopped rebuild left." in compacted.stderr
    assert "leftovers" not in after.stdout
    assert pinch("memory", "search", "harbour bike", "--preset", "keyword").stdout == before
