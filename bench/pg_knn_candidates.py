"""What pgvector's HNSW costs and finds for the candidate counts search could ask (issue 19): on
one scale's schema (bench/bulk_scale.py load), for new questions embedded by the real local
model, the HNSW read of `hnsw.ef_search` = LIMIT = N candidates — ids only, and with the float32
vectors the exact re-rank reads (what `PgKnnIndex.knn` asks today: N = 1,000 for a pool of 100)
— timed, and its recall@100 against an exact scan of the whole matrix table.

    python bench/pg_knn_candidates.py --chunks 100000 --dsn DSN [--queries 30] [--rounds 2]
    python bench/pg_knn_candidates.py --real VECTORS.npz --dsn DSN

The synthetic scales' vectors are random unit vectors (HNSW's worst case): their recall says
nothing of real notes. `--real` instead loads real e5 vectors (`bench/projection_recall.py
--vectors VECTORS.npz`: LoCoMo and MADial passages and LoCoMo questions) into a scratch table
with the HNSW index Pinch builds (pgvector's defaults, cosine), and asks its questions.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
from pgvector.psycopg import register_vector  # noqa: E402

from bench import speed_pg  # noqa: E402
from bench.synthetic import TextSource  # noqa: E402
from memory.embeddings.local_models import LocalE5Provider  # noqa: E402
from memory.store.postgres.database import open_postgres  # noqa: E402
from memory.store.postgres.vectors import floats_of  # noqa: E402

ARMS = (
    (1000, True),
    (1000, False),
    (400, False),
    (300, False),
    (200, False),
    (200, True),
    (100, False),
)


REAL_SCHEMA = "pinch_knn_real"


def load_real(dsn: str, npz: Path) -> tuple[list[np.ndarray], str]:
    """The real vectors of `npz` in a scratch table of their own schema (made once), with the
    HNSW index Pinch builds; returns the questions' vectors and the table."""
    saved = np.load(npz)
    real, asked = saved["real"].astype(np.float32), saved["asked"].astype(np.float32)
    db = open_postgres(dsn, schema=REAL_SCHEMA, min_size=1, max_size=2)
    try:
        with db.transaction() as conn:
            register_vector(conn)
            made = conn.execute("SELECT to_regclass('knn_real') IS NOT NULL").fetchone()
            if not (made and made[0]):
                conn.execute(
                    f"CREATE TABLE knn_real (chunk_id bigint PRIMARY KEY, scope text NOT NULL, "
                    f"vector bytea NOT NULL, embedding vector({real.shape[1]}) NOT NULL)"
                )
                with conn.cursor().copy(
                    "COPY knn_real (chunk_id, scope, vector, embedding) FROM STDIN"
                ) as copy:
                    copy.set_types(["bigint", "text", "bytea", "vector"])
                    for i, v in enumerate(real):
                        copy.write_row((i, "", v.astype("<f4").tobytes(), v))
                conn.execute(
                    "CREATE INDEX knn_real_hnsw ON knn_real "
                    "USING hnsw (embedding vector_cosine_ops)"
                )
    finally:
        db.close()
    return list(asked), "knn_real"


def run(
    dsn: str, schema: str, queries: int, rounds: int, real: Path | None = None
) -> list[dict[str, Any]]:
    if real is not None:
        asked, table = load_real(dsn, real)
        schema = REAL_SCHEMA
    db = open_postgres(dsn, schema=schema, min_size=1, max_size=2)
    try:
        if real is None:
            generation = db.execute("SELECT id FROM memory_generations WHERE state = 'active'")[0][
                0
            ]
            table = f"memory_matrix_g{int(generation)}"
            provider = LocalE5Provider()
            source = TextSource(99, rich=True)
            asked = [provider.embed_query(source.question()) for _ in range(queries)]
        scopes = [r[0] for r in db.execute(f"SELECT DISTINCT scope FROM {table}")]
        with db.transaction() as conn:  # each centroid once: pgvector's column is the vector
            register_vector(conn)
            rows = conn.execute(f"SELECT chunk_id, embedding FROM {table}", binary=True).fetchall()
        ids = np.array([int(r[0]) for r in rows])
        matrix = np.vstack([floats_of(r[1]) for r in rows])
        del rows
        matrix = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
        exact = [set(ids[np.argsort(-(matrix @ q))[:100]].tolist()) for q in asked]
        out = []
        for _ in range(rounds):
            for ef, vectors in ARMS:
                times, recalls = [], []
                for q, best in zip(asked, exact, strict=True):
                    with db.transaction() as conn:
                        register_vector(conn)
                        started = time.perf_counter()
                        conn.execute(f"SET LOCAL hnsw.ef_search = {ef}")
                        columns = "chunk_id, embedding" if vectors else "chunk_id"
                        found = conn.execute(
                            f"SELECT {columns} FROM {table} WHERE scope = ANY(%s) "
                            "ORDER BY embedding <=> %s LIMIT %s",
                            (scopes, q, ef),
                        ).fetchall()
                        times.append(1000 * (time.perf_counter() - started))
                    recalls.append(len(best & {int(r[0]) for r in found[:100]}) / 100)
                times.sort()
                out.append(
                    {
                        "ef_search": ef,
                        "vectors": vectors,
                        "p50_ms": statistics.median(times),
                        "p95_ms": times[min(len(times) - 1, int(0.95 * len(times)))],
                        "recall@100": float(np.mean(recalls)),
                        "worst": min(recalls),
                    }
                )
        return out
    finally:
        db.close()


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--chunks", type=int, help="a synthetic scale's schema (bulk_scale.py load)")
    p.add_argument("--real", type=Path, help="real vectors (projection_recall.py --vectors)")
    p.add_argument("--dsn", required=True)
    p.add_argument("--queries", type=int, default=30)
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args(argv)
    print("| ef_search = candidates | vectors | p50 ms | p95 ms | recall@100 (worst) |")
    print("|---|---|---|---|---|")
    if (args.chunks is None) == (args.real is None):
        p.error("give --chunks or --real")
    schema = speed_pg.schema_for(args.chunks) if args.chunks else REAL_SCHEMA
    for r in run(args.dsn, schema, args.queries, args.rounds, args.real):
        print(
            f"| {r['ef_search']} | {'yes' if r['vectors'] else 'ids only'} | {r['p50_ms']:.1f} "
            f"| {r['p95_ms']:.1f} | {r['recall@100']:.3f} ({r['worst']:.2f}) |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
