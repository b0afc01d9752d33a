"""Generated benchmark workspaces on disk, rewritten only where their content changed.

Reusing a workspace between runs keeps file hashes stable, so the index skips unchanged files
and the embedding cache in its database makes reruns fast.
"""

from __future__ import annotations

from pathlib import Path


def write_workspace(root: Path, files: dict[str, str]) -> int:
    """Make `root` hold exactly `files` (workspace-relative path -> content) as memory files.

    Writes only files whose content differs and deletes other memory files (MEMORY.md, USER.md,
    memory/**/*.md) left by earlier runs. Returns how many files were written or deleted.
    """
    changed = 0
    root.mkdir(parents=True, exist_ok=True)
    for rel, content in files.items():
        target = root / rel
        if target.is_file() and target.read_text(encoding="utf-8") == content:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content, encoding="utf-8")
        changed += 1
    stale = [p for p in (root / "MEMORY.md", root / "USER.md") if p.is_file()]
    if (root / "memory").is_dir():
        stale += list((root / "memory").rglob("*.md"))
    for path in stale:
        if path.relative_to(root).as_posix() not in files:
            path.unlink()
            changed += 1
    return changed


def relative_hit_path(path: str, workspace: Path) -> str:
    """A hit's path as '/'-separated and workspace-relative, whatever form the index reports."""
    candidate = Path(path)
    if candidate.is_absolute():
        try:
            return candidate.resolve().relative_to(workspace.resolve()).as_posix()
        except ValueError:
            return candidate.as_posix()
    return path.replace("\\", "/").removeprefix("./")
