"""sqlite-vec's vec0 table read as the generation's pack: on the sqlite-vec backend the one stored
copy of the centroids (issue 22: each vector stored once; 40 MB at 100k chunks).

A vec0 table made by this version (`memory_vec_g<N>`: `scope text, scale float, embedding
int8[d]`, memory/store/vector_knn.py) holds each centroid's 8-bit codes and its float32 scale —
everything the stored form (memory/store/vector_codec.py: `b"i8"`, scale, codes) has — so once
it is in step with the change log the row table needs no copy and the block pack
(memory/store/vector_pack.py) none either. Its shadow tables are ordinary tables: any process
reads them, with or without the extension (only writing the vec0 table needs sqlite-vec).

The shadow layout is sqlite-vec's own (v0.1.9): `<t>_chunks(chunk_id, size, validity, rowids)`
— `size` slots, a bitmap of the live ones (bit i of byte i/8) and their rowids as int64; per
chunk `<t>_vector_chunks00(rowid = chunk_id, vectors)` (`size` × d int8 codes),
`<t>_metadatachunks00` (the scope: 16 bytes a slot, an int32 length then the text's first 12
bytes; longer texts whole in `<t>_metadatatext00` by rowid) and `<t>_metadatachunks01` (the
scale: a float64 a slot); `<t>_rowids(rowid, chunk_id, chunk_offset)` finds one row. A table
whose creator is not a version known here, or whose columns differ, is not read this way (the
block pack stays the copy).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from memory.store.vector_codec import MAGIC
from memory.store.vector_names import table_exists, vec0_seq_key, vec_table

KNOWN_VERSIONS = frozenset({"v0.1.9"})  # sqlite-vec versions whose shadow layout is read here
_TEXT_VIEW = 16  # bytes a text metadata slot takes: int32 length, then 12 bytes of the text
_TEXT_INLINE = 12
_BATCH = 500


def vec0_columns(dimensions: int) -> str:
    """The columns of a vec0 table that can serve as the pack."""
    return f"scope text, scale float, embedding int8[{int(dimensions)}] distance_metric=cosine"


_COLUMNS = re.compile(
    r"USING\s+vec0\(\s*scope text, scale float, "
    r"embedding int8\[(\d+)\] distance_metric=cosine\s*\)",
    re.IGNORECASE,
)
_SHADOWS = (
    "chunks",
    "rowids",
    "vector_chunks00",
    "metadatachunks00",
    "metadatatext00",
    "metadatachunks01",
)


def packable_dimensions(conn: Any, generation: int) -> int | None:
    """The width of the generation's vec0 table when it can serve as the pack (its columns
    hold scales, a known sqlite-vec version made it); else None."""
    table = vec_table(generation)
    row = conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", (table,)).fetchone()
    match = _COLUMNS.search(row[0] or "") if row is not None else None
    if match is None or not all(table_exists(conn, f"{table}_{s}") for s in _SHADOWS):
        return None
    if not table_exists(conn, f"{table}_info"):
        return None
    version = conn.execute(
        f"SELECT value FROM {table}_info WHERE key = 'CREATE_VERSION'"
    ).fetchone()
    if version is None or version[0] not in KNOWN_VERSIONS:
        return None
    return int(match.group(1))


def vec0_seq(conn: Any, generation: int) -> int | None:
    """The change log's seq the vec0 table last caught up to (None: never)."""
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (vec0_seq_key(generation),))
    found = row.fetchone()
    return int(found[0]) if found is not None else None


@dataclass(frozen=True)
class Vec0Block:
    """One vec0 chunk's live rows, in chunk-id order."""

    seq: int | None  # the vec0 table's seq, read with the block
    ids: np.ndarray  # int64 (rows,)
    scopes: list[str]
    scope_codes: np.ndarray  # int32 (rows,) into scopes
    codes: np.ndarray  # int8 (rows, d)
    scales: np.ndarray  # float32 (rows,)

    @property
    def rows(self) -> int:
        return len(self.ids)


class Vec0Pack:
    """Reads a generation's vec0 table (of `dimensions`, from `packable_dimensions`; in step
    with the change log at `seq`, None: not known) as blocks and looks rows up in it;
    read-only."""

    def __init__(self, conn: Any, generation: int, dimensions: int, seq: int | None) -> None:
        self.conn = conn
        self.generation = generation
        self.dimensions = dimensions
        self.seq = seq
        self.table = vec_table(generation)
        self._kept: tuple[int, Vec0Block | None] | None = None

    def rows(self) -> int:
        (n,) = self.conn.execute(f"SELECT count(*) FROM {self.table}_rowids").fetchone()
        return int(n)

    def layout(self) -> list[tuple[int, int]]:
        """(vec0 chunk, live rows) of each chunk holding any, by chunk."""
        out = []
        for chunk, validity in self.conn.execute(
            f"SELECT chunk_id, validity FROM {self.table}_chunks ORDER BY chunk_id"
        ):
            live = int(np.unpackbits(np.frombuffer(validity, np.uint8)).sum())
            if live:
                out.append((int(chunk), live))
        return out

    def block(self, chunk: int) -> Vec0Block | None:
        t = self.table
        row = self.conn.execute(
            f"SELECT c.size, c.validity, c.rowids, v.vectors, s.data, k.data, "
            f"(SELECT value FROM meta WHERE key = ?) FROM {t}_chunks c "
            f"JOIN {t}_vector_chunks00 v ON v.rowid = c.chunk_id "
            f"JOIN {t}_metadatachunks00 s ON s.rowid = c.chunk_id "
            f"JOIN {t}_metadatachunks01 k ON k.rowid = c.chunk_id WHERE c.chunk_id = ?",
            (vec0_seq_key(self.generation), chunk),
        ).fetchone()
        if row is None:
            return None
        size, validity, rowids, vectors, scope_views, scales, seq = row
        d = self.dimensions
        if len(vectors) != size * d or len(rowids) != 8 * size or len(scales) != 8 * size:
            return None  # not the layout this reader knows
        live = np.unpackbits(np.frombuffer(validity, np.uint8), bitorder="little")[:size] > 0
        ids = np.frombuffer(rowids, "<i8")[live]
        order = np.argsort(ids, kind="stable")
        at = np.flatnonzero(live)[order]
        views = np.frombuffer(scope_views, np.uint8).reshape(size, _TEXT_VIEW)[at]
        names, scope_codes = self._scopes(ids[order], views)
        return Vec0Block(
            None if seq is None else int(seq),
            ids[order].astype(np.int64),
            names,
            scope_codes,
            np.frombuffer(vectors, np.int8).reshape(size, d)[at],
            np.frombuffer(scales, "<f8")[at].astype(np.float32),
        )

    def _scopes(self, ids: np.ndarray, views: np.ndarray) -> tuple[list[str], np.ndarray]:
        """The rows' scope names (each distinct one once) and each row's index into them."""
        lengths = views[:, :4].copy().view("<i4").reshape(-1)
        long = lengths > _TEXT_INLINE
        texts: dict[int, str] = {}
        if long.any():
            texts = self._long_texts(ids[long].tolist())
        keys = views.copy()
        keys[long, 4:] = 0
        unique, first, inverse = np.unique(
            keys.view(f"V{_TEXT_VIEW}").reshape(-1), return_index=True, return_inverse=True
        )
        names: dict[str, int] = {}
        lut = np.zeros(len(unique), dtype=np.int32)
        for u, i in enumerate(first.tolist()):
            n = int(lengths[i])
            if n <= _TEXT_INLINE:
                text = bytes(views[i, 4 : 4 + n]).decode("utf-8", "replace")
                lut[u] = names.setdefault(text, len(names))
        codes = lut[inverse.reshape(-1)].astype(np.int32)
        for i in np.flatnonzero(long).tolist():
            codes[i] = names.setdefault(texts.get(int(ids[i]), ""), len(names))
        return list(names), codes

    def _long_texts(self, ids: Sequence[int]) -> dict[int, str]:
        out: dict[int, str] = {}
        for i in range(0, len(ids), _BATCH):
            part = list(ids[i : i + _BATCH])
            marks = ",".join("?" for _ in part)
            for rowid, text in self.conn.execute(
                f"SELECT rowid, data FROM {self.table}_metadatatext00 WHERE rowid IN ({marks})",
                part,
            ):
                out[int(rowid)] = str(text)
        return out

    def _where(self, chunk_ids: Iterable[int]) -> dict[int, tuple[int, int]]:
        """chunk id → (vec0 chunk, slot) of those the table holds."""
        wanted = list(dict.fromkeys(int(c) for c in chunk_ids))
        found: dict[int, tuple[int, int]] = {}
        for i in range(0, len(wanted), _BATCH):
            part = wanted[i : i + _BATCH]
            marks = ",".join("?" for _ in part)
            for rowid, chunk, slot in self.conn.execute(
                f"SELECT rowid, chunk_id, chunk_offset FROM {self.table}_rowids "
                f"WHERE rowid IN ({marks})",
                part,
            ):
                found[int(rowid)] = (int(chunk), int(slot))
        return found

    def _chunk(self, chunk: int) -> Vec0Block | None:
        if self._kept is None or self._kept[0] != chunk:
            self._kept = (chunk, self.block(chunk))
        return self._kept[1]

    def find(self, chunk_ids: Sequence[int]) -> dict[int, tuple[str, bytes]]:
        """chunk id → (scope, stored vector: `b"i8"`, scale, codes) of those the table holds."""
        out: dict[int, tuple[str, bytes]] = {}
        where = self._where(chunk_ids)
        for cid, (chunk, _) in sorted(where.items(), key=lambda kv: kv[1]):
            block = self._chunk(chunk)
            if block is None:
                continue
            i = int(np.searchsorted(block.ids, cid))
            if i < block.rows and int(block.ids[i]) == cid:
                scope = block.scopes[int(block.scope_codes[i])]
                scale = block.scales[i : i + 1].tobytes()
                out[cid] = (scope, MAGIC + scale + block.codes[i].tobytes())
        return out

    def codes(self, chunk_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(found (bool, one per id), their codes (found, d), their scales (found,))."""
        stored = self.find(chunk_ids.tolist())
        found = np.array([int(c) in stored for c in chunk_ids.tolist()], dtype=bool)
        if not found.any():
            return found, np.empty((0, self.dimensions), np.int8), np.empty(0, "<f4")
        blobs = [stored[int(c)][1] for c in chunk_ids[found].tolist()]
        joined = np.frombuffer(b"".join(blobs), np.uint8).reshape(len(blobs), -1)
        scales = joined[:, 2:6].copy().view("<f4").reshape(-1)
        return found, joined[:, 6:].view(np.int8).copy(), scales

    def dead_slots(self) -> int:
        """Slots of deleted rows the table keeps (sqlite-vec reuses only its last chunk's)."""
        (slots,) = self.conn.execute(
            f"SELECT coalesce(sum(size), 0) FROM {self.table}_chunks"
        ).fetchone()
        (live,) = self.conn.execute(f"SELECT count(*) FROM {self.table}_rowids").fetchone()
        (last,) = self.conn.execute(
            f"SELECT coalesce(max(chunk_id), 0) FROM {self.table}_chunks"
        ).fetchone()
        tail = self.conn.execute(
            f"SELECT size, validity FROM {self.table}_chunks WHERE chunk_id = ?", (last,)
        ).fetchone()
        free_tail = 0
        if tail is not None:
            free_tail = int(tail[0]) - int(np.unpackbits(np.frombuffer(tail[1], np.uint8)).sum())
        return max(0, int(slots) - int(live) - free_tail)


def vec0_pack(conn: Any, generation: int) -> Vec0Pack | None:
    """The generation's vec0 table as a pack, when it can be one: its columns hold scales and it
    caught up with the change log at least once (a table left behind by a retired generation
    whose id came back has no seq, and is emptied before sqlite-vec uses it)."""
    dims = packable_dimensions(conn, generation)
    seq = vec0_seq(conn, generation) if dims is not None else None
    return None if dims is None or seq is None else Vec0Pack(conn, generation, dims, seq)


def vec0_rows(conn: Any, generation: int) -> Vec0Pack | None:
    """The generation's vec0 table to look rows up in whenever it can be the pack, in step or
    not: rows whose vector is NULL and that no block pack holds have theirs there."""
    dims = packable_dimensions(conn, generation)
    return None if dims is None else Vec0Pack(conn, generation, dims, vec0_seq(conn, generation))


def dead_slot_bytes(pack: Vec0Pack) -> int:
    """About what the slots of deleted rows take (codes, rowid, scope and scale each)."""
    return pack.dead_slots() * (pack.dimensions + 8 + _TEXT_VIEW + 8)
