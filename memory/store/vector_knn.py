"""sqlite-vec's vec0 table per index generation: a KNN index derived from the stored vectors.

`memory_vec_g<N>` (a vec0 virtual table; `scope` a metadata column, so KNN filters conversations
inside the index; `int8[d]`: the stored vectors' 8-bit codes, whose cosine is the decoded vectors',
and `scale` their scales, so that in step it is the one stored copy of the centroids,
memory/store/vec0_pack.py — int8 tables made by older versions, without scales, are made again
on first use; `float[d]` ones stay so) is derived from the stored vectors
(memory/store/vector_tables.py: the rows', else the pack's) and used only while in step with
them: `meta` key `vec0_seq_g<N>` holds the change log's seq it last caught up to. A process
without sqlite-vec writes only the matrix table, which leaves the vec0 table behind until a
process with sqlite-vec catches it up.
"""

from __future__ import annotations

import logging
import re
from typing import Any, Protocol

import numpy as np

from memory.store.vec0_pack import packable_dimensions, vec0_columns, vec0_rows
from memory.store.vector_codec import (
    HEADER,
    MAGIC,
    decode,
    encodable,
    encode,
    int8_codes,
    is_quantised,
)
from memory.store.vector_names import (
    matrix_table,
    pack_table,
    table_exists,
    vec0_seq_key,
    vec_table,
)
from memory.store.vector_pack import (
    SqliteMatrixPack,
    codes_of_width,
    rows_lean_on_pack,
    write_blocks,
)
from memory.store.vector_tables import BATCH, SqliteVectorTables, to_blob

log = logging.getLogger(__name__)

KNN_MAX_K = 4096  # sqlite-vec answers at most this many neighbours


class KnnIndex(Protocol):
    """A nearest-neighbour index over a generation's stored vectors, kept in step with them
    through their change log.

    Promises a second implementation must keep:
    - `catch_up` (inside the caller's write transaction) leaves the index holding exactly the
      stored vectors as of the log's last seq, and records that seq; `in_step` is true exactly
      when the recorded seq is the log's last seq (0 for an empty or missing log);
    - `knn` returns up to k (chunk id, cosine similarity) pairs of the given scopes, best first,
      ties broken by the lower chunk id; it answers from the index whether or not it is in step
      (callers check `in_step` in the same snapshot when they need exact answers);
    - `live` says whether the generation is one that searches may still read (not retired).
    """

    def catch_up(self, conn: Any, generation: int) -> None: ...

    def in_step(self, conn: Any, generation: int) -> bool: ...

    def delete(self, conn: Any, generation: int, chunk_ids: list[int]) -> None:
        """Remove the chunks from the index (the caller then logs and catches up)."""

    def knn(
        self, conn: Any, query: np.ndarray, k: int, generation: int, scopes: list[str]
    ) -> list[tuple[int, float]]: ...

    def count(self, conn: Any, generation: int) -> int:
        """Rows in the generation's index (0 if it has none)."""

    def live(self, conn: Any, generation: int) -> bool: ...

    def forget(self, generation: int) -> None:
        """The generation's tables were dropped: create them again on next use."""


def _scale(blob: bytes) -> float:
    """The float32 scale of a stored 8-bit vector (exact as a float64)."""
    return float(np.frombuffer(blob, dtype="<f4", count=1, offset=len(MAGIC))[0])


class SqliteVecIndex:
    """`KnnIndex` as one vec0 virtual table per generation (needs sqlite-vec loaded)."""

    def __init__(self, dimensions: int) -> None:
        self.dimensions = dimensions
        self._tables = SqliteVectorTables()
        self._ready: dict[int, bool] = {}  # generation -> its table holds int8 codes
        self._scaled: dict[int, bool] = {}  # generation -> … and their scales (it is the pack)
        self._mixed: set[int] = set()  # generations whose stored vectors are not all its codes

    def _ensure(self, conn: Any, generation: int) -> str:
        table = vec_table(generation)
        if generation not in self._ready:
            if encodable(self.dimensions):
                self._renew_unscaled(conn, generation)
                columns = vec0_columns(self.dimensions)
            else:
                columns = f"scope text, embedding float[{self.dimensions}] distance_metric=cosine"
            conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS {table} USING vec0({columns})")
            self._know(conn, generation)
        return table

    def _know(self, conn: Any, generation: int) -> None:
        self._ready[generation] = self._holds_int8(conn, generation)
        self._scaled[generation] = packable_dimensions(conn, generation) is not None

    def _renew_unscaled(self, conn: Any, generation: int) -> None:
        """An int8 table an older version made keeps no scales, so it cannot be the pack and
        the centroids are stored twice: it is made again (the catch-up that follows copies
        every row into it, then the rows and the block pack give up their copies)."""
        if not self._holds_int8(conn, generation) or packable_dimensions(conn, generation):
            return
        log.info("Vector index of generation %d made again, to hold the vectors once", generation)
        conn.execute(f"DROP TABLE {vec_table(generation)}")
        conn.execute("DELETE FROM meta WHERE key = ?", (vec0_seq_key(generation),))

    @staticmethod
    def _holds_int8(conn: Any, generation: int) -> bool:
        row = conn.execute(
            "SELECT sql FROM sqlite_master WHERE name = ?", (vec_table(generation),)
        ).fetchone()
        return bool(row and "int8[" in (row[0] or ""))

    def forget(self, generation: int) -> None:
        self._ready.pop(generation, None)
        self._scaled.pop(generation, None)

    def _as_column(self, generation: int, blob: bytes) -> bytes:
        """A stored vector (either form) as the generation's vec0 column takes it."""
        if self._ready.get(generation):
            return int8_codes(blob) or int8_codes(encode(decode(blob))) or b""
        return to_blob(decode(blob))

    def _copy_rows(
        self, conn: Any, generation: int, table: str, rows: list[tuple[int, str, bytes]]
    ) -> None:
        """Insert (id, scope, stored vector) rows into the vec0 table."""
        if self._scaled.get(generation):
            coded = [(c, s, b if is_quantised(b) else encode(decode(b))) for c, s, b in rows]
            conn.executemany(
                f"INSERT INTO {table}(rowid, scope, scale, embedding) "
                "VALUES (?, ?, ?, vec_int8(?))",
                [(cid, scope, _scale(b), b[HEADER:]) for cid, scope, b in coded],
            )
            return
        value = "vec_int8(?)" if self._ready.get(generation) else "?"
        conn.executemany(
            f"INSERT INTO {table}(rowid, scope, embedding) VALUES (?, ?, {value})",
            [(cid, scope, self._as_column(generation, blob)) for cid, scope, blob in rows],
        )

    def _seq(self, conn: Any, generation: int) -> int | None:
        row = conn.execute("SELECT value FROM meta WHERE key = ?", (vec0_seq_key(generation),))
        found = row.fetchone()
        return int(found[0]) if found is not None else None

    def in_step(self, conn: Any, generation: int) -> bool:
        # A numpy-only write advances the log, not the vec0 table.
        return self._seq(conn, generation) == (self._tables.last_seq(conn, generation) or 0)

    def _changed_since(self, conn: Any, generation: int, seq: int) -> list[int] | None:
        """Chunks whose vectors changed after `seq`; None if the change log no longer says."""
        last = self._tables.last_seq(conn, generation)
        if last is None or seq > last:  # no log, or it was dropped and made again
            return None
        oldest = self._tables.oldest_seq(conn, generation)
        if oldest is not None and oldest > seq + 1:  # pruned
            return None
        return self._tables.changed_since(conn, generation, seq)

    def catch_up(self, conn: Any, generation: int) -> None:
        table = self._ensure(conn, generation)
        seq = self._tables.last_seq(conn, generation) or 0
        since = self._seq(conn, generation)
        if since == seq:
            return
        changed = self._changed_since(conn, generation, since) if since is not None else None
        if changed is None:  # never in step, or the log no longer covers its lag: copy it all
            if (
                self._scaled.get(generation)
                and not table_exists(conn, pack_table(generation))
                and rows_lean_on_pack(conn, generation)
            ):  # the rows lean on this very table for their vectors: packed apart first
                write_blocks(conn, generation, seq)
            # Made again rather than emptied (unless it is new): vec0 keeps a deleted row's slot
            # unless it is in its last chunk, so only a new table is dense.
            if conn.execute(f"SELECT 1 FROM {table}_chunks LIMIT 1").fetchone() is not None:
                conn.execute(f"DROP TABLE {table}")
                self.forget(generation)
                table = self._ensure(conn, generation)
            # (the rows and the pack's vectors, or an index's from before the matrix table)
            for rows in self._tables.rows(conn, generation, 4096):
                self._copy_rows(conn, generation, table, rows)
        else:
            for i in range(0, len(changed), BATCH):
                part = changed[i : i + BATCH]
                marks = ",".join("?" for _ in part)
                conn.execute(f"DELETE FROM {table} WHERE rowid IN ({marks})", part)
                found = self._tables.stored_of(conn, generation, part)
                self._copy_rows(
                    conn, generation, table, [(cid, *found[cid]) for cid in part if cid in found]
                )
        conn.execute(
            "INSERT INTO meta(key, value) VALUES (?, ?) "
            "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            (vec0_seq_key(generation), str(seq)),
        )
        if self._scaled.get(generation):
            self._give_up_copies(conn, generation, seq, changed)

    def _give_up_copies(
        self, conn: Any, generation: int, seq: int, changed: list[int] | None
    ) -> None:
        """In step, holding every vector with its scale, the table is the pack: the block pack
        and the rows keep no copy (of the rows, those just copied — all after a full copy)."""
        if changed is None or table_exists(conn, pack_table(generation)):
            # (not where the stored vectors are wider than its codes, as an index from before
            # 8-bit centroids may hold: checked once, as it reads every row)
            if generation not in self._mixed:
                if codes_of_width(conn, generation, self.dimensions):
                    SqliteMatrixPack().write(conn, generation, seq)
                else:
                    self._mixed.add(generation)
            return
        table = matrix_table(generation)
        for i in range(0, len(changed), BATCH):
            part = changed[i : i + BATCH]
            marks = ",".join("?" for _ in part)
            conn.execute(
                f"UPDATE {table} SET vector = NULL WHERE vector IS NOT NULL "
                f"AND substr(vector, 1, 2) = ? AND length(vector) = ? AND chunk_id IN ({marks})",
                (MAGIC, self.dimensions + HEADER, *part),
            )

    def renew(self, conn: Any, generation: int) -> None:
        """Make the table again from the stored vectors (dense: the slots deleted rows left in
        its older chunks given back), inside the caller's write transaction."""
        conn.execute("DELETE FROM meta WHERE key = ?", (vec0_seq_key(generation),))
        self.catch_up(conn, generation)

    def delete(self, conn: Any, generation: int, chunk_ids: list[int]) -> None:
        table = vec_table(generation)
        if table_exists(conn, table):
            conn.executemany(f"DELETE FROM {table} WHERE rowid = ?", [(i,) for i in chunk_ids])

    def knn(
        self, conn: Any, query: np.ndarray, k: int, generation: int, scopes: list[str]
    ) -> list[tuple[int, float]]:
        table = vec_table(generation)
        if not table_exists(conn, table):
            return []
        if generation not in self._ready:
            self._know(conn, generation)
        marks = ",".join("?" for _ in scopes)
        probe = "vec_int8(?)" if self._ready[generation] else "?"
        # int8: a wider shortlist by the codes (the query's quantised too), then the exact cosine
        wide = 2 * k + 16 if self._ready[generation] else k
        rows = conn.execute(
            f"SELECT rowid, distance FROM {table} WHERE embedding MATCH {probe} AND k = ? "
            f"AND scope IN ({marks}) ORDER BY distance",
            (self._as_column(generation, to_blob(query)), min(wide, KNN_MAX_K), *scopes),
        ).fetchall()
        pairs = [(int(uid), 1.0 - float(dist)) for uid, dist in rows]
        if self._ready[generation] and pairs:
            pairs = self._rescore(conn, generation, query, [uid for uid, _ in pairs])
        return sorted(pairs, key=lambda p: (-p[1], p[0]))[:k]

    def _rescore(
        self, conn: Any, generation: int, query: np.ndarray, ids: list[int]
    ) -> list[tuple[int, float]]:
        """The cosine of the float query with the stored vectors (decoded) of `ids`: the score
        the in-memory matrix gives them (the codes' own ranking also quantised the query)."""
        found = self._tables.vectors_of(conn, generation, ids)
        kept = [i for i in ids if i in found]
        if not kept:
            return []
        matrix = np.vstack([found[i][1] for i in kept])
        sims = matrix @ np.asarray(query, dtype=np.float32)
        return list(zip(kept, sims.tolist(), strict=True))

    def count(self, conn: Any, generation: int) -> int:
        table = vec_table(generation)
        if not table_exists(conn, table):
            return 0
        return int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])

    def live(self, conn: Any, generation: int) -> bool:
        return bool(
            conn.execute(
                "SELECT 1 FROM memory_generations WHERE id = ? AND state != 'retired'",
                (generation,),
            ).fetchone()
        )


RENEW_DEAD_SHARE = 0.10  # a vec0 table is made again once this share of its slots is dead


def live_vec0_generations(conn: Any) -> list[int]:
    """The generations searches may still read whose vec0 table is the pack."""
    return [g for g in _live_generations(conn) if packable_dimensions(conn, g) is not None]


def _live_generations(conn: Any) -> list[int]:
    return [
        int(g)
        for (g,) in conn.execute("SELECT id FROM memory_generations WHERE state != 'retired'")
    ]


def renew_sparse_tables(conn: Any) -> int:
    """Make again each live generation's vec0 table that an older version made without scales
    (a second copy of the centroids) or whose deleted rows' slots are a tenth of it or more
    (needs sqlite-vec loaded; inside the caller's write transaction); how many."""
    renewed = 0
    for generation in _live_generations(conn):
        pack = vec0_rows(conn, generation)
        if pack is None:
            dims = _unscaled_int8_dimensions(conn, generation)
            if dims is not None:
                SqliteVecIndex(dims).renew(conn, generation)
                renewed += 1
            continue
        dead = pack.dead_slots()
        if dead and dead >= RENEW_DEAD_SHARE * (dead + pack.rows()):
            SqliteVecIndex(pack.dimensions).renew(conn, generation)
            renewed += 1
    return renewed


def _unscaled_int8_dimensions(conn: Any, generation: int) -> int | None:
    row = conn.execute(
        "SELECT sql FROM sqlite_master WHERE name = ?", (vec_table(generation),)
    ).fetchone()
    found = re.search(r"embedding int8\[(\d+)\]", row[0] or "") if row is not None else None
    return int(found.group(1)) if found is not None and "scale float" not in row[0] else None


def second_copy_bytes(conn: Any) -> int:
    """About what making the older versions' unscaled vec0 tables again gives back: the block
    pack's copy of their centroids (codes, scale and id a row)."""
    total = 0
    for generation in _live_generations(conn):
        dims = _unscaled_int8_dimensions(conn, generation)
        if dims is not None and table_exists(conn, pack_table(generation)):
            (rows,) = conn.execute(
                f"SELECT coalesce(sum(rows), 0) FROM {pack_table(generation)}"
            ).fetchone()
            total += int(rows) * (dims + 12)
    return total
