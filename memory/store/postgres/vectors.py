"""The vector stores on PostgreSQL + pgvector: `VectorTables`, `MatrixPack` and `KnnIndex`
(memory/store/vector_*.py state the promises).

Per generation `N`, as on SQLite: `memory_matrix_g<N>` holds one row a chunk — its scope and
its centroid as pgvector's `vector(d)` (`embedding`, float32) under an HNSW index with cosine
distance — and `memory_matrix_log_g<N>` logs every write under an increasing `seq`. Each
centroid is stored once, there: exact scores, reads by id and full reads take its float32
numbers back through pgvector's binary form (`floats_of`), the same bits the indexer wrote.
(Older versions also kept a float32 `bytea` copy beside it, `memory_chunks.centroid` and, after
`pinch migrate`, a pack: migration p001_centroids_once, centroids_once.py.) PostgreSQL keeps the
HNSW index in the same transaction as the rows, so there is nothing to rebuild: `catch_up` only
records the seq it saw (keeping the `in_step` promise the callers rely on).

`knn` asks HNSW for several times `k` candidates of the scopes (`hnsw.ef_search` raised to
match), re-scores them exactly from their stored float32 vectors, and orders best first with
ties to the lower chunk id; when HNSW returns fewer candidates than asked (a filter on a small
scope), it scans the scope exactly instead.

`PgMatrixPack` keeps the `MatrixPack` seam complete, but nothing on PostgreSQL writes a pack:
search asks HNSW, and `pinch migrate` leaves SQLite's pack behind (the target packs its own).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

import numpy as np
from psycopg import sql

from memory.store.vector_names import log_table, matrix_table, pack_table, vec0_seq_key
from memory.store.vector_pack import BLOCK_ROWS, PackBlock, PackInfo
from memory.store.vector_storage import VectorStorage
from memory.store.vector_tables import LOG_KEEP, Row, from_blob, to_blob

# HNSW candidates fetched per result asked, before the exact re-rank (`hnsw.ef_search` the
# same). 3, not 10: on 12,576 real e5 passages and 300 LoCoMo questions recall@100 was 0.992
# with 300 candidates against 0.994 with 1,000, and 1,000 cost ≈ 45-55 ms at 100k chunks
# against ≈ 9-22 for 200-400 (`bench/pg_knn_candidates.py`, bench/RESULTS.md 2026-12-02).
CANDIDATES_PER_RESULT = 3
MIN_CANDIDATES = 100  # (bench/pg_store.py: recall@10 0.90 at 40 candidates, see RESULTS.md)
MAX_EF_SEARCH = 1000  # pgvector's limit for hnsw.ef_search


def _ident(name: str) -> sql.Identifier:
    return sql.Identifier(name)


# A generation's centroids: one row a chunk, its centroid once (pgvector's float32 `vector`).
CREATE_MATRIX = (
    "CREATE TABLE {} (chunk_id bigint PRIMARY KEY, scope text NOT NULL, "
    "embedding vector({}) NOT NULL)"
)


def floats_of(stored: Any) -> np.ndarray:
    """A stored `embedding` as float32, read in pgvector's binary form (`binary=True`): the
    very numbers written, as the float32 blob older versions kept beside it held them."""
    vector: np.ndarray = stored.to_numpy() if hasattr(stored, "to_numpy") else np.asarray(stored)
    return vector.astype(np.float32, copy=False)


def table_exists(conn: Any, name: str) -> bool:
    row = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (name,)).fetchone()
    return bool(row and row[0])


class PgVectorTables:
    """`VectorTables` on PostgreSQL (one table pair per generation, as on SQLite)."""

    def add(self, conn: Any, rows: list[Row]) -> None:
        for gen in sorted({r[1] for r in rows}):
            mine = [r for r in rows if r[1] == gen]
            self._log(conn, gen, [r[0] for r in mine])
            table = matrix_table(gen)
            if not table_exists(conn, table):
                self._create(conn, gen, len(np.asarray(mine[0][3])))
            conn.cursor().executemany(
                sql.SQL(
                    "INSERT INTO {} (chunk_id, scope, embedding) VALUES (%s, %s, %s) "
                    "ON CONFLICT (chunk_id) DO UPDATE SET scope = excluded.scope, "
                    "embedding = excluded.embedding"
                ).format(_ident(table)),
                [(cid, scope, np.asarray(vec, dtype=np.float32)) for cid, _, scope, vec in mine],
            )

    @staticmethod
    def _create(conn: Any, generation: int, dimensions: int) -> None:
        table = matrix_table(generation)
        conn.execute(sql.SQL(CREATE_MATRIX).format(_ident(table), sql.Literal(int(dimensions))))
        conn.execute(
            sql.SQL("CREATE INDEX {} ON {} USING hnsw (embedding vector_cosine_ops)").format(
                _ident(f"{table}_hnsw"), _ident(table)
            )
        )
        # Chunks indexed before their generation's table existed (an older SQLite file brought
        # over by `pinch migrate`): copy their centroids once; nothing writes that column now.
        for cid, scope, blob in conn.execute(
            "SELECT id, scope, centroid FROM memory_chunks WHERE generation = %s "
            "AND centroid IS NOT NULL",
            (generation,),
        ).fetchall():
            vec = from_blob(bytes(blob))
            if len(vec) == dimensions:
                conn.execute(
                    sql.SQL(
                        "INSERT INTO {} (chunk_id, scope, embedding) VALUES (%s, %s, %s)"
                    ).format(_ident(table)),
                    (cid, scope, vec),
                )

    def delete(self, conn: Any, generation: int, chunk_ids: list[int]) -> None:
        table = matrix_table(generation)
        if table_exists(conn, table):
            conn.execute(
                sql.SQL("DELETE FROM {} WHERE chunk_id = ANY(%s)").format(_ident(table)),
                (list(chunk_ids),),
            )
            self._log(conn, generation, chunk_ids)

    def drop_generation(self, conn: Any, generation: int) -> None:
        conn.execute("DELETE FROM meta WHERE key = %s", (vec0_seq_key(generation),))
        for name in (matrix_table(generation), log_table(generation), pack_table(generation)):
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(_ident(name)))

    @staticmethod
    def _log(conn: Any, generation: int, chunk_ids: list[int]) -> None:
        log = _ident(log_table(generation))
        conn.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} (seq bigint GENERATED ALWAYS AS IDENTITY "
                "PRIMARY KEY, chunk_id bigint NOT NULL)"
            ).format(log)
        )
        conn.execute(
            sql.SQL("INSERT INTO {} (chunk_id) SELECT unnest(%s::bigint[])").format(log),
            (list(chunk_ids),),
        )
        # Keep the log bounded: a reader further behind than this reads the whole matrix again.
        conn.execute(
            sql.SQL("DELETE FROM {} WHERE seq <= (SELECT max(seq) FROM {}) - %s").format(log, log),
            (LOG_KEEP,),
        )

    @contextlib.contextmanager
    def snapshot(self, conn: Any) -> Iterator[None]:
        """A REPEATABLE READ, read-only transaction on `conn` (which must not be in one)."""
        with conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            yield

    def index_version(self, conn: Any) -> str:
        row = conn.execute("SELECT value FROM meta WHERE key = 'index_version'").fetchone()
        return str(row[0]) if row else "0"

    def last_seq(self, conn: Any, generation: int) -> int | None:
        if not (
            table_exists(conn, log_table(generation))
            and table_exists(conn, matrix_table(generation))
        ):
            return None
        row = conn.execute(
            sql.SQL("SELECT coalesce(max(seq), 0) FROM {}").format(_ident(log_table(generation)))
        ).fetchone()
        return int(row[0])

    def oldest_seq(self, conn: Any, generation: int) -> int | None:
        row = conn.execute(
            sql.SQL("SELECT min(seq) FROM {}").format(_ident(log_table(generation)))
        ).fetchone()
        return None if row[0] is None else int(row[0])

    def changed_since(self, conn: Any, generation: int, seq: int) -> list[int]:
        rows = conn.execute(
            sql.SQL(
                "SELECT chunk_id FROM {} WHERE seq > %s GROUP BY chunk_id ORDER BY min(seq)"
            ).format(_ident(log_table(generation))),
            (seq,),
        ).fetchall()
        return [int(r[0]) for r in rows]

    def changes_since(self, conn: Any, generation: int, seq: int) -> tuple[int | None, int]:
        row = conn.execute(
            sql.SQL("SELECT min(seq), count(DISTINCT chunk_id) FROM {} WHERE seq > %s").format(
                _ident(log_table(generation))
            ),
            (seq,),
        ).fetchone()
        return (None if row[0] is None else int(row[0])), int(row[1])

    def logged_chunks(self, conn: Any, generation: int) -> int:
        row = conn.execute(
            sql.SQL("SELECT count(DISTINCT chunk_id) FROM {}").format(_ident(log_table(generation)))
        ).fetchone()
        return int(row[0])

    def vectors_of(
        self, conn: Any, generation: int, chunk_ids: list[int]
    ) -> dict[int, tuple[str, np.ndarray]]:
        table = matrix_table(generation)
        if not chunk_ids or not table_exists(conn, table):
            return {}
        rows = conn.execute(
            sql.SQL("SELECT chunk_id, scope, embedding FROM {} WHERE chunk_id = ANY(%s)").format(
                _ident(table)
            ),
            (list(chunk_ids),),
            binary=True,
        ).fetchall()
        return {int(cid): (scope, floats_of(found)) for cid, scope, found in rows}

    def count(self, conn: Any, generation: int) -> int:
        table = matrix_table(generation)
        if not table_exists(conn, table):
            return 0
        return int(
            conn.execute(sql.SQL("SELECT count(*) FROM {}").format(_ident(table))).fetchone()[0]
        )

    def rows(
        self, conn: Any, generation: int, batch: int
    ) -> Iterator[list[tuple[int, str, bytes]]]:
        table = matrix_table(generation)
        if not table_exists(conn, table):
            return
        cursor = conn.execute(
            sql.SQL("SELECT chunk_id, scope, embedding FROM {} ORDER BY chunk_id").format(
                _ident(table)
            ),
            binary=True,
        )
        while found := cursor.fetchmany(batch):
            yield [(int(cid), scope, to_blob(floats_of(v))) for cid, scope, v in found]


class PgMatrixPack:
    """`MatrixPack` on PostgreSQL: one table of blocks per generation, as on SQLite."""

    def info(self, conn: Any, generation: int) -> PackInfo | None:
        table = pack_table(generation)
        if not table_exists(conn, table):
            return None
        row = conn.execute(
            sql.SQL("SELECT min(seq), coalesce(sum(rows), 0), count(*) FROM {}").format(
                _ident(table)
            )
        ).fetchone()
        if not row[2]:
            return None
        return PackInfo(int(row[0]), int(row[1]))

    def drop(self, conn: Any, generation: int) -> None:
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(_ident(pack_table(generation))))

    def write(self, conn: Any, generation: int, seq: int) -> int:
        table = _ident(pack_table(generation))
        self.drop(conn, generation)
        conn.execute(
            sql.SQL(
                "CREATE TABLE {} (block integer PRIMARY KEY, seq bigint NOT NULL, "
                "rows integer NOT NULL, dimensions integer NOT NULL, scopes text NOT NULL, "
                "ids bytea NOT NULL, scope_codes bytea NOT NULL, vectors bytea NOT NULL)"
            ).format(table)
        )
        total, width = 0, None
        for block, rows in enumerate(PgVectorTables().rows(conn, generation, BLOCK_ROWS)):
            width = width or len(rows[0][2])
            if any(len(r[2]) != width for r in rows):
                self.drop(conn, generation)
                return 0
            names: dict[str, int] = {}
            codes = [names.setdefault(r[1], len(names)) for r in rows]
            conn.execute(
                sql.SQL("INSERT INTO {} VALUES (%s, %s, %s, %s, %s, %s, %s, %s)").format(table),
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
            total += len(rows)
        return total

    def layout(self, conn: Any, generation: int) -> list[tuple[int, int]]:
        rows = conn.execute(
            sql.SQL("SELECT block, rows FROM {} ORDER BY block").format(
                _ident(pack_table(generation))
            )
        ).fetchall()
        return [(int(b), int(n)) for b, n in rows]

    def dimensions(self, conn: Any, generation: int) -> int | None:
        row = conn.execute(
            sql.SQL("SELECT dimensions FROM {} LIMIT 1").format(_ident(pack_table(generation)))
        ).fetchone()
        return None if row is None else int(row[0])

    def block(self, conn: Any, generation: int, block: int) -> PackBlock | None:
        row = conn.execute(
            sql.SQL(
                "SELECT seq, rows, dimensions, scopes, ids, scope_codes, vectors FROM {} "
                "WHERE block = %s"
            ).format(_ident(pack_table(generation))),
            (block,),
        ).fetchone()
        if row is None:
            return None
        seq, n, dims, names, id_blob, code_blob, vec_blob = row
        return PackBlock(
            int(seq),
            int(n),
            int(dims),
            json.loads(names),
            np.frombuffer(bytes(id_blob), dtype="<i8"),
            np.frombuffer(bytes(code_blob), dtype="<i4"),
            np.frombuffer(bytes(vec_blob), dtype="<f4").reshape(int(n), int(dims)),
        )


class PgKnnIndex:
    """`KnnIndex` on PostgreSQL: pgvector's HNSW index on the matrix table, exact re-rank."""

    def __init__(self, dimensions: int) -> None:
        self.dimensions = dimensions
        self._tables = PgVectorTables()

    def forget(self, generation: int) -> None:
        pass  # nothing cached: the HNSW index lives and dies with the matrix table

    def _seq(self, conn: Any, generation: int) -> int | None:
        row = conn.execute(
            "SELECT value FROM meta WHERE key = %s", (vec0_seq_key(generation),)
        ).fetchone()
        return int(row[0]) if row is not None else None

    def in_step(self, conn: Any, generation: int) -> bool:
        return self._seq(conn, generation) == (self._tables.last_seq(conn, generation) or 0)

    def catch_up(self, conn: Any, generation: int) -> None:
        seq = self._tables.last_seq(conn, generation) or 0
        conn.execute(
            "INSERT INTO meta (key, value) VALUES (%s, %s) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (vec0_seq_key(generation), str(seq)),
        )

    def delete(self, conn: Any, generation: int, chunk_ids: list[int]) -> None:
        pass  # the rows are the index: `VectorTables.delete` removes them from both

    def knn(
        self, conn: Any, query: np.ndarray, k: int, generation: int, scopes: list[str]
    ) -> list[tuple[int, float]]:
        table = matrix_table(generation)
        if k <= 0 or not scopes or not table_exists(conn, table):
            return []
        q = np.asarray(query, dtype=np.float32)
        want = max(k * CANDIDATES_PER_RESULT, MIN_CANDIDATES)
        with conn.transaction():  # SET LOCAL lasts to its end (a savepoint inside a snapshot)
            conn.execute(
                sql.SQL("SET LOCAL hnsw.ef_search = {}").format(
                    sql.Literal(min(max(want, 40), MAX_EF_SEARCH))
                )
            )
            nearest = sql.SQL(
                "SELECT chunk_id, embedding FROM {} WHERE scope = ANY(%s) "
                "ORDER BY embedding <=> %s LIMIT %s"
            ).format(_ident(table))
            rows = conn.execute(nearest, (scopes, q, want), binary=True).fetchall()
            if len(rows) < want:  # HNSW filtered to too few: a small scope, scanned exactly
                rows = conn.execute(
                    sql.SQL("SELECT chunk_id, embedding FROM {} WHERE scope = ANY(%s)").format(
                        _ident(table)
                    ),
                    (scopes,),
                    binary=True,
                ).fetchall()
        if not rows:
            return []
        ids = [int(r[0]) for r in rows]
        matrix = np.vstack([floats_of(r[1]) for r in rows])
        norms = np.linalg.norm(matrix, axis=1) * (np.linalg.norm(q) or 1.0)
        sims = (matrix @ q) / np.where(norms == 0, 1.0, norms)
        ranked = sorted(zip(ids, sims.tolist(), strict=True), key=lambda p: (-p[1], p[0]))
        return [(cid, float(s)) for cid, s in ranked[:k]]

    def count(self, conn: Any, generation: int) -> int:
        return self._tables.count(conn, generation)

    def live(self, conn: Any, generation: int) -> bool:
        return bool(
            conn.execute(
                "SELECT 1 FROM memory_generations WHERE id = %s AND state != 'retired'",
                (generation,),
            ).fetchone()
        )


def postgres_vector_storage() -> VectorStorage:
    """The vectors in the agent's PostgreSQL schema (each centroid once, in pgvector's column)."""
    return VectorStorage(PgVectorTables(), PgMatrixPack())
