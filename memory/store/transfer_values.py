"""Row values as `pinch migrate`'s SQLite side reads and writes them (memory/store/
transfer_sqlite.py): stored vectors as float32 and back to codes where that is exact (both
backends' writers), datetimes as UTC text, and a bare read-only connection shaped like the
Database the cache's readers take."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from memory.store.transfer import MATRIX, MATRIX_PACK, utc_text
from memory.store.vector_codec import decode, exact_compact_blobs, is_compact
from memory.store.vector_pack import block_vectors


class BareReader:
    """What `cached_vectors` uses of a Database, over a bare connection (read only)."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.lock = contextlib.nullcontext()

    def execute(self, query: str, params: Sequence[Any] = ()) -> list[Any]:
        return list(self.conn.execute(query, params))


def float32_blob(blob: bytes) -> bytes:
    """A stored vector as float32 little-endian (8-bit codes decoded; float32 as it is)."""
    blob = bytes(blob)
    return decode(blob).astype("<f4").tobytes() if is_compact(blob) else blob


def matrix_generation(table: str, columns: Sequence[str]) -> int | None:
    """The generation of a matrix row table read with its vectors (None: another table)."""
    match = MATRIX.fullmatch(table)
    return int(match.group(1)) if match and {"vector", "chunk_id"} <= set(columns) else None


def float32_rows(table: str, columns: Sequence[str]) -> Any:
    """A function turning `table`'s rows to their float32 form, None for a table without
    vectors stored as 8-bit codes."""
    names = list(columns)
    if table == "embedding_cache" and "vector" in names:
        at = names.index("vector")
        return lambda row: (*row[:at], float32_blob(row[at]), *row[at + 1 :])
    if MATRIX_PACK.fullmatch(table) and {"vectors", "rows", "dimensions"} <= set(names):
        at, n, d = names.index("vectors"), names.index("rows"), names.index("dimensions")

        def block(row: Any) -> tuple[Any, ...]:
            floats = block_vectors(bytes(row[at]), int(row[n]), int(row[d]))
            return (*row[:at], floats.astype("<f4").tobytes(), *row[at + 1 :])

        return block
    return None


# The tables whose `vector` both backends store as 8-bit codes (a passage's own, a cached one).
CODED = ("memory_units", "embedding_cache")


def vector_at(table: str, columns: Sequence[str]) -> int | None:
    """Where a coded table's `vector` is among `columns` (None: not one of them)."""
    return list(columns).index("vector") if table in CODED and "vector" in columns else None


def coded_rows(table: str, columns: Sequence[str], rows: Sequence[Any]) -> list[Any]:
    """Portable rows of `table` as a target stores them: each float32 vector as 8-bit codes
    where those decode to exactly its floats (codes decoded on the way come back as the very
    same bytes), any other kept whole, so what is read back hashes the same."""
    at = vector_at(table, columns)
    if at is None:
        return list(rows)
    vectors = exact_compact_blobs([r[at] for r in rows])
    return [(*r[:at], v, *r[at + 1 :]) for r, v in zip(rows, vectors, strict=True)]


def sqlite_value(value: Any) -> Any:
    if isinstance(value, datetime):
        return utc_text(value)
    if isinstance(value, memoryview):
        return bytes(value)
    return value


def fsync_path(path: Path) -> None:
    """Flush a file (or a folder's entries) to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_database(path: Path) -> None:
    """A SQLite file and its WAL and shared-memory files, where they are."""
    for name in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        name.unlink(missing_ok=True)
