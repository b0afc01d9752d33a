"""The workspace: which files are memory, and memory_get's safe, line-ranged reads."""

from __future__ import annotations

import asyncio
import ctypes
import os
import re
import threading
import time
from datetime import datetime
from pathlib import Path

import pytest

from agent.tools import ToolContext
from agent.types import ToolCall
from memory.errors import WorkspaceError
from memory.files.workspace import (
    MemoryFile,
    default_origin,
    discover_memory_files,
    file_day,
    open_confined,
    open_memory_file,
    read_confined,
    read_memory_lines,
)
from memory.files.writes import WorkspaceWriter
from tests.agent_support import OWNER, make_kit
from tests.conftest import WorkspaceFactory
from tests.fakes.model_server import FakeModelServer

LOG = "".join(f"line {n}\n" for n in range(1, 11))


@pytest.fixture
def workspace(make_workspace: WorkspaceFactory) -> Path:
    return make_workspace(
        {
            "MEMORY.md": "# Memory\n- likes tea\n",
            "USER.md": "# User\n",
            "AGENTS.md": "# Agents\n",
            "SOUL.md": "# Soul\n",
            "memory/2026-01-10.md": LOG,
            "memory/projects/garden.md": "# Garden\n",
            "memory/notes.txt": "not markdown\n",
        }
    )


# ---- discovery ------------------------------------------------------------------------------


def test_discovers_memory_user_and_memory_folder_markdown(workspace: Path) -> None:
    files = discover_memory_files(workspace)

    assert [f.rel_path for f in files] == [
        "MEMORY.md",
        "USER.md",
        "memory/2026-01-10.md",
        "memory/projects/garden.md",
    ]
    assert {f.source for f in files} == {"memory"}


def test_discovery_skips_symlinked_files_and_folders(workspace: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    (outside / "deep").mkdir(parents=True)
    (outside / "secret.md").write_text("secret\n")
    (outside / "deep" / "more.md").write_text("more\n")
    (workspace / "memory" / "link.md").symlink_to(outside / "secret.md")
    (workspace / "memory" / "linked-folder").symlink_to(outside / "deep")

    paths = [f.rel_path for f in discover_memory_files(workspace)]

    assert "memory/link.md" not in paths
    assert not any(p.startswith("memory/linked-folder") for p in paths)


def test_discovery_skips_hidden_files_and_folders(workspace: Path) -> None:
    (workspace / "memory" / ".draft.md").write_text("draft\n")
    (workspace / "memory" / ".trash").mkdir()
    (workspace / "memory" / ".trash" / "old.md").write_text("old\n")

    paths = [f.rel_path for f in discover_memory_files(workspace)]

    assert not any("draft" in p or "trash" in p for p in paths)


def test_extra_paths_add_files_and_folders_inside_and_outside(
    workspace: Path, tmp_path: Path
) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("a\n")
    (notes / "b.txt").write_text("b\n")
    (workspace / "docs").mkdir()
    (workspace / "docs" / "plan.md").write_text("plan\n")

    files = discover_memory_files(workspace, [str(notes), "docs/plan.md", "missing/"])

    extra = {f.rel_path: f for f in files if f.source == "extra"}
    assert set(extra) == {(notes / "a.md").resolve().as_posix(), "docs/plan.md"}
    assert {f.origin for f in extra.values()} == {"owner"}


def test_a_missing_workspace_raises_advice_to_run_init(tmp_path: Path) -> None:
    with pytest.raises(WorkspaceError, match=r"does not exist.*pinch init"):
        discover_memory_files(tmp_path / "nowhere")


def test_dated_logs_have_a_day_and_curated_files_do_not() -> None:
    assert file_day("memory/2026-01-10.md") == "2026-01-10"
    assert file_day("memory/2026-01-10-trip-to-rome.md") == "2026-01-10"
    assert file_day("memory/archive/2025-12-31.md") == "2025-12-31"
    assert file_day("MEMORY.md") is None
    assert file_day("memory/ideas.md") is None
    assert file_day("notes/2026-01-10.md") is None  # only logs under memory/ are dated


def test_curated_files_belong_to_the_owner_and_logs_to_the_agent() -> None:
    assert default_origin("MEMORY.md") == "owner"
    assert default_origin("USER.md") == "owner"
    assert default_origin("memory/2026-01-10.md") == "agent"


# ---- memory_get: reading lines --------------------------------------------------------------


def test_reads_a_range_of_lines(workspace: Path) -> None:
    result = read_memory_lines(workspace, "memory/2026-01-10.md", from_line=3, lines=2)

    assert result.text == "line 3\nline 4"
    assert (result.from_line, result.to_line, result.total_lines) == (3, 4, 10)
    assert result.path == "memory/2026-01-10.md"


def test_reads_to_the_end_without_a_line_count(workspace: Path) -> None:
    result = read_memory_lines(workspace, "memory/2026-01-10.md", from_line=9)

    assert result.text == "line 9\nline 10"


def test_a_range_running_past_the_end_is_cut_at_the_end(workspace: Path) -> None:
    result = read_memory_lines(workspace, "memory/2026-01-10.md", from_line=9, lines=50)

    assert result.text == "line 9\nline 10"
    assert result.to_line == 10


def test_reading_past_the_end_gives_empty_text(workspace: Path) -> None:
    result = read_memory_lines(workspace, "memory/2026-01-10.md", from_line=500, lines=5)

    assert result.text == ""
    assert result.to_line == result.from_line - 1
    assert result.total_lines == 10


def test_reads_memory_md_and_nested_memory_files(workspace: Path) -> None:
    assert read_memory_lines(workspace, "MEMORY.md").text == "# Memory\n- likes tea"
    assert read_memory_lines(workspace, "memory/projects/garden.md").text == "# Garden"


def test_invalid_utf8_is_read_with_replacement_characters(workspace: Path) -> None:
    (workspace / "memory" / "bad.md").write_bytes(b"caf\xe9 au lait\n")

    assert read_memory_lines(workspace, "memory/bad.md").text == "caf\ufffd au lait"


def test_a_long_read_is_truncated_with_a_marker(workspace: Path) -> None:
    (workspace / "memory" / "long.md").write_text("x" * 500 + "\n")

    text = read_memory_lines(workspace, "memory/long.md", max_chars=100).text

    assert text.startswith("x" * 100)
    assert "truncated at 100 characters" in text


def test_line_numbers_must_be_positive(workspace: Path) -> None:
    with pytest.raises(WorkspaceError, match="numbered from 1"):
        read_memory_lines(workspace, "MEMORY.md", from_line=0)
    with pytest.raises(WorkspaceError, match="lines must be 1 or more"):
        read_memory_lines(workspace, "MEMORY.md", lines=0)


def test_a_missing_file_says_to_search_first(workspace: Path) -> None:
    with pytest.raises(WorkspaceError, match=r"does not exist: search memory"):
        read_memory_lines(workspace, "memory/2020-01-01.md")


def test_a_binary_file_is_refused(workspace: Path) -> None:
    (workspace / "memory" / "blob.md").write_bytes(b"\x00\x01\x02binary")

    with pytest.raises(WorkspaceError, match="binary"):
        read_memory_lines(workspace, "memory/blob.md")


def test_extra_paths_inside_the_workspace_can_be_read(workspace: Path) -> None:
    (workspace / "docs").mkdir()
    (workspace / "docs" / "plan.md").write_text("the plan\n")

    result = read_memory_lines(workspace, "docs/plan.md", extra_paths=["docs"])

    assert result.text == "the plan"


def test_an_extra_path_outside_the_workspace_is_read_by_the_path_search_shows(
    workspace: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    (outside / "boats").mkdir(parents=True)
    (outside / "boats" / "boat.md").write_text("# Boat\n\nMoored at Kiel.\n")
    (outside / "other.md").write_text("not configured\n")
    (outside / "boats" / "escape.md").symlink_to(outside / "other.md")
    shown = (outside / "boats" / "boat.md").resolve().as_posix()  # what search returns
    extra = [str(outside / "boats")]

    result = read_memory_lines(workspace, shown, from_line=3, extra_paths=extra)

    assert (result.path, result.text) == (shown, "Moored at Kiel.")
    for refused in (
        (outside / "other.md").as_posix(),  # beside the extra path, not in it
        (outside / "boats" / "escape.md").as_posix(),  # a link inside it
        f"{outside}/boats/../other.md",
        f"{outside}/boats/../boats/boat.md",  # only the exact path search shows
        "/etc/passwd.md",
    ):
        with pytest.raises(WorkspaceError):
            read_memory_lines(workspace, refused, extra_paths=extra)
    with pytest.raises(WorkspaceError, match="not a workspace-relative path"):
        read_memory_lines(workspace, shown)  # not configured: refused as before


# ---- memory_get: paths it refuses -----------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("../outside.md", "'..'"),
        ("memory/../../outside.md", "'..'"),
        ("/etc/passwd.md", "not a workspace-relative path"),
        ("~/notes.md", "not a workspace-relative path"),
        ("C:/Users/me/notes.md", "not a workspace-relative path"),
        ("memory\\2026-01-10.md", "not a workspace-relative path"),
        ("memory%2F..%2F..%2Fsecret.md", "encoded or look-alike"),
        ("%2e%2e/secret.md", "encoded or look-alike"),
        ("．．/x.md", "encoded or look-alike"),  # fullwidth full stops
        ("memory／2026-01-10.md", "encoded or look-alike"),  # fullwidth solidus
        ("memory/2026-01-10.md\x00.txt", "NUL"),
        ("memory/notes.txt", "not a Markdown file"),
        ("memory/2026-01-10", "not a Markdown file"),
        ("AGENTS.md", "not a memory file"),
        ("SOUL.md", "not a memory file"),
        ("docs/plan.md", "not a memory file"),
        ("", "A path is required"),
        ("   ", "A path is required"),
    ],
)
def test_refuses_paths_outside_memory_with_a_clear_message(
    workspace: Path, path: str, message: str
) -> None:
    with pytest.raises(WorkspaceError, match=re.escape(message)):
        read_memory_lines(workspace, path)


def test_refuses_a_symlink_inside_memory_pointing_outside(workspace: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.md"
    secret.write_text("password\n")
    (workspace / "memory" / "escape.md").symlink_to(secret)

    with pytest.raises(WorkspaceError, match="symbolic link"):
        read_memory_lines(workspace, "memory/escape.md")


def test_refuses_a_path_through_a_symlinked_folder(workspace: Path, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "x.md").write_text("x\n")
    (workspace / "memory" / "linked").symlink_to(outside, target_is_directory=True)

    with pytest.raises(WorkspaceError, match="symbolic link"):
        read_memory_lines(workspace, "memory/linked/x.md")


def test_refuses_when_the_memory_folder_itself_is_a_symlink(
    make_workspace: WorkspaceFactory, tmp_path: Path
) -> None:
    outside = tmp_path / "real-memory"
    outside.mkdir()
    (outside / "2026-01-10.md").write_text("x\n")
    ws = tmp_path / "ws-with-linked-memory"
    ws.mkdir()
    os.symlink(outside, ws / "memory")

    with pytest.raises(WorkspaceError, match="symbolic link"):
        read_memory_lines(ws, "memory/2026-01-10.md")


# ---- hard links, the check-then-open race, over-long paths ----------------------------------


@pytest.fixture
def hard_linked(workspace: Path, tmp_path: Path) -> Path:
    """memory/linked.md: a hard link to a secret file outside the workspace."""
    secret = tmp_path / "outside-secret.md"
    secret.write_text("the outside secret\n")
    os.link(secret, workspace / "memory" / "linked.md")
    return workspace


def test_a_hard_link_to_an_outside_file_is_refused_by_memory_get(hard_linked: Path) -> None:
    with pytest.raises(WorkspaceError, match="hard link"):
        read_memory_lines(hard_linked, "memory/linked.md")


def test_a_hard_link_is_readable_when_the_owner_allows_hard_links(hard_linked: Path) -> None:
    result = read_memory_lines(hard_linked, "memory/linked.md", allow_hard_links=True)
    assert result.text == "the outside secret"


def test_a_hard_linked_file_is_listed_for_the_indexer_to_refuse_and_report(
    hard_linked: Path,
) -> None:
    assert "memory/linked.md" in [f.rel_path for f in discover_memory_files(hard_linked)]


def test_a_hard_linked_file_is_not_opened_for_the_indexer(hard_linked: Path) -> None:
    linked = MemoryFile("memory/linked.md", hard_linked / "memory/linked.md", "memory", "agent")
    with pytest.raises(WorkspaceError, match="hard link"):
        open_memory_file(hard_linked, linked)
    fd = open_memory_file(hard_linked, linked, allow_hard_links=True)
    with os.fdopen(fd, "rb") as fh:
        assert fh.read() == b"the outside secret\n"


def test_the_indexer_opens_extra_files_outside_the_workspace_but_no_link(
    workspace: Path, tmp_path: Path
) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# A\n")
    (notes / "link.md").symlink_to(tmp_path / "outside-secret-2.md")
    a = MemoryFile(str(notes / "a.md"), notes / "a.md", "extra", "owner")
    link = MemoryFile(str(notes / "link.md"), notes / "link.md", "extra", "owner")
    with os.fdopen(open_memory_file(workspace, a), "rb") as fh:
        assert fh.read() == b"# A\n"
    with pytest.raises(WorkspaceError, match="symbolic link"):
        open_memory_file(workspace, link)


def test_writes_refuse_a_hard_linked_target(hard_linked: Path, tmp_path: Path) -> None:
    writer = WorkspaceWriter(hard_linked)
    with pytest.raises(WorkspaceError, match="hard link"):
        writer.write_file("memory/linked.md", "overwritten\n")
    os.link(tmp_path / "outside-secret.md", hard_linked / "USER.md.tmp-link")
    os.replace(hard_linked / "USER.md.tmp-link", hard_linked / "USER.md")
    with pytest.raises(WorkspaceError, match="hard link"):
        writer.record_fact("USER.md", "likes tea")
    assert (tmp_path / "outside-secret.md").read_text() == "the outside secret\n"


def test_the_tools_refuse_a_hard_linked_file(hard_linked: Path, tmp_path: Path) -> None:
    with FakeModelServer() as server:  # the tools never call the model
        kit = make_kit(tmp_path, server, workspace=hard_linked)
    try:
        session = kit.store.current(OWNER)
        ctx = ToolContext(OWNER, session.id)
        for tool in ("memory_get", "read_file"):
            call = ToolCall("toolu_1", tool, {"path": "memory/linked.md"})
            result = asyncio.run(kit.agent.tools.call(call, ctx))
            assert result.is_error and "hard link" in result.content, tool
            assert "outside secret" not in result.content
    finally:
        kit.index.close()


def test_open_confined_refuses_a_fifo_without_blocking(workspace: Path) -> None:
    os.mkfifo(workspace / "memory" / "pipe.md")
    with pytest.raises(WorkspaceError, match="not a regular file"):
        open_confined(workspace, "memory/pipe.md")


def test_open_confined_reads_a_nested_workspace_file(workspace: Path) -> None:
    fd = open_confined(workspace, "memory/projects/garden.md")
    try:
        assert os.read(fd, 100) == b"# Garden\n"
    finally:
        os.close(fd)


def test_swapping_a_file_and_a_symlink_never_lets_a_read_escape(
    workspace: Path, tmp_path: Path
) -> None:
    """A second thread swaps memory/race.md between a file and a link to an outside file."""
    secret = tmp_path / "race-secret.md"
    secret.write_text("ESCAPED\n")
    target = workspace / "memory" / "race.md"
    as_file = workspace / "memory" / "race-file.tmp"
    as_link = workspace / "memory" / "race-link.tmp"
    target.write_text("inside\n")
    stop = threading.Event()

    def swap() -> None:
        while not stop.is_set():
            as_file.write_text("inside\n")
            os.replace(as_file, target)
            as_link.unlink(missing_ok=True)
            as_link.symlink_to(secret)
            os.replace(as_link, target)

    swapper = threading.Thread(target=swap)
    swapper.start()
    reads = escapes = 0
    # Until enough reads raced the swaps (a loaded machine takes longer), at most 20 s.
    deadline = time.monotonic() + 20.0
    try:
        while reads <= 400 and time.monotonic() < deadline:
            for read in (
                lambda: read_memory_lines(workspace, "memory/race.md").text,
                lambda: read_confined(workspace, "memory/race.md").decode(),
            ):
                try:
                    text = read()
                except WorkspaceError:
                    continue
                reads += 1
                escapes += "ESCAPED" in text
    finally:
        stop.set()
        swapper.join()
    assert reads > 200
    assert escapes == 0


def test_a_folder_swapped_for_a_symlink_never_lets_a_read_escape(
    workspace: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside-dir"
    outside.mkdir()
    (outside / "note.md").write_text("ESCAPED\n")
    folder = workspace / "memory" / "swap"
    folder.mkdir()
    (folder / "note.md").write_text("inside\n")
    link = workspace / "memory" / "swap-link.tmp"
    link.symlink_to(outside)
    parked = workspace / "memory" / "swap-parked.tmp"
    stop = threading.Event()

    def swap() -> None:
        while not stop.is_set():
            os.rename(folder, parked)
            os.rename(link, folder)
            os.rename(folder, link)
            os.rename(parked, folder)

    swapper = threading.Thread(target=swap)
    swapper.start()
    reads = escapes = 0
    deadline = time.monotonic() + 20.0  # until enough reads raced the swaps, at most 20 s
    try:
        while reads <= 100 and time.monotonic() < deadline:
            try:
                text = read_memory_lines(workspace, "memory/swap/note.md").text
            except WorkspaceError:
                continue
            reads += 1
            escapes += "ESCAPED" in text
    finally:
        stop.set()
        swapper.join()
    assert reads > 50
    assert escapes == 0


@pytest.mark.parametrize(
    "path",
    ["memory/" + "a" * 300 + ".md", "/".join(["memory"] + ["d" * 200] * 25) + "/x.md"],
    ids=["300-byte-name", "5000-byte-path"],
)
def test_an_over_long_path_is_refused_like_any_bad_path(workspace: Path, path: str) -> None:
    with pytest.raises(WorkspaceError, match="too long"):
        read_memory_lines(workspace, path)
    with pytest.raises(WorkspaceError, match="too long"):
        WorkspaceWriter(workspace).write_file(path, "x\n")


def _exchange(a: Path, b: Path) -> None:
    """Swap two names atomically (renameat2 RENAME_EXCHANGE): neither is ever missing."""
    libc = ctypes.CDLL(None, use_errno=True)
    at_fdcwd, rename_exchange = -100, 2
    if libc.renameat2(at_fdcwd, bytes(a), at_fdcwd, bytes(b), rename_exchange) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def _swap_folder_with_link(folder: Path, outside: Path, stop: threading.Event) -> None:
    """Until `stop`: `folder` is alternately the real folder and a link to `outside`."""
    link = folder.with_name(folder.name + "-link.tmp")
    link.symlink_to(outside)
    while not stop.is_set():
        _exchange(folder, link)
    if folder.is_symlink():
        _exchange(folder, link)


@pytest.mark.parametrize("folder", ["memory/swap", "memory"])
def test_a_folder_swapped_for_a_symlink_never_lets_a_write_escape(
    workspace: Path, tmp_path: Path, folder: str
) -> None:
    outside = tmp_path / "outside-target"
    outside.mkdir()
    (workspace / folder).mkdir(exist_ok=True)
    writer = WorkspaceWriter(workspace)
    stop = threading.Event()
    swapper = threading.Thread(
        target=_swap_folder_with_link, args=(workspace / folder, outside, stop)
    )
    swapper.start()
    writes = 0
    started = time.monotonic()
    try:
        # At least 1 s of racing and at least 6 writes that got through (a busy machine may
        # need longer for those), at most 15 s.
        while time.monotonic() - started < 1.0 or (
            writes <= 5 and time.monotonic() - started < 15.0
        ):
            try:
                if folder == "memory":
                    writer.append_daily_log("a note", now=datetime(2026, 1, 11, 9, 0))
                else:
                    writer.write_file(f"{folder}/note.md", "# Note\n")
            except WorkspaceError:
                continue
            writes += 1
    finally:
        stop.set()
        swapper.join()
    assert writes > 5
    assert list(outside.iterdir()) == []
