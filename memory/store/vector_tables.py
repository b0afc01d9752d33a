"""The stored centroid vectors of each index generation and their change log.

Per generation `N`: `memory_matrix_g<N>` holds one row a chunk (chunk id, scope, and the vector
as 8-bit codes and a scale, memory/store/vector_codec.py, until the pack holds it), and
`memory_matrix_log_g<N>` names every chunk whose vector was written or deleted, in order (`seq`), so
a process holding the vectors in memory re-reads only what changed. The rows and the pack
(memory/store/vector_pack.py) together are the source of truth, each vector in one of them: a
write puts the vector in the chunk's row, writing the pack moves every row's vector into it
(NULL in the row). Both vector backends write these tables, so an index built with one can be
searched with the other; sqlite-vec's vec0 table (memory/store/vector_knn.py) is derived from
them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, Protocol

import numpy as np

from memory.store.vec0_pack import vec0_pack
from memory.store.vector_codec import decode, encode
from memory.store.vector_names import (
    create_matrix,
    drop_vec_table,
    log_table,
    matrix_table,
    pack_table,
    table_exists,
)
from memory.store.vector_pack import (
    codes_of_width,
    current_rows,
    packed_rows,
    write_blocks,
)

LOG_KEEP = 100_000  # change-log rows kept per generation (≈ 2 MB)
BATCH = 500  # ids bound in one statement


def to_blob(vector: np.ndarray) -> bytes:
    """A vector as stored: little-endian float32."""
    return np.asarray(vector, dtype="<f4").tobytes()


def from_blob(blob: bytes) -> np.ndarray:
    """A stored vector (or several, back to back) as a read-only float32 array."""
    return np.frombuffer(blob, dtype="<f4")


Row = tuple[int, int, str, np.ndarray]  # (chunk_id, generation, scope, centroid)


class VectorTables(Protocol):
    """The centroid vectors of each generation's chunks, and a log of which ones changed.

    Promises a second implementation must keep:
    - one vector per (generation, chunk id): `add` replaces a chunk's row, `delete` removes it;
      a generation's first `add` also copies in the centroids its chunks already carry;
    - every `add` and `delete` appends the chunk ids to the generation's change log under
      increasing `seq` numbers (never reused while the log exists; `drop_generation` drops
      the log, and a log made again may start lower); at most `LOG_KEEP` rows are kept, the
      oldest pruned;
    - writes happen inside the caller's transaction (`conn` from `Database.transaction()`),
      so rows and log change together or not at all;
    - reads on one connection inside `snapshot(conn)` see one consistent state: the log's
      last seq and the rows it covers;
    - `rows` yields a generation's rows ordered by chunk id; `changed_since` names each chunk
      once (in the order the store finds them, the same every time for the same log).
    """

    def add(self, conn: Any, rows: list[Row]) -> None:
        """Insert or replace (chunk_id, generation, scope, centroid) rows and log them."""

    def delete(self, conn: Any, generation: int, chunk_ids: list[int]) -> None:
        """Remove the chunks' rows and log them (nothing if the generation has no table)."""

    def drop_generation(self, conn: Any, generation: int) -> None:
        """Drop everything stored for the generation's vectors (derived copies too)."""

    def snapshot(self, conn: Any) -> contextlib.AbstractContextManager[None]:
        """One read snapshot on `conn` for the reads inside it."""

    def index_version(self, conn: Any) -> str:
        """The index's version: it changes with every write to the index ("0" if never)."""

    def last_seq(self, conn: Any, generation: int) -> int | None:
        """The change log's last seq (0 if empty); None when the generation has no log or no
        vector table (its vectors must then be read in full)."""

    def oldest_seq(self, conn: Any, generation: int) -> int | None:
        """The oldest seq the log still holds (None if empty): older changes were pruned."""

    def changed_since(self, conn: Any, generation: int, seq: int) -> list[int]:
        """Chunk ids logged after `seq`, each once."""

    def changes_since(self, conn: Any, generation: int, seq: int) -> tuple[int | None, int]:
        """(the oldest seq logged after `seq` or None, how many distinct chunks it names)."""

    def logged_chunks(self, conn: Any, generation: int) -> int:
        """Distinct chunks the whole log names."""

    def vectors_of(
        self, conn: Any, generation: int, chunk_ids: list[int]
    ) -> dict[int, tuple[str, np.ndarray]]:
        """chunk id → (scope, vector) for those of `chunk_ids` that have a row."""

    def count(self, conn: Any, generation: int) -> int:
        """Rows of the generation (chunks with a centroid)."""

    def rows(
        self, conn: Any, generation: int, batch: int
    ) -> Iterator[list[tuple[int, str, bytes]]]:
        """(chunk id, scope, stored vector blob) rows ordered by chunk id, `batch` at a time
        (decode the blobs with vector_codec.decode_many)."""


class SqliteVectorTables:
    """`VectorTables` on the agent's SQLite file (one table pair per generation)."""

    def add(self, conn: Any, rows: list[Row]) -> None:
        for gen in sorted({r[1] for r in rows}):
            self._log(conn, gen, [r[0] for r in rows if r[1] == gen])
            table = matrix_table(gen)
            if not table_exists(conn, table):
                conn.execute(create_matrix(table))
                # A generation indexed before this table existed: copy its vectors once, so the
                # table always holds every chunk of the generation.
                conn.execute(
                    f"INSERT INTO {table}(chunk_id, scope, vector) SELECT id, scope, centroid "
                    "FROM memory_chunks WHERE generation = ? AND centroid IS NOT NULL",
                    (gen,),
                )
            conn.executemany(
                f"INSERT OR REPLACE INTO {table}(chunk_id, scope, vector) VALUES (?, ?, ?)",
                [(cid, scope, encode(vec)) for cid, g, scope, vec in rows if g == gen],
            )

    def delete(self, conn: Any, generation: int, chunk_ids: list[int]) -> None:
        table = matrix_table(generation)
        if table_exists(conn, table):
            conn.executemany(f"DELETE FROM {table} WHERE chunk_id = ?", [(i,) for i in chunk_ids])
            self._log(conn, generation, chunk_ids)

    def drop_generation(self, conn: Any, generation: int) -> None:
        drop_vec_table(conn, generation)

    @staticmethod
    def _log(conn: Any, generation: int, chunk_ids: list[int]) -> None:
        conn.execute(
            f"CREATE TABLE IF NOT EXISTS {log_table(generation)} "
            "(seq INTEGER PRIMARY KEY AUTOINCREMENT, chunk_id INTEGER NOT NULL)"
        )
        conn.executemany(
            f"INSERT INTO {log_table(generation)}(chunk_id) VALUES (?)", [(i,) for i in chunk_ids]
        )
        # Keep the log bounded: a reader further behind than this reads the whole matrix again.
        conn.execute(
            f"DELETE FROM {log_table(generation)} WHERE seq <= "
            f"(SELECT max(seq) FROM {log_table(generation)}) - ?",
            (LOG_KEEP,),
        )

    @contextlib.contextmanager
    def snapshot(self, conn: Any) -> Iterator[None]:
        conn.execute("BEGIN")
        try:
            yield
        finally:
            conn.execute("COMMIT")

    def index_version(self, conn: Any) -> str:
        version = conn.execute("SELECT value FROM meta WHERE key = 'index_version'").fetchone()
        return version[0] if version else "0"

    def last_seq(self, conn: Any, generation: int) -> int | None:
        if not (
            table_exists(conn, log_table(generation))
            and table_exists(conn, matrix_table(generation))
        ):
            return None
        (seq,) = conn.execute(
            f"SELECT coalesce(max(seq), 0) FROM {log_table(generation)}"
        ).fetchone()
        return int(seq)

    def oldest_seq(self, conn: Any, generation: int) -> int | None:
        (oldest,) = conn.execute(f"SELECT min(seq) FROM {log_table(generation)}").fetchone()
        return None if oldest is None else int(oldest)

    def changed_since(self, conn: Any, generation: int, seq: int) -> list[int]:
        return [
            int(r[0])
            for r in conn.execute(
                f"SELECT DISTINCT chunk_id FROM {log_table(generation)} WHERE seq > ?", (seq,)
            )
        ]

    def changes_since(self, conn: Any, generation: int, seq: int) -> tuple[int | None, int]:
        oldest, newer = conn.execute(
            f"SELECT min(seq), count(DISTINCT chunk_id) FROM {log_table(generation)} WHERE seq > ?",
            (seq,),
        ).fetchone()
        return (None if oldest is None else int(oldest)), int(newer)

    def logged_chunks(self, conn: Any, generation: int) -> int:
        (changes,) = conn.execute(
            f"SELECT count(DISTINCT chunk_id) FROM {log_table(generation)}"
        ).fetchone()
        return int(changes)

    def vectors_of(
        self, conn: Any, generation: int, chunk_ids: list[int]
    ) -> dict[int, tuple[str, np.ndarray]]:
        return {
            cid: (scope, decode(blob))
            for cid, (scope, blob) in self.stored_of(conn, generation, chunk_ids).items()
        }

    def stored_of(
        self, conn: Any, generation: int, chunk_ids: list[int]
    ) -> dict[int, tuple[str, bytes]]:
        """chunk id → (scope, stored vector blob) for those of `chunk_ids` that have a row: the
        row's vector, or the pack's when the row's is NULL."""
        found: dict[int, tuple[str, bytes]] = {}
        packed: list[int] = []
        table = matrix_table(generation)
        for i in range(0, len(chunk_ids), BATCH):
            part = chunk_ids[i : i + BATCH]
            marks = ",".join("?" for _ in part)
            for cid, scope, blob in conn.execute(
                f"SELECT chunk_id, scope, vector FROM {table} WHERE chunk_id IN ({marks})", part
            ):
                if blob is None:
                    packed.append(int(cid))
                else:
                    found[int(cid)] = (scope, bytes(blob))
        if packed:
            found.update(packed_rows(conn, generation, packed))
        return found

    def _source(self, conn: Any, generation: int) -> tuple[str, str, tuple[Any, ...]]:
        """(count statement, rows statement, parameters) for the generation's vectors."""
        table = matrix_table(generation)
        if table_exists(conn, table):
            return (
                f"SELECT count(*) FROM {table}",
                f"SELECT chunk_id, scope, vector FROM {table} ORDER BY chunk_id",
                (),
            )
        # An index written before the matrix table existed: slower, same result.
        where = "FROM memory_chunks WHERE generation = ? AND centroid IS NOT NULL"
        return (
            f"SELECT count(*) {where}",
            f"SELECT id, scope, centroid {where} ORDER BY id",
            (generation,),
        )

    def count(self, conn: Any, generation: int) -> int:
        count_sql, _, params = self._source(conn, generation)
        return int(conn.execute(count_sql, params).fetchone()[0])

    def rows(
        self, conn: Any, generation: int, batch: int
    ) -> Iterator[list[tuple[int, str, bytes]]]:
        if table_exists(conn, matrix_table(generation)):
            yield from current_rows(conn, generation, batch)
            return
        _, sql, params = self._source(conn, generation)
        cursor = conn.execute(sql, params)
        while rows := cursor.fetchmany(batch):
            yield rows


def store_vectors_once(conn: Any) -> None:
    """Each generation's centroids kept once (migration m015): a generation with a pack has its
    pack written again from its rows, current at its change log's last seq, and its rows keep
    no vector; every row table is made again with a `vector` that may be NULL."""
    tables = SqliteVectorTables()
    names = conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name GLOB 'memory_matrix_g[0-9]*'"
    ).fetchall()
    for (name,) in names:
        generation = int(name.removeprefix("memory_matrix_g"))
        if matrix_table(generation) != name:
            continue
        seq = tables.last_seq(conn, generation)
        packed = False
        vec0 = vec0_pack(conn, generation)
        if seq is not None and vec0 is not None and vec0.seq == seq:
            # sqlite-vec's table, in step, is the pack (memory/store/vec0_pack.py): the rows
            # are made again below without their vectors
            conn.execute(f"DROP TABLE IF EXISTS {pack_table(generation)}")
            packed = codes_of_width(conn, generation, vec0.dimensions)
        elif seq is not None and table_exists(conn, pack_table(generation)):
            # The rows hold every vector (this layout's source of truth): the old pack goes
            # first, so the new one takes its pages instead of growing the file.
            conn.execute(f"DROP TABLE {pack_table(generation)}")
            count = tables.count(conn, generation)
            packed = count > 0 and write_blocks(conn, generation, seq) == count
        vector = "NULL" if packed else "vector"
        conn.execute(create_matrix(f"{name}_next"))
        conn.execute(
            f"INSERT INTO {name}_next SELECT chunk_id, scope, {vector} FROM {name} "
            "ORDER BY chunk_id"
        )
        conn.execute(f"DROP TABLE {name}")
        conn.execute(f"ALTER TABLE {name}_next RENAME TO {name}")
