"""Which files are memory: `MEMORY.md`, `USER.md`, `memory/**/*.md` and configured extra paths
(files or folders of `.md` files), found without following symbolic links; their dates and
default origins. Reading them safely is memory/files/workspace.py's."""

from __future__ import annotations

import errno
import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from memory.errors import WorkspaceError

EVERGREEN_FILES = ("MEMORY.md", "USER.md")
DREAMS_FILE = "DREAMS.md"  # the dream diary: for the owner to read, never indexed nor loaded
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


def extra_path_base(workspace: Path, configured: str) -> Path:
    """Where an `[memory] extra_paths` entry points: `~` expanded, a relative path taken from the
    workspace (not resolved: a symbolic link stays one, to be refused)."""
    base = Path(configured).expanduser()
    return base if base.is_absolute() else workspace / base


def discover_memory_files(
    workspace: Path, extra_paths: list[str] | None = None
) -> list[MemoryFile]:
    """All memory files, in a stable order. Raises WorkspaceError if the workspace is missing.

    Symbolic links are skipped. Files with several hard links are listed: opening them
    (`open_memory_file`) refuses them unless `allow_hard_links` (`[memory] allow_hard_links`), so
    the indexer reports each with what to do instead of leaving it out without a word.
    """
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
        base = extra_path_base(workspace, raw)
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
            if rel not in seen and rel != DREAMS_FILE:  # Dreaming's diary is never a source
                seen.add(rel)
                files.append(MemoryFile(rel, p, "extra", "owner"))
    return files


def extra_path_problems(workspace: Path, extra_paths: list[str] | None) -> dict[str, str]:
    """{configured extra path: why nothing is indexed from it} for paths that are missing or are
    symbolic links (never followed), so a typo or a linked folder is not ignored without a word."""
    problems: dict[str, str] = {}
    for raw in extra_paths or []:
        base = extra_path_base(workspace, raw)
        if base.is_symlink() and (broken := broken_link(base)):
            problems[raw] = f"skipped: {base} is {broken}; fix the path in [memory] extra_paths"
        elif base.is_symlink():
            problems[raw] = (
                f"skipped: {base} is a symbolic link, which Pinch does not follow; put the "
                f"folder it points to ({os.path.realpath(base)}) in [memory] extra_paths instead"
            )
        elif not base.exists():
            problems[raw] = (
                f"skipped: {base} does not exist; fix the path in [memory] extra_paths "
                "(relative paths are taken from the workspace)"
            )
    return problems


def broken_link(link: Path) -> str | None:
    """What is wrong with symbolic link `link` if it leads to nothing (its target is missing, or
    it loops back to itself), else None: advice to point it elsewhere would be wrong then."""
    try:
        os.path.realpath(link, strict=True)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "a symbolic link that leads back to itself (a loop)"
        return f"a symbolic link to {os.readlink(link)}, which does not exist"
    return None


def skipped_links(workspace: Path) -> dict[str, str]:
    """{path in the workspace: why it is not indexed} for the symbolic links where memory files
    would be (MEMORY.md, USER.md, the memory folder, Markdown files and folders inside it):
    `discover_memory_files` never follows them, and a file left out must not go without a word.
    """
    found: dict[str, str] = {}

    def add(p: Path) -> None:
        rel = p.relative_to(workspace).as_posix()
        if broken := broken_link(p):
            found[rel] = f"skipped: {broken}; remove it (`rm {shlex.quote(rel)}`)"
            return
        found[rel] = (
            "skipped: a symbolic link, which Pinch does not follow inside the workspace (so no "
            "link can point memory tools at files elsewhere); put the file itself here, or add "
            f"what it points to ({os.path.realpath(p)}) to [memory] extra_paths"
        )

    for name in EVERGREEN_FILES:
        if (workspace / name).is_symlink():
            add(workspace / name)
    mem_dir = workspace / "memory"
    if mem_dir.is_symlink():
        add(mem_dir)
    elif mem_dir.is_dir():
        for dirpath, dirnames, filenames in os.walk(mem_dir, followlinks=False):
            for name in sorted([*dirnames, *filenames]):
                p = Path(dirpath, name)
                if (
                    not name.startswith(".")
                    and p.is_symlink()
                    and (p.is_dir() or name.endswith(".md"))
                ):
                    add(p)
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
    return found


def is_memory_path(rel_path: str) -> bool:
    return (
        rel_path in EVERGREEN_FILES
        or rel_path.lower() == "memory.md"
        or (rel_path.startswith("memory/") and rel_path.endswith(".md"))
    )
