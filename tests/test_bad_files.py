"""One bad file never stops the others: a file that cannot be read, vanishes mid-sync, has a
name that is not UTF-8, or is a FIFO is recorded with what to do, and everything else is
indexed; `pinch memory status` lists it; search and chat work.

Tests run as root, so "permission denied" is injected at the open call; the FIFO, the
non-UTF-8 name and the vanished file are real.
"""

from __future__ import annotations

import errno
import os
import threading
import unicodedata
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import memory.index.sync
from app.cli.main import main
from memory.files.workspace import read_memory_lines
from memory.index.index import MemoryIndex
from memory.index.sync import SyncReport
from tests.conftest import IndexFactory, WorkspaceFactory
from tests.fakes.model_server import FakeModelServer, text_reply

FILES = {
    "MEMORY.md": "# Memory\n\n- The cat is called Tom.\n",
    "USER.md": "# User\n\n- Anna prefers tea.\n",
    "memory/2026-01-10.md": "# 2026-01-10\n\nWent hiking in the Alps.\n",
}
API_KEY = "test-key"


def sync_within(idx: MemoryIndex, seconds: float = 20) -> SyncReport:
    """Sync in a thread and fail (instead of hanging the suite) if it blocks."""
    out: list[SyncReport | BaseException] = []
    done = threading.Event()

    def run() -> None:
        try:
            out.append(idx.sync())
        except BaseException as exc:
            out.append(exc)
        done.set()

    threading.Thread(target=run, daemon=True).start()
    assert done.wait(seconds), "the sync blocked"
    if isinstance(out[0], BaseException):
        raise out[0]
    return out[0]


def paths(hits: Any) -> set[str]:
    return {h.path for h in hits}


def make_bad_name(ws: Path) -> None:
    """memory/caf<0xE9>.md: a Latin-1 name, which is not valid UTF-8."""
    name = os.fsencode(ws / "memory") + b"/caf\xe9.md"
    with open(name, "wb") as f:
        f.write(b"Espresso at the corner.\n")


BAD_NAME = "memory/caf\\xe9.md"  # how it is stored and shown


# ---- the index ----------------------------------------------------------------------------


def test_a_fifo_named_md_never_blocks_and_is_reported(
    make_workspace: WorkspaceFactory, make_index: IndexFactory
) -> None:
    ws = make_workspace(FILES)
    os.mkfifo(ws / "memory" / "pipe.md")
    idx = make_index(ws)

    report = sync_within(idx)

    assert "not a regular file" in report.problems["memory/pipe.md"]
    assert sorted(report.files_indexed) == sorted(FILES)
    assert "not a regular file" in idx.status().problems["memory/pipe.md"]
    assert paths(idx.search("hiking", preset="keyword")) == {"memory/2026-01-10.md"}


def test_deep_status_does_not_block_on_a_fifo(
    make_workspace: WorkspaceFactory, make_index: IndexFactory
) -> None:
    ws = make_workspace(FILES)
    idx = make_index(ws)
    sync_within(idx)
    os.mkfifo(ws / "memory" / "pipe.md")
    result: list[list[str] | None] = []
    worker = threading.Thread(target=lambda: result.append(idx.status(deep=True).dirty_files))
    worker.start()
    worker.join(20)

    assert result == [["memory/pipe.md"]]


def test_a_file_name_that_is_not_utf8_is_reported_escaped_and_the_rest_indexed(
    make_workspace: WorkspaceFactory, make_index: IndexFactory
) -> None:
    ws = make_workspace(FILES)
    make_bad_name(ws)
    idx = make_index(ws)

    report = sync_within(idx)

    assert "not valid UTF-8" in report.problems[BAD_NAME]
    assert "rename" in report.problems[BAD_NAME]
    assert sorted(report.files_indexed) == sorted(FILES)
    assert BAD_NAME in idx.status().problems
    assert sync_within(idx).problems.keys() == {BAD_NAME}  # still reported, nothing re-done


def test_a_file_name_with_control_characters_is_reported_escaped(
    make_workspace: WorkspaceFactory, make_index: IndexFactory
) -> None:
    ws = make_workspace({**FILES, "memory/\x1b[31mred\nline.md": "Escape codes in a name.\n"})
    idx = make_index(ws)

    report = sync_within(idx)

    assert "control characters" in report.problems["memory/\\x1b[31mred\\x0aline.md"]
    assert sorted(report.files_indexed) == sorted(FILES)
    assert all("\x1b" not in path for path in idx.status().problems)


def test_a_renamed_bad_file_name_stops_being_reported(
    make_workspace: WorkspaceFactory, make_index: IndexFactory
) -> None:
    ws = make_workspace(FILES)
    make_bad_name(ws)
    idx = make_index(ws)
    sync_within(idx)

    os.rename(os.fsencode(ws / "memory") + b"/caf\xe9.md", ws / "memory" / "cafe.md")
    report = sync_within(idx)

    assert report.problems == {}
    assert idx.status().problems == {}
    assert paths(idx.search("espresso", preset="keyword")) == {"memory/cafe.md"}


def test_a_file_deleted_between_listing_and_reading_is_reported_not_fatal(
    make_workspace: WorkspaceFactory, make_index: IndexFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = make_workspace({**FILES, "memory/2026-01-11.md": "Short-lived note.\n"})
    real_discover = memory.index.sync.discover_memory_files

    def list_then_delete(*args: Any, **kwargs: Any) -> Any:
        found = real_discover(*args, **kwargs)
        (ws / "memory" / "2026-01-11.md").unlink(missing_ok=True)  # the owner deletes it now
        return found

    monkeypatch.setattr(memory.index.sync, "discover_memory_files", list_then_delete)
    idx = make_index(ws)

    report = sync_within(idx)

    assert "disappeared" in report.problems["memory/2026-01-11.md"]
    assert sorted(report.files_indexed) == sorted(FILES)
    monkeypatch.setattr(memory.index.sync, "discover_memory_files", real_discover)
    assert sync_within(idx).problems == {}  # the next sync forgets it
    assert idx.status().problems == {}


def test_a_file_hard_linked_after_listing_is_refused_when_read(
    make_workspace: WorkspaceFactory,
    make_index: IndexFactory,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    ws = make_workspace({**FILES, "memory/linked.md": "Shared with another folder.\n"})
    real_discover = memory.index.sync.discover_memory_files

    def list_then_link(*args: Any, **kwargs: Any) -> Any:
        found = real_discover(*args, **kwargs)
        if not (tmp_path / "outside.md").exists():  # a second name, outside the workspace
            os.link(ws / "memory" / "linked.md", tmp_path / "outside.md")
        return found

    monkeypatch.setattr(memory.index.sync, "discover_memory_files", list_then_link)
    idx = make_index(ws)

    report = sync_within(idx)

    assert "hard link" in report.problems["memory/linked.md"]
    assert sorted(report.files_indexed) == sorted(FILES)


def test_a_hard_linked_file_is_reported_with_what_to_do_not_silently_left_out(
    make_workspace: WorkspaceFactory, make_index: IndexFactory, tmp_path: Path
) -> None:
    # e.g. a backup tool that snapshots with hard links (cp -al, rsnapshot) on the same disk
    ws = make_workspace(FILES)
    os.link(ws / "MEMORY.md", tmp_path / "backup-MEMORY.md")
    idx = make_index(ws)

    report = sync_within(idx)

    assert "allow_hard_links" in report.problems["MEMORY.md"]
    assert "allow_hard_links" in idx.status().problems["MEMORY.md"]
    assert sorted(report.files_indexed) == ["USER.md", "memory/2026-01-10.md"]


def test_an_indexed_file_that_gains_a_hard_link_is_reported(
    make_workspace: WorkspaceFactory, make_index: IndexFactory, tmp_path: Path
) -> None:
    ws = make_workspace(FILES)
    idx = make_index(ws)
    sync_within(idx)
    os.link(ws / "USER.md", tmp_path / "second-name.md")  # the mtime does not change

    report = sync_within(idx)

    assert "hard link" in report.problems["USER.md"]
    assert "hard link" in idx.status().problems["USER.md"]


def test_a_file_that_cannot_be_opened_is_reported_with_what_to_do(
    make_workspace: WorkspaceFactory, make_index: IndexFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = make_workspace({**FILES, "memory/secret.md": "Locked away.\n"})
    real_open: Callable[..., int] = os.open

    def deny_secret(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if str(path).endswith("secret.md"):  # as mode 000 does for a user other than root
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(memory.index.sync.os, "open", deny_secret)
    idx = make_index(ws)

    report = sync_within(idx)

    assert "permission denied" in report.problems["memory/secret.md"]
    assert "chmod u+r" in report.problems["memory/secret.md"]
    assert sorted(report.files_indexed) == sorted(FILES)
    assert "permission denied" in idx.status().problems["memory/secret.md"]


def test_a_folder_named_md_is_not_taken_for_a_file(
    make_workspace: WorkspaceFactory, make_index: IndexFactory
) -> None:
    ws = make_workspace(FILES)
    (ws / "memory" / "notes.md").mkdir()
    (ws / "memory" / "notes.md" / "inside.md").write_text("A note inside a folder.\n")
    idx = make_index(ws)

    report = sync_within(idx)

    assert report.problems == {}
    assert "memory/notes.md/inside.md" in report.files_indexed


def test_a_leading_byte_order_mark_does_not_reach_the_index(
    make_workspace: WorkspaceFactory, make_index: IndexFactory
) -> None:
    ws = make_workspace({**FILES, "memory/bom.md": "\ufeffZeppelin tickets booked.\n"})
    idx = make_index(ws)
    sync_within(idx)

    (text,) = idx.db.execute("SELECT text FROM memory_chunks WHERE path = 'memory/bom.md'")[0]

    assert text == "Zeppelin tickets booked."
    assert paths(idx.search("zeppelin", preset="keyword")) == {"memory/bom.md"}
    # …nor what memory_get and `pinch memory get` read.
    assert read_memory_lines(ws, "memory/bom.md").text.startswith("Zeppelin tickets booked.")


# ---- the command line and the chat --------------------------------------------------------


@pytest.fixture
def server() -> Iterator[FakeModelServer]:
    with FakeModelServer(api_key=API_KEY) as fake:
        yield fake


@pytest.fixture
def bad_home(pinch_home: Path, server: FakeModelServer, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An initialised home whose memory/ holds a FIFO and a file with a non-UTF-8 name."""
    for name in list(os.environ):
        if name.startswith("ANTHROPIC_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
    monkeypatch.setenv("PINCH_AGENT__MODEL", "claude-test")
    monkeypatch.setenv("PINCH_AGENT__API_BASE", server.url)
    monkeypatch.setenv("PINCH_AGENT__MAX_RETRIES", "0")
    monkeypatch.setenv("PINCH_MEMORY__EMBEDDING__PROVIDER", "none")
    assert CliRunner().invoke(main, ["init"]).exit_code == 0
    ws = pinch_home / "workspace"
    (ws / "memory" / "2026-01-10.md").write_text("Went hiking in the Alps.\n")
    os.mkfifo(ws / "memory" / "pipe.md")
    make_bad_name(ws)
    return pinch_home


def test_index_status_and_search_work_beside_bad_files(bad_home: Path) -> None:
    runner = CliRunner()

    indexed = runner.invoke(main, ["memory", "index"])
    status = runner.invoke(main, ["memory", "status"])
    search = runner.invoke(main, ["memory", "search", "hiking", "--preset", "keyword"])

    assert indexed.exit_code == 0, indexed.output
    assert f"{BAD_NAME}: skipped: the file name is not valid UTF-8" in indexed.stderr
    assert "memory/pipe.md: skipped: not a regular file" in indexed.stderr
    assert status.exit_code == 0, status.output
    assert f"problem         {BAD_NAME}: skipped: the file name is not valid UTF-8" in status.stdout
    assert "problem         memory/pipe.md: skipped: not a regular file" in status.stdout
    assert search.exit_code == 0, search.output
    assert "memory/2026-01-10.md" in search.stdout


def test_symbolic_links_where_memory_files_would_be_are_listed_not_silently_skipped(
    bad_home: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "elsewhere"
    (outside / "notes").mkdir(parents=True)
    (outside / "MEMORY.md").write_text("- kiwifruit\n")
    (outside / "notes" / "n.md").write_text("- kumquat\n")
    ws = bad_home / "workspace"
    (ws / "MEMORY.md").unlink()
    (ws / "MEMORY.md").symlink_to(outside / "MEMORY.md")
    (ws / "memory" / "notes").symlink_to(outside / "notes")
    (ws / "memory" / "link.md").symlink_to(outside / "notes" / "n.md")
    runner = CliRunner()

    indexed = runner.invoke(main, ["memory", "index"])
    status = runner.invoke(main, ["memory", "status"])

    for path in ("MEMORY.md", "memory/notes", "memory/link.md"):
        assert f"{path}: skipped: a symbolic link" in indexed.stderr, indexed.stderr
        assert f"problem         {path}: skipped: a symbolic link" in status.stdout
    assert "[memory] extra_paths" in status.stdout
    # Still never followed.
    search = runner.invoke(main, ["memory", "search", "kiwifruit kumquat", "--preset", "keyword"])
    assert "kiwifruit" not in search.stdout and "kumquat" not in search.stdout


def test_chat_starts_and_answers_beside_bad_files(bad_home: Path, server: FakeModelServer) -> None:
    server.script(text_reply("Hello despite the odd files."))

    done = CliRunner().invoke(main, ["chat"], input="hello\n")

    assert done.exit_code == 0, done.output
    assert "Hello despite the odd files." in done.stdout


def test_names_from_disk_with_percent_or_decomposed_accents_are_indexed(
    make_index: IndexFactory, make_workspace: WorkspaceFactory
) -> None:
    # Names listed from the disk are not typed by anyone: "100%" and a macOS-style decomposed
    # "café" are ordinary file names, not look-alike tricks.
    decomposed = unicodedata.normalize("NFD", "memory/café.md")
    ws = make_workspace({"memory/100%-done.md": "progress zebra\n", decomposed: "croissant\n"})
    idx = make_index(ws)
    idx.sync()
    assert idx.search("zebra")
    assert idx.search("croissant")
