"""The workspace on disk: which files are memory, and safe reads of them.

Memory files are `MEMORY.md`, `USER.md`, `memory/**/*.md` and configured extra paths (files or
folders of `.md` files). Symlinks are skipped when discovering and refused when reading, so no
path can lead outside the workspace.
"""

from __future__ import annotations

import os
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from memory.errors import WorkspaceError

EVERGREEN_FILES = ("MEMORY.md", "USER.md")
_DATED = re.compile(r"(?:^|/)(\d{4})-(\d{2})-(\d{2})(?:-[^/]*)?\.md$")


@dataclass(frozen=True)
class MemoryFile:
    rel_path: str  # '/'-separated, relative to the workspace (or 'extra:<n>/...' for outside)
    abs_path: Path
    source: str  # 'memory' | 'extra'
    origin: str  # default origin of its chunks: 'owner' | 'agent'


def file_day(rel_path: str) -> str | None:
    """YYYY-MM-DD for dated logs (memory/2026-01-10.md, memory/2026-01-10-trip.md), else None."""
    m = _DATED.search(rel_path)
    if not m or not rel_path.startswith("memory/"):
        return None
    return f"{m.group(1)}-{m.group(2)}-{m.group(3)}"


def default_origin(rel_path: str) -> str:
    # Curated files are the owner's; logs and session notes are mostly written by the agent.
    return "owner" if rel_path in EVERGREEN_FILES else "agent"


def _walk_md(root: Path) -> list[Path]:
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(
            d for d in dirnames if not d.startswith(".") and not Path(dirpath, d).is_symlink()
        )
        for name in sorted(filenames):
            p = Path(dirpath, name)
            if name.endswith(".md") and not name.startswith(".") and not p.is_symlink():
                found.append(p)
    return found


def discover_memory_files(
    workspace: Path, extra_paths: list[str] | None = None
) -> list[MemoryFile]:
    """All memory files, in a stable order. Raises WorkspaceError if the workspace is missing."""
    if not workspace.is_dir():
        raise WorkspaceError(
            f"The workspace {workspace} does not exist. Run `pinch init` to create it "
            "(or set PINCH_WORKSPACE to where your memory files are)."
        )
    files: list[MemoryFile] = []
    for name in EVERGREEN_FILES:
        p = workspace / name
        if p.is_file() and not p.is_symlink():
            files.append(MemoryFile(name, p, "memory", "owner"))
    mem_dir = workspace / "memory"
    if mem_dir.is_dir() and not mem_dir.is_symlink():
        for p in _walk_md(mem_dir):
            rel = p.relative_to(workspace).as_posix()
            files.append(MemoryFile(rel, p, "memory", default_origin(rel)))
    seen = {f.rel_path for f in files}
    for raw in extra_paths or []:
        base = Path(raw).expanduser()
        base = base if base.is_absolute() else workspace / base
        if base.is_symlink() or not base.exists():
            continue
        candidates = [base] if base.is_file() else _walk_md(base)
        for p in candidates:
            if p.suffix != ".md":
                continue
            try:
                rel = p.resolve().relative_to(workspace.resolve()).as_posix()
            except ValueError:
                rel = p.resolve().as_posix()
            if rel not in seen:
                seen.add(rel)
                files.append(MemoryFile(rel, p, "extra", "owner"))
    return files


def is_memory_path(rel_path: str) -> bool:
    return (
        rel_path in EVERGREEN_FILES
        or rel_path.lower() == "memory.md"
        or (rel_path.startswith("memory/") and rel_path.endswith(".md"))
    )


def confine_path(workspace: Path, raw: str) -> tuple[Path, str]:
    """(absolute path, '/'-separated relative path) of a workspace-relative path, or
    WorkspaceError saying why it may not be used.

    The one check every file access goes through: no absolute paths, `~`, drive letters,
    backslashes, `.`/`..`/empty segments, hidden files, control characters, percent-encoding or
    Unicode look-alikes (NFKC-changed text), and no symbolic link anywhere along the path.
    """
    if not raw or not raw.strip():
        raise WorkspaceError("A path is required, e.g. memory/2026-01-10.md or MEMORY.md.")
    if any(unicodedata.category(ch) == "Cc" for ch in raw):
        raise WorkspaceError(f"{raw!r} contains control characters (such as a NUL byte).")
    if "%" in raw or unicodedata.normalize("NFKC", raw) != raw:
        raise WorkspaceError(
            f"{raw!r} contains encoded or look-alike characters; write the plain path."
        )
    text = raw.strip()
    if "\\" in text or text.startswith(("/", "~")) or re.match(r"^[A-Za-z]:", text):
        raise WorkspaceError(
            f"{raw!r} is not a workspace-relative path: use paths like memory/2026-01-10.md."
        )
    parts = text.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise WorkspaceError(f"{raw!r} may not contain '..', '.' or empty segments.")
    if any(p.startswith(".") for p in parts):
        raise WorkspaceError(f"{raw!r} names a hidden file or folder, which is not allowed.")
    probe = workspace
    for part in parts:
        probe = probe / part
        if probe.is_symlink():
            raise WorkspaceError(f"{raw!r} goes through a symbolic link, which is not allowed.")
    try:
        probe.resolve().relative_to(workspace.resolve())
    except ValueError as exc:
        raise WorkspaceError(f"{raw!r} is outside the workspace.") from exc
    return probe, "/".join(parts)


def resolve_memory_path(workspace: Path, raw: str, extra_paths: list[str] | None = None) -> Path:
    """The file a memory path names, or WorkspaceError explaining why it is not allowed.

    Only `.md` files that are memory paths (MEMORY.md, USER.md, memory/**) or configured extra
    paths inside the workspace, through `confine_path`.
    """
    target, rel = confine_path(workspace, raw)
    if not rel.endswith(".md"):
        raise WorkspaceError(f"{raw!r} is not a Markdown file: memory_get reads only .md files.")
    allowed_extra = {
        f.rel_path for f in discover_memory_files(workspace, extra_paths) if f.source == "extra"
    }
    if not is_memory_path(rel) and rel not in allowed_extra:
        raise WorkspaceError(
            f"{raw!r} is not a memory file: only MEMORY.md, USER.md, memory/**/*.md and "
            "configured extra paths can be read."
        )
    return target


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
) -> ReadResult:
    """`lines` lines of a memory file starting at 1-based `from_line`.

    Past the end gives an empty text, not an error. Invalid UTF-8 is shown with U+FFFD.
    """
    if from_line < 1:
        raise WorkspaceError("from must be 1 or more (lines are numbered from 1).")
    if lines is not None and lines < 1:
        raise WorkspaceError("lines must be 1 or more.")
    target = resolve_memory_path(workspace, raw_path, extra_paths)
    rel = target.relative_to(workspace).as_posix()
    if not target.exists():
        raise WorkspaceError(f"{rel} does not exist. Use memory_search to find the right file.")
    if not target.is_file():
        raise WorkspaceError(f"{rel} is not a file.")
    data = target.read_bytes()
    if b"\x00" in data[:8192]:
        raise WorkspaceError(f"{rel} looks like a binary file, not Markdown; it cannot be read.")
    all_lines = data.decode("utf-8", errors="replace").split("\n")
    if all_lines and all_lines[-1] == "":
        all_lines.pop()
    start = from_line - 1
    end = len(all_lines) if lines is None else min(len(all_lines), start + lines)
    selected = all_lines[start:end] if start < len(all_lines) else []
    text = "\n".join(selected)
    if len(text) > max_chars:
        text = text[:max_chars] + f"\n… [truncated at {max_chars} characters; read fewer lines]"
    return ReadResult(rel, from_line, from_line + len(selected) - 1, len(all_lines), text)
