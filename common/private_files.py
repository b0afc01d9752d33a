"""Files only the owner's OS user may read: 0600 files, 0700 folders (the agent database, the
memory files, the inbox, Pinch's home)."""

from __future__ import annotations

from pathlib import Path

PRIVATE_FILE_MODE = 0o600
PRIVATE_DIR_MODE = 0o700


def make_private_dirs(path: Path) -> list[Path]:
    """Create `path` and any missing parents with mode 0700; returns the folders created.

    (`Path.mkdir(parents=True)` would give the parents the umask's mode, often 0755.)
    """
    missing: list[Path] = []
    probe = path
    while not probe.exists() and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=PRIVATE_DIR_MODE)
        except FileExistsError:
            continue
    return list(reversed(missing))
