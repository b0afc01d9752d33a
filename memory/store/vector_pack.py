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
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from memory.store.vector_codec import HEADER, MAGIC, decode_many, is_quantised
from memory.store.vector_names import create_matrix, matrix_table, pack_table, table_exists

log = logging.getLogger(__name__)

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
        total = write_blocks(conn, generation, seq)
        if total:  # the pack holds every row's vector now: the rows keep none
            empty_row_vectors(conn, generation)
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


def empty_row_vectors(conn: Any, generation: int) -> None:
    """The row table's vectors dropped (the pack holds them). When most rows hold one (a
    generation just built), the table is written again without them: emptied in place, each
    page kept ≈ 4 % full — 41 MB of pages for 0.5 MB of rows at 100k chunks, which no free-page
    count shows and only a VACUUM gave back. Written again, they are free pages: reused by the
    next writes, counted by `pinch memory status`, given back by a compaction."""
    table = matrix_table(generation)
    holding, rows = conn.execute(f"SELECT count(vector), count(*) FROM {table}").fetchone()
    if not holding:
        return
    if 2 * holding < rows:
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
            if not _rows_lean_on_pack(conn, generation):
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
    pack = _PackReader(conn, generation)
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


def _rows_lean_on_pack(conn: Any, generation: int) -> bool:
    return bool(
        conn.execute(
            f"SELECT 1 FROM {matrix_table(generation)} WHERE vector IS NULL LIMIT 1"
        ).fetchone()
    )


@dataclass(frozen=True)
class _StoredBlock:
    """One block as stored: its rows' vectors are handed out in the row table's form."""

    rows: int
    dims: int
    scopes: list[str]
    ids: np.ndarray  # int64 (rows,), ascending
    scope_codes: np.ndarray  # int32 (rows,)
    vectors: bytes

    def stored(self, i: int) -> bytes:
        """Row `i`'s vector as the row table stores it (`b"i8"`, scale, codes; or float32)."""
        n, d = self.rows, self.dims
        if len(self.vectors) == 4 * n * d:
            return self.vectors[4 * i * d : 4 * (i + 1) * d]
        scale = self.vectors[n * d + 4 * i : n * d + 4 * i + 4]
        return MAGIC + scale + self.vectors[i * d : (i + 1) * d]


class _PackReader:
    """Looks chunks up in a generation's pack, a block at a time (the last block read is kept:
    lookups in chunk-id order read each block once)."""

    def __init__(self, conn: Any, generation: int) -> None:
        self.conn = conn
        self.table = pack_table(generation)
        self._firsts: tuple[np.ndarray, np.ndarray] | None = None  # (first ids, block numbers)
        self._kept: tuple[int, _StoredBlock | None] | None = None

    def _blocks(self) -> tuple[np.ndarray, np.ndarray]:
        if self._firsts is None:
            found: list[tuple[int, int]] = []
            if table_exists(self.conn, self.table):
                for block, ids in self.conn.execute(
                    f"SELECT block, substr(ids, 1, 8) FROM {self.table} ORDER BY block"
                ):
                    if ids:
                        found.append((int(np.frombuffer(ids, dtype="<i8")[0]), int(block)))
            found.sort()
            self._firsts = (
                np.array([f for f, _ in found], dtype=np.int64),
                np.array([b for _, b in found], dtype=np.int64),
            )
        return self._firsts

    def _block(self, block: int) -> _StoredBlock | None:
        if self._kept is None or self._kept[0] != block:
            row = self.conn.execute(
                f"SELECT rows, dimensions, scopes, ids, scope_codes, vectors FROM {self.table} "
                "WHERE block = ?",
                (block,),
            ).fetchone()
            found = None
            if row is not None:
                n, dims, names, ids, codes, vectors = row
                found = _StoredBlock(
                    int(n),
                    int(dims),
                    json.loads(names),
                    np.frombuffer(ids, dtype="<i8"),
                    np.frombuffer(codes, dtype="<i4"),
                    bytes(vectors),
                )
            self._kept = (block, found)
        return self._kept[1]

    def codes(self, chunk_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(found (bool, one per id), their 8-bit codes (found, d), their scales (found,)) of
        ascending chunk ids, from a pack of 8-bit blocks."""
        firsts, numbers = self._blocks()
        found = np.zeros(len(chunk_ids), dtype=bool)
        codes: list[np.ndarray] = []
        scales: list[np.ndarray] = []
        at = np.searchsorted(firsts, chunk_ids, side="right") - 1 if len(firsts) else None
        for k in np.unique(at[at >= 0]).tolist() if at is not None else []:
            block = self._block(int(numbers[k]))
            if block is None:
                continue
            which = np.flatnonzero(at == k)
            rows = np.minimum(np.searchsorted(block.ids, chunk_ids[which]), block.rows - 1)
            hit = block.ids[rows] == chunk_ids[which]
            found[which[hit]] = True
            n, d = block.rows, block.dims
            all_codes = np.frombuffer(block.vectors, np.int8, count=n * d).reshape(n, d)
            codes.append(all_codes[rows[hit]])
            scales.append(np.frombuffer(block.vectors, "<f4", count=n, offset=n * d)[rows[hit]])
        if not codes:
            return found, np.empty((0, 0), dtype=np.int8), np.empty(0, dtype="<f4")
        return found, np.concatenate(codes), np.concatenate(scales)

    def find(self, chunk_ids: list[int]) -> dict[int, tuple[str, bytes]]:
        """chunk id → (scope, stored vector) for those of `chunk_ids` the pack holds."""
        firsts, numbers = self._blocks()
        if not len(firsts) or not chunk_ids:
            return {}
        wanted = np.array(sorted(set(chunk_ids)), dtype=np.int64)
        at = np.searchsorted(firsts, wanted, side="right") - 1
        found: dict[int, tuple[str, bytes]] = {}
        for k in np.unique(at[at >= 0]).tolist():
            block = self._block(int(numbers[k]))
            if block is None:
                continue
            ids = wanted[at == k]
            rows = np.searchsorted(block.ids, ids)
            for cid, i in zip(ids.tolist(), rows.tolist(), strict=True):
                if i < block.rows and int(block.ids[i]) == cid:
                    found[cid] = (block.scopes[int(block.scope_codes[i])], block.stored(i))
        return found


def packed_ids(conn: Any, generation: int) -> np.ndarray:
    """Every chunk id the generation's pack holds (int64, in chunk-id order)."""
    blobs = [
        np.frombuffer(ids, dtype="<i8")
        for (ids,) in conn.execute(f"SELECT ids FROM {pack_table(generation)} ORDER BY block")
    ]
    return np.concatenate(blobs).astype(np.int64) if blobs else np.zeros(0, dtype=np.int64)


def packed_rows(conn: Any, generation: int, chunk_ids: list[int]) -> dict[int, tuple[str, bytes]]:
    """chunk id → (scope, stored vector) of those of `chunk_ids` the generation's pack holds."""
    return _PackReader(conn, generation).find(chunk_ids)


def current_rows(conn: Any, generation: int, batch: int) -> Iterator[list[tuple[int, str, bytes]]]:
    """The generation's rows (chunk id, scope, stored vector) in chunk-id order, `batch` at a
    time: the row table's, each vector its own or else the pack's."""
    pack = _PackReader(conn, generation)
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
