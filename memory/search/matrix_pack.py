"""Reading a generation's packed centroid matrix (memory/store/vector_pack.py) into arrays,
on several connections at once when allowed.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from memory.store.vector_pack import PackInfo
from memory.store.vector_storage import VectorStorage, sqlite_vector_storage

READ_THREADS = 8


@dataclass(frozen=True)
class Packed:
    """The pack read into arrays with `room` rows in all (rows past `rows` are free)."""

    seq: int
    rows: int
    ids: np.ndarray  # int64 (room,)
    vectors: np.ndarray  # float32 (room, dimensions)
    scope_of: np.ndarray  # int32 (room,): index into scope_ids; -1 = a free row
    scope_ids: dict[str, int]


def read_pack(
    conn: Any,
    generation: int,
    info: PackInfo,
    room: int,
    connect: Callable[[], Any] | None = None,
    storage: VectorStorage | None = None,
) -> Packed | None:
    """The pack in arrays of `room` (≥ info.rows) rows; None if it is not whole.

    With `connect` (a new read connection to the same file), blocks are read by up to
    `READ_THREADS` threads at once: a pack in a file with many free pages is scattered over it,
    and on a cold page cache each 1,024-row block is a chain of dependent page reads (at 100k
    chunks 2.0 s one block at a time, 0.8 s eight at a time). A block whose seq is not
    `info.seq` (rewritten meanwhile) makes this read one block at a time on `conn`."""
    storage = storage or sqlite_vector_storage()
    pack, tables = storage.pack, storage.tables
    layout = pack.layout(conn, generation)
    if sum(n for _, n in layout) != info.rows or info.rows > room:
        return None
    starts = dict(
        zip((b for b, _ in layout), np.cumsum([0] + [n for _, n in layout]).tolist(), strict=False)
    )
    ids = np.zeros(room, dtype=np.int64)
    scope_of = np.full(room, -1, dtype=np.int32)
    dims = pack.dimensions(conn, generation)
    if dims is None:
        return None
    # np.empty: pages of the reserved room that are never written are never resident.
    vectors = np.empty((room, dims), dtype=np.float32)
    codes: dict[int, tuple[list[str], np.ndarray]] = {}

    def read_blocks(c: Any, blocks: list[int]) -> bool:
        for block in blocks:
            found = pack.block(c, generation, block)
            if found is None or found.seq != info.seq or found.dimensions != vectors.shape[1]:
                return False
            i, n = starts[block], found.rows
            vectors[i : i + n] = found.vectors
            ids[i : i + n] = found.ids
            codes[block] = (found.scopes, found.scope_codes)
        return True

    blocks = [b for b, _ in layout]
    threads = min(READ_THREADS, len(blocks)) if connect is not None else 1
    whole = False
    if threads > 1:
        assert connect is not None

        def in_thread(k: int) -> bool:
            try:
                c = connect()
                try:
                    with tables.snapshot(c):
                        return read_blocks(c, blocks[k::threads])
                finally:
                    c.close()  # (ends the read transaction)
            except Exception:  # read again on `conn`, which holds the caller's snapshot
                return False

        with ThreadPoolExecutor(threads, thread_name_prefix="matrix-pack") as pool:
            whole = all(pool.map(in_thread, range(threads)))
    if not whole and not read_blocks(conn, blocks):
        return None
    scope_ids: dict[str, int] = {}
    for block in blocks:
        names, block_codes = codes[block]
        lut = np.array([scope_ids.setdefault(s, len(scope_ids)) for s in names], dtype=np.int32)
        i = starts[block]
        scope_of[i : i + len(block_codes)] = lut[block_codes]
    return Packed(info.seq, info.rows, ids, vectors, scope_of, scope_ids)
