"""A packed copy of a generation's centroid matrix, so a full read is a few large blobs.

The row table `memory_matrix_g<N>` (one 1.5 kB row a chunk) stays the source of truth; reading
its 100k rows through SQLite and Python takes seconds. The pack, `memory_matrix_pack_g<N>`, holds
the same rows in blocks of `BLOCK_ROWS` (chunk ids as one int64 blob, scopes as int32 codes into
the block's own list of names, vectors as one blob: the rows' 8-bit codes then their float32
scales, memory/store/vector_codec.py — or float32 rows, as older packs and rows hold), ordered by
chunk id, and records the
change-log seq it is current at. A reader loads the pack (memory/search/matrix_pack.py) and then
applies the change log since that seq (memory/search/matrix_cache.py). The pack is written
whole in one transaction (every block carries the same seq) and dropped with the generation.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from memory.store.vector_codec import HEADER, decode_many, is_quantised
from memory.store.vector_tables import matrix_table, pack_table, table_exists

BLOCK_ROWS = 1024  # 0.4 MB of vectors a block at 384 dimensions (1.5 MB as float32)


@dataclass(frozen=True)
class PackInfo:
    seq: int  # the change log's last seq the pack includes
    rows: int  # chunks in the pack


@dataclass(frozen=True)
class PackBlock:
    """One block of the pack, decoded (the arrays are read-only views of the stored blobs)."""

    seq: int
    rows: int
    dimensions: int
    scopes: list[str]  # the block's scope names; `scope_codes` index into it
    ids: np.ndarray  # int64 (rows,)
    scope_codes: np.ndarray  # int32 (rows,)
    vectors: np.ndarray  # float32 (rows, dimensions)


class MatrixPack(Protocol):
    """The packed copy of a generation's vectors, in numbered blocks.

    Promises a second implementation must keep:
    - `write` replaces the whole pack inside the caller's transaction (which must also cover
      the change log's `seq` and the rows it copies): every block carries that one seq, blocks
      are numbered from 0 and hold the rows in chunk-id order, `BLOCK_ROWS` a block;
    - a pack is all or nothing: a reader that finds blocks of different seqs (rewritten
      meanwhile, seen on another connection) must not mix them;
    - `info` is None when there is no pack (or it has no blocks);
    - `drop` removes it (also done by `VectorTables.drop_generation`).
    """

    def info(self, conn: Any, generation: int) -> PackInfo | None:
        """The pack's seq and rows, or None if there is none."""

    def drop(self, conn: Any, generation: int) -> None: ...

    def write(self, conn: Any, generation: int, seq: int) -> int:
        """Replace the pack with the generation's rows, current at `seq`; the rows packed
        (0, and no pack, when the vectors differ in width)."""

    def layout(self, conn: Any, generation: int) -> list[tuple[int, int]]:
        """(block number, rows) of each block, by block number."""

    def dimensions(self, conn: Any, generation: int) -> int | None:
        """The width of the packed vectors (None: no block)."""

    def block(self, conn: Any, generation: int, block: int) -> PackBlock | None:
        """One block, or None if it is not there."""


class SqliteMatrixPack:
    """`MatrixPack` as one SQLite table of blocks per generation."""

    def info(self, conn: Any, generation: int) -> PackInfo | None:
        table = pack_table(generation)
        if not table_exists(conn, table):
            return None
        seq, rows, blocks = conn.execute(
            f"SELECT min(seq), coalesce(sum(rows), 0), count(*) FROM {table}"
        ).fetchone()
        if not blocks:
            return None
        return PackInfo(int(seq), int(rows))

    def drop(self, conn: Any, generation: int) -> None:
        conn.execute(f"DROP TABLE IF EXISTS {pack_table(generation)}")

    def write(self, conn: Any, generation: int, seq: int) -> int:
        table = pack_table(generation)
        self.drop(conn, generation)
        conn.execute(
            f"CREATE TABLE {table} (block INTEGER PRIMARY KEY, seq INTEGER NOT NULL, "
            "rows INTEGER NOT NULL, dimensions INTEGER NOT NULL, scopes TEXT NOT NULL, "
            "ids BLOB NOT NULL, scope_codes BLOB NOT NULL, vectors BLOB NOT NULL)"
        )
        cursor = conn.execute(
            f"SELECT chunk_id, scope, vector FROM {matrix_table(generation)} ORDER BY chunk_id"
        )
        block, total, width = 0, 0, None
        while rows := cursor.fetchmany(BLOCK_ROWS):
            width = width or len(rows[0][2])
            if any(len(r[2]) != width for r in rows):
                self.drop(conn, generation)
                return 0
            blobs = [r[2] for r in rows]
            if all(is_quantised(b) for b in blobs):
                dims = width - HEADER
                vectors = b"".join(b[HEADER:] for b in blobs) + b"".join(b[2:HEADER] for b in blobs)
            else:
                dims = width // 4
                vectors = decode_many(blobs).astype("<f4").tobytes()
            names: dict[str, int] = {}
            codes = [names.setdefault(r[1], len(names)) for r in rows]
            conn.execute(
                f"INSERT INTO {table} VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    block,
                    seq,
                    len(rows),
                    dims,
                    json.dumps(list(names)),
                    np.array([r[0] for r in rows], dtype="<i8").tobytes(),
                    np.array(codes, dtype="<i4").tobytes(),
                    vectors,
                ),
            )
            block += 1
            total += len(rows)
        return total

    def layout(self, conn: Any, generation: int) -> list[tuple[int, int]]:
        return [
            (int(b), int(n))
            for b, n in conn.execute(
                f"SELECT block, rows FROM {pack_table(generation)} ORDER BY block"
            )
        ]

    def dimensions(self, conn: Any, generation: int) -> int | None:
        row = conn.execute(f"SELECT dimensions FROM {pack_table(generation)} LIMIT 1").fetchone()
        return None if row is None else int(row[0])

    def block(self, conn: Any, generation: int, block: int) -> PackBlock | None:
        row = conn.execute(
            f"SELECT seq, rows, dimensions, scopes, ids, scope_codes, vectors "
            f"FROM {pack_table(generation)} WHERE block = ?",
            (block,),
        ).fetchone()
        if row is None:
            return None
        seq, n, dims, names, id_blob, code_blob, vec_blob = row
        return PackBlock(
            seq,
            n,
            dims,
            json.loads(names),
            np.frombuffer(id_blob, dtype="<i8"),
            np.frombuffer(code_blob, dtype="<i4"),
            block_vectors(vec_blob, n, dims),
        )


def block_vectors(blob: bytes, rows: int, dims: int) -> np.ndarray:
    """A block's vectors as float32 (rows, dims): 8-bit codes then scales, or float32."""
    if len(blob) == 4 * rows * dims:
        return np.frombuffer(blob, dtype="<f4").reshape(rows, dims)
    codes = np.frombuffer(blob, dtype=np.int8, count=rows * dims).reshape(rows, dims)
    scales = np.frombuffer(blob, dtype="<f4", count=rows, offset=rows * dims)
    out = codes.astype(np.float32)
    out *= scales[:, None]
    return out
