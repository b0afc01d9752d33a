"""MemoryWatcher: edits to memory files become searchable within seconds; other files are
ignored."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from memory.index.index import MemoryIndex
from memory.index.watch import MemoryWatcher
from tests.conftest import IndexFactory, WorkspaceFactory, keyword_config

DEBOUNCE_MS = None  # the default from settings: 1.5 s of quiet before a re-index


def wait_for(condition: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


@pytest.fixture
def watched(
    make_workspace: WorkspaceFactory, make_index: IndexFactory
) -> Iterator[tuple[Path, MemoryIndex, MemoryWatcher]]:
    ws = make_workspace({"memory/2026-01-10.md": "# 2026-01-10\n\n- Walked the dog.\n"})
    idx = make_index(ws, keyword_config())
    idx.sync()
    watcher = MemoryWatcher(idx, debounce_ms=DEBOUNCE_MS)
    watcher.start()
    time.sleep(0.3)  # let the watcher subscribe before the test edits anything
    yield ws, idx, watcher
    watcher.stop()


def test_an_appended_line_becomes_searchable_within_3_seconds(
    watched: tuple[Path, MemoryIndex, MemoryWatcher],
) -> None:
    ws, idx, watcher = watched
    started = time.monotonic()

    with (ws / "memory" / "2026-01-10.md").open("a") as f:
        f.write("- Ordered a sourdough starter.\n")

    assert wait_for(lambda: bool(idx.search("sourdough")), timeout=3.0)
    assert time.monotonic() - started < 3.0
    # The watcher counts a sync once it returns; its rows are searchable from its commit on.
    assert wait_for(lambda: watcher.syncs >= 1, timeout=1.0)
    assert watcher.last_error is None


def test_a_new_memory_file_is_indexed(watched: tuple[Path, MemoryIndex, MemoryWatcher]) -> None:
    ws, idx, _ = watched

    (ws / "memory" / "2026-01-11.md").write_text("Planted tulip bulbs.\n")

    assert wait_for(lambda: bool(idx.search("tulip")), timeout=3.0)


def test_changes_to_other_files_do_not_trigger_a_sync(
    watched: tuple[Path, MemoryIndex, MemoryWatcher],
) -> None:
    ws, _, watcher = watched

    (ws / "AGENTS.md").write_text("# Agents\n")
    (ws / "SOUL.md").write_text("# Soul\n")
    (ws / "memory" / "notes.txt").write_text("not markdown\n")
    (ws / "scratch.md").write_text("outside memory/\n")
    time.sleep(2.5)  # longer than the 1.5 s quiet period

    assert watcher.syncs == 0
    # …while it was listening all along: a memory file does trigger one.
    (ws / "memory" / "2026-01-12.md").write_text("Fixed the bike.\n")
    assert wait_for(lambda: watcher.syncs == 1, timeout=3.0)


def test_stop_ends_the_watcher_thread(
    make_workspace: WorkspaceFactory, make_index: IndexFactory
) -> None:
    idx = make_index(make_workspace(), keyword_config())
    watcher = MemoryWatcher(idx, debounce_ms=DEBOUNCE_MS)
    watcher.start()
    thread = watcher._thread
    assert thread is not None and thread.is_alive()

    watcher.stop()

    assert not thread.is_alive()


def test_a_burst_of_writes_is_indexed_once(
    watched: tuple[Path, MemoryIndex, MemoryWatcher],
) -> None:
    ws, idx, watcher = watched

    for i in range(5):  # five saves 0.2 s apart: inside one 1.5 s quiet window
        with (ws / "memory" / "2026-01-10.md").open("a") as f:
            f.write(f"- Burst line {i} quokka.\n")
        time.sleep(0.2)

    assert wait_for(lambda: len(idx.search("quokka", max_results=10)) >= 1, timeout=4.0)
    time.sleep(0.3)
    assert watcher.syncs == 1


def watch_index(index: MemoryIndex) -> MemoryWatcher:
    watcher = MemoryWatcher(index, debounce_ms=DEBOUNCE_MS)
    watcher.start()
    time.sleep(0.3)  # let the watcher subscribe before the test edits anything
    return watcher


def test_an_edit_under_an_extra_path_inside_the_workspace_is_indexed(
    make_workspace: WorkspaceFactory, make_index: IndexFactory
) -> None:
    ws = make_workspace({"notes/garage.md": "# Garage\n\n- The drill is on the shelf.\n"})
    idx = make_index(ws, keyword_config(extra_paths=["notes"]))
    idx.sync()
    watcher = watch_index(idx)
    try:
        with (ws / "notes" / "garage.md").open("a") as f:
            f.write("- The ladder hangs behind the door.\n")

        assert wait_for(lambda: bool(idx.search("ladder")), timeout=4.0)
    finally:
        watcher.stop()


def test_a_renamed_memory_folder_leaves_no_old_paths_in_the_index(
    make_workspace: WorkspaceFactory, make_index: IndexFactory
) -> None:
    ws = make_workspace({"memory/trips/lisbon.md": "# Lisbon\n\n- Tram 28 to Alfama.\n"})
    idx = make_index(ws, keyword_config())
    idx.sync()
    watcher = watch_index(idx)
    try:
        (ws / "memory" / "trips").rename(ws / "memory" / "travel")

        def moved() -> bool:
            return [h.path for h in idx.search("Alfama")] == ["memory/travel/lisbon.md"]

        assert wait_for(moved, timeout=4.0)
    finally:
        watcher.stop()


def test_a_memory_folder_moved_out_of_the_workspace_is_removed_from_the_index(
    make_workspace: WorkspaceFactory, make_index: IndexFactory, tmp_path: Path
) -> None:
    ws = make_workspace({"memory/trips/lisbon.md": "# Lisbon\n\n- Tram 28 to Alfama.\n"})
    idx = make_index(ws, keyword_config())
    idx.sync()
    watcher = watch_index(idx)
    try:
        (ws / "memory" / "trips").rename(tmp_path / "trips-archive")

        assert wait_for(lambda: not idx.search("Alfama"), timeout=4.0)
    finally:
        watcher.stop()
