"""The workspace on disk: confined paths and safe reads of memory files (which files are memory
is memory/files/discovery.py's; its names are re-exported here).

Symbolic links are skipped when discovering and refused when reading, so no path can lead
outside the workspace. Reads open the file one path component at a time without
following symbolic links (`open_confined`), so swapping a file for a link between the check and
the read cannot escape either. A file with more than one hard link may be the same file as one
outside the workspace: it is treated as outside unless `[memory] allow_hard_links = true`.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from common.text import shorten
from memory.errors import WorkspaceError
from memory.files.discovery import (
    DREAMS_FILE,
    EVERGREEN_FILES,
    MemoryFile,
    default_origin,
    discover_memory_files,
    extra_path_base,
    extra_path_problems,
    file_day,
    is_memory_path,
    skipped_links,
)

# Discovery's names, for callers that import them from here (memory/files/discovery.py).
__all__ = [
    "DREAMS_FILE",
    "EVERGREEN_FILES",
    "MemoryFile",
    "default_origin",
    "discover_memory_files",
    "extra_path_base",
    "extra_path_problems",
    "file_day",
    "is_memory_path",
    "skipped_links",
]

# Linux limits: one path component and a whole path. Checked before any system call, so an
# over-long path is refused like any other bad path instead of failing with ENAMETOOLONG.
MAX_COMPONENT_BYTES = 255
MAX_PATH_BYTES = 4000


# Everything Pinch creates is private to the owner: memory files and the database hold chats.


class FileMissingError(WorkspaceError):
    """The confined path is allowed but no file is there (yet)."""


def _hard_linked(path: Path) -> bool:
    """True if `path` is a regular file with more than one name (maybe one outside)."""
    try:
        st = path.lstat()
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_nlink > 1


def _hard_link_refusal(rel: str) -> WorkspaceError:
    return WorkspaceError(
        f"{rel!r} has more than one hard link, so it may be a file outside the workspace; "
        "Pinch treats it as outside. Copy it instead of linking it, or set "
        "[memory] allow_hard_links = true in config.toml if you made the link yourself."
    )


def confine_path(workspace: Path, raw: str, *, allow_hard_links: bool = False) -> tuple[Path, str]:
    """(absolute path, '/'-separated relative path) of a workspace-relative path, or
    WorkspaceError saying why it may not be used.

    The one check every file access goes through: no absolute paths, `~`, drive letters,
    backslashes, `.`/`..`/empty segments, hidden files, control characters, percent-encoding or
    Unicode look-alikes (NFKC-changed text), no over-long names, no symbolic link anywhere along
    the path, and no existing file with several hard links unless `allow_hard_links`.
    This is a check of names; to read, use `open_confined`, which cannot race with a change on
    disk between the check and the open.
    """
    if not raw or not raw.strip():
        raise WorkspaceError("A path is required, e.g. memory/2026-01-10.md or MEMORY.md.")
    shown = shorten(raw, 80)
    if any(unicodedata.category(ch) == "Cc" for ch in raw):
        raise WorkspaceError(f"{shown!r} contains control characters (such as a NUL byte).")
    if "%" in raw or unicodedata.normalize("NFKC", raw) != raw:
        raise WorkspaceError(
            f"{shown!r} contains encoded or look-alike characters; write the plain path."
        )
    text = raw.strip()
    try:
        encoded = [os.fsencode(p) for p in text.split("/")]
    except UnicodeError as exc:
        raise WorkspaceError(f"{shown!r} cannot be used as a file name here.") from exc
    total = len(os.fsencode(str(workspace))) + len(os.fsencode(text))
    if total > MAX_PATH_BYTES:
        raise WorkspaceError(
            f"{shown!r} is too long ({total:,} bytes with the workspace folder; at most "
            f"{MAX_PATH_BYTES:,}); use a shorter path."
        )
    if any(len(p) > MAX_COMPONENT_BYTES for p in encoded):
        raise WorkspaceError(
            f"{shown!r} is too long for a file name ({MAX_COMPONENT_BYTES} bytes per folder or "
            "file name at most); use a shorter path."
        )
    if "\\" in text or text.startswith(("/", "~")) or re.match(r"^[A-Za-z]:", text):
        raise WorkspaceError(
            f"{shown!r} is not a workspace-relative path: use paths like memory/2026-01-10.md."
        )
    parts = text.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise WorkspaceError(f"{shown!r} may not contain '..', '.' or empty segments.")
    if any(p.startswith(".") for p in parts):
        raise WorkspaceError(f"{shown!r} names a hidden file or folder, which is not allowed.")
    probe = workspace
    try:
        for part in parts:
            probe = probe / part
            if probe.is_symlink():
                raise WorkspaceError(
                    f"{shown!r} goes through a symbolic link, which is not allowed."
                )
        probe.resolve().relative_to(workspace.resolve())
    except ValueError as exc:
        raise WorkspaceError(f"{shown!r} is outside the workspace.") from exc
    except OSError as exc:
        raise WorkspaceError(f"{shown!r} cannot be used: {exc.strerror or exc}.") from exc
    rel = "/".join(parts)
    if not allow_hard_links and _hard_linked(probe):
        raise _hard_link_refusal(rel)
    return probe, rel


def _open_error(rel: str, exc: OSError) -> WorkspaceError:
    if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
        # O_NOFOLLOW met a symbolic link (ELOOP), or a folder along the way is a link/file.
        return WorkspaceError(f"{rel!r} goes through a symbolic link, which is not allowed.")
    if exc.errno == errno.ENOENT:
        return FileMissingError(f"{rel} does not exist in the workspace.")
    if exc.errno == errno.ENAMETOOLONG:
        return WorkspaceError(f"{rel!r} is too long for a file name; use a shorter path.")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return WorkspaceError(
            f"{rel} cannot be read: permission denied. Check its owner and mode (ls -l)."
        )
    return WorkspaceError(f"{rel} cannot be opened: {exc.strerror or exc}.")


def _walk_folders(root: Path, folders: list[str], rel: str) -> int:
    """A descriptor of root/folders, each folder opened relative to the one before, O_NOFOLLOW."""
    nofollow = getattr(os, "O_NOFOLLOW", 0)
    directory = getattr(os, "O_DIRECTORY", 0)
    try:
        fd = os.open(root, os.O_RDONLY | directory)
    except OSError as exc:
        raise WorkspaceError(f"The folder {root} cannot be opened: {exc.strerror}.") from exc
    try:
        for part in folders:
            next_fd = os.open(part, os.O_RDONLY | directory | nofollow, dir_fd=fd)
            os.close(fd)
            fd = next_fd
    except OSError as exc:
        os.close(fd)
        raise _open_error(rel, exc) from exc
    return fd


def _open_beneath(root: Path, parts: list[str], rel: str, allow_hard_links: bool) -> int:
    """An O_RDONLY descriptor of root/parts, opened one component at a time with O_NOFOLLOW."""
    fd = _walk_folders(root, parts[:-1], rel)
    # O_NONBLOCK: a FIFO named *.md must not hang the open; it is refused below.
    flags = (
        os.O_RDONLY
        | getattr(os, "O_NOFOLLOW", 0)
        | getattr(os, "O_NONBLOCK", 0)
        | getattr(os, "O_NOCTTY", 0)
    )
    try:
        file_fd = os.open(parts[-1], flags, dir_fd=fd)
    except OSError as exc:
        raise _open_error(rel, exc) from exc
    finally:
        os.close(fd)
    st = os.fstat(file_fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(file_fd)
        raise WorkspaceError(f"{rel} is not a regular file.")
    if st.st_nlink > 1 and not allow_hard_links:
        os.close(file_fd)
        raise _hard_link_refusal(rel)
    return file_fd


def open_folder_confined(workspace: Path, rel: str) -> int:
    """A descriptor of the folder holding the workspace file `rel` (already confined), opened one
    component at a time with O_NOFOLLOW; WorkspaceError if a folder along the way is a link.

    Writes go through this folder descriptor, so a folder swapped for a symbolic link after the
    check cannot redirect them outside the workspace."""
    return _walk_folders(workspace, rel.split("/")[:-1], rel)


def open_confined(workspace: Path, raw: str, *, allow_hard_links: bool = False) -> int:
    """A read-only file descriptor of the workspace file `raw` names, or WorkspaceError.

    `raw` passes `confine_path`; then every folder and the file itself are opened relative to
    the one before with O_NOFOLLOW, and the opened file must be a regular file with one link
    (unless `allow_hard_links`). What is opened is what was checked: no swap of a file for a
    symbolic link between the check and the read can lead outside. FIFOs and devices are
    refused without blocking. The caller closes the descriptor.
    """
    _, rel = confine_path(workspace, raw, allow_hard_links=allow_hard_links)
    return _open_beneath(workspace, rel.split("/"), rel, allow_hard_links)


# The largest memory file Pinch indexes or reads: a bigger one (a log dumped into memory/) would
# cost memory several times its size in any process that read it whole, the gateway included.
MAX_FILE_BYTES = 10 * 1024 * 1024


def _read_fd(fd: int, max_bytes: int | None) -> bytes:
    with os.fdopen(fd, "rb") as fh:
        return fh.read() if max_bytes is None else fh.read(max_bytes)


# Why a memory file holding a NUL byte is neither indexed nor read, and what to do.
BINARY_ADVICE = (
    "it holds NUL bytes, so it is binary, not Markdown; if it is text (a NUL left by a crash or a "
    "bad copy), remove them (`tr -d '\\000' < FILE > FILE.new`, then rename FILE.new over it), "
    "otherwise rename it so it does not end in .md"
)


def too_big_advice(size: int) -> str:
    """Why a file of `size` bytes is neither indexed nor read, and what to do."""
    return (
        f"{size / 1e6:.1f} MB is over the {MAX_FILE_BYTES // 2**20} MB limit for one memory file; "
        "split it into smaller files"
    )


def _read_memory_fd(fd: int, rel: str) -> bytes:
    """The bytes of the memory file open at `fd` (closed here), refused past MAX_FILE_BYTES
    without reading them."""
    size = os.fstat(fd).st_size
    data = _read_fd(fd, MAX_FILE_BYTES + 1)
    if size > MAX_FILE_BYTES or len(data) > MAX_FILE_BYTES:
        raise WorkspaceError(f"{rel} cannot be read: {too_big_advice(max(size, len(data)))}.")
    return data


def read_confined(
    workspace: Path, raw: str, *, allow_hard_links: bool = False, max_bytes: int | None = None
) -> bytes:
    """The bytes of the workspace file `raw` names, through `open_confined`."""
    return _read_fd(open_confined(workspace, raw, allow_hard_links=allow_hard_links), max_bytes)


def open_memory_file(workspace: Path, f: MemoryFile, *, allow_hard_links: bool = False) -> int:
    """A read-only descriptor of a discovered memory file, for the indexer; the caller closes it.

    A file inside the workspace is opened component by component from the workspace
    (`open_confined`); an extra path outside it from its own folder, which the owner configured.
    Never follows a symbolic link, never blocks (FIFOs are refused), and refuses files with
    several hard links unless `allow_hard_links`. Raises WorkspaceError (FileMissingError when
    the file is gone) with a one-line reason.
    """
    try:
        rel = f.abs_path.relative_to(workspace).as_posix()
    except ValueError:
        return _open_beneath(f.abs_path.parent, [f.abs_path.name], f.rel_path, allow_hard_links)
    # The name came from listing the disk, not from a person or the model: no look-alike or
    # percent check (they would skip "100%.md" or a macOS decomposed "café.md"); the walk below
    # still follows no link and opens only a regular file.
    return _open_beneath(workspace, rel.split("/"), rel, allow_hard_links)


def resolve_memory_path(
    workspace: Path,
    raw: str,
    extra_paths: list[str] | None = None,
    *,
    allow_hard_links: bool = False,
) -> Path:
    """The file a memory path names, or WorkspaceError explaining why it is not allowed.

    Only `.md` files that are memory paths (MEMORY.md, USER.md, memory/**) or configured extra
    paths inside the workspace, through `confine_path`.
    """
    target, rel = confine_path(workspace, raw, allow_hard_links=allow_hard_links)
    if not rel.endswith(".md"):
        raise WorkspaceError(f"{raw!r} is not a Markdown file: only .md memory files can be read.")
    if not is_memory_path(rel):
        allowed_extra = {
            f.rel_path for f in discover_memory_files(workspace, extra_paths) if f.source == "extra"
        }
        if rel not in allowed_extra:
            raise WorkspaceError(
                f"{raw!r} is not a memory file: only MEMORY.md, USER.md, memory/**/*.md and "
                "configured extra paths can be read."
            )
    return target


def _open_outside_extra(
    workspace: Path, raw: str, extra_paths: list[str] | None, allow_hard_links: bool
) -> int | None:
    """A read-only descriptor of the file outside the workspace that an extra path indexes under
    the absolute path `raw` (as search shows it), or None when `raw` names no such file. Only
    exactly those files: opened from the configured folder one component at a time, never
    through a symbolic link (see `_open_beneath`)."""
    if not raw.startswith("/") or not extra_paths:
        return None
    found = next(
        (
            f
            for f in discover_memory_files(workspace, extra_paths)
            if f.source == "extra" and f.rel_path == raw and not f.rel_path.startswith(".")
        ),
        None,
    )
    if found is None:
        return None
    for configured in extra_paths:
        base = extra_path_base(workspace, configured)
        if base == found.abs_path:  # the extra path is this one file
            return _open_beneath(base.parent, [base.name], raw, allow_hard_links)
        if found.abs_path.is_relative_to(base):
            parts = list(found.abs_path.relative_to(base).parts)
            return _open_beneath(base, parts, raw, allow_hard_links)
    return None


@dataclass(frozen=True)
class ReadResult:
    path: str
    from_line: int
    to_line: int  # last line returned (from_line - 1 when nothing was returned)
    total_lines: int
    text: str


def read_memory_lines(
    workspace: Path,
    raw_path: str,
    from_line: int = 1,
    lines: int | None = None,
    extra_paths: list[str] | None = None,
    max_chars: int = 20_000,
    *,
    allow_hard_links: bool = False,
) -> ReadResult:
    """`lines` lines of a memory file starting at 1-based `from_line`.

    Past the end gives an empty text, not an error. Invalid UTF-8 is shown with U+FFFD.
    """
    if from_line < 1:
        raise WorkspaceError("from must be 1 or more (lines are numbered from 1).")
    if lines is not None and lines < 1:
        raise WorkspaceError("lines must be 1 or more.")
    outside = _open_outside_extra(workspace, raw_path, extra_paths, allow_hard_links)
    if outside is not None:
        rel, data = raw_path, _read_memory_fd(outside, raw_path)
    else:
        target = resolve_memory_path(
            workspace, raw_path, extra_paths, allow_hard_links=allow_hard_links
        )
        rel = target.relative_to(workspace).as_posix()
        try:
            fd = open_confined(workspace, rel, allow_hard_links=allow_hard_links)
        except FileMissingError:
            raise WorkspaceError(
                f"{rel} does not exist: search memory (`pinch memory search`) to find the right "
                "file."
            ) from None
        data = _read_memory_fd(fd, rel)
    if b"\x00" in data:  # as the index decides: a NUL anywhere
        raise WorkspaceError(f"{rel} cannot be read: {BINARY_ADVICE}.")
    # A byte-order mark is not text (the indexer drops it too).
    all_lines = data.decode("utf-8", errors="replace").removeprefix("\ufeff").split("\n")
    if all_lines and all_lines[-1] == "":
        all_lines.pop()
    start = from_line - 1
    end = len(all_lines) if lines is None else min(len(all_lines), start + lines)
    selected = all_lines[start:end] if start < len(all_lines) else []
    text = "\n".join(selected)
    if len(text) > max_chars:
        text = text[:max_chars] + f"\n… [truncated at {max_chars} characters; read fewer lines]"
    return ReadResult(rel, from_line, from_line + len(selected) - 1, len(all_lines), text)
