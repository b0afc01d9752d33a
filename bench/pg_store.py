"""The PostgreSQL store beside SQLite on one synthetic index: keyword search (FTS5's bm25 on
SQLite; on PostgreSQL the same bm25 computed in SQL over the GIN index's candidate rows) and
vector search (pgvector's HNSW with an exact re-rank, against an exact scan; SQLite's vector
search is measured by bench/speed.py), latency and agreement.

    python -m bench.pg_store --quick            # 2,000 chunks, 40 queries (under a minute)
    python -m bench.pg_store --chunks 100000    # by hand, on a quiet machine
    python -m bench.pg_store --dsn postgresql://…   # an existing server instead of pgserver

Agreement: the share of queries whose top 10 (by place: path and line) is the same on both
backends, and the largest rank difference; for vectors, recall@10 of HNSW + re-rank against the
exact answer. Times are per query, p50 / p95, in milliseconds.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from memory.store.db import open_database
from memory.store.index_generations import SqliteGenerations
from memory.store.index_rows import ChunkRow, SqliteIndexRows
from memory.store.postgres.database import open_postgres
from memory.store.postgres.index_rows import PgGenerations, PgIndexRows
from memory.store.postgres.search import PgSearchQueries
from memory.store.postgres.vectors import PgKnnIndex, PgVectorTables
from memory.store.search_queries import SqliteSearchQueries
from memory.text import fts_body, fts_match_expression

DIMS = 64
WORDS = [
    "anna", "bees", "honey", "river", "dog", "walked", "running", "ferry", "ticket", "hangzhou",
    "meeting", "project", "budget", "garden", "coffee", "train", "station", "birthday", "gift",
    "doctor", "appointment", "flight", "hotel", "museum", "concert", "recipe", "bread", "cafés",
    "蓝", "色", "杯", "子", "茶", "会", "议",
]  # fmt: skip


def make_texts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    weights = [1.0 / (i + 1) for i in range(len(WORDS))]  # Zipf-like: a few common words
    filler = [f"w{i}" for i in range(2000)]
    return [
        " ".join(rng.choices(WORDS, weights, k=rng.randint(3, 12)) + rng.sample(filler, k=30))
        for _ in range(n)
    ]


def percentiles(times: list[float]) -> str:
    ms = sorted(t * 1000 for t in times)
    return f"{statistics.median(ms):.1f} / {ms[int(len(ms) * 0.95) - 1]:.1f}"


def fill(texts: list[str], vectors: np.ndarray, sqlite_db: Any, pg_db: Any) -> tuple[int, int]:
    generations = []
    for db, gens, rows in (
        (sqlite_db, SqliteGenerations(sqlite_db), SqliteIndexRows(sqlite_db)),
        (pg_db, PgGenerations(pg_db), PgIndexRows(pg_db)),
    ):
        with db.transaction() as conn:
            gen = gens.create_building(conn, {"dimensions": DIMS}, 0.0)
            gens.activate(conn, gen, 0.0)
            for i, text in enumerate(texts):
                row = ChunkRow(
                    gen, f"memory/{i}.md", "memory", "owner", "", 1, 2, "h", text, None, None,
                    fts_body(text),
                )  # fmt: skip
                rows.insert_chunk(conn, row)
        generations.append(gen)
    with pg_db.transaction() as conn:
        ids = [r[0] for r in conn.execute("SELECT id FROM memory_chunks ORDER BY id").fetchall()]
        PgVectorTables().add(
            conn, [(cid, generations[1], "", v) for cid, v in zip(ids, vectors, strict=True)]
        )
        conn.execute("ANALYZE")
    return generations[0], generations[1]


def keyword_run(queries: list[str], sqlite_db: Any, pg_db: Any) -> dict[str, Any]:
    backends = {"sqlite": SqliteSearchQueries(sqlite_db), "postgres": PgSearchQueries(pg_db)}
    times: dict[str, list[float]] = {name: [] for name in backends}
    tops: dict[str, list[list[tuple[str, float]]]] = {name: [] for name in backends}
    for match in queries:
        for name, q in backends.items():
            start = time.perf_counter()
            ranked = q.keyword_ranked(match, 10)
            times[name].append(time.perf_counter() - start)
            paths = {r[0]: r[1] for r in q.chunks([i for i, _ in ranked])}
            tops[name].append([(paths[i], rank) for i, rank in ranked])
    same = sum(
        [p for p, _ in a] == [p for p, _ in b]
        for a, b in zip(tops["sqlite"], tops["postgres"], strict=True)
    )
    worst = max(
        (abs(ra - rb) for a, b in zip(tops["sqlite"], tops["postgres"], strict=True)
         for (_, ra), (_, rb) in zip(a, b, strict=False)),
        default=0.0,
    )  # fmt: skip
    return {"times": times, "same_top10": same / len(queries), "max_rank_diff": worst}


def vector_run(pg_db: Any, generation: int, vectors: np.ndarray, n: int) -> dict[str, Any]:
    knn = PgKnnIndex(DIMS)
    rng = np.random.default_rng(7)
    recalls, times = [], []
    ids_in_order: list[int] = []
    with pg_db.transaction() as conn:
        ids_in_order = [
            r[0] for r in conn.execute("SELECT id FROM memory_chunks ORDER BY id").fetchall()
        ]
    for _ in range(n):
        q = rng.standard_normal(DIMS).astype(np.float32)
        q /= np.linalg.norm(q)
        start = time.perf_counter()
        with pg_db.transaction() as conn:
            found = knn.knn(conn, q, 10, generation, [""])
        times.append(time.perf_counter() - start)
        exact = {ids_in_order[i] for i in np.argsort(-(vectors @ q))[:10]}
        recalls.append(len(exact & {cid for cid, _ in found}) / 10)
    return {"times": times, "recall": statistics.mean(recalls)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="2,000 chunks, 40 queries")
    parser.add_argument("--chunks", type=int, default=20_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--dsn", help="an existing PostgreSQL with pgvector (default: pgserver)")
    args = parser.parse_args()
    chunks, n_queries = (2_000, 40) if args.quick else (args.chunks, args.queries)
    folder = Path(tempfile.mkdtemp(prefix="pinch-pg-bench-"))
    server = None
    dsn = args.dsn
    if dsn is None:
        os.environ.setdefault("XDG_RUNTIME_DIR", str(folder))
        import pgserver

        server = pgserver.get_server(folder / "pg", cleanup_mode="stop")
        dsn = server.get_uri()
    texts = make_texts(chunks, 1)
    vectors = np.random.default_rng(2).standard_normal((chunks, DIMS)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    sqlite_db = open_database(folder / "agent.sqlite", vector_backend="numpy")
    pg_db = open_postgres(dsn, schema=f"pinch_bench_{os.getpid()}", min_size=1, max_size=2)
    try:
        start = time.perf_counter()
        _, pg_gen = fill(texts, vectors, sqlite_db, pg_db)
        filled = time.perf_counter() - start
        rng = random.Random(3)
        queries = [
            fts_match_expression([f"{w}" if len(w) > 1 else w for w in rng.sample(WORDS, 2)])
            or '"anna"'
            for _ in range(n_queries)
        ]
        kw = keyword_run(queries, sqlite_db, pg_db)
        vec = vector_run(pg_db, pg_gen, vectors, n_queries)
    finally:
        sqlite_db.close()
        pg_db.close()
        if server is not None:
            server.cleanup()
    print(f"{chunks:,} chunks, {n_queries} queries; both indexes filled in {filled:.1f} s")
    print("| search | p50 / p95 ms | agreement |")
    print("|---|---|---|")
    print(f"| keyword, SQLite FTS5 bm25 | {percentiles(kw['times']['sqlite'])} | — |")
    print(
        f"| keyword, PostgreSQL bm25 in SQL over GIN candidates | "
        f"{percentiles(kw['times']['postgres'])} | same top 10 in "
        f"{kw['same_top10']:.0%} of queries, largest rank difference {kw['max_rank_diff']:.1e} |"
    )
    print(
        f"| vector, pgvector HNSW + exact re-rank (k=10) | {percentiles(vec['times'])} | "
        f"recall@10 {vec['recall']:.3f} against an exact scan |"
    )


if __name__ == "__main__":
    main()
