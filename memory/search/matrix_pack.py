"""A packed copy of a generation's centroid matrix, so a full read is a few large blobs.

The row table `memory_matrix_g<N>` (one 1.5 kB row a chunk) stays the source of truth; reading
its 100k rows through SQLite and Python takes seconds. The pack, `memory_matrix_pack_g<N>`, holds
the same rows in blocks of `BLOCK_ROWS` (chunk ids as one int64 blob, scopes as int32 codes into
the block's own list of names, vectors as one float32 blob), ordered by chunk id, and records the
change-log seq it is current at. A reader loads the pack and then applies the change log since
that seq (memory/search/vectors.py). The pack is written whole in one transaction (every block
carries
the same seq) and dropped with the generation.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

BLOCK_ROWS = 1024  # 1.5 MB of vectors a block at 384 dimensions
READ_THREADS = 8


def pack_table(generation: int) -> str:
    return f"memory_matrix_pack_g{int(generation)}"


@dataclass(frozen=True)
class PackInfo:
    seq: int  # the change log's last seq the pack includes
    rows: int  # chunks in the pack


@dataclass(frozen=True)
class Packed:
    """The pack read into arrays with `room` rows in all (rows past `rows` are free)."""

    seq: int
    rows: int
    ids: np.ndarray  # int64 (room,)
    vectors: np.ndarray  # float32 (room, dimensions)
    scope_of: np.ndarray  # int32 (room,): index into scope_ids; -1 = a free row
    scope_ids: dict[str, int]


def _exists(conn: Any, name: str) -> bool:
    return bool(conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (name,)).fetchone())


def pack_info(conn: Any, generation: int) -> PackInfo | None:
    table = pack_table(generation)
    if not _exists(conn, table):
        return None
    seq, rows, blocks = conn.execute(
        f"SELECT min(seq), coalesce(sum(rows), 0), count(*) FROM {table}"
    ).fetchone()
    if not blocks:
        return None
    return PackInfo(int(seq), int(rows))


def drop_pack(conn: Any, generation: int) -> None:
    conn.execute(f"DROP TABLE IF EXISTS {pack_table(generation)}")


def write_pack(conn: Any, generation: int, rows_table: str, seq: int) -> int:
    """Replace the pack with a copy of `rows_table` (chunk_id, scope, vector) current at `seq`,
    inside the caller's write transaction (which must cover the log's seq and the rows).
    Returns the rows packed; a table whose vectors differ in width is not packed (0)."""
    table = pack_table(generation)
    drop_pack(conn, generation)
    conn.execute(
        f"CREATE TABLE {table} (block INTEGER PRIMARY KEY, seq INTEGER NOT NULL, "
        "rows INTEGER NOT NULL, dimensions INTEGER NOT NULL, scopes TEXT NOT NULL, "
        "ids BLOB NOT NULL, scope_codes BLOB NOT NULL, vectors BLOB NOT NULL)"
    )
    cursor = conn.execute(f"SELECT chunk_id, scope, vector FROM {rows_table} ORDER BY chunk_id")
    block, total, width = 0, 0, None
    while rows := cursor.fetchmany(BLOCK_ROWS):
        width = width or len(rows[0][2])
        if any(len(r[2]) != width for r in rows):
            drop_pack(conn, generation)
            return 0
        names: dict[str, int] = {}
        codes = [names.setdefault(r[1], len(names)) for r in rows]
        conn.execute(
            f"INSERT INTO {table} VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                block,
                seq,
                len(rows),
                width // 4,
                json.dumps(list(names)),
                np.array([r[0] for r in rows], dtype="<i8").tobytes(),
                np.array(codes, dtype="<i4").tobytes(),
                b"".join(r[2] for r in rows),
            ),
        )
        block += 1
        total += len(rows)
    return total


def read_pack(
    conn: Any,
    generation: int,
    info: PackInfo,
    room: int,
    connect: Callable[[], Any] | None = None,
) -> Packed | None:
    """The pack in arrays of `room` (≥ info.rows) rows; None if it is not whole.

    With `connect` (a new read connection to the same file), blocks are read by up to
    `READ_THREADS` threads at once: a pack in a file with many free pages is scattered over it,
    and on a cold page cache each 1,024-row block is a chain of dependent page reads (at 100k
    chunks 2.0 s one block at a time, 0.8 s eight at a time). A block whose seq is not
    `info.seq` (rewritten meanwhile) makes this read one block at a time on `conn`."""
    table = pack_table(generation)
    layout = [
        (int(b), int(n)) for b, n in conn.execute(f"SELECT block, rows FROM {table} ORDER BY block")
    ]
    if sum(n for _, n in layout) != info.rows or info.rows > room:
        return None
    starts = dict(
        zip((b for b, _ in layout), np.cumsum([0] + [n for _, n in layout]).tolist(), strict=False)
    )
    ids = np.zeros(room, dtype=np.int64)
    scope_of = np.full(room, -1, dtype=np.int32)
    dims_row = conn.execute(f"SELECT dimensions FROM {table} LIMIT 1").fetchone()
    if dims_row is None:
        return None
    # np.empty: pages of the reserved room that are never written are never resident.
    vectors = np.empty((room, int(dims_row[0])), dtype=np.float32)
    codes: dict[int, tuple[list[str], np.ndarray]] = {}

    def read_blocks(c: Any, blocks: list[int]) -> bool:
        for block in blocks:
            row = c.execute(
                f"SELECT seq, rows, dimensions, scopes, ids, scope_codes, vectors FROM {table} "
                "WHERE block = ?",
                (block,),
            ).fetchone()
            if row is None or row[0] != info.seq or row[2] != vectors.shape[1]:
                return False
            _, n, dims, names, id_blob, code_blob, vec_blob = row
            i = starts[block]
            vectors[i : i + n] = np.frombuffer(vec_blob, dtype="<f4").reshape(n, dims)
            ids[i : i + n] = np.frombuffer(id_blob, dtype="<i8")
            codes[block] = (json.loads(names), np.frombuffer(code_blob, dtype="<i4"))
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
                    c.execute("BEGIN")
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
