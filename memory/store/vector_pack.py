"""The packed copy of a generation's centroid matrix, so a full read is a few large blobs — and
the one full copy of the centroids.

The pack, `memory_matrix_pack_g<N>`, holds a generation's rows in blocks of `BLOCK_ROWS` (chunk
ids as one int64 blob, scopes as int32 codes into the block's own list of names, vectors as one
blob: the rows' 8-bit codes then their float32 scales, memory/store/vector_codec.py — or float32
rows, as older packs and rows hold), ordered by chunk id, and records the change-log seq it is
current at. Reading 100k rows through SQLite and Python costs 0.36-0.5 s of CPU; the pack's
blocks 0.1-0.18 s. A reader loads the pack (memory/search/matrix_pack.py) and then applies the
change log since that seq (memory/search/matrix_cache.py). The pack is written whole in one
transaction (every block carries the same seq) and dropped with the generation.

Each centroid is stored once: writing the pack empties the `vector` of every row of the row table
`memory_matrix_g<N>` (memory/store/vector_tables.py), which keeps the chunk id and scope. A row
with a vector was written since the pack (or there is no pack: a small generation); a row whose
vector is NULL has it in the pack (`packed_rows`, `current_rows`).

On the sqlite-vec backend the pack is sqlite-vec's own table (memory/store/vec0_pack.py): it
holds each centroid's codes and scale, so once it is in step with the change log there are no
blocks (`SqliteMatrixPack` reads it the same way, in its chunks of 1,024 rows). A process
without sqlite-vec that writes meanwhile leaves it behind; its next pack is blocks again, until
sqlite-vec catches up.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from memory.store.pack_lookup import pack_lookup
from memory.store.vec0_pack import vec0_pack
from memory.store.vector_codec import HEADER, MAGIC, decode_many, is_quantised
from memory.store.vector_names import create_matrix, matrix_table, pack_table, table_exists

log = logging.getLogger(__name__)

SMALL_REWRITE = 2_000  # rows below which emptying the row table's vectors is done in place
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
      are numbered from 0 and hold the rows in chunk-id order, `BLOCK_ROWS` a block; it may
      drop the row table's own copies of the vectors it packed (the SQLite store does:
      `VectorTables` reads still answer them, from the pack);
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
        (0, and no new pack, when the vectors differ in width)."""

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
            vec0 = vec0_pack(conn, generation)
            rows = vec0.rows() if vec0 is not None else 0
            if vec0 is None or vec0.seq is None or not rows:
                return None
            return PackInfo(vec0.seq, rows)
        seq, rows, blocks = conn.execute(
            f"SELECT min(seq), coalesce(sum(rows), 0), count(*) FROM {table}"
        ).fetchone()
        if not blocks:
            return None
        return PackInfo(int(seq), int(rows))

    def drop(self, conn: Any, generation: int) -> None:
        conn.execute(f"DROP TABLE IF EXISTS {pack_table(generation)}")

    def write(self, conn: Any, generation: int, seq: int) -> int:
        vec0 = vec0_pack(conn, generation)
        if vec0 and vec0.seq == seq and codes_of_width(conn, generation, vec0.dimensions):
            # sqlite-vec's table is in step: it is the pack, the rows and blocks keep no copy
            conn.execute(f"DROP TABLE IF EXISTS {pack_table(generation)}")
            empty_row_vectors(conn, generation)
            return vec0.rows()
        total = write_blocks(conn, generation, seq)
        if total:  # the pack holds every row's vector now: the rows keep none
            empty_row_vectors(conn, generation)
        return total

    def layout(self, conn: Any, generation: int) -> list[tuple[int, int]]:
        if not table_exists(conn, pack_table(generation)):
            vec0 = vec0_pack(conn, generation)
            return vec0.layout() if vec0 is not None else []
        return [
            (int(b), int(n))
            for b, n in conn.execute(
                f"SELECT block, rows FROM {pack_table(generation)} ORDER BY block"
            )
        ]

    def dimensions(self, conn: Any, generation: int) -> int | None:
        if not table_exists(conn, pack_table(generation)):
            vec0 = vec0_pack(conn, generation)
            return vec0.dimensions if vec0 is not None else None
        row = conn.execute(f"SELECT dimensions FROM {pack_table(generation)} LIMIT 1").fetchone()
        return None if row is None else int(row[0])

    def block(self, conn: Any, generation: int, block: int) -> PackBlock | None:
        if not table_exists(conn, pack_table(generation)):
            vec0 = vec0_pack(conn, generation)
            found = vec0.block(block) if vec0 is not None else None
            if vec0 is None or found is None or found.seq is None:
                return None
            vectors = found.codes.astype(np.float32)
            vectors *= found.scales[:, None]
            return PackBlock(
                found.seq,
                found.rows,
                vec0.dimensions,
                found.scopes,
                found.ids,
                found.scope_codes,
                vectors,
            )
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


def empty_row_vectors(conn: Any, generation: int) -> None:
    """The row table's vectors dropped (the pack holds them). When most rows hold one (a
    generation just built), the table is written again without them: emptied in place, each
    page kept ≈ 4 % full — 41 MB of pages for 0.5 MB of rows at 100k chunks, which no free-page
    count shows and only a VACUUM gave back. Written again, they are free pages: reused by the
    next writes, counted by `pinch memory status`, given back by a compaction. (Under
    SMALL_REWRITE rows, in place: the pages at stake are fewer than the rewrite would free.)"""
    table = matrix_table(generation)
    holding, rows = conn.execute(f"SELECT count(vector), count(*) FROM {table}").fetchone()
    if not holding:
        return
    if 2 * holding < rows or holding < SMALL_REWRITE:
        conn.execute(f"UPDATE {table} SET vector = NULL WHERE vector IS NOT NULL")
        return
    conn.execute(f"DROP TABLE IF EXISTS {table}_next")
    conn.execute(create_matrix(f"{table}_next"))
    conn.execute(
        f"INSERT INTO {table}_next SELECT chunk_id, scope, NULL FROM {table} ORDER BY chunk_id"
    )
    conn.execute(f"DROP TABLE {table}")
    conn.execute(f"ALTER TABLE {table}_next RENAME TO {table}")


def block_vectors(blob: bytes, rows: int, dims: int) -> np.ndarray:
    """A block's vectors as float32 (rows, dims): 8-bit codes then scales, or float32."""
    if len(blob) == 4 * rows * dims:
        return np.frombuffer(blob, dtype="<f4").reshape(rows, dims)
    codes = np.frombuffer(blob, dtype=np.int8, count=rows * dims).reshape(rows, dims)
    scales = np.frombuffer(blob, dtype="<f4", count=rows, offset=rows * dims)
    out = codes.astype(np.float32)
    out *= scales[:, None]
    return out


def write_blocks(conn: Any, generation: int, seq: int) -> int:
    """Replace the generation's pack with its current rows (the old pack's merged with the row
    table's), every block at `seq`; the rows packed. When the vectors differ in width nothing
    is packed (0): the old pack is kept if rows still need it, else dropped."""
    table = pack_table(generation)
    new = f"{table}_next"  # written beside the old pack, which it reads, then renamed
    conn.execute(f"DROP TABLE IF EXISTS {new}")
    conn.execute(
        f"CREATE TABLE {new} (block INTEGER PRIMARY KEY, seq INTEGER NOT NULL, "
        "rows INTEGER NOT NULL, dimensions INTEGER NOT NULL, scopes TEXT NOT NULL, "
        "ids BLOB NOT NULL, scope_codes BLOB NOT NULL, vectors BLOB NOT NULL)"
    )
    width = _one_code_width(conn, generation)
    blocks = (
        _code_blocks(conn, generation, width)
        if width is not None
        else _row_blocks(conn, generation)
    )
    total = 0
    for block, found in enumerate(blocks):
        if found is None:  # the vectors differ in width
            conn.execute(f"DROP TABLE {new}")
            if not rows_lean_on_pack(conn, generation):
                conn.execute(f"DROP TABLE IF EXISTS {table}")
            return 0
        ids, scopes, dims, vectors = found
        names: dict[str, int] = {}
        codes = [names.setdefault(s, len(names)) for s in scopes]
        conn.execute(
            f"INSERT INTO {new} VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                block,
                seq,
                len(ids),
                dims,
                json.dumps(list(names)),
                np.asarray(ids, dtype="<i8").tobytes(),
                np.array(codes, dtype="<i4").tobytes(),
                vectors,
            ),
        )
        total += len(ids)
    conn.execute(f"DROP TABLE IF EXISTS {table}")
    conn.execute(f"ALTER TABLE {new} RENAME TO {table}")
    return total


_Block = tuple[np.ndarray, list[str], int, bytes]  # chunk ids, scopes, dimensions, vectors blob


def _row_blocks(conn: Any, generation: int) -> Iterator[_Block | None]:
    """The pack's blocks from the rows one by one (any stored form); None: widths differ."""
    width = None
    for rows in current_rows(conn, generation, BLOCK_ROWS):
        blobs = [r[2] for r in rows]
        dims = [len(b) - HEADER if is_quantised(b) else len(b) // 4 for b in blobs]
        width = width or dims[0]
        if any(d != width for d in dims):
            yield None
            return
        if all(is_quantised(b) for b in blobs):
            vectors = b"".join(b[HEADER:] for b in blobs) + b"".join(b[2:HEADER] for b in blobs)
        else:
            vectors = decode_many(blobs).astype("<f4").tobytes()
        yield np.array([r[0] for r in rows], dtype=np.int64), [r[1] for r in rows], width, vectors


def _one_code_width(conn: Any, generation: int) -> int | None:
    """The dimensions when every stored vector (rows and pack) is 8-bit codes of one width, so
    the pack can be rewritten block by block in arrays (else None: row by row)."""
    widths = conn.execute(
        f"SELECT DISTINCT length(vector), substr(vector, 1, 2) = ? FROM "
        f"{matrix_table(generation)} WHERE vector IS NOT NULL",
        (MAGIC,),
    ).fetchall()
    dims = {int(n) - HEADER for n, magic in widths if magic and int(n) % 4 == 2}
    if len(dims) != len(widths):
        return None
    if table_exists(conn, pack_table(generation)):
        packed = conn.execute(
            f"SELECT DISTINCT dimensions, length(vectors) = rows * (dimensions + 4) "
            f"FROM {pack_table(generation)}"
        ).fetchall()
        if not all(quantised for _, quantised in packed):
            return None
        dims |= {int(d) for d, _ in packed}
    return dims.pop() if len(dims) == 1 else None


def _code_blocks(conn: Any, generation: int, dims: int) -> Iterator[_Block | None]:
    """The pack's blocks as arrays of 8-bit codes and scales: each row's own, else the old
    pack's (the same bytes `_row_blocks` gives, without a blob a row)."""
    pack = pack_lookup(conn, generation)
    cursor = conn.execute(
        f"SELECT chunk_id, scope, vector FROM {matrix_table(generation)} ORDER BY chunk_id"
    )
    while rows := cursor.fetchmany(BLOCK_ROWS):
        ids = np.array([r[0] for r in rows], dtype=np.int64)
        own = np.array([r[2] is not None for r in rows], dtype=bool)
        codes = np.empty((len(rows), dims), dtype=np.int8)
        scales = np.empty(len(rows), dtype="<f4")
        blobs = [bytes(r[2]) for r in rows if r[2] is not None]
        if blobs:
            codes[own] = np.frombuffer(b"".join(b[HEADER:] for b in blobs), np.int8).reshape(
                -1, dims
            )
            scales[own] = np.frombuffer(b"".join(b[2:HEADER] for b in blobs), "<f4")
        kept = own.copy()
        if not own.all():
            at = np.flatnonzero(~own)
            found, packed_codes, packed_scales = pack.codes(ids[at])
            codes[at[found]], scales[at[found]] = packed_codes, packed_scales
            kept[at[found]] = True
            if not found.all():  # never written so: the pack would have been kept
                log.warning(
                    "%d centroid vectors of generation %d are neither in their rows nor the pack",
                    int((~found).sum()),
                    generation,
                )
        if kept.any():
            yield (
                ids[kept],
                [r[1] for r, k in zip(rows, kept.tolist(), strict=True) if k],
                dims,
                codes[kept].tobytes() + scales[kept].tobytes(),
            )


def rows_lean_on_pack(conn: Any, generation: int) -> bool:
    return bool(
        conn.execute(
            f"SELECT 1 FROM {matrix_table(generation)} WHERE vector IS NULL LIMIT 1"
        ).fetchone()
    )


def codes_of_width(conn: Any, generation: int, dims: int) -> bool:
    """Whether every vector the rows and the block pack hold is 8-bit codes of `dims` (what
    sqlite-vec's int8 table keeps exactly)."""
    widths = conn.execute(
        f"SELECT DISTINCT length(vector), substr(vector, 1, 2) = ? FROM "
        f"{matrix_table(generation)} WHERE vector IS NOT NULL",
        (MAGIC,),
    ).fetchall()
    if any(not magic or int(n) != dims + HEADER for n, magic in widths):
        return False
    if not table_exists(conn, pack_table(generation)):
        return True
    packed = conn.execute(
        f"SELECT DISTINCT dimensions, length(vectors) = rows * (dimensions + 4) "
        f"FROM {pack_table(generation)}"
    ).fetchall()
    return all(int(d) == dims and quantised for d, quantised in packed)


def packed_rows(conn: Any, generation: int, chunk_ids: list[int]) -> dict[int, tuple[str, bytes]]:
    """chunk id → (scope, stored vector) of those of `chunk_ids` the generation's pack holds."""
    return pack_lookup(conn, generation).find(chunk_ids)


def current_rows(conn: Any, generation: int, batch: int) -> Iterator[list[tuple[int, str, bytes]]]:
    """The generation's rows (chunk id, scope, stored vector) in chunk-id order, `batch` at a
    time: the row table's, each vector its own or else the pack's."""
    pack = pack_lookup(conn, generation)
    cursor = conn.execute(
        f"SELECT chunk_id, scope, vector FROM {matrix_table(generation)} ORDER BY chunk_id"
    )
    while rows := cursor.fetchmany(batch):
        missing = [int(r[0]) for r in rows if r[2] is None]
        packed = pack.find(missing) if missing else {}
        if len(packed) < len(missing):  # never written so: the pack would have been kept
            log.warning(
                "%d centroid vectors of generation %d are neither in their rows nor the pack",
                len(missing) - len(packed),
                generation,
            )
        yield [
            (int(cid), scope, bytes(blob) if blob is not None else packed[int(cid)][1])
            for cid, scope, blob in rows
            if blob is not None or int(cid) in packed
        ]
