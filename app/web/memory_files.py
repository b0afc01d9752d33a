"""The memory files as the /memory page shows and edits them (no HTTP here).

- Which files: `discover_memory_files` (MEMORY.md, USER.md, memory/**, extra paths), grouped as
  the owner thinks of them, and the inbox's received files.
- Reading: `memory get`'s rules (`read_memory_lines`: confined, no symbolic link, no hidden or
  non-memory file); the editor also gets the exact text and its hash.
- Saving: compare-and-swap through the workspace writer (`WorkspaceWriter.rewrite`: confined,
  atomic, re-indexed after the write). If the file is no longer what the owner opened (deleted
  too), nothing is written: `EditConflict` carries the text on disk now and the difference, and
  the owner's text goes back to the editor.
Every function blocks (file I/O): call it in a worker thread.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass
from pathlib import Path

from memory.errors import WorkspaceError
from memory.files.atomic import read_workspace_text
from memory.files.discovery import file_day
from memory.files.inbox import INBOX_FOLDER
from memory.files.workspace import (
    EVERGREEN_FILES,
    confine_path,
    discover_memory_files,
    extra_path_problems,
    read_memory_lines,
    resolve_memory_path,
    skipped_links,
)
from memory.files.writes import WorkspaceWriter
from memory.store.content_hash import hash_text
from memory.store.source_listing import KINDS, SourceListings

MAX_VIEW_CHARS = 2_000_000
MAX_EDIT_BYTES = 1_000_000
MAX_INBOX_FILES = 300
GROUPS = ("Curated", "Daily logs", "Session notes", "Other memory files", "Extra paths")


@dataclass(frozen=True)
class FileEntry:
    path: str
    group: str
    size: int
    modified: float
    editable: bool  # inside the workspace (extra paths outside it are shown, never written)


@dataclass(frozen=True)
class OpenedFile:
    path: str
    text: str  # exactly the file's text when editable, else what `memory get` shows
    hash: str  # of the exact text ("" when not editable)
    editable: bool
    total_lines: int
    why_not_editable: str = ""


class EditConflict(WorkspaceError):
    """The file changed on disk since it was opened: nothing was written."""

    def __init__(self, path: str, current: str | None, mine: str) -> None:
        super().__init__(
            f"{path} changed on disk since you opened it; nothing was written. Merge your "
            "version with the one on disk below, then save again."
        )
        self.path = path
        self.gone = current is None  # deleted meanwhile: saving again creates it
        self.current = current or ""
        self.current_hash = text_hash(current)
        self.mine = mine

    @property
    def diff(self) -> str:
        """What saving yours would change in the file as it is now (unified diff)."""
        return unified_diff(self.current, self.mine, self.path)


def text_hash(text: str | None) -> str:
    """The hash the editor carries: of the text, or "absent" for a file that does not exist."""
    return "absent" if text is None else hash_text(text)


def unified_diff(before: str, after: str, path: str) -> str:
    lines = difflib.unified_diff(
        before.splitlines(keepends=True),
        after.splitlines(keepends=True),
        fromfile=f"{path} (on disk now)",
        tofile=f"{path} (yours)",
    )
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


def _group(rel: str, source: str) -> str:
    if source == "extra":
        return "Extra paths"
    if rel in EVERGREEN_FILES:
        return "Curated"
    day = file_day(rel)
    if day is not None:
        name = rel.rsplit("/", 1)[-1]
        return "Daily logs" if name == f"{day}.md" else "Session notes"
    return "Other memory files"


DATED_SHOWN = 30  # newest daily logs and session notes listed before "all files"
_GROUP_OF_KIND = dict(zip(KINDS, GROUPS, strict=True))


@dataclass(frozen=True)
class FileList:
    files: list[FileEntry]  # in GROUPS order; daily logs and session notes newest first
    counts: dict[str, int]  # files in each group (more than listed when only the newest are)


def memory_files(
    workspace: Path,
    extra_paths: list[str],
    listings: SourceListings,
    generation: int | None,
    *,
    newest: int | None = DATED_SHOWN,
) -> FileList:
    """The memory files from the index's source rows (one query however many there are; a file
    created a moment ago appears once the watcher indexed it, within seconds) — before the first
    build, from the disk. With `newest`, only that many daily logs and session notes."""
    found: list[FileEntry] = []
    counts = dict.fromkeys(GROUPS, 0)
    if generation is None:
        for f in discover_memory_files(workspace, extra_paths):
            try:
                st = f.abs_path.lstat()
            except OSError:
                continue
            entry = FileEntry(
                f.rel_path,
                _group(f.rel_path, f.source),
                st.st_size,
                st.st_mtime,
                _inside(f.rel_path),
            )
            found.append(entry)
            counts[entry.group] += 1
    else:
        listing = listings.listing(generation, newest=newest if newest is not None else 10**9)
        for kind, n in listing.counts.items():
            counts[_GROUP_OF_KIND[kind]] = n
        found = [
            FileEntry(f.path, _GROUP_OF_KIND[f.kind], f.size, f.mtime, _inside(f.path))
            for f in listing.files
        ]
    by_group: dict[str, list[FileEntry]] = {g: [] for g in GROUPS}
    for entry in found:
        by_group[entry.group].append(entry)
    newest_first = {"Daily logs", "Session notes"}
    ordered = [
        e
        for g in GROUPS
        for e in sorted(by_group[g], key=lambda e: e.path, reverse=g in newest_first)[
            : newest if newest is not None and g in newest_first else None
        ]
    ]
    return FileList(ordered, counts)


def _inside(path: str) -> bool:
    return not path.startswith("/")


def file_problems(workspace: Path, extra_paths: list[str], *, links: bool) -> dict[str, str]:
    """Extra paths that yield nothing and (with `links`: a walk of the memory folder) skipped
    symbolic links, with what to do — what `pinch memory status` lists beside the index's own
    problems."""
    skipped = skipped_links(workspace) if links and workspace.is_dir() else {}
    return {**extra_path_problems(workspace, extra_paths), **skipped}


@dataclass(frozen=True)
class InboxEntry:
    path: str
    size: int
    modified: float


def inbox_files(workspace: Path, limit: int = MAX_INBOX_FILES) -> list[InboxEntry]:
    """Files received with messages (<workspace>/inbox/DAY/NAME), newest day first; no link
    is followed."""
    root = workspace / INBOX_FOLDER
    if not root.is_dir() or root.is_symlink():
        return []
    found: list[InboxEntry] = []
    for day in sorted(os.scandir(root), key=lambda d: d.name, reverse=True):
        if not day.is_dir(follow_symlinks=False) or day.name.startswith("."):
            continue
        for item in sorted(os.scandir(day.path), key=lambda d: d.name):
            if item.name.startswith(".") or not item.is_file(follow_symlinks=False):
                continue
            st = item.stat(follow_symlinks=False)
            found.append(
                InboxEntry(f"{INBOX_FOLDER}/{day.name}/{item.name}", st.st_size, st.st_mtime)
            )
            if len(found) >= limit:
                return found
    return found


def inbox_target(workspace: Path, raw: str) -> str:
    """The confined workspace path of an inbox file, or WorkspaceError."""
    _, rel = confine_path(workspace, raw)
    if not rel.startswith(f"{INBOX_FOLDER}/"):
        raise WorkspaceError(f"{raw!r} is not a file of the inbox.")
    return rel


def open_file(
    workspace: Path, raw: str, extra_paths: list[str], *, allow_hard_links: bool = False
) -> OpenedFile:
    """A memory file by `memory get`'s rules (WorkspaceError saying why not), with its exact
    text and hash when the page may edit it."""
    shown = read_memory_lines(
        workspace,
        raw,
        1,
        None,
        extra_paths,
        MAX_VIEW_CHARS,
        allow_hard_links=allow_hard_links,
    )
    if shown.path.startswith("/"):
        return OpenedFile(
            shown.path,
            shown.text,
            "",
            False,
            shown.total_lines,
            "it is outside the workspace (an extra path): edit it where it lives",
        )
    try:
        exact = read_workspace_text(workspace, shown.path)
    except WorkspaceError as exc:
        return OpenedFile(shown.path, shown.text, "", False, shown.total_lines, str(exc))
    if exact is None:  # gone between the two reads
        raise WorkspaceError(f"{shown.path} does not exist.")
    return OpenedFile(shown.path, exact, text_hash(exact), True, shown.total_lines)


def save_file(
    writer: WorkspaceWriter,
    extra_paths: list[str],
    raw: str,
    text: str,
    opened_hash: str,
) -> str:
    """Write `text` to the memory file `raw` if it still is what the owner opened (its hash
    `opened_hash`); else raise `EditConflict` and write nothing. Returns the workspace path.

    The path must be a memory file `memory get` may read inside the workspace; line endings
    become "\\n" (a browser sends "\\r\\n")."""
    text = text.replace("\r\n", "\n")
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_EDIT_BYTES:
        raise WorkspaceError(
            f"The text is {size:,} bytes; the page saves at most {MAX_EDIT_BYTES:,}. Edit the "
            "file in an editor instead; nothing was written."
        )
    try:
        opened = open_file(writer.workspace, raw, extra_paths)
    except WorkspaceError:
        vanished = _vanished(writer.workspace, raw, extra_paths)
        if vanished is None:
            raise
        path = vanished
    else:
        if not opened.editable:
            raise WorkspaceError(f"{opened.path} cannot be edited here: {opened.why_not_editable}.")
        path = opened.path

    def change(current: str | None) -> str:
        if text_hash(current) != opened_hash:
            raise EditConflict(path, current, text)
        return text

    return writer.rewrite(path, change)


def _vanished(workspace: Path, raw: str, extra_paths: list[str]) -> str | None:
    """The workspace path of a memory file the page may write that does not exist (deleted
    while the owner edited it: the compare-and-swap keeps their text, and a save that knows it
    is gone creates it again); None for any other path."""
    try:
        rel = resolve_memory_path(workspace, raw, extra_paths).relative_to(workspace).as_posix()
        return rel if read_workspace_text(workspace, rel) is None else None
    except (WorkspaceError, ValueError):
        return None
