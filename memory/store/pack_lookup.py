"""Looking chunks' vectors up in a generation's pack (memory/store/vector_pack.py): in its
blocks, a block at a time, or in sqlite-vec's table where that is the pack
(memory/store/vec0_pack.py). `pack_lookup` picks the one the generation has."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from memory.store.vec0_pack import Vec0Pack, vec0_rows
from memory.store.vector_codec import MAGIC
from memory.store.vector_names import pack_table, table_exists


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


class BlockLookup:
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


def pack_lookup(conn: Any, generation: int) -> BlockLookup | Vec0Pack:
    """What looks chunks up in the generation's pack: its blocks, else sqlite-vec's table when
    that is the pack (memory/store/vec0_pack.py)."""
    if not table_exists(conn, pack_table(generation)):
        vec0 = vec0_rows(conn, generation)
        if vec0 is not None:
            return vec0
    return BlockLookup(conn, generation)
