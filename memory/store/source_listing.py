"""The memory files the index holds, as the owner's web page lists them: counted by kind, with
only the newest daily logs and session notes (thousands of them) read out. Read-only, over the
index's source rows (`memory_sources`, memory/store/index_rows.py owns the table).

    listing = SqliteSourceListing(db).listing(generation, newest=30)
    listing.counts["daily"]      # how many daily logs
    listing.files                # curated, other and extra files, and the newest dated ones
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from memory.store.db import Database

KINDS = ("curated", "daily", "note", "other", "extra")
_DAY = "[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]"
# The kinds of memory/files/discovery.py (file_day, is_memory_path) as SQL.
_KIND = (
    "CASE WHEN path IN ('MEMORY.md', 'USER.md') THEN 'curated' "
    f"WHEN source = 'memory' AND path GLOB 'memory/*' AND path GLOB '*/{_DAY}.md' THEN 'daily' "
    f"WHEN source = 'memory' AND path GLOB 'memory/*' AND path GLOB '*/{_DAY}-*.md' THEN 'note' "
    "WHEN source = 'memory' THEN 'other' ELSE 'extra' END"
)


@dataclass(frozen=True)
class ListedFile:
    path: str
    kind: str  # one of KINDS
    size: int
    mtime: float


@dataclass(frozen=True)
class SourceListing:
    counts: dict[str, int]  # files of each kind
    files: tuple[ListedFile, ...]  # dated kinds: the newest `newest` by path; others: all


class SourceListings(Protocol):
    """Read-only. Transcripts (source 'sessions') are never listed. Asked again at the same
    index version (which every write of the index changes), it answers what it answered."""

    def listing(self, generation: int, *, newest: int) -> SourceListing: ...


class CachedListing:
    """The listing kept per (generation, newest, index version), on any backend: classifying
    30,000 files costs ~80 ms, and the list changes only when the index does. Subclasses read
    it (`_read`)."""

    def __init__(self, db: Any) -> None:
        self.db = db
        self._last: tuple[tuple[int, int, str], SourceListing] | None = None

    def listing(self, generation: int, *, newest: int) -> SourceListing:
        version = self.db.execute("SELECT value FROM meta WHERE key = 'index_version'")
        key = (generation, newest, str(version[0][0]) if version else "0")
        last = self._last
        if last is not None and last[0] == key:
            return last[1]
        answer = self._read(generation, newest)
        self._last = (key, answer)
        return answer

    def _read(self, generation: int, newest: int) -> SourceListing:
        raise NotImplementedError


class SqliteSourceListing(CachedListing):
    def __init__(self, db: Database) -> None:
        super().__init__(db)

    def _read(self, generation: int, newest: int) -> SourceListing:
        where = "WHERE generation = ? AND source != 'sessions'"
        counts = {
            str(k): int(n)
            for k, n in self.db.execute(
                f"SELECT {_KIND} AS kind, count(*) FROM memory_sources {where} GROUP BY kind",
                (generation,),
            )
        }
        # The dated kinds newest first along the (generation, path) key, stopping at `newest`.
        rows = []
        for kind in ("daily", "note"):
            if counts.get(kind):
                rows += self.db.execute(
                    f"SELECT path, {_KIND} AS kind, size, mtime FROM memory_sources {where} "
                    "AND kind = ? ORDER BY path DESC LIMIT ?",
                    (generation, kind, newest),
                )
        rows += self.db.execute(
            f"SELECT path, {_KIND} AS kind, size, mtime FROM memory_sources {where} "
            "AND kind NOT IN ('daily', 'note')",
            (generation,),
        )
        files = tuple(ListedFile(str(p), str(k), int(z), float(m)) for p, k, z, m in rows)
        return SourceListing(counts, files)
